//! A LogQL metric query in three steps, none of which does another's work: [`program`] plans
//! the expression into the reads it needs and the operations that combine their series, in the
//! order they run; [`fetch`] reads each read's series from the stores (the per-minute rollup, or a
//! scan of the lines); [`apply`] combines them and reads nothing. The program runs left to right
//! on a stack of values, so an operation's inputs are combined, and their memory given back,
//! before the next read starts: the same order, and the same peak, as evaluating the expression
//! from the inside out.

mod apply;
mod fetch;
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
    /// function (the rollup or a scan) is counted in `sources`.
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
        let program = program::plan(expr, steps, placement);
        self.admitted(tenant, async {
            let mut stats = Stats::default();
            let mut values = Vec::new();
            for step in &program {
                match step {
                    Step::Read(read) => {
                        let mut fetch = Fetch {
                            tenant,
                            steps,
                            stats: &mut stats,
                            charge: &mut *charge,
                            sources,
                        };
                        values.push(Value::Matrix(self.fetch(read, &mut fetch).await?));
                    }
                    Step::Apply(operation) => {
                        apply::apply(operation, &mut values, steps, &mut *charge)?
                    }
                }
            }
            let value = values
                .pop()
                .expect("a planned program leaves exactly one value");
            eval::check_series(&value, self.limits().max_series)?;
            stats.returned = points(&value);
            stats.seconds = started.elapsed().as_secs_f64();
            Ok((value, stats))
        })
        .await
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
