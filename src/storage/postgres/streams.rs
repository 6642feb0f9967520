//! The stream catalog on PostgreSQL (`streams`): each label set a tenant's service stored records
//! with, one row per hour of record time. Kept in each batch's transaction; read by stream
//! selectors on labels other than the service, which it turns into the services to read, so
//! that a past heap hour's btree and a sealed hour's chunk groups skip every other service.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Postgres, QueryBuilder};

use super::label_match::push_label_conditions;
use crate::model::selection::Selection;
use crate::storage::row::{stream_runs, Row};

/// Adds a batch's streams, an hour each, where the catalog lacks them. `DO NOTHING` takes no lock
/// on a row already there, so batches of one stream do not wait on each other; in key order, so
/// that two batches adding the same new streams never deadlock.
const ADD_SQL: &str = "INSERT INTO streams (tenant, hour, service, labels) \
     SELECT DISTINCT s.tenant, to_timestamp(s.hour * 3600), s.service, s.labels::jsonb \
     FROM UNNEST($1::text[], $2::int8[], $3::text[], $4::text[]) AS s(tenant, hour, service, labels) \
     ORDER BY 1, 2, 3, 4 ON CONFLICT DO NOTHING";

/// The hour (since the Unix epoch) of a time.
fn hour_of(at: DateTime<Utc>) -> i64 {
    at.timestamp().div_euclid(3600)
}

/// The start of the hour `at` is in: the catalog's row for a record stamped `at`.
pub(super) fn hour_start(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(hour_of(at) * 3600, 0).unwrap_or(at)
}

/// Adds the streams of `rows` to the catalog on `conn`.
pub(super) async fn add_streams(
    conn: &mut PgConnection,
    rows: &[Row<'_>],
) -> Result<(), sqlx::Error> {
    let mut streams: HashSet<(&str, i64, &str, &str)> = HashSet::new();
    // One lookup per run of a stream's records and hour, not per record.
    for run in stream_runs(rows) {
        let record = run[0].record;
        let mut last = None;
        for row in run {
            let hour = hour_of(row.record.ts);
            if last != Some(hour) {
                streams.insert((
                    run[0].tenant,
                    hour,
                    record.service.as_str(),
                    &*record.labels,
                ));
                last = Some(hour);
            }
        }
    }
    sqlx::query(ADD_SQL)
        .bind(streams.iter().map(|s| s.0).collect::<Vec<_>>())
        .bind(streams.iter().map(|s| s.1).collect::<Vec<_>>())
        .bind(streams.iter().map(|s| s.2).collect::<Vec<_>>())
        .bind(streams.iter().map(|s| s.3).collect::<Vec<_>>())
        .execute(conn)
        .await?;
    Ok(())
}

/// The streams a selection's labels select, by the catalog: their services, and their label sets
/// (as text).
pub(super) struct CatalogedStreams {
    /// The services.
    pub(super) services: Vec<String>,
    /// The label sets.
    pub(super) labels: Vec<String>,
}

impl CatalogedStreams {
    /// Whether there is none: the selection has no row.
    pub(super) fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

/// The streams of `tenant` in the catalog, in `selection`'s hours, whose labels hold every one of
/// its `labels` and match its `label_patterns` (those PostgreSQL reads as the engine does; of the
/// others, they have the label); `None` when the selection names no such label, or names one
/// service (whose rows an index finds already). Each row is still tested by the engine.
pub(super) async fn cataloged_streams(
    conn: &mut PgConnection,
    tenant: &str,
    selection: &Selection,
) -> Result<Option<CatalogedStreams>, sqlx::Error> {
    if !selection.wants_catalog() {
        return Ok(None);
    }
    let mut builder: QueryBuilder<'_, Postgres> =
        QueryBuilder::new("SELECT DISTINCT service, labels::text FROM streams WHERE tenant = ");
    builder.push_bind(tenant.to_owned());
    builder
        .push(" AND hour >= ")
        .push_bind(hour_start(selection.from));
    builder.push(" AND hour < ").push_bind(selection.to);
    // None of a selection's patterns matches the empty value: a stream without the label has
    // none of its rows.
    for (key, _) in &selection.label_patterns {
        builder.push(" AND labels ? ").push_bind(key.clone());
    }
    push_label_conditions(&mut builder, selection);
    let streams: Vec<(String, String)> = builder.build_query_as().fetch_all(conn).await?;
    let mut services: Vec<String> = streams.iter().map(|(service, _)| service.clone()).collect();
    services.sort_unstable();
    services.dedup();
    Ok(Some(CatalogedStreams {
        services,
        labels: streams.into_iter().map(|(_, labels)| labels).collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hour_starts_on_the_hour_before_it() {
        let at = |s| DateTime::from_timestamp(s, 0).unwrap();
        assert_eq!(hour_start(at(7200)), at(7200));
        assert_eq!(hour_start(at(7199)), at(3600));
        assert_eq!(hour_start(at(-1)), at(-3600));
    }
}
