//! The console's volume histogram: a search's records per time bucket and level, read from the
//! per-minute `log_volume` rollup through the reader Loki's volume endpoints use
//! ([`crate::loki::read`]), never by scanning the rows.
//!
//! The rollup keeps (minute, service, severity), so it answers a search's time range, services
//! and minimum severity exactly, at the minute's resolution: a range that starts or ends inside a
//! minute counts that whole minute. It keeps nothing of the message or the attributes, so a
//! histogram leaves `contains` and `attr` out and says so ([`Histogram::not_applied`]).

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

use crate::error::QueryError;
use crate::loki::logql::ast::{LogQuery, MatchOp, Matcher};
use crate::loki::logql::labels::SERVICE_LABEL;
use crate::loki::read::{Stats, TimeRange};
use crate::model::severity::Severity;
use crate::proto::v1;
use crate::query::filter::Filter;
use crate::query::Reads;

/// The most buckets a histogram is cut into.
pub(crate) const MAX_BUCKETS: i64 = 120;

/// Bucket sizes in minutes, smallest first; past the last, whole days.
const BUCKET_MINUTES: [i64; 12] = [1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440];

const MINUTE: i64 = 60;
const DAY_MINUTES: i64 = 1440;

/// Records per level in one bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bucket {
    /// Where the bucket starts (whole minutes; the first bucket may start before the range).
    pub start: DateTime<Utc>,
    /// Records per level, in the order of [`Severity::ALL`].
    pub counts: [u64; Severity::ALL.len()],
}

impl Bucket {
    /// All the bucket's records.
    pub(crate) fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The levels with records, by Loki's level names, and their counts.
    pub(crate) fn levels(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Severity::ALL
            .into_iter()
            .zip(self.counts)
            .filter(|(_, count)| *count > 0)
            .map(|(level, count)| (level.name(), count))
    }
}

/// A search's volume over its range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Histogram {
    /// The start of the first minute counted.
    pub from: DateTime<Utc>,
    /// The end of the last minute counted.
    pub to: DateTime<Utc>,
    /// How long each bucket is: whole minutes.
    pub bucket: TimeDelta,
    /// Every bucket from the one holding `from` to the one holding the last minute, empty ones
    /// included.
    pub buckets: Vec<Bucket>,
    /// The lower bound the server chose for a filter without `from`, as a search does.
    pub default_from: Option<DateTime<Utc>>,
    /// The parameters of the filter the rollup cannot apply (`contains`, `attr`): the counts
    /// are of the records the rest of the filter selects.
    pub not_applied: Vec<&'static str>,
}

impl Histogram {
    /// All records counted.
    pub(crate) fn total(&self) -> u64 {
        self.buckets.iter().map(Bucket::total).sum()
    }
}

/// The bucket size for a span of `minutes`: the smallest of [`BUCKET_MINUTES`], or whole days
/// past them, that cuts it into fewer than [`MAX_BUCKETS`] pieces, so that with the buckets on
/// multiples of their size (one more at most) there are no more than [`MAX_BUCKETS`].
pub(crate) fn bucket_minutes(minutes: i64) -> i64 {
    let fits = |size: i64| (minutes + size - 1) / size < MAX_BUCKETS;
    BUCKET_MINUTES
        .into_iter()
        .find(|size| fits(*size))
        .unwrap_or_else(|| {
            let days =
                (minutes + DAY_MINUTES * (MAX_BUCKETS - 1) - 1) / (DAY_MINUTES * (MAX_BUCKETS - 1));
            days.max(1) * DAY_MINUTES
        })
}

/// The rollup's selection of `filter`: its services (any of them). The rollup's rows below the
/// filter's minimum severity are dropped as they are read.
fn selector(filter: &Filter) -> LogQuery {
    let mut selector = Vec::new();
    match filter.services.as_slice() {
        [] => {}
        [service] => selector.push(Matcher {
            label: SERVICE_LABEL.into(),
            op: MatchOp::Eq,
            value: service.clone(),
        }),
        services => selector.push(Matcher {
            label: SERVICE_LABEL.into(),
            op: MatchOp::Re,
            value: services
                .iter()
                .map(|service| regex::escape(service))
                .collect::<Vec<_>>()
                .join("|"),
        }),
    }
    LogQuery {
        selector,
        pipeline: Vec::new(),
    }
}

/// The index in [`Severity::ALL`] of a severity's level (unknown, first, for one outside them all).
fn level_index(severity: i16) -> usize {
    Severity::of(severity.into()) as usize
}

