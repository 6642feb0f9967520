//! Loki's query API over the stores, for Grafana's Loki data source, `logcli` and scripts: LogQL
//! log queries (streams of lines), labels, series and volume, each read scoped to the caller's
//! tenant and held to the limits of every read (admission per tenant, the read timeout, the
//! answer's bytes); metric queries are [`super::metric`]'s, on the reads here.
//!
//! A read runs in two parts: the database narrows the rows by the selection SQL can check
//! ([`super::logql::plan`]), and the engine ([`super::logql::pipeline`]) checks each row that
//! comes back and runs its stages. Volume, and a metric query that only sums lines by service and
//! level over whole minutes, read the per-minute `log_volume` rollup instead of the rows.
//!
//! The endpoints themselves, their parameters and Loki's JSON shapes are the HTTP listener's, in
//! [`super::api`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};

use crate::error::HttpError;
use crate::loki::logql::ast::{LogQuery, RangeFunction};
use crate::loki::logql::eval::{EvalError, RangeAccumulator, Series, Steps};
use crate::loki::logql::labels::{self, Labels, StreamLabelCache};
use crate::loki::logql::pipeline::{CompileError, Output, Pipeline};
use crate::loki::logql::plan;
use crate::loki::logql::ParseError;
use crate::model::selection::{Counting, Order, VolumeRow};
use crate::query::memory::ReadCharge;
use crate::query::Reads;
use crate::storage::{CountedRow, StoredRow};

/// The most lines a log query may ask for, as Loki's default `max_entries_limit_per_query`.
pub(crate) const MAX_ENTRIES: usize = 5000;
/// The most (minute, service, severity) rollup rows one query may read.
pub(crate) const MAX_VOLUME_ROWS: usize = 500_000;
/// Rows looked at, newest first, to list the attribute labels and their values of a range:
/// attributes have no index, so their names and values are sampled, not counted.
pub(crate) const LABEL_SAMPLE_ROWS: usize = 2000;

// A request Loki's API cannot serve as written is the caller's: 400, with the reason.
impl From<ParseError> for HttpError {
    fn from(err: ParseError) -> Self {
        HttpError::BadRequest(err.to_string())
    }
}

impl From<CompileError> for HttpError {
    fn from(err: CompileError) -> Self {
        HttpError::BadRequest(err.to_string())
    }
}

impl From<EvalError> for HttpError {
    fn from(err: EvalError) -> Self {
        HttpError::BadRequest(err.to_string())
    }
}

/// What a query read, for Loki's `stats`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Stats {
    /// Rows the database sent.
    pub lines_scanned: u64,
    /// Bytes of their messages.
    pub bytes_scanned: u64,
    /// Rollup rows read instead of rows.
    pub volume_rows: u64,
    /// Entries or points in the answer.
    pub returned: u64,
    /// Seconds spent.
    pub seconds: f64,
}

impl Stats {
    /// Adds what another read of the same query read.
    pub(crate) fn add(&mut self, read: &Stats) {
        self.lines_scanned += read.lines_scanned;
        self.bytes_scanned += read.bytes_scanned;
        self.volume_rows += read.volume_rows;
    }
}

/// A time range `[from, to)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimeRange {
    /// Inclusive start.
    pub from: DateTime<Utc>,
    /// Exclusive end.
    pub to: DateTime<Utc>,
}

/// One line of a log query's answer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entry {
    /// Nanoseconds since the epoch.
    pub ts: i64,
    /// The line, after the query's stages.
    pub line: String,
}

/// A log query's answer: lines grouped by their labels, each stream in the query's direction.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Streams {
    /// Streams, by labels.
    pub streams: BTreeMap<Labels, Vec<Entry>>,
}

/// Nanoseconds since the epoch of a stored time (microsecond precision, so it always fits).
pub(crate) fn nanos(ts: DateTime<Utc>) -> i64 {
    ts.timestamp_micros().saturating_mul(1000)
}

