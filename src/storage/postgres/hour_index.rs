//! The service index of a past hour. The hour being written has only BRIN indexes: a btree on
//! every insert would cost about half of the ingest rate. Once the hour is over, its rows are
//! nearly all there, and a query for one service (or one stream, whose service is known) would
//! otherwise read the whole hour: so a past heap hour gets a btree on `(tenant, service, ts)`,
//! built once, beside the writers (`CREATE INDEX CONCURRENTLY` takes no lock that blocks them).
//! The few late rows pay for it; a sealed hour drops it with its heap, and keeps a minimum and
//! maximum of every column per chunk group instead, ordered by the same key.

use chrono::{DateTime, TimeDelta, Utc};
use sqlx::PgConnection;

use super::retention::SERVICE_INDEX_SUFFIX;
use super::seal::{Leaf, PgSealer};
use super::Flavor;
use crate::storage::error::{unavailable, StoreError};

/// How long after its hour ends a heap leaf gets its service index: long enough for a shipper's
/// buffered lines of the hour's last seconds to land first.
pub const INDEX_AFTER: TimeDelta = TimeDelta::minutes(5);

impl Leaf {
    /// Whether the next run should give it its service index, given the newest range end that
    /// may be indexed: a heap with rows that has none yet.
    pub fn wants_index(&self, cutoff: DateTime<Utc>) -> bool {
        self.to <= cutoff && !self.sealed && !self.indexed && self.bytes > 0
    }
}

/// Builds `leaf`'s service index without blocking its writers, first dropping what a build that
/// was interrupted left (an index marked invalid, which writers keep up to date for nothing).
pub async fn index_leaf(conn: &mut PgConnection, leaf: &Leaf) -> Result<(), sqlx::Error> {
    let index = format!("{}{SERVICE_INDEX_SUFFIX}", leaf.name);
    let statements = [
        format!("DROP INDEX CONCURRENTLY IF EXISTS {index}"),
        format!(
            "CREATE INDEX CONCURRENTLY {index} ON {} (tenant, service, ts)",
            leaf.name
        ),
    ];
    // Each on its own, outside any transaction, as a concurrent build must be; a statement
    // without parameters is not prepared, so none is left in the connection's cache.
    for statement in &statements {
        sqlx::query(statement)
            .persistent(false)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

impl PgSealer {
    /// Gives `leaf` its service index. Nothing on Citus, whose leaves are distributed days.
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
    use crate::storage::postgres::{hour_partition_name, partition_name};

    #[test]
    fn a_past_heap_hour_with_rows_is_indexed_once() {
        let day = chrono::NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
        let from = day.and_hms_opt(7, 0, 0).unwrap().and_utc();
        let to = from + TimeDelta::hours(1);
        let mut leaf = Leaf {
            name: hour_partition_name(day, 7),
            parent: partition_name(day),
            from,
            to,
            sealed: false,
            small_stripes: 0,
            bytes: 8192,
            indexed: false,
        };
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
