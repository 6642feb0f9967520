//! SQLite retention: old rows deleted through the `(tenant, ts, service)` index, a chunk per transaction.
//! SQLite has no partitions and no BRIN indexes, and one process writes the file, so a run has no
//! lock to take and nothing to do but delete.

use chrono::{DateTime, NaiveDate, Utc};

use super::streams::{hour_of, FORGET_SQL};
use super::SqliteStore;
use crate::storage::chunked_delete::{delete_in_chunks, DELETE_CHUNK};
use crate::storage::error::{unavailable, StoreError};
use crate::storage::volume::{volume_cutoff, VOLUME_TENANTS_SQL};

/// Every tenant with rows, by a loose index scan of `(tenant, ts, service)`: one index probe per tenant
/// instead of reading every row.
const TENANTS_SQL: &str = "WITH RECURSIVE tenants(name) AS ( \
       SELECT min(tenant) FROM logs \
       UNION ALL \
       SELECT (SELECT min(tenant) FROM logs WHERE tenant > tenants.name) FROM tenants WHERE tenants.name IS NOT NULL) \
     SELECT name FROM tenants WHERE name IS NOT NULL";

/// One chunk: the oldest rows of one tenant found through the index, deleted by rowid.
const DELETE_SQL: &str = "DELETE FROM logs WHERE id IN \
     (SELECT id FROM logs WHERE tenant = ? AND ts < ? LIMIT ?)";

/// One chunk of a tenant's old rollup minutes, found through the primary key.
const DELETE_VOLUME_SQL: &str = "DELETE FROM log_volume WHERE rowid IN \
     (SELECT rowid FROM log_volume WHERE tenant = ? AND minute < ? LIMIT ?)";

/// A retention run's session: the writer itself, since SQLite has one.
#[derive(Debug)]
pub struct SqliteRetention {
    store: SqliteStore,
}

impl SqliteStore {
    pub(in crate::storage) async fn retention(&self) -> Result<SqliteRetention, StoreError> {
        Ok(SqliteRetention {
            store: self.clone(),
        })
    }
}

impl SqliteRetention {
    pub(in crate::storage) async fn try_lock(&mut self) -> Result<bool, StoreError> {
        Ok(true)
    }

    pub(in crate::storage) async fn unlock(&mut self) {}

    pub(in crate::storage) async fn create_partitions(
        &mut self,
        _first: NaiveDate,
        _last: NaiveDate,
    ) -> Result<u64, StoreError> {
        Ok(0)
    }

    pub(in crate::storage) async fn summarize_recent(&mut self, _now: DateTime<Utc>) -> u64 {
        0
    }

    pub(in crate::storage) async fn drop_partitions_ending_by(
        &mut self,
        _cutoff: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        Ok(0)
    }

    /// Deletes every row older than `horizon`, then the catalog's streams with none newer;
    /// returns how many rows. Runs on the writer pool (SQLite has one writer), each chunk its
    /// own short transaction, pausing between chunks so ingest batches interleave with the
    /// delete instead of waiting for all of it. Each chunk takes a writer's turn, as ingest
    /// does, so the WAL checkpointer never finds a delete holding the write lock.
    pub(in crate::storage) async fn delete_before(
        &mut self,
        horizon: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let horizon = horizon.timestamp_micros();
        let deleted = self
            .delete_per_tenant(TENANTS_SQL, DELETE_SQL, horizon)
            .await?;
        let _turn = self.store.turn().await;
        sqlx::query(FORGET_SQL)
            .bind(hour_of(horizon))
            .execute(self.store.pool())
            .await
            .map_err(unavailable)?;
        Ok(deleted)
    }

    /// Deletes the rollup's minutes that ended before `horizon`, a tenant at a time through the
    /// primary key, in chunks as above.
    pub(in crate::storage) async fn delete_volume_before(
        &mut self,
        horizon: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let cutoff = volume_cutoff(horizon).timestamp();
        self.delete_per_tenant(VOLUME_TENANTS_SQL, DELETE_VOLUME_SQL, cutoff)
            .await
    }

    /// Runs `delete` (bound to a tenant, `cutoff` and the chunk size) in chunks for each tenant
    /// `tenants` lists, each chunk a writer's turn; returns the rows deleted.
    async fn delete_per_tenant(
        &self,
        tenants: &str,
        delete: &'static str,
        cutoff: i64,
    ) -> Result<u64, StoreError> {
        let store = &self.store;
        let pool = store.pool();
        let tenants: Vec<String> = sqlx::query_scalar(tenants)
            .fetch_all(pool)
            .await
            .map_err(unavailable)?;
        let mut deleted = 0;
        for tenant in tenants {
            let tenant = tenant.as_str();
            deleted += delete_in_chunks(move || async move {
                let _turn = store.turn().await;
                sqlx::query(delete)
                    .bind(tenant)
                    .bind(cutoff)
                    .bind(DELETE_CHUNK)
                    .execute(pool)
                    .await
                    .map(|done| done.rows_affected())
            })
            .await
            .map_err(unavailable)?;
        }
        Ok(deleted)
    }

    pub(in crate::storage) async fn close(self) -> Result<(), StoreError> {
        Ok(())
    }
}