impl Reads {
    /// Streams the rows of `query` in `scan` through its pipeline to `each`, which returns false
    /// to stop.
    pub(super) async fn each_output(
        &self,
        tenant: &str,
        query: &LogQuery,
        scan: Scan<'_>,
        stats: &mut Stats,
        each: &mut (dyn FnMut(&StoredRow, Output) -> bool + Send),
    ) -> Result<(), HttpError> {
        let pipeline = Pipeline::compile(query)?;
        self.each_piped(tenant, query, &pipeline, scan, stats, each)
            .await
    }

    /// The same through `pipeline`, compiled from `query` (with hints, say).
    pub(super) async fn each_piped(
        &self,
        tenant: &str,
        query: &LogQuery,
        pipeline: &Pipeline,
        Scan {
            range,
            order,
            limit,
            needs,
        }: Scan<'_>,
        stats: &mut Stats,
        each: &mut (dyn FnMut(&StoredRow, Output) -> bool + Send),
    ) -> Result<(), HttpError> {
        let mut selection = plan::selection(query, range.from, range.to);
        if let Some(name) = needs {
            selection.lines.extend(plan::giving_label(query, name));
        }
        let Some(selection) = self.reader().narrow(tenant, &selection).await? else {
            return Ok(());
        };
        let limit = limit.filter(|_| plan::is_exact(query));
        let (mut lines, mut bytes) = (0u64, 0u64);
        let mut streams = StreamLabelCache::default();
        let mut sink = |row: &StoredRow| {
            lines += 1;
            bytes += row.message.len() as u64;
            match pipeline.process_in(row, &mut streams) {
                Some(output) => each(row, output),
                None => true,
            }
        };
        let read = self
            .reader()
            .select(tenant, &selection, order, limit, &mut sink)
            .await;
        stats.lines_scanned += lines;
        stats.bytes_scanned += bytes;
        Ok(read?)
    }

    /// Gives `each` the rows of `query` (whose stages are line filters alone,
    /// [`plan::filters_lines_only`]) over `range`, counted by the database per window of
    /// `counting` and label columns: each window's labels, end (nanoseconds), lines and bytes,
    /// until it returns false. False, having read nothing, where the store cannot check every
    /// line filter itself.
    pub(super) async fn each_counted(
        &self,
        tenant: &str,
        query: &LogQuery,
        range: TimeRange,
        counting: Counting,
        stats: &mut Stats,
        each: &mut (dyn FnMut(Labels, i64, u64, u64) -> bool + Send),
    ) -> Result<bool, HttpError> {
        debug_assert!(plan::filters_lines_only(query));
        let selection = plan::selection(query, range.from, range.to);
        if !self.reader().checks_lines(&selection) {
            return Ok(false);
        }
        let Some(selection) = self.reader().narrow(tenant, &selection).await? else {
            return Ok(true);
        };
        // The selector again, for what the database left out (a regular expression).
        let pipeline = Pipeline::compile(query)?;
        let (mut lines, mut bytes) = (0u64, 0u64);
        let mut streams = StreamLabelCache::default();
        let mut sink = |counted: CountedRow| {
            let (count, size) = (counted.count as u64, counted.bytes as u64);
            lines += count;
            bytes += size;
            let Some((stream, _)) =
                streams.selected(&counted.row, |stream| pipeline.selects(stream))
            else {
                return true;
            };
            let labels = labels::with_metadata(stream.clone(), &counted.row);
            each(labels, nanos(counted.row.ts), count, size)
        };
        let read = self
            .reader()
            .count(tenant, &selection, counting, &mut sink)
            .await;
        stats.lines_scanned += lines;
        stats.bytes_scanned += bytes;
        read?;
        Ok(true)
    }

