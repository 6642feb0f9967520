//! A metric expression planned into the steps that evaluate it, in the order they run: each
//! operation after the steps that make its operands, so that running them on a stack of values
//! evaluates the expression. Which reads the rollup can answer is decided here, once.

use crate::loki::logql::ast::{
    AggregateOp, BinaryModifier, BinaryOp, Grouping, LabelReplace, MetricExpr, RangeExpr,
};
use crate::loki::logql::eval::Steps;
use crate::loki::logql::plan::{self, Placement, VolumePlan};

/// One step of a metric query.
pub(super) enum Step<'a> {
    /// Series read from the stores, pushed on the stack.
    Read(Read<'a>),
    /// An operation on the values on top of the stack, which it replaces with its result.
    Apply(Operation<'a>),
}

/// Series a metric query reads.
pub(super) enum Read<'a> {
    /// From the per-minute rollup, at the minute's resolution.
    Rollup(VolumePlan),
    /// From a scan of the lines, each line (or the value it unwraps) counted in its own series
    /// or, with `sum_by`, straight into its group of that `sum`'s grouping: summing afterwards
    /// would first make one series per distinct label set, which lines with an attribute of many
    /// values (a request id) take past the series limit. The rollup holds counts only, so every
    /// function of values scans.
    Scan {
        /// The range function and the lines it reads.
        range: &'a RangeExpr,
        /// The grouping of the `sum` the scan feeds, if it feeds one.
        sum_by: Option<&'a Option<Grouping>>,
    },
}

/// What an operation does with the values on top of the stack.
pub(super) enum Operation<'a> {
    /// Aggregates the top value's series.
    Aggregate {
        /// Which aggregation.
        op: AggregateOp,
        /// `by (…)` or `without (…)`.
        grouping: &'a Option<Grouping>,
        /// `topk`'s k.
        parameter: Option<f64>,
    },
    /// Combines the two top values, the left operand below the right.
    Binary(BinaryOp, &'a BinaryModifier),
    /// Rewrites a label of the top value's series.
    LabelReplace(&'a LabelReplace),
    /// Pushes a number.
    Number(f64),
    /// Pushes `vector(…)`: one series without labels.
    Vector(f64),
}

/// The steps of `expr` at `steps`, with the rollup read wherever `placement` lets it answer.
pub(super) fn plan(expr: &MetricExpr, steps: Steps, placement: Placement) -> Vec<Step<'_>> {
    let mut program = Vec::new();
    push(expr, steps, placement, &mut program);
    program
}

fn push<'a>(expr: &'a MetricExpr, steps: Steps, placement: Placement, out: &mut Vec<Step<'a>>) {
    if let Some(rollup) = plan::volume_plan(expr, steps, placement) {
        out.push(Step::Read(Read::Rollup(rollup)));
        return;
    }
    if let Some((grouping, range)) = expr.sum_of_range() {
        out.push(Step::Read(Read::Scan {
            range,
            sum_by: Some(grouping),
        }));
        out.push(Step::Apply(Operation::Aggregate {
            op: AggregateOp::Sum,
            grouping,
            parameter: None,
        }));
        return;
    }
    match expr {
        MetricExpr::Range(range) => out.push(Step::Read(Read::Scan {
            range,
            sum_by: None,
        })),
        MetricExpr::Aggregate {
            op,
            grouping,
            parameter,
            inner,
        } => {
            push(inner, steps, placement, out);
            out.push(Step::Apply(Operation::Aggregate {
                op: *op,
                grouping,
                parameter: *parameter,
            }));
        }
        MetricExpr::Binary {
            op,
            modifier,
            left,
            right,
        } => {
            push(left, steps, placement, out);
            push(right, steps, placement, out);
            out.push(Step::Apply(Operation::Binary(*op, modifier)));
        }
        MetricExpr::LabelReplace(replace) => {
            push(&replace.inner, steps, placement, out);
            out.push(Step::Apply(Operation::LabelReplace(replace)));
        }
        MetricExpr::Number(value) => out.push(Step::Apply(Operation::Number(*value))),
        MetricExpr::Vector(value) => out.push(Step::Apply(Operation::Vector(*value))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loki::logql::ast::Query;
    use crate::loki::logql::parse;

    const MINUTE: i64 = plan::MINUTE_NANOS;

    fn metric(text: &str) -> MetricExpr {
        match parse(text).unwrap() {
            Query::Metric(expr) => expr,
            Query::Log(_) => panic!("{text} is a log query"),
        }
    }

    /// The program as one word per step, in order.
    fn shape(text: &str, steps: Steps) -> Vec<&'static str> {
        let expr = metric(text);
        plan(&expr, steps, Placement::Exact)
            .iter()
            .map(|step| match step {
                Step::Read(Read::Rollup(_)) => "rollup",
                Step::Read(Read::Scan { sum_by: None, .. }) => "scan",
                Step::Read(Read::Scan {
                    sum_by: Some(_), ..
                }) => "scan-into-groups",
                Step::Apply(Operation::Aggregate { .. }) => "aggregate",
                Step::Apply(Operation::Binary(..)) => "binary",
                Step::Apply(Operation::LabelReplace(_)) => "label_replace",
                Step::Apply(Operation::Number(_)) => "number",
                Step::Apply(Operation::Vector(_)) => "vector",
            })
            .collect()
    }

    #[test]
    fn each_operation_follows_the_steps_of_its_operands() {
        let minutes = Steps::new(0, 10 * MINUTE, MINUTE).unwrap();
        let seconds = Steps::new(0, 10 * MINUTE, MINUTE / 2).unwrap();
        let by_level = r#"sum by (level) (count_over_time({service_name="api"}[1m]))"#;
        assert_eq!(shape(by_level, minutes), ["rollup"]);
        assert_eq!(shape(by_level, seconds), ["scan-into-groups", "aggregate"]);
        assert_eq!(
            shape(
                r#"topk(2, rate({service_name="api"} |= "x" [1m])) / 2 + vector(1)"#,
                minutes
            ),
            ["scan", "aggregate", "number", "binary", "vector", "binary"]
        );
        assert_eq!(
            shape(
                &format!(
                    r#"{by_level} - max(count_over_time({{service_name="db"}} |= "slow" [5m]))"#
                ),
                minutes
            ),
            ["rollup", "scan", "aggregate", "binary"]
        );
        // Values are never in the rollup; an offset reads a range it was not asked to plan.
        assert_eq!(
            shape(
                r#"sum by (level) (sum_over_time({service_name="api"} | logfmt | unwrap bytes [1m]))"#,
                minutes
            ),
            ["scan-into-groups", "aggregate"]
        );
        assert_eq!(
            shape(
                r#"label_replace(sum(count_over_time({service_name="api"}[1m] offset 5m)), "a", "b", "c", "d") > 2"#,
                minutes
            ),
            [
                "scan-into-groups",
                "aggregate",
                "label_replace",
                "number",
                "binary"
            ]
        );
    }
}
