//! The stream catalog (`streams`): each label set a tenant's service has stored records with, and
//! the newest hour it had one in. Kept as batches are written (in the batch's transaction), read
//! by stream selectors on labels other than the service: the read index holds the service, so
//! the scan fetches from the table only the rows of the services the catalog names, instead of
//! every row of the tenant's range.

use std::collections::HashMap;

use sqlx::SqliteConnection;

use super::label_match::{push_label_matches, push_plain_test};
use super::statement::Statement;
use crate::model::selection::Selection;
use crate::storage::row::{stream_runs, Row};

/// Microseconds in an hour: the catalog's unit of time.
const HOUR_MICROS: i64 = 3_600_000_000;

/// Adds a batch's streams, bound as one JSON array `[[tenant, service, labels, hour], …]`; an
/// existing stream's hour only moves forward, so a late row leaves it alone.
const ADD_SQL: &str = "INSERT INTO streams (tenant, service, labels, last_hour) \
     SELECT value->>0, value->>1, value->>2, value->>3 FROM json_each(?1) WHERE true \
     ON CONFLICT (tenant, service, labels) DO UPDATE SET last_hour = excluded.last_hour \
     WHERE excluded.last_hour > streams.last_hour";

/// Forgets the streams whose newest hour is before the bound one, the hour of retention's
/// horizon: every row of theirs is older than the horizon, and retention deletes them.
pub(super) const FORGET_SQL: &str = "DELETE FROM streams WHERE last_hour < ?";

/// The hour (since the Unix epoch) of a time in microseconds.
pub(super) fn hour_of(micros: i64) -> i64 {
    micros.div_euclid(HOUR_MICROS)
}

/// Adds the streams of `rows` to the catalog on `conn`.
pub(super) async fn add_streams(
    conn: &mut SqliteConnection,
    rows: &[Row<'_>],
) -> Result<(), sqlx::Error> {
    let mut newest: HashMap<(&str, &str, &str), i64> = HashMap::new();
    for run in stream_runs(rows) {
        let record = run[0].record;
        let newest_ts = run.iter().map(|row| row.record.ts.timestamp_micros());
        let hour = hour_of(newest_ts.fold(i64::MIN, i64::max));
        let key = (run[0].tenant, record.service.as_str(), &*record.labels);
        let last = newest.entry(key).or_insert(hour);
        *last = (*last).max(hour);
    }
    let streams: Vec<(&str, &str, &str, i64)> = newest
        .into_iter()
        .map(|((tenant, service, labels), hour)| (tenant, service, labels, hour))
        .collect();
    let streams = serde_json::to_string(&streams).expect("streams serialize");
    sqlx::query(ADD_SQL).bind(streams).execute(conn).await?;
    Ok(())
}

/// ` AND service IN (…)`: the services of `tenant` with a stream in the catalog, since the
/// selection's start, whose labels hold every one of its `labels` and match its
/// `label_patterns`. Each row is still tested against its own labels after this.
pub(super) fn push_cataloged_services(
    builder: &mut Statement,
    tenant: &str,
    selection: &Selection,
) {
    builder
        .push(" AND service IN (SELECT service FROM streams WHERE tenant = ")
        .push_bind(tenant)
        .push(" AND last_hour >= ")
        .push_bind(hour_of(selection.from.timestamp_micros()));
    push_label_matches(builder, &selection.labels);
    // A stream without the label has NULL here, which no pattern matches, as none matches the
    // empty value either.
    for (key, pattern) in &selection.label_patterns {
        let value = |builder: &mut Statement| {
            builder
                .push("json_extract(labels, ")
                .push_bind(format!("$.\"{key}\""))
                .push(")");
        };
        match pattern.plain_test(false) {
            Some(test) => push_plain_test(builder, test, value),
            None => {
                builder.push(" AND ");
                value(builder);
                builder.push(" REGEXP ").push_bind(pattern.rust.as_str());
            }
        }
    }
    builder.push(")");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hour_holds_the_times_from_its_start_to_before_the_next() {
        assert_eq!(hour_of(0), 0);
        assert_eq!(hour_of(HOUR_MICROS - 1), 0);
        assert_eq!(hour_of(HOUR_MICROS), 1);
        assert_eq!(hour_of(-1), -1);
    }
}
