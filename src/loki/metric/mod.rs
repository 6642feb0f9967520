//! A LogQL metric query in three steps, none of which does another's work: [`program`] plans
//! the expression into the reads it needs and the operations that combine their series, in the
//! order they run; [`fetch`] reads each read's series from the stores (the per-minute rollup, or a
//! scan of the lines); [`apply`] combines them and reads nothing. The program runs left to right
//! on a stack of values, so an operation's inputs are combined, and their memory given back,
//! before the next read starts: the same order, and the same peak, as evaluating the expression
//! from the inside out. When the reads of every step together pass the read's memory bound, the
//! steps are answered a run at a time and the runs joined ([`pieces`]).

mod apply;
mod fetch;
mod pieces;
mod program;

use std::sync::Arc;
use std::time::Instant;

use super::logql::eval::{self, Steps, Value};
use super::logql::plan::Placement;
use super::read::Stats;
use crate::error::HttpError;
use crate::loki::logql::ast::MetricExpr;
use crate::observability::metrics::CounterVec;
use crate::query::memory::ReadCharge;
use crate::query::Reads;
use fetch::Fetch;
use program::Step;

impl Reads {
    /// A metric query at `steps` (one step for an instant query), counting each line where
    /// `placement` allows; its series are charged to `charge` as they are made, and the value
    /// still holds its charge ([`Value::bytes`]) when it is given. What answered each range
    /// function (the rollup or a scan) is counted in `sources`. Steps whose series do not fit
    /// the read's memory together are answered a run at a time ([`pieces`]).
    pub(crate) async fn loki_metric(
        &self,
        tenant: &Arc<str>,
        expr: &MetricExpr,
        steps: Steps,
        placement: Placement,
        charge: &mut ReadCharge,
        sources: &CounterVec<1>,
    ) -> Result<(Value, Stats), HttpError> {
        let started = Instant::now();
        self.admitted(tenant, async {
            let mut stats = Stats::default();
            // Runs still to answer, the next last.
            let mut pending = vec![steps];
            let mut whole = None;
            let mut joined = pieces::Joined::new(steps);
            while let Some(run) = pending.pop() {
                let split = pieces::halves(run);
                let before = charge.held();
                charge.count_refusals(split.is_none());
                let mut fetch = Fetch {
                    tenant,
                    steps: run,
                    stats: &mut stats,
                    charge: &mut *charge,
                    sources,
                };
                let result = self.run(expr, placement, &mut fetch).await;
                charge.count_refusals(true);
                match (result, split) {
                    (Ok(value), _) if run == steps => whole = Some(value),
                    (Ok(value), _) => joined.add(run, value, charge)?,
                    (Err(err), Some((first, second))) if pieces::smaller_may_fit(&err) => {
                        // What the refused run made is gone with it.
                        charge.release(charge.held() - before);
                        tracing::debug!(
                            steps = run.count,
                            "a metric query's steps passed its memory bound together: in halves"
                        );
                        pending.extend([second, first]);
                    }
                    (Err(err), _) => return Err(err),
                }
            }
            let value = whole.unwrap_or_else(|| joined.finish(expr, charge));
            eval::check_series(&value, self.limits().max_series)?;
            stats.returned = points(&value);
            stats.seconds = started.elapsed().as_secs_f64();
            Ok((value, stats))
        })
        .await
    }

    /// `expr` at the steps of `fetch`, planned for them.
    async fn run(
        &self,
        expr: &MetricExpr,
        placement: Placement,
        fetch: &mut Fetch<'_>,
    ) -> Result<Value, HttpError> {
        let steps = fetch.steps;
        let mut values = Vec::new();
        for step in &program::plan(expr, steps, placement) {
            match step {
                Step::Read(read) => values.push(Value::Matrix(self.fetch(read, fetch).await?)),
                Step::Apply(operation) => {
                    apply::apply(operation, &mut values, steps, &mut *fetch.charge)?
                }
            }
        }
        Ok(values
            .pop()
            .expect("a planned program leaves exactly one value"))
    }
}

/// Total points of a value, for `stats`.
fn points(value: &Value) -> u64 {
    match value {
        Value::Scalar(_) => 1,
        Value::Matrix(series) => series
            .iter()
            .map(|s| s.points.iter().flatten().count() as u64)
            .sum(),
    }
}
