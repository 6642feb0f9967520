//! A LogQL metric query in three steps, none of which does another's work: [`program`] plans
//! the expression into the reads it needs and the operations that combine their series, in the
//! order they run; [`fetch`] reads each read's series from the stores (the per-minute rollup, or a
//! scan of the lines); [`apply`] combines them and reads nothing. The reads of a program with
//! several (the sides of a binary operation) run at the same time, so that the database works on
//! them together; the program then runs left to right on a stack of values. When its reads do
//! not fit the read's memory bound together, it reads as it runs instead, so that an operation's
//! inputs are combined, and their memory given back, before the next read starts: the same order,
//! and the same peak, as evaluating the expression from the inside out. When the reads of every
//! step together pass the bound even so, the steps are answered a run at a time and the runs
//! joined ([`pieces`]).

mod apply;
mod fetch;
mod pieces;
mod program;

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;

use super::logql::eval::{self, Series, Steps, Value};
use super::logql::plan::Placement;
use super::read::Stats;
use crate::error::{HttpError, QueryError};
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
                let result = self.run(tenant, expr, placement, &mut fetch).await;
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
        tenant: &Arc<str>,
        expr: &MetricExpr,
        placement: Placement,
        fetch: &mut Fetch<'_>,
    ) -> Result<Value, HttpError> {
        let steps = fetch.steps;
        let program = program::plan(expr, steps, placement);
        let mut read = self.read_at_once(tenant, &program, fetch).await?;
        let mut values = Vec::new();
        for step in &program {
            match step {
                Step::Read(one) => {
                    let series = match read.as_mut() {
                        Some(read) => read.next().expect("a read's series for each read"),
                        None => self.fetch(one, fetch).await?,
                    };
                    values.push(Value::Matrix(series));
                }
                Step::Apply(operation) => {
                    apply::apply(operation, &mut values, steps, &mut *fetch.charge)?
                }
            }
        }
        Ok(values
            .pop()
            .expect("a planned program leaves exactly one value"))
    }

    /// The series of each read of `program`, in its order, read two at a time: the sides of a
    /// binary operation wait on the database together instead of one after the other. The
    /// second takes a read slot of the tenant's own, so that a tenant's reads never hold more
    /// connections than it has slots. `None` when the program has a single read, when the
    /// tenant has no slot free, or when its reads do not fit a memory bound together:
    /// the program then reads as it runs, each operation giving back what its inputs held
    /// before the next read, and whatever still does not fit is refused there.
    async fn read_at_once(
        &self,
        tenant: &Arc<str>,
        program: &[Step<'_>],
        fetch: &mut Fetch<'_>,
    ) -> Result<Option<std::vec::IntoIter<Vec<Series>>>, HttpError> {
        let reads: Vec<_> = program
            .iter()
            .filter_map(|step| match step {
                Step::Read(read) => Some(read),
                Step::Apply(_) => None,
            })
            .collect();
        if reads.len() < 2 {
            return Ok(None);
        }
        let Some(_second) = self.spare_slot(tenant) else {
            return Ok(None);
        };
        let mut parts: Vec<_> = reads.iter().map(|_| fetch.charge.part()).collect();
        let mut stats = vec![Stats::default(); reads.len()];
        let mut fetches: Vec<_> = parts
            .iter_mut()
            .zip(&mut stats)
            .map(|(charge, stats)| Fetch {
                tenant: fetch.tenant,
                steps: fetch.steps,
                stats,
                charge,
                sources: fetch.sources,
            })
            .collect();
        let pending: Vec<_> = fetches
            .iter_mut()
            .zip(&reads)
            .map(|(part, read)| self.fetch(read, part))
            .collect();
        let results: Vec<_> = futures::stream::iter(pending).buffered(2).collect().await;
        drop(fetches);
        for read in &stats {
            fetch.stats.add(read);
        }
        // Held one after the other, the reads hold less, of the read's bound and of the reads'.
        let fewer_may_fit = |err: &HttpError| {
            pieces::smaller_may_fit(err)
                || matches!(err, HttpError::Query(QueryError::ReadMemoryFull { .. }))
        };
        if results
            .iter()
            .any(|result| result.as_ref().is_err_and(fewer_may_fit))
        {
            return Ok(None);
        }
        let series = results.into_iter().collect::<Result<Vec<_>, _>>()?;
        for part in parts {
            fetch.charge.absorb(part);
        }
        Ok(Some(series.into_iter()))
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
