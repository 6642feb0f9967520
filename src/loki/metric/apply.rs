//! The operations of a metric query on the values its reads made: aggregations, arithmetic,
//! numbers. Nothing here reads; each result is charged before it is built and its inputs given
//! back once it is.

use std::collections::HashSet;

use super::program::Operation;
use crate::error::HttpError;
use crate::loki::logql::ast::{AggregateOp, Grouping};
use crate::loki::logql::binary;
use crate::loki::logql::eval::{self, Series, Steps, Value};
use crate::loki::logql::labels::Labels;
use crate::query::memory::ReadCharge;

/// Replaces the operands of `operation` on top of `values` with its result.
pub(super) fn apply(
    operation: &Operation<'_>,
    values: &mut Vec<Value>,
    steps: Steps,
    charge: &mut ReadCharge,
) -> Result<(), HttpError> {
    let value = match operation {
        Operation::Aggregate {
            op,
            grouping,
            parameter,
        } => match pop(values) {
            Value::Matrix(series) => {
                let held: usize = series.iter().map(Series::bytes).sum();
                let most = aggregate_bound(*op, grouping, &series, steps.count, held);
                transform(charge, held, most, || {
                    Ok(Value::Matrix(eval::aggregate(
                        *op,
                        grouping,
                        *parameter,
                        series,
                        steps.count,
                    )?))
                })?
            }
            Value::Scalar(_) => {
                return Err(HttpError::BadRequest(
                    "an aggregation takes series (such as count_over_time(…)), not a number".into(),
                ))
            }
        },
        Operation::Binary(op, modifier) => {
            let right = pop(values);
            let left = pop(values);
            let (left_bytes, right_bytes) = (left.bytes(), right.bytes());
            // Its series are at most those of both sides (`or` keeps series of each).
            let most = left_bytes + right_bytes;
            transform(charge, left_bytes + right_bytes, most, || {
                Ok(binary::binary(*op, modifier, left, right)?)
            })?
        }
        Operation::LabelReplace(replace) => match pop(values) {
            Value::Matrix(series) => {
                // The series change in place, so what they take is only known once they have:
                // the difference is charged (or given back) then.
                let held: usize = series.iter().map(Series::bytes).sum();
                let value = Value::Matrix(eval::label_replace(series, replace)?);
                let now = value.bytes();
                if now > held {
                    charge.charge(now - held)?;
                } else {
                    charge.release(held - now);
                }
                value
            }
            Value::Scalar(_) => {
                return Err(HttpError::BadRequest(
                    "label_replace takes series (such as count_over_time(…)), not a number".into(),
                ))
            }
        },
        Operation::Number(value) => Value::Scalar(*value),
        Operation::Vector(value) => {
            charge.charge(eval::series_bytes(&Labels::new(), steps.count))?;
            eval::vector(*value, steps.count)
        }
    };
    values.push(value);
    Ok(())
}

/// The most an aggregation of `series` (`held` bytes) makes: one series per group, or the
/// members themselves where they are kept whole (`topk`, `bottomk`, `sort`). Charging the
/// groups alone lets `count(count_over_time(…))` over many streams hold its input once, not
/// twice.
fn aggregate_bound(
    op: AggregateOp,
    grouping: &Option<Grouping>,
    series: &[Series],
    steps: usize,
    held: usize,
) -> usize {
    match op {
        AggregateOp::Topk | AggregateOp::Bottomk | AggregateOp::Sort | AggregateOp::SortDesc => {
            held
        }
        AggregateOp::Sum
        | AggregateOp::Count
        | AggregateOp::Avg
        | AggregateOp::Min
        | AggregateOp::Max => {
            let groups: HashSet<Labels> = series
                .iter()
                .map(|one| eval::group_key(grouping, &one.labels))
                .collect();
            groups
                .iter()
                .map(|group| eval::series_bytes(group, steps))
                .sum()
        }
    }
}

/// The value on top of the stack, which the plan put there before the operation that takes it.
fn pop(values: &mut Vec<Value>) -> Value {
    values
        .pop()
        .expect("a planned program puts an operation after its operands")
}

/// Runs `make`, which builds a value of at most `most` bytes from values of `inputs` bytes
/// that it consumes: `most` is charged before it builds, and once it has, the inputs and what
/// the value did not need are given back.
fn transform(
    charge: &mut ReadCharge,
    inputs: usize,
    most: usize,
    make: impl FnOnce() -> Result<Value, HttpError>,
) -> Result<Value, HttpError> {
    charge.charge(most)?;
    let value = make()?;
    charge.release(inputs + most.saturating_sub(value.bytes()));
    Ok(value)
}
