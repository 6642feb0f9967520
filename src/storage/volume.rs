//! The volume rollup's share of a batch: its rows counted per (tenant, minute, service,
//! severity, `level` label), which each backend adds to `log_volume` in the batch's transaction, one upsert per
//! group rather than per row.
//!
//! A minute row keyed `m` holds the records of `(m, m + 1 min]`, closed at its end as LogQL's
//! ranges are (`(t − range, t]`): a record stamped exactly `hh:mm:00` is counted by a range that
//! ends at `hh:mm`, from the rollup as from a scan.

use std::borrow::Cow;
use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::row::Row;
use crate::model::selection::VolumeRow;

/// Every tenant with rollup rows, by a loose scan of the primary key's leading `tenant`: one
/// index probe per tenant instead of reading every row. The same text on both stores.
pub(in crate::storage) const VOLUME_TENANTS_SQL: &str = "WITH RECURSIVE tenants(name) AS ( \
       SELECT min(tenant) FROM log_volume \
       UNION ALL \
       SELECT (SELECT min(tenant) FROM log_volume WHERE tenant > tenants.name) FROM tenants WHERE tenants.name IS NOT NULL) \
     SELECT name FROM tenants WHERE name IS NOT NULL";

/// A row of the rollup as both stores select it: `minute` (seconds since the epoch), `service`,
/// `severity`, `level`, `records` and `bytes`.
pub(in crate::storage) fn decode_volume<R>(row: &R) -> Result<VolumeRow, sqlx::Error>
where
    R: sqlx::Row,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i16: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(VolumeRow {
        minute: row.try_get("minute")?,
        service: row.try_get("service")?,
        severity: row.try_get("severity")?,
        level: row.try_get("level")?,
        count: row.try_get("records")?,
        bytes: row.try_get("bytes")?,
    })
}

/// The first minute retention keeps of the rollup at `horizon`: the one whose records the horizon
/// cuts, or the one that ends at it (a record stamped at the horizon is kept). A minute the horizon
/// cuts keeps its counts, since they cannot be split; every earlier minute ended before the
/// horizon and goes.
pub(in crate::storage) fn volume_cutoff(horizon: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(minute_of(horizon), 0).unwrap_or(horizon)
}

/// The key of the minute row that counts a record stamped `ts`, in seconds since the epoch: the
/// start of the minute `(m, m + 1 min]` that holds it.
pub(in crate::storage) fn minute_of(ts: DateTime<Utc>) -> i64 {
    const MINUTE_MICROS: i64 = 60_000_000;
    // The stores keep microseconds: one microsecond before a minute's end is the latest record
    // that is not on the next minute's boundary.
    (ts.timestamp_micros() - 1).div_euclid(MINUTE_MICROS) * 60
}

/// The records and message bytes of one group of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::storage) struct VolumeGroup<'a> {
    pub tenant: &'a str,
    /// The minute's start, in seconds since the epoch.
    pub minute: i64,
    pub service: &'a str,
    pub severity: i16,
    /// The stream's `level` label as sent, empty without one.
    pub level: Cow<'a, str>,
    pub records: i64,
    pub bytes: i64,
}

/// The groups of `rows`, sorted by key, so that two transactions upserting the same groups take
/// their row locks in the same order and cannot deadlock.
pub(in crate::storage) fn groups<'a>(rows: &[Row<'a>]) -> Vec<VolumeGroup<'a>> {
    type Key<'a> = (&'a str, i64, &'a str, i16, Cow<'a, str>);
    let mut sums: HashMap<Key<'a>, (i64, i64)> = HashMap::new();
    for row in rows {
        let record = row.record;
        let minute = minute_of(record.ts);
        let level = level_label(&record.labels);
        let sum = sums
            .entry((
                row.tenant,
                minute,
                record.service.as_str(),
                record.severity,
                level,
            ))
            .or_default();
        sum.0 += 1;
        sum.1 += record.message.len() as i64;
    }
    let mut groups: Vec<(Key<'a>, (i64, i64))> = sums.into_iter().collect();
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    groups
        .into_iter()
        .map(
            |((tenant, minute, service, severity, level), (records, bytes))| VolumeGroup {
                tenant,
                minute,
                service,
                severity,
                level,
                records,
                bytes,
            },
        )
        .collect()
}

