//! The indexes of a past hour. The hour being written has only BRIN indexes on time: a btree on
//! every insert would cost about 40 % of the ingest rate. Once the hour is over its rows are
//! nearly all there, and a query for one service, or for a stream by its labels, would otherwise
//! read the whole hour: so a past heap hour gets a btree on `(tenant, service, ts)` and a GIN of
//! its stream labels (`labels @> {"job": "cron"}`: the labels of a stream repeat on each of its
//! rows, so the GIN is a few hundred KiB an hour), each built once, beside the writers (`CREATE
//! INDEX CONCURRENTLY` takes no lock that blocks them). The few late rows pay for them; a sealed
//! hour drops them with its heap, and keeps a minimum and maximum of every column per chunk group
//! instead, ordered by tenant, service, severity and time. The same pass lists the hour's streams
//! in the stream catalog, where a writer that does not keep it left some out.

use chrono::{DateTime, TimeDelta, Utc};
use sqlx::PgConnection;

use super::retention::PAST_HOUR_INDEXES;
use super::seal::{Leaf, PgSealer};
use super::Flavor;
use crate::storage::error::{unavailable, StoreError};

/// How long after its hour ends a heap leaf gets its indexes: long enough for a shipper's
/// buffered lines of the hour's last seconds to land first.
pub const INDEX_AFTER: TimeDelta = TimeDelta::minutes(5);

/// Lists the streams of the leaf `table` in the stream catalog, in key order as the writers add
/// theirs, so that the two never deadlock.
fn catalog_statement(table: &str) -> String {
    format!(
        "INSERT INTO streams (tenant, hour, service, labels) \
         SELECT DISTINCT tenant, date_bin('1 hour', ts, TIMESTAMPTZ '2000-01-01 00:00:00+00'), \
                service, labels \
         FROM {table} ORDER BY 1, 2, 3, 4 ON CONFLICT DO NOTHING"
    )
}

impl Leaf {
    /// Whether the next run should give it its indexes, given the newest range end that may be
    /// indexed: a heap with rows that lacks one.
    pub fn wants_index(&self, cutoff: DateTime<Utc>) -> bool {
        self.to <= cutoff && !self.sealed && !self.indexed && self.bytes > 0
    }
}

/// Builds the indexes `leaf` lacks without blocking its writers, first dropping what a build
/// that was interrupted left (an index marked invalid, which writers keep up to date for
/// nothing); then gathers the hour's statistics.
pub async fn index_leaf(conn: &mut PgConnection, leaf: &Leaf) -> Result<(), sqlx::Error> {
    for (suffix, definition) in PAST_HOUR_INDEXES {
        let index = format!("{}{suffix}", leaf.name);
        let valid: Option<bool> = sqlx::query_scalar(
            "SELECT x.indisvalid FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid \
             WHERE c.relname = $1",
        )
        .bind(&index)
        .fetch_optional(&mut *conn)
        .await?;
        let statements = match valid {
            Some(true) => continue,
            Some(false) => vec![format!("DROP INDEX CONCURRENTLY IF EXISTS {index}")],
            None => Vec::new(),
        }
        .into_iter()
        .chain([format!(
            "CREATE INDEX CONCURRENTLY {index} ON {} {definition}",
            leaf.name
        )]);
        // Each on its own, outside any transaction, as a concurrent build must be.
        for statement in statements {
            sqlx::query(&statement)
                .persistent(false)
                .execute(&mut *conn)
                .await?;
        }
    }
    // Every stream of the hour in the stream catalog, those that a writer not keeping it (a pod
    // of the version before it, during a rolling upgrade) left out among them: a selector of
    // labels other than the service reads only the streams the catalog names. The hour is read
    // once, as each index build above reads it.
    sqlx::query(&catalog_statement(&leaf.name))
        .persistent(false)
        .execute(&mut *conn)
        .await?;
    // The hour is complete now, and a planner without its statistics (autovacuum may be off,
    // or not have come by) takes the btree for a way to read the tenant's rows in time order,
    // and reads them all through it for a selector of other labels: several times a scan.
    sqlx::query(&format!("ANALYZE {}", leaf.name))
        .persistent(false)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

impl PgSealer {
    /// Gives `leaf` its indexes. Nothing on Citus, whose leaves are distributed days.
    pub async fn index(&mut self, leaf: &Leaf) -> Result<bool, StoreError> {
        if self.flavor == Flavor::Citus {
            return Ok(false);
        }
        index_leaf(&mut self.conn, leaf)
            .await
            .map_err(unavailable)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_past_heap_hour_with_rows_is_indexed_once() {
        let mut leaf =
            Leaf::empty_heap_hour(chrono::NaiveDate::from_ymd_opt(2026, 3, 1).unwrap(), 7);
        leaf.bytes = 8192;
        let to = leaf.to;
        assert!(
            !leaf.wants_index(to - TimeDelta::seconds(1)),
            "not before its hour is over"
        );
        assert!(leaf.wants_index(to));
        leaf.indexed = true;
        assert!(!leaf.wants_index(to), "once");
        leaf.indexed = false;
        leaf.bytes = 0;
        assert!(!leaf.wants_index(to), "an hour never written to needs none");
        leaf.bytes = 8192;
        leaf.sealed = true;
        assert!(!leaf.wants_index(to), "a sealed hour is columnar");
    }
}