    /// A log query's lines over `range`: at most `limit`, and no more than fit the answer's bytes;
    /// each line kept is charged to `charge`.
    pub(crate) async fn loki_logs(
        &self,
        tenant: &Arc<str>,
        query: &LogQuery,
        range: TimeRange,
        limit: usize,
        order: Order,
        charge: &mut ReadCharge,
    ) -> Result<(Streams, Stats), HttpError> {
        let started = Instant::now();
        let budget = self.limits().page_size(limit).bytes;
        self.admitted(tenant, async {
            let mut stats = Stats::default();
            let mut streams = Streams::default();
            let (mut taken, mut size) = (0usize, 0usize);
            let mut refused = None;
            let mut each = |row: &StoredRow, output: Output| {
                // Labels and framing count as well as the line: an answer of tiny lines with
                // many labels is still bounded.
                let cost = output.line.len()
                    + 48
                    + output
                        .labels
                        .iter()
                        .map(|(k, v)| k.len() + v.len() + 6)
                        .sum::<usize>();
                if taken > 0 && size + cost > budget {
                    return false;
                }
                if let Err(err) = charge.charge(cost) {
                    refused = Some(err);
                    return false;
                }
                size += cost;
                taken += 1;
                let entry = Entry {
                    ts: nanos(row.ts),
                    line: output.line.into_owned(),
                };
                streams
                    .streams
                    .entry(output.labels)
                    .or_default()
                    .push(entry);
                taken < limit
            };
            self.each_output(
                tenant,
                query,
                Scan {
                    range,
                    order,
                    limit: Some(limit),
                    needs: None,
                },
                &mut stats,
                &mut each,
            )
            .await?;
            if let Some(err) = refused {
                return Err(err.into());
            }
            stats.returned = taken as u64;
            stats.seconds = started.elapsed().as_secs_f64();
            Ok((streams, stats))
        })
        .await
    }
}

/// What a volume request asks of the rollup besides its selector and range.
#[derive(Clone, Debug, Default)]
pub(crate) struct VolumeAsk {
    /// The labels to sum by (by default the labels the selector names).
    pub targets: Vec<String>,
    /// `None`: one sum over the whole range; else a sum at each step over the step before it.
    pub steps: Option<Steps>,
    /// The most series, largest first.
    pub limit: usize,
    /// Loki's `aggregateBy=labels`: one series per stream label name, `{name=""}`, holding the
    /// bytes of the streams that have it.
    pub by_label_names: bool,
}

/// A read of the rollup into series: the rows of `query` over `range`, each in the series of
/// its stream's labels that `keep` names.
pub(super) struct RollupRead<'a> {
    pub tenant: &'a str,
    pub query: &'a LogQuery,
    pub range: TimeRange,
    pub keep: &'a [String],
}

/// Which rows of a query a read goes through, in what order, and how many it wants at most
/// (passed to the database only when [`plan::is_exact`] says it can count them).
#[derive(Clone, Copy, Debug)]
pub(super) struct Scan<'a> {
    pub range: TimeRange,
    pub order: Order,
    pub limit: Option<usize>,
    /// A label every line the read keeps has (an `unwrap`'s), by which the database may pass
    /// over rows that cannot have it ([`plan::giving_label`]).
    pub needs: Option<&'a str>,
}

/// Where a rollup minute's rows count among `steps`: at the minute's end, the last instant of
/// `(m, m + 1 min]`, so that a step's range holds the minutes that end within it; the minute still
/// going at the last step at that step, so that the newest lines are counted.
fn minute_at(minute: i64, steps: Steps) -> i64 {
    (minute.saturating_mul(1_000_000_000) + plan::MINUTE_NANOS).min(steps.end())
}

/// Refuses what the rollup cannot answer: a matcher on a label other than its stream labels, a
/// target label it cannot group by, or a pipeline.
fn rollup_selector(query: &LogQuery, targets: &[String]) -> Result<(), HttpError> {
    let matched = query.selector.iter().map(|m| &m.label);
    if let Some(other) = matched
        .filter(|label| !labels::is_indexed(label))
        .chain(
            targets
                .iter()
                .filter(|label| !labels::is_rollup_label(label)),
        )
        .next()
    {
        return Err(HttpError::BadRequest(format!(
            "volume is kept for service_name and level only, not for {other:?}; use a metric query such as sum by ({other}) (bytes_over_time({{…}}[5m])) instead"
        )));
    }
    if !query.pipeline.is_empty() {
        return Err(HttpError::BadRequest(
            "the volume endpoints take a stream selector alone, without a pipeline".into(),
        ));
    }
    Ok(())
}