/// The value of the `level` key of a record's labels (a JSON object of strings, as validation
/// writes it), empty without one. Read without parsing the object: keys and values are JSON
/// strings, so `"level":"` can only start a key where it follows `{` or `,`.
pub(in crate::storage) fn level_label(labels: &str) -> Cow<'_, str> {
    const KEY: &str = "\"level\":";
    let Some(at) = labels
        .match_indices(KEY)
        .find(|(at, _)| matches!(labels.as_bytes().get(at.wrapping_sub(1)), Some(b'{' | b',')))
        .map(|(at, _)| at + KEY.len())
    else {
        return Cow::Borrowed("");
    };
    let rest = &labels[at..];
    let Some(body) = rest.strip_prefix('"') else {
        return Cow::Borrowed("");
    };
    match body.find(['"', '\\']) {
        Some(end) if body.as_bytes()[end] == b'"' => Cow::Borrowed(&body[..end]),
        _ => {
            let mut reader = serde_json::Deserializer::from_str(rest);
            Cow::Owned(serde::Deserialize::deserialize(&mut reader).unwrap_or_default())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    fn record(ts: i64, service: &str, severity: i16, message: &str) -> Record {
        Record {
            ts: chrono::DateTime::from_timestamp(ts, 0).unwrap(),
            severity,
            service: service.into(),
            message: message.into(),
            labels: "{}".into(),
            attributes: "{}".into(),
            trace_id: None,
            span_id: None,
        }
    }

    #[test]
    fn rows_are_counted_per_minute_service_and_severity_in_key_order() {
        let records = [
            record(125, "b", 9, "xx"),
            record(61, "a", 9, "x"),
            record(119, "a", 9, "yyy"),
            record(121, "a", 17, ""),
            record(-1, "a", 9, "z"),
            record(180, "c", 9, "on the minute"),
        ];
        let rows: Vec<Row<'_>> = records
            .iter()
            .map(|record| Row {
                tenant: "t",
                record,
            })
            .collect();
        let groups = groups(&rows);
        let keys: Vec<(i64, &str, i16, i64, i64)> = groups
            .iter()
            .map(|g| (g.minute, g.service, g.severity, g.records, g.bytes))
            .collect();
        assert_eq!(
            keys,
            [
                (-60, "a", 9, 1, 1),
                (60, "a", 9, 2, 4),
                (120, "a", 17, 1, 0),
                (120, "b", 9, 1, 2),
                (120, "c", 9, 1, 13),
            ]
        );
    }

    #[test]
    fn the_level_label_is_read_from_the_labels_as_sent() {
        assert_eq!(level_label(r#"{"job":"a","level":"WARNING"}"#), "WARNING");
        assert_eq!(level_label(r#"{"level":"info"}"#), "info");
        assert_eq!(level_label(r#"{"level":"a \"b\""}"#), "a \"b\"");
        assert_eq!(level_label(r#"{"xlevel":"no","job":"level"}"#), "");
        assert_eq!(level_label(r#"{"a":"x,\"level\":\"no"}"#), "");
        assert_eq!(level_label("{}"), "");
    }

    #[test]
    fn a_record_on_a_minute_ends_the_minute_before_it() {
        let at = |text: &str| {
            minute_of(
                DateTime::parse_from_rfc3339(text)
                    .unwrap()
                    .with_timezone(&Utc),
            )
        };
        let minute = at("2026-12-01T10:15:00.000001Z");
        assert_eq!(at("2026-12-01T10:16:00Z"), minute, "(10:15, 10:16]");
        assert_eq!(at("2026-12-01T10:15:59.999999Z"), minute);
        assert_eq!(at("2026-12-01T10:15:00Z"), minute - 60);
        assert_eq!(at("1969-12-31T23:59:59Z"), -60);
        assert_eq!(at("1970-01-01T00:00:00Z"), -60);
    }
}

#[cfg(test)]
mod cutoff_tests {
    use super::*;

    #[test]
    fn the_minute_the_horizon_cuts_is_kept() {
        let horizon = DateTime::parse_from_rfc3339("2026-12-01T10:15:42.5Z")
            .unwrap()
            .with_timezone(&Utc);
        let cutoff = volume_cutoff(horizon);
        assert_eq!(cutoff.to_rfc3339(), "2026-12-01T10:15:00+00:00");
        let on_a_minute = DateTime::parse_from_rfc3339("2026-12-01T10:15:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            volume_cutoff(on_a_minute).to_rfc3339(),
            "2026-12-01T10:14:00+00:00",
            "a horizon on a minute keeps the minute that ends at it, which counts a record at it"
        );
    }
}
