//! The volume rollup's share of a batch: its rows counted per (tenant, minute, service,
//! severity), which each backend adds to `log_volume` in the batch's transaction, one upsert per
//! group rather than per row.

use std::collections::HashMap;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};

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
/// `severity`, `records` and `bytes`.
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
        count: row.try_get("records")?,
        bytes: row.try_get("bytes")?,
    })
}

/// The first minute retention keeps of the rollup at `horizon`: the one `horizon` falls in. A
/// minute the horizon cuts keeps its counts, since they cannot be split; every earlier minute
/// ended before the horizon and goes.
pub(in crate::storage) fn volume_cutoff(horizon: DateTime<Utc>) -> DateTime<Utc> {
    horizon
        .duration_trunc(TimeDelta::minutes(1))
        .unwrap_or(horizon)
}

/// The records and message bytes of one group of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::storage) struct VolumeGroup<'a> {
    pub tenant: &'a str,
    /// The minute's start, in seconds since the epoch.
    pub minute: i64,
    pub service: &'a str,
    pub severity: i16,
    pub records: i64,
    pub bytes: i64,
}

/// The groups of `rows`, sorted by key, so that two transactions upserting the same groups take
/// their row locks in the same order and cannot deadlock.
pub(in crate::storage) fn groups<'a>(rows: &[Row<'a>]) -> Vec<VolumeGroup<'a>> {
    let mut sums: HashMap<(&'a str, i64, &'a str, i16), (i64, i64)> = HashMap::new();
    for row in rows {
        let record = row.record;
        let minute = record.ts.timestamp().div_euclid(60) * 60;
        let sum = sums
            .entry((row.tenant, minute, record.service.as_str(), record.severity))
            .or_default();
        sum.0 += 1;
        sum.1 += record.message.len() as i64;
    }
    let mut groups: Vec<VolumeGroup<'a>> = sums
        .into_iter()
        .map(
            |((tenant, minute, service, severity), (records, bytes))| VolumeGroup {
                tenant,
                minute,
                service,
                severity,
                records,
                bytes,
            },
        )
        .collect();
    groups.sort_by(|a, b| {
        (a.tenant, a.minute, a.service, a.severity)
            .cmp(&(b.tenant, b.minute, b.service, b.severity))
    });
    groups
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
            record(120, "a", 17, ""),
            record(-1, "a", 9, "z"),
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
            ]
        );
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
        assert_eq!(
            volume_cutoff(cutoff),
            cutoff,
            "a horizon on a minute keeps that minute"
        );
    }
}
