//! The reads of a metric query: each read's series from the stores, charged as they are made.

use chrono::DateTime;

use super::program::Read;
use crate::error::HttpError;
use crate::loki::logql::ast::{Grouping, RangeQuery};
use crate::loki::logql::eval::{self, EvalError, RangeAccumulator, Series, Steps};
use crate::loki::logql::pipeline::{Output, ERROR_LABEL};
use crate::loki::logql::plan::VolumePlan;
use crate::loki::read::{nanos, RollupRead, Scan, Stats, TimeRange};
use crate::model::selection::Order;
use crate::observability::metrics::CounterVec;
use crate::query::memory::ReadCharge;
use crate::query::Reads;
use crate::storage::StoredRow;

/// What every read of one metric query shares: whose it is, its steps, and what it read and
/// holds so far.
pub(super) struct Fetch<'a> {
    /// The tenant whose records are read.
    pub tenant: &'a str,
    /// The query's steps.
    pub steps: Steps,
    /// What the query read so far.
    pub stats: &'a mut Stats,
    /// What the query holds.
    pub charge: &'a mut ReadCharge,
    /// Where each read counts what answered it.
    pub sources: &'a CounterVec<1>,
}

impl Reads {
    /// The series of `read`.
    pub(super) async fn fetch(
        &self,
        read: &Read<'_>,
        fetch: &mut Fetch<'_>,
    ) -> Result<Vec<Series>, HttpError> {
        match read {
            Read::Rollup(plan) => {
                fetch.sources.increment_static(["rollup"], 1);
                self.rollup(plan, fetch).await
            }
            Read::Scan { range, sum_by } => self.range_series(*range, *sum_by, fetch).await,
        }
    }

    /// The series of a range function at the query's steps, read by a scan, each charged as it
    /// is made; with `sum_by`, each line is counted in its group of that `sum`'s grouping instead
    /// of its own series.
    async fn range_series(
        &self,
        RangeQuery {
            function,
            query,
            range,
        }: RangeQuery<'_>,
        sum_by: Option<&Option<Grouping>>,
        fetch: &mut Fetch<'_>,
    ) -> Result<Vec<Series>, HttpError> {
        fetch.sources.increment_static(["scan"], 1);
        let steps = fetch.steps;
        let range = range.as_nanos() as i64;
        let mut accumulator = RangeAccumulator::new(function, range, steps);
        let span = TimeRange {
            from: DateTime::from_timestamp_nanos(steps.start.saturating_sub(range)),
            // A range ends at its step, `(t − range, t]`: the read ends past `end` by the stores'
            // resolution, a microsecond, which both keep and neither rounds away.
            to: DateTime::from_timestamp_nanos(steps.end().saturating_add(1_000)),
        };
        let mut failed = None;
        {
            let charge = &mut *fetch.charge;
            let mut each = |row: &StoredRow, output: Output| {
                // Loki refuses to count a line that still carries `__error__`, except into a
                // `sum` of everything, whose one series never has the label (Loki 3.7.6 answers
                // `sum(count_over_time({…} | json [5m]))` over such lines with their count).
                let keeps_labels = !matches!(sum_by, Some(None));
                if let Some(kind) = output
                    .labels
                    .get(ERROR_LABEL)
                    .filter(|kind| keeps_labels && !kind.is_empty())
                {
                    failed = Some(EvalError::pipeline(kind, &output.labels).into());
                    return false;
                }
                let labels = match sum_by {
                    Some(grouping) => eval::group_key(grouping, &output.labels),
                    None => output.labels,
                };
                let made = accumulator
                    .add(labels, nanos(row.ts), output.line.len())
                    .map_err(HttpError::from)
                    .and_then(|made| Ok(charge.charge(made)?));
                match made {
                    Ok(()) => true,
                    Err(err) => {
                        failed = Some(err);
                        false
                    }
                }
            };
            self.each_output(
                fetch.tenant,
                query,
                Scan {
                    range: span,
                    order: Order::Any,
                    limit: None,
                },
                fetch.stats,
                &mut each,
            )
            .await?;
        }
        match failed {
            Some(err) => Err(err),
            None => Ok(accumulator.finish()),
        }
    }

    /// A volume plan's series from the rollup, at the minute's resolution.
    async fn rollup(
        &self,
        plan: &VolumePlan,
        fetch: &mut Fetch<'_>,
    ) -> Result<Vec<Series>, HttpError> {
        let steps = fetch.steps;
        let range = plan.range.as_nanos() as i64;
        // The minutes `(m, m + 1 min]` that end within `(start − range, end]`: none after `end`.
        let span = TimeRange {
            from: DateTime::from_timestamp_nanos(steps.start.saturating_sub(range)),
            to: DateTime::from_timestamp_nanos(steps.end()),
        };
        let mut accumulator = RangeAccumulator::new(plan.function, range, steps);
        let read = RollupRead {
            tenant: fetch.tenant,
            query: &plan.query,
            range: span,
            keep: &plan.by,
        };
        self.rollup_series(read, &mut accumulator, fetch.stats, fetch.charge)
            .await?;
        Ok(accumulator.finish())
    }
}