/// What Loki's `index/stats` says of a selector over a range, counted from the rollup.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct IndexStats {
    /// Streams (service and level) with lines in the range.
    pub(crate) streams: u64,
    /// Rollup rows (a stream's minutes): loghaul keeps no chunks, and this is its closest unit.
    pub(crate) chunks: u64,
    /// Bytes of the lines' messages.
    pub(crate) bytes: u64,
    /// Lines.
    pub(crate) entries: u64,
}

/// The (service, level) of a stream: the key of its rows in the rollup.
fn rollup_key(labels: &Labels) -> (Option<String>, Option<String>) {
    (
        labels.get(labels::SERVICE_LABEL).cloned(),
        labels.get(labels::LEVEL_LABEL).cloned(),
    )
}

/// The labels of `stream` that `keep` names.
fn only(stream: Labels, keep: &[String]) -> Labels {
    stream
        .into_iter()
        .filter(|(name, _)| keep.contains(name))
        .collect()
}

/// Series of the rollup's (service, level) summed into one per stream label name (`{env=""}`):
/// each adds to the names its streams have, those of `streams` with its service and level (or,
/// when none was seen, the service and level themselves).
fn by_names(series: Vec<Series>, streams: &[Labels]) -> Vec<Series> {
    let mut names: BTreeMap<_, BTreeSet<String>> = BTreeMap::new();
    for stream in streams {
        names
            .entry(rollup_key(stream))
            .or_default()
            .extend(stream.keys().cloned());
    }
    let mut sums: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
    for one in series {
        let own: BTreeSet<String> = one.labels.keys().cloned().collect();
        for name in names.get(&rollup_key(&one.labels)).unwrap_or(&own) {
            let points = sums
                .entry(name.clone())
                .or_insert_with(|| vec![None; one.points.len()]);
            for (sum, point) in points.iter_mut().zip(&one.points) {
                if let Some(value) = point {
                    *sum.get_or_insert(0.0) += value;
                }
            }
        }
    }
    sums.into_iter()
        .map(|(name, points)| Series {
            labels: Labels::from([(name, String::new())]),
            points,
        })
        .collect()
}

impl Reads {
    /// Gives `each` the rollup's rows over `range` whose stream `query` (a selector of indexed
    /// labels) selects, with the stream's labels, as the database sends them: none is kept, so a
    /// read holds what `each` makes of them. Refused past [`MAX_VOLUME_ROWS`]. The one reader of
    /// the rollup: Loki's endpoints and the console's histogram ([`crate::console::histogram`])
    /// all read here.
    pub(crate) async fn selected_streams(
        &self,
        tenant: &str,
        query: &LogQuery,
        range: TimeRange,
        stats: &mut Stats,
        each: &mut (dyn FnMut(Labels, VolumeRow) -> Result<(), HttpError> + Send),
    ) -> Result<(), HttpError> {
        let selection = plan::selection(query, range.from, range.to);
        // The selector again, for what the database left out (a regular expression).
        let pipeline = Pipeline::compile(query)?;
        let mut read = 0usize;
        let mut failed = None;
        let mut sink = |row: VolumeRow| {
            read += 1;
            if read > MAX_VOLUME_ROWS {
                failed = Some(HttpError::BadRequest(format!(
                    "the range holds more than {MAX_VOLUME_ROWS} (minute, service, level) volume rows; narrow the time range or the selector"
                )));
                return false;
            }
            // The selector names the rollup's stream labels only, never `detected_level`.
            let stream = labels::volume_labels(&row.service, &row.level, row.severity);
            if !pipeline.selects(&stream) {
                return true;
            }
            match each(stream, row) {
                Ok(()) => true,
                Err(err) => {
                    failed = Some(err);
                    false
                }
            }
        };
        self.reader()
            .volume(tenant, &selection, MAX_VOLUME_ROWS + 1, &mut sink)
            .await?;
        if let Some(err) = failed {
            return Err(err);
        }
        stats.volume_rows += read as u64;
        Ok(())
    }