fn at(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(seconds, 0).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The end of the minute that holds the last instant before `to`, in seconds.
fn minute_ceil(to: DateTime<Utc>) -> i64 {
    let micros = to.timestamp_micros();
    (micros + MINUTE * 1_000_000 - 1).div_euclid(MINUTE * 1_000_000) * MINUTE
}

impl Reads {
    /// The volume histogram of `tenant`'s records that `filter` selects, checked and bounded as
    /// a search is (the default range when it has no `from`, one admitted read within the read
    /// timeout).
    pub(crate) async fn histogram(
        &self,
        tenant: &Arc<str>,
        filter: v1::Filter,
    ) -> Result<Histogram, QueryError> {
        let filter = Filter::from_proto(Some(filter))?;
        let default_from = self.limits().default_from(&filter);
        let from = filter.from.or(default_from);
        let to = filter
            .to
            .unwrap_or_else(Utc::now)
            .max(from.unwrap_or_default());
        let query = selector(&filter);
        let mut not_applied = Vec::new();
        if filter.contains.is_some() {
            not_applied.push("contains");
        }
        if !filter.attributes.is_empty() {
            not_applied.push("attr");
        }
        let range = TimeRange {
            // Without any lower bound, from the first minute of the tenant's rollup.
            from: from.unwrap_or(DateTime::UNIX_EPOCH),
            to,
        };
        // The rows come by minute, oldest first, and are counted as they come: without `from`,
        // the buckets start at the first one's minute.
        let last = minute_ceil(to);
        let mut layout = from.map(|from| Layout::new(from.timestamp(), last));
        self.admitted(tenant, async {
            self.selected_streams(
                tenant,
                &query,
                range,
                &mut Stats::default(),
                &mut |_, row| {
                    if row.severity >= filter.min_severity {
                        layout
                            .get_or_insert_with(|| Layout::new(row.minute, last))
                            .count(row.minute, row.severity, row.count);
                    }
                    Ok(())
                },
            )
            .await
        })
        .await?;
        let layout = layout.unwrap_or_else(|| Layout::new(last - MINUTE, last));
        Ok(Histogram {
            from: at(layout.first),
            to: at(layout.last),
            bucket: TimeDelta::seconds(layout.size),
            buckets: layout.buckets,
            default_from,
            not_applied,
        })
    }
}

/// The buckets of a histogram from its first minute, as the rows are counted into them.
struct Layout {
    /// The first minute counted, in seconds.
    first: i64,
    /// The end of the last minute counted, in seconds.
    last: i64,
    /// Each bucket's length, in seconds.
    size: i64,
    /// Where the first bucket starts, in seconds.
    start: i64,
    buckets: Vec<Bucket>,
}

impl Layout {
    /// The buckets from the minute that holds `first` (seconds) to `last` (the end of a minute).
    fn new(first: i64, last: i64) -> Self {
        let first = first.div_euclid(MINUTE) * MINUTE;
        let last = last.max(first + MINUTE);
        let size = bucket_minutes((last - first) / MINUTE) * MINUTE;
        let start = first.div_euclid(size) * size;
        let count = (last - start + size - 1) / size;
        let buckets = (0..count)
            .map(|n| Bucket {
                start: at(start + n * size),
                counts: [0; Severity::ALL.len()],
            })
            .collect();
        Layout {
            first,
            last,
            size,
            start,
            buckets,
        }
    }

    /// Adds `count` records of `severity` in the minute starting at `minute` (seconds).
    fn count(&mut self, minute: i64, severity: i16, count: i64) {
        let index = (minute - self.start).div_euclid(self.size);
        if let Some(bucket) = usize::try_from(index)
            .ok()
            .and_then(|i| self.buckets.get_mut(i))
        {
            bucket.counts[level_index(severity)] += count.max(0) as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_whole_minutes_and_at_most_the_maximum() {
        let cases = [
            (1, 1),
            (5, 1),
            (60, 1),
            (119, 1),
            (120, 2),
            (360, 5),
            (1440, 15),
            (7 * 1440, 120),
            (30 * 1440, 720),
            (90 * 1440, DAY_MINUTES),
            (200 * 1440, 2 * DAY_MINUTES),
            (3650 * 1440, 31 * DAY_MINUTES),
        ];
        for (minutes, expected) in cases {
            assert_eq!(bucket_minutes(minutes), expected, "{minutes} minutes");
        }
        for minutes in (1..20_000).chain([525_600, 5_256_000, 52_560_000]) {
            let size = bucket_minutes(minutes);
            // The worst alignment: the span starts one minute before a bucket's end.
            let buckets = (minutes + size - 1) / size + 1;
            assert!(buckets <= MAX_BUCKETS, "{minutes}: {buckets} of {size}");
        }
    }

    #[test]
    fn the_selector_takes_the_services() {
        let filter = Filter {
            services: vec!["a.b".into(), "c|d".into()],
            min_severity: 14,
            ..Filter::default()
        };
        let query = selector(&filter);
        assert_eq!(query.selector[0].value, r"a\.b|c\|d");
        assert_eq!(
            query.selector.len(),
            1,
            "the severity is checked as rows are read"
        );
        let one = selector(&Filter {
            services: vec!["checkout".into()],
            ..Filter::default()
        });
        assert_eq!(one.selector.len(), 1);
        assert_eq!(one.selector[0].op, MatchOp::Eq);
        assert!(selector(&Filter::default()).selector.is_empty());
    }

    #[test]
    fn levels_are_indexed_as_loki_names_them() {
        let name = |severity| Severity::ALL[level_index(severity)].name();
        assert_eq!(name(0), "unknown");
        assert_eq!(name(4), "trace");
        assert_eq!(name(13), "warn");
        assert_eq!(name(24), "fatal");
        assert_eq!(name(99), "unknown");
    }

    #[test]
    fn the_last_minute_is_the_one_before_to() {
        let exact = DateTime::from_timestamp(600, 0).unwrap();
        assert_eq!(minute_ceil(exact), 600);
        let inside = DateTime::from_timestamp(600, 1000).unwrap();
        assert_eq!(minute_ceil(inside), 660);
    }
}
