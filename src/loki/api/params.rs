//! The query string of Loki's API, read as Loki reads it: times as Unix seconds (with a
//! fraction), Unix nanoseconds or RFC 3339; steps as a duration or seconds; `limit`,
//! `direction`, `since`; each refused with a message naming the parameter.

use chrono::{DateTime, TimeDelta, Utc};

use crate::error::HttpError;
use crate::loki::logql::lexer;
use crate::loki::read::{TimeRange, MAX_ENTRIES};
use crate::model::selection::Order;

/// Lines a log query returns when it does not say.
pub(crate) const DEFAULT_LIMIT: usize = 100;
/// The longest time range a query may cover, as Loki's default `max_query_length`.
pub(crate) const MAX_QUERY_LENGTH: TimeDelta = TimeDelta::hours(30 * 24 + 1);

/// A request's query-string parameters, in order (`match[]` may repeat).
#[derive(Clone, Debug, Default)]
pub(crate) struct Params(Vec<(String, String)>);

fn bad(message: String) -> HttpError {
    HttpError::BadRequest(message)
}

impl Params {
    /// The parameters of a query string (`None`: none).
    pub(crate) fn parse(query: Option<&str>) -> Self {
        Params(
            form_urlencoded::parse(query.unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// Adds `more` after these, so that its values win where both give one.
    pub(crate) fn extend(&mut self, more: Params) {
        self.0.extend(more.0);
    }

    /// The last value of `name`, if given and not empty.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(key, value)| key == name && !value.is_empty())
            .map(|(_, value)| value.as_str())
    }

    /// Every value of `name`.
    pub(crate) fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .collect()
    }

    /// `name` as a time, or `default`.
    pub(crate) fn time(
        &self,
        name: &str,
        default: DateTime<Utc>,
    ) -> Result<DateTime<Utc>, HttpError> {
        match self.get(name) {
            None => Ok(default),
            Some(text) => parse_time(text)
                .ok_or_else(|| bad(format!("invalid {name} {text:?}: expected Unix seconds, Unix nanoseconds or an RFC 3339 time"))),
        }
    }

    /// `start`/`end` (or `since` before `end`), by default the hour before now; `end` is
    /// exclusive, so an entry at `start` is in and one at `end` is not. Both are rounded up to a
    /// whole microsecond, the precision of stored times, which keeps that rule exact: `logcli`
    /// pages a backward query with `end` one nanosecond after its last entry, and an end cut
    /// down to that entry's microsecond would lose the entries sharing it not yet printed.
    pub(crate) fn range(&self, now: DateTime<Utc>) -> Result<TimeRange, HttpError> {
        let to = self.time("end", now)?;
        let since = match self.get("since") {
            None => TimeDelta::hours(1),
            Some(text) => lexer::duration(text)
                .and_then(|d| TimeDelta::from_std(d).ok())
                .ok_or_else(|| {
                    bad(format!(
                        "invalid since {text:?}: expected a duration such as 1h"
                    ))
                })?,
        };
        let from = self.time("start", to.checked_sub_signed(since).unwrap_or(to))?;
        let (from, to) = (ceil_micros(from), ceil_micros(to));
        if to < from {
            return Err(bad(
                "end timestamp must not be before or equal to start time".into(),
            ));
        }
        if to - from > MAX_QUERY_LENGTH {
            return Err(bad(format!(
                "the query time range exceeds the limit (query length: {}h, limit: 30d1h)",
                (to - from).num_hours()
            )));
        }
        Ok(TimeRange { from, to })
    }

    /// `limit`, at most [`MAX_ENTRIES`].
    pub(crate) fn limit(&self) -> Result<usize, HttpError> {
        self.entries("limit", DEFAULT_LIMIT)
    }

    /// `name`, a count of lines to read (`default` when not given), at most [`MAX_ENTRIES`].
    pub(crate) fn entries(&self, name: &str, default: usize) -> Result<usize, HttpError> {
        let limit = self.count(&[name], default)?;
        if limit > MAX_ENTRIES {
            return Err(bad(format!(
                "max entries limit per query exceeded, limit > max_entries_limit ({limit} > {MAX_ENTRIES})"
            )));
        }
        Ok(limit)
    }

    /// The first of `names` given, a positive whole number, or `default`.
    pub(crate) fn count(&self, names: &[&str], default: usize) -> Result<usize, HttpError> {
        let Some((name, text)) = names
            .iter()
            .find_map(|name| self.get(name).map(|text| (name, text)))
        else {
            return Ok(default);
        };
        let count: usize = text
            .parse()
            .map_err(|_| bad(format!("invalid {name} {text:?}: expected a whole number")))?;
        if count == 0 {
            return Err(bad("limit must be a positive value".into()));
        }
        Ok(count)
    }

    /// `direction`: `backward` (newest first, the default) or `forward`.
    pub(crate) fn direction(&self) -> Result<Order, HttpError> {
        match self
            .get("direction")
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("backward") => Ok(Order::Newest),
            Some("forward") => Ok(Order::Oldest),
            Some(other) => Err(bad(format!(
                "invalid direction {other:?}: expected backward or forward"
            ))),
        }
    }