    /// Adds the rows of `read` to `accumulator`, each counted at [`minute_at`] its steps; each
    /// series charged as it is made.
    pub(super) async fn rollup_series(
        &self,
        read: RollupRead<'_>,
        accumulator: &mut RangeAccumulator,
        stats: &mut Stats,
        charge: &mut ReadCharge,
    ) -> Result<(), HttpError> {
        let steps = accumulator.steps();
        let RollupRead {
            tenant,
            query,
            range,
            keep,
        } = read;
        self.selected_streams(tenant, query, range, stats, &mut |stream, row| {
            let made = accumulator.add_many(
                only(stream, keep),
                minute_at(row.minute, steps),
                row.count as u64,
                row.bytes as u64,
            )?;
            Ok(charge.charge(made)?)
        })
        .await
    }

    /// What `query` (a selector of indexed labels) holds over `range`, from the rollup: Grafana
    /// asks it before a query to show how much the query will read.
    pub(crate) async fn loki_index_stats(
        &self,
        tenant: &Arc<str>,
        query: &LogQuery,
        range: TimeRange,
    ) -> Result<(IndexStats, Stats), HttpError> {
        rollup_selector(query, &[])?;
        self.admitted(tenant, async {
            let mut stats = Stats::default();
            let mut index = IndexStats::default();
            let mut streams = BTreeSet::new();
            self.selected_streams(tenant, query, range, &mut stats, &mut |stream, row| {
                streams.insert(stream);
                index.chunks += 1;
                index.entries += row.count.max(0) as u64;
                index.bytes += row.bytes.max(0) as u64;
                Ok(())
            })
            .await?;
            index.streams = streams.len() as u64;
            Ok((index, stats))
        })
        .await
    }

    /// Bytes per series of `query` (a selector of indexed labels) over `range` from the rollup,
    /// as `ask` says; each series charged to `charge` as it is made.
    pub(crate) async fn loki_volume(
        &self,
        tenant: &Arc<str>,
        query: &LogQuery,
        range: TimeRange,
        ask: VolumeAsk,
        charge: &mut ReadCharge,
    ) -> Result<(Vec<Series>, Stats), HttpError> {
        let VolumeAsk {
            targets,
            steps,
            limit,
            by_label_names,
        } = ask;
        let started = Instant::now();
        rollup_selector(query, &targets)?;
        let targets = if by_label_names {
            vec![
                labels::SERVICE_LABEL.to_owned(),
                labels::LEVEL_LABEL.to_owned(),
            ]
        } else if targets.is_empty() {
            query.selector.iter().map(|m| m.label.clone()).collect()
        } else {
            targets
        };
        self.admitted(tenant, async {
            let mut stats = Stats::default();
            let steps = match steps {
                Some(steps) => steps,
                None => Steps::new(nanos(range.to), nanos(range.to), 1)?,
            };
            // One step over the whole range, or each step over the one before it.
            let window = match steps.count {
                1 => nanos(range.to) - nanos(range.from) + plan::MINUTE_NANOS,
                _ => steps.step,
            };
            let mut accumulator =
                RangeAccumulator::new(RangeFunction::BytesOverTime, window, steps);
            let read = RollupRead {
                tenant,
                query,
                range,
                keep: &targets,
            };
            self.rollup_series(read, &mut accumulator, &mut stats, charge)
                .await?;
            let mut series = accumulator.finish();
            if by_label_names {
                let streams = self
                    .streams_of(tenant, std::slice::from_ref(query), range)
                    .await?;
                series = by_names(series, &streams);
            }
            let total = |s: &Series| s.points.iter().flatten().sum::<f64>();
            series.sort_by(|a, b| total(b).total_cmp(&total(a)));
            let cut: usize = series.iter().skip(limit).map(Series::bytes).sum();
            series.truncate(limit);
            charge.release(cut);
            stats.returned = series.len() as u64;
            stats.seconds = started.elapsed().as_secs_f64();
            Ok((series, stats))
        })
        .await
    }

