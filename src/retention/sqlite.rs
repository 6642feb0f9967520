//! SQLite retention: delete old rows through the `(tenant, ts)` index, a chunk per transaction.

use chrono::{DateTime, Utc};

use super::{delete_in_chunks, DELETE_CHUNK};
use crate::storage::sqlite::SqliteStore;

/// Every tenant with rows, by a loose index scan of `(tenant, ts)`: one index probe per tenant
/// instead of reading every row.
const TENANTS_SQL: &str = "WITH RECURSIVE tenants(name) AS ( \
       SELECT min(tenant) FROM logs \
       UNION ALL \
       SELECT (SELECT min(tenant) FROM logs WHERE tenant > tenants.name) FROM tenants WHERE tenants.name IS NOT NULL) \
     SELECT name FROM tenants WHERE name IS NOT NULL";

/// One chunk: the oldest rows of one tenant found through the index, deleted by rowid.
const DELETE_SQL: &str = "DELETE FROM logs WHERE id IN \
     (SELECT id FROM logs WHERE tenant = ? AND ts < ? LIMIT ?)";

/// Deletes every row older than `horizon`; returns how many. Runs on the writer pool (SQLite has
/// one writer), each chunk its own short transaction, pausing between chunks so ingest batches
/// interleave with the delete instead of waiting for all of it. Each chunk takes a writer's turn,
/// as ingest does, so the WAL checkpointer never finds a delete holding the write lock.
pub async fn delete_before(
    store: &SqliteStore,
    horizon: DateTime<Utc>,
) -> Result<u64, sqlx::Error> {
    let horizon = horizon.timestamp_micros();
    let pool = store.pool();
    let tenants: Vec<String> = sqlx::query_scalar(TENANTS_SQL).fetch_all(pool).await?;
    let mut deleted = 0;
    for tenant in tenants {
        let tenant = tenant.as_str();
        deleted += delete_in_chunks(move || async move {
            let _turn = store.turn().await;
            sqlx::query(DELETE_SQL)
                .bind(tenant)
                .bind(horizon)
                .bind(DELETE_CHUNK)
                .execute(pool)
                .await
                .map(|done| done.rows_affected())
        })
        .await?;
    }
    Ok(deleted)
}