    /// `step` (or `interval`'s fallback, Loki's default: the range over 250, at least 1 s), in
    /// nanoseconds.
    pub(crate) fn step(&self, range: TimeRange) -> Result<i64, HttpError> {
        let Some(text) = self.get("step") else {
            let seconds = ((range.to - range.from).num_seconds() / 250).max(1);
            return Ok(seconds * 1_000_000_000);
        };
        let step = parse_step(text)
            .ok_or_else(|| bad(format!("cannot parse {text:?} to a valid duration")))?;
        Some(step)
            .filter(|nanos| *nanos > 0)
            .ok_or_else(|| bad("zero or negative query resolution step widths are not accepted. Try a positive integer".into()))
    }
}

/// A time as Loki takes it: with a `.`, Unix seconds; an integer of at most 10 digits, Unix
/// seconds; a longer one, Unix nanoseconds; else RFC 3339.
pub(crate) fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    if text.contains('.') {
        if let Ok(seconds) = text.parse::<f64>() {
            if !seconds.is_finite() || seconds.abs() > 1e11 {
                return None;
            }
            let nanos = (seconds * 1e9).round() as i64;
            return Some(DateTime::from_timestamp_nanos(nanos));
        }
    }
    match text.parse::<i64>() {
        Ok(number) if text.trim_start_matches('-').len() <= 10 => {
            DateTime::from_timestamp(number, 0)
        }
        Ok(nanos) => Some(DateTime::from_timestamp_nanos(nanos)),
        Err(_) => DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|ts| ts.with_timezone(&Utc)),
    }
}

/// A step in nanoseconds, as Loki reads it: a number of seconds (`15`, `0.5`, `-1`) or a
/// Prometheus duration (`30s`, `1m30s`; not `1.5m`).
pub(crate) fn parse_step(text: &str) -> Option<i64> {
    if let Ok(seconds) = text.parse::<f64>() {
        let nanos = seconds * 1e9;
        return (nanos.is_finite() && nanos.abs() < i64::MAX as f64).then_some(nanos as i64);
    }
    let step = lexer::prometheus_duration(text).ok()?;
    i64::try_from(step.as_nanos()).ok()
}

/// `at` rounded up to a whole microsecond: an entry stored at a whole microsecond is before `at`
/// exactly when it is before this.
fn ceil_micros(at: DateTime<Utc>) -> DateTime<Utc> {
    match at.timestamp_subsec_nanos() % 1000 {
        0 => at,
        below => at
            .checked_add_signed(TimeDelta::nanoseconds(i64::from(1000 - below)))
            .unwrap_or(at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_loki_reads_them() {
        let at = |text| parse_time(text).unwrap().timestamp_nanos_opt().unwrap();
        assert_eq!(at("1700000000"), 1_700_000_000_000_000_000);
        assert_eq!(at("1700000000.5"), 1_700_000_000_500_000_000);
        assert_eq!(at("1700000000123456789"), 1_700_000_000_123_456_789);
        assert_eq!(at("2023-11-14T22:13:20Z"), 1_700_000_000_000_000_000);
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(parse_time("1e400.0"), None);
    }

    #[test]
    fn a_range_keeps_every_entry_of_its_bounds_microseconds() {
        let now = parse_time("1700000000").unwrap();
        let nanos = |at: DateTime<Utc>| at.timestamp_nanos_opt().unwrap();
        // logcli's next page ends 1 ns after the last entry it printed, at …001_000 ns.
        let range = Params::parse(Some("start=1699990000000000001&end=1699999999000001001"))
            .range(now)
            .unwrap();
        assert_eq!(nanos(range.to), 1_699_999_999_000_002_000);
        assert_eq!(nanos(range.from), 1_699_990_000_000_001_000);
        let whole = Params::parse(Some("start=1699990000000001000&end=1700000000"))
            .range(now)
            .unwrap();
        assert_eq!(
            nanos(whole.from),
            1_699_990_000_000_001_000,
            "already whole"
        );
        assert_eq!(nanos(whole.to), 1_700_000_000_000_000_000);
    }

    #[test]
    fn ranges_limits_directions_and_steps() {
        let now = parse_time("1700000000").unwrap();
        let params = Params::parse(Some(
            "start=1699990000&end=1700000000&limit=20&direction=FORWARD&step=1m",
        ));
        let range = params.range(now).unwrap();
        assert_eq!((range.to - range.from).num_seconds(), 10_000);
        assert_eq!(params.limit().unwrap(), 20);
        assert_eq!(params.direction().unwrap(), Order::Oldest);
        assert_eq!(params.step(range).unwrap(), 60_000_000_000);
        let defaults = Params::parse(None);
        let range = defaults.range(now).unwrap();
        assert_eq!((range.to - range.from).num_hours(), 1);
        assert_eq!(
            defaults.step(range).unwrap(),
            14_000_000_000,
            "3600 s / 250"
        );
        assert_eq!(defaults.limit().unwrap(), DEFAULT_LIMIT);
        for refused in [
            "limit=5001",
            "limit=0",
            "direction=sideways",
            "step=0",
            "step=-5",
            "start=1700000001&end=1700000000",
            "start=1600000000&end=1700000000",
            "since=forever",
        ] {
            let params = Params::parse(Some(refused));
            let outcome = params
                .range(now)
                .and_then(|range| params.step(range))
                .and_then(|_| params.limit())
                .and_then(|_| params.direction());
            assert!(outcome.is_err(), "{refused}");
        }
        assert_eq!(
            Params::parse(Some("match[]=a&match[]=b")).all("match[]"),
            ["a", "b"]
        );
    }
}
