//! The reads of a metric query: each read's series from the stores, charged as they are made.

use chrono::DateTime;

use super::program::Read;
use crate::error::HttpError;
use crate::loki::logql::ast::{Grouping, LogQuery, RangeExpr, RangeFunction};
use crate::loki::logql::eval::{self, EvalError, RangeAccumulator, Series, Steps};
use crate::loki::logql::hints;
use crate::loki::logql::labels::{self, Labels};
use crate::loki::logql::pipeline::{Output, Pipeline, ERROR_LABEL};
use crate::loki::logql::plan::{self, VolumePlan};
use crate::loki::logql::samples::SampleAccumulator;
use crate::loki::logql::unwrap::Unwrapper;
use crate::loki::read::{nanos, RollupRead, Scan, Stats, TimeRange};
use crate::model::selection::{CountedAttributes, Counting, Order};
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
            Read::Scan { range, sum_by } => self.range_series(range, *sum_by, fetch).await,
        }
    }

    /// The series of a range function at the query's steps, read by a scan, each charged as it
    /// is made; with `sum_by`, each line is counted in its group of that `sum`'s grouping instead
    /// of its own series.
    async fn range_series(
        &self,
        range: &RangeExpr,
        sum_by: Option<&Option<Grouping>>,
        fetch: &mut Fetch<'_>,
    ) -> Result<Vec<Series>, HttpError> {
        // A `sum` of everything counts each line its stages keep in its one series, which keeps
        // no label and refuses no pipeline error: the stages that only make labels change
        // nothing of it, and without them the database may count the lines itself.
        let lines_only;
        let range = if matches!(sum_by, Some(None)) && range.unwrap.is_none() {
            lines_only = RangeExpr {
                query: plan::lines_counted_by_a_sum(&range.query),
                ..range.clone()
            };
            &lines_only
        } else {
            range
        };
        let steps = fetch.steps;
        let width = range.range.as_nanos() as i64;
        let offset = range.offset.as_nanos() as i64;
        let mut target = Target::new(range, width, offset, steps)?;
        let span = TimeRange {
            from: DateTime::from_timestamp_nanos(
                steps.start.saturating_sub(offset).saturating_sub(width),
            ),
            // A range ends at its step, `(t − range, t]`: the read ends past `end` by the stores'
            // resolution, a microsecond, which both keep and neither rounds away.
            to: DateTime::from_timestamp_nanos(
                steps.end().saturating_sub(offset).saturating_add(1_000),
            ),
        };
        if let (Some(counting), Target::Lines { accumulator, held }) =
            (counting(range, sum_by, steps), &mut target)
        {
            let mut failed = None;
            let charge = &mut *fetch.charge;
            let mut each = |labels: Labels, ts: i64, count: u64, bytes: u64| {
                let labels = series_labels(labels, range, sum_by);
                let made = accumulator
                    .add_many(labels, ts, count, bytes)
                    .map_err(HttpError::from)
                    .and_then(|made| {
                        *held += made;
                        Ok(charge.charge(made)?)
                    });
                match made {
                    Ok(()) => true,
                    Err(err) => {
                        failed = Some(err);
                        false
                    }
                }
            };
            let counted = self
                .each_counted(
                    fetch.tenant,
                    &range.query,
                    span,
                    counting,
                    fetch.stats,
                    &mut each,
                )
                .await?;
            if let Some(err) = failed {
                return Err(err);
            }
            if counted {
                fetch.sources.increment_static(["count"], 1);
                return finish(target, range, steps, fetch.charge);
            }
        }
        fetch.sources.increment_static(["scan"], 1);
        // Loki refuses a line that still carries `__error__`, except a line counted into a `sum`
        // of everything, whose one series never has the label (Loki 3.7.6 answers
        // `sum(count_over_time({…} | json [5m]))` over such lines with their count). An unwrapped
        // value is always checked: Loki's parser reads the label it unwraps, whatever the sum.
        let checks_errors = target.unwraps() || !matches!(sum_by, Some(None));
        let pipeline =
            Pipeline::compile(&range.query)?.with_hints(hints::parser_hints(range, sum_by));
        // A line without the label it unwraps adds nothing, not even an error.
        let needs = range.unwrap.as_ref().map(|unwrap| unwrap.label.as_str());
        let mut failed = None;
        // When a line still carries an error, where it is: the query fails, so the scan stops.
        let mut erred: Option<(i64, EvalError)> = None;
        {
            let charge = &mut *fetch.charge;
            let mut each = |row: &StoredRow, output: Output| {
                let stream = output.stream;
                let Some((labels, value)) = target.sample(output) else {
                    return true;
                };
                if let Some(kind) = labels
                    .get(ERROR_LABEL)
                    .filter(|kind| checks_errors && !kind.is_empty())
                {
                    erred = Some((nanos(row.ts), EvalError::pipeline(kind, &labels)));
                    return false;
                }
                let labels = series_labels(labels, range, sum_by);
                let made = target
                    .add(labels, nanos(row.ts), stream, value)
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
            self.each_piped(
                fetch.tenant,
                &range.query,
                &pipeline,
                Scan {
                    range: span,
                    order: Order::Any,
                    limit: None,
                    needs,
                },
                fetch.stats,
                &mut each,
            )
            .await?;
        }
        if let Some(err) = failed {
            return Err(err);
        }
        if let Some((at, met)) = erred {
            // Loki reads the lines in time order and names the first error it meets; the rows
            // came in any order, so the lines up to the one that stopped the scan are read again
            // for the earliest. A stored time is whole microseconds: the next one is 1 µs on.
            let to = DateTime::from_timestamp_nanos(at.saturating_add(1_000)).min(span.to);
            let scan = Scan {
                range: TimeRange {
                    from: span.from,
                    to,
                },
                order: Order::Any,
                limit: None,
                needs,
            };
            let earliest = self
                .earliest_error(
                    fetch.tenant,
                    &range.query,
                    &pipeline,
                    &target,
                    scan,
                    fetch.stats,
                )
                .await?;
            return Err(earliest.unwrap_or(met).into());
        }
        finish(target, range, steps, fetch.charge)
    }

    /// The error of the earliest line `scan` reads that still carries one, as Loki names it. Of
    /// lines at the same instant, the least error text wins, so that the answer does not depend
    /// on the order the store returned them in (heap and sealed hours differ).
    async fn earliest_error(
        &self,
        tenant: &str,
        query: &LogQuery,
        pipeline: &Pipeline,
        target: &Target,
        scan: Scan<'_>,
        stats: &mut Stats,
    ) -> Result<Option<EvalError>, HttpError> {
        let mut first: Option<(i64, EvalError)> = None;
        let mut each = |row: &StoredRow, output: Output| {
            let Some((labels, _)) = target.sample(output) else {
                return true;
            };
            let Some(kind) = labels.get(ERROR_LABEL).filter(|kind| !kind.is_empty()) else {
                return true;
            };
            let ts = nanos(row.ts);
            if first.as_ref().is_none_or(|(at, _)| ts <= *at) {
                let error = EvalError::pipeline(kind, &labels);
                if first
                    .as_ref()
                    .is_none_or(|(at, named)| ts < *at || error.0 < named.0)
                {
                    first = Some((ts, error));
                }
            }
            true
        };
        self.each_piped(tenant, query, pipeline, scan, stats, &mut each)
            .await?;
        Ok(first.map(|(_, err)| err))
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

/// The labels of the series a line of `range` counts in: its group of the `sum` it feeds, or of
/// the range function's own grouping, or its own labels.
fn series_labels(labels: Labels, range: &RangeExpr, sum_by: Option<&Option<Grouping>>) -> Labels {
    match (sum_by, &range.grouping) {
        // Only whether a step has a line matters.
        _ if range.function == RangeFunction::AbsentOverTime => Labels::new(),
        (Some(grouping), _) => eval::group_key(grouping, &labels),
        (None, Some(_)) => eval::group_key(&range.grouping, &labels),
        (None, None) => labels,
    }
}

/// The series `target` gathered, `absent_over_time`'s made of them; what the accumulator held
/// beyond its series (folds, samples) goes back, what the answer takes beyond that is charged.
fn finish(
    target: Target,
    range: &RangeExpr,
    steps: Steps,
    charge: &mut ReadCharge,
) -> Result<Vec<Series>, HttpError> {
    let held = target.held();
    let mut series = target.finish();
    if range.function == RangeFunction::AbsentOverTime {
        series = eval::absent(&series, &range.query.selector, steps.count);
    }
    let now: usize = series.iter().map(Series::bytes).sum();
    if now > held {
        charge.charge(now - held)?;
    } else {
        charge.release(held - now);
    }
    Ok(series)
}

/// How the database can count the lines of `range` itself, grouped by no more label columns
/// than the series need, when it can: a function of lines (not of values) over a query whose
/// stages are all line filters, at steps whose ranges start and end on whole windows of
/// microseconds. A window is as wide as the greatest common divisor of the step and the range,
/// so that every range is made of whole windows: each window counts at the steps its end does.
fn counting(
    range: &RangeExpr,
    sum_by: Option<&Option<Grouping>>,
    steps: Steps,
) -> Option<Counting> {
    if range.unwrap.is_some() || !plan::filters_lines_only(&range.query) {
        return None;
    }
    let width = range.range.as_nanos() as i64;
    let offset = range.offset.as_nanos() as i64;
    let window = if steps.count == 1 {
        width
    } else {
        gcd(steps.step, width)
    };
    if window <= 0 || window % 1_000 != 0 {
        return None;
    }
    // The label names the series keep: `None` for all of them.
    let kept: Option<&[String]> = match (sum_by, &range.grouping) {
        _ if range.function == RangeFunction::AbsentOverTime => Some(&[]),
        (Some(None), _) => Some(&[]),
        (
            Some(Some(Grouping {
                without: false,
                labels,
            })),
            _,
        )
        | (
            None,
            Some(Grouping {
                without: false,
                labels,
            }),
        ) => Some(labels),
        _ => None,
    };
    let keeps = |name: &str| kept.is_none_or(|kept| kept.iter().any(|k| k == name));
    let (window, width) = (window / 1_000, width / 1_000);
    // Every boundary is the first step's range end plus whole windows; a stored time is whole
    // microseconds, so a boundary between two of them reads as the earlier one. The origin is
    // one more range and window back: before every row the range reads.
    let end = (steps.start - offset).div_euclid(1_000);
    Some(Counting {
        width_micros: window,
        origin_micros: end - width - window,
        severity: keeps(labels::DETECTED_LEVEL_LABEL),
        attributes: counted_attributes(kept),
        trace: keeps(labels::TRACE_ID_LABEL) || keeps(labels::SPAN_ID_LABEL),
    })
}

/// The attributes a counted read keeps for series that keep the labels `kept` (`None`: all).
/// An attribute gives any label but `service_name`, whose place the service holds. A label
/// named without `_` can only come from the attribute of that very key: the others' names are
/// made of their keys with each character other than a letter or digit (and before a leading
/// digit) written `_`.
fn counted_attributes(kept: Option<&[String]>) -> CountedAttributes {
    let Some(kept) = kept else {
        return CountedAttributes::All;
    };
    let names: Vec<String> = kept
        .iter()
        .filter(|name| *name != labels::SERVICE_LABEL)
        .cloned()
        .collect();
    if names.is_empty() {
        CountedAttributes::None
    } else if names.iter().all(|name| !name.contains('_')) {
        CountedAttributes::Only(names)
    } else {
        CountedAttributes::All
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// What a scan feeds: lines into a count, or unwrapped values into a function of values.
enum Target {
    /// Each line counts (or its bytes do).
    Lines {
        accumulator: RangeAccumulator,
        /// What the accumulator was charged for, all told.
        held: usize,
    },
    /// Each line's value counts, where it has one.
    Values(Unwrapper, SampleAccumulator),
}

impl Target {
    fn new(range: &RangeExpr, width: i64, offset: i64, steps: Steps) -> Result<Self, HttpError> {
        Ok(match &range.unwrap {
            None => Target::Lines {
                accumulator: RangeAccumulator::new(range.function, width, steps)
                    .with_offset(offset),
                held: 0,
            },
            Some(unwrap) => Target::Values(
                Unwrapper::compile(unwrap)?,
                SampleAccumulator::new(range.function, range.parameter, width, offset, steps),
            ),
        })
    }

    fn unwraps(&self) -> bool {
        matches!(self, Target::Values(..))
    }

    /// A line's labels and what it adds: its bytes, or its value; `None` when it adds nothing.
    fn sample(&self, output: Output) -> Option<(Labels, f64)> {
        match self {
            Target::Lines { .. } => Some((output.labels, output.line.len() as f64)),
            Target::Values(unwrapper, _) => unwrapper.sample(output.labels),
        }
    }

    /// Adds what [`Target::sample`] gave at `ts`, of the stream whose hash is `stream`; gives the
    /// memory to charge.
    fn add(
        &mut self,
        labels: Labels,
        ts: i64,
        stream: u64,
        value: f64,
    ) -> Result<usize, EvalError> {
        match self {
            Target::Lines { accumulator, held } => {
                let made = accumulator.add(labels, ts, value as usize)?;
                *held += made;
                Ok(made)
            }
            Target::Values(_, accumulator) => accumulator.add(labels, ts, stream, value),
        }
    }

    fn held(&self) -> usize {
        match self {
            Target::Lines { held, .. } => *held,
            Target::Values(_, accumulator) => accumulator.held(),
        }
    }

    fn finish(self) -> Vec<Series> {
        match self {
            Target::Lines { accumulator, .. } => accumulator.finish(),
            Target::Values(_, accumulator) => accumulator.finish(),
        }
    }
}