    /// The stream labels of the rows of `query` over `range`, newest first, until
    /// [`LABEL_SAMPLE_ROWS`] were read, through its selector and stages: what stream labels
    /// other than the rollup's are sampled from.
    async fn sample(
        &self,
        tenant: &str,
        query: &LogQuery,
        range: TimeRange,
        each: &mut (dyn FnMut(Labels) + Send),
    ) -> Result<(), HttpError> {
        let mut stats = Stats::default();
        let mut read = 0;
        let mut sink = |row: &StoredRow, _: Output| {
            each(labels::row_stream_labels(row));
            read += 1;
            read < LABEL_SAMPLE_ROWS
        };
        self.each_output(
            tenant,
            query,
            Scan {
                range,
                order: Order::Newest,
                limit: None,
                needs: None,
            },
            &mut stats,
            &mut sink,
        )
        .await
    }

    /// The stream label names of `range` (of the streams `query` selects, when given):
    /// `service_name`, which every record has, and the stream labels of the newest rows.
    pub(crate) async fn loki_label_names(
        &self,
        tenant: &Arc<str>,
        range: TimeRange,
        query: Option<&LogQuery>,
    ) -> Result<Vec<String>, HttpError> {
        let everything = LogQuery::default();
        let query = query.unwrap_or(&everything);
        self.admitted(tenant, async {
            let mut names = BTreeSet::new();
            if query.selector.is_empty() {
                // Every record has a service.
                names.insert(labels::SERVICE_LABEL.to_owned());
            }
            self.sample(tenant, query, range, &mut |labels| {
                names.extend(labels.into_keys());
            })
            .await?;
            Ok(names.into_iter().collect())
        })
        .await
    }

    /// The values of label `name` over `range` among the rows `query` selects (all rows when
    /// `None`): from the rollup for indexed labels, else sampled from the newest rows.
    pub(crate) async fn loki_label_values(
        &self,
        tenant: &Arc<str>,
        name: &str,
        range: TimeRange,
        query: Option<&LogQuery>,
    ) -> Result<Vec<String>, HttpError> {
        let everything = LogQuery::default();
        let query = query.unwrap_or(&everything);
        self.admitted(tenant, async {
            let mut values = BTreeSet::new();
            if labels::is_indexed(name) && plan::is_indexed_selector(query) {
                self.selected_streams(
                    tenant,
                    query,
                    range,
                    &mut Stats::default(),
                    &mut |mut stream, _| {
                        values.extend(stream.remove(name));
                        Ok(())
                    },
                )
                .await?;
            } else {
                self.sample(tenant, query, range, &mut |mut labels| {
                    values.extend(labels.remove(name));
                })
                .await?;
            }
            Ok(values.into_iter().filter(|v| !v.is_empty()).collect())
        })
        .await
    }

    /// The streams (their stream labels) over `range` that any of `selectors` selects: those
    /// of the newest rows, and for a selector of the rollup's labels every (service, level) of
    /// the range that those rows did not show, with the labels the rollup keeps.
    pub(crate) async fn loki_series(
        &self,
        tenant: &Arc<str>,
        selectors: &[LogQuery],
        range: TimeRange,
    ) -> Result<Vec<Labels>, HttpError> {
        self.admitted(tenant, self.streams_of(tenant, selectors, range))
            .await
    }

    /// [`Reads::loki_series`] within a read already admitted.
    async fn streams_of(
        &self,
        tenant: &str,
        selectors: &[LogQuery],
        range: TimeRange,
    ) -> Result<Vec<Labels>, HttpError> {
        let mut series = BTreeSet::new();
        let mut rollup = BTreeSet::new();
        for query in selectors {
            if plan::is_indexed_selector(query) {
                self.selected_streams(
                    tenant,
                    query,
                    range,
                    &mut Stats::default(),
                    &mut |mut stream, _| {
                        stream.remove(labels::DETECTED_LEVEL_LABEL);
                        rollup.insert(stream);
                        Ok(())
                    },
                )
                .await?;
            }
            self.sample(tenant, query, range, &mut |labels| {
                series.insert(labels);
            })
            .await?;
        }
        let sampled: BTreeSet<_> = series.iter().map(rollup_key).collect();
        series.extend(
            rollup
                .into_iter()
                .filter(|stream| !sampled.contains(&rollup_key(stream))),
        );
        Ok(series.into_iter().collect())
    }
}
