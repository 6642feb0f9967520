//! PostgreSQL: one binary `COPY` per batch (see [`copy`]), in the transaction that claims the
//! batch's chunk keys and adds its counts to the volume rollup (`log_volume`). It replaced `INSERT … SELECT FROM UNNEST` of one array per column, which
//! it beats at every batch size: at a few rows both wait on the commit, and at thousands the
//! server no longer builds and takes apart arrays.
//!
//! [`copy`]: super::copy

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::streams::add_streams;
use super::{citus, copy, Flavor, PostgresStore};
use crate::storage::chunked_delete::{delete_in_chunks, DELETE_CHUNK};
use crate::storage::error::{classify, unavailable, StoreError};
use crate::storage::row::{claimed_in_order, kept_rows, Claim, Row};
use crate::storage::volume;

/// Claims chunk keys; RETURNING names those inserted now (a key already present, or claimed by a
/// transaction that commits first, is skipped). Sorted so two transactions claiming overlapping
/// keys take their index locks in the same order.
const CLAIM_SQL: &str = "INSERT INTO producer_chunks (tenant, producer_id, sequence) \
     SELECT * FROM UNNEST($1::text[], $2::bytea[], $3::int8[]) ORDER BY 1, 2, 3 \
     ON CONFLICT DO NOTHING RETURNING tenant, producer_id, sequence";

/// Deletes keys older than the dedup window, a bounded number per statement.
const PRUNE_SQL: &str = "DELETE FROM producer_chunks WHERE ctid = ANY(ARRAY( \
     SELECT ctid FROM producer_chunks WHERE stored_at < $1 LIMIT $2))";

/// Adds a batch's groups to the rollup, each to the writing session's own row (`writer`), so that
/// sessions never wait on one another; the groups come sorted, so the rows' locks are taken in
/// the same order by every transaction (replicas' sessions may share a pid). `received_at` is the
/// transaction's start, as in `logs`, through the column's default: Citus refuses a function
/// call in `DO UPDATE SET`.
const VOLUME_SQL: &str = "INSERT INTO log_volume AS v (tenant, minute, service, severity, level, writer, records, bytes) \
     SELECT g.tenant, to_timestamp(g.minute), g.service, g.severity, g.level, pg_backend_pid(), g.records, g.bytes \
     FROM UNNEST($1::text[], $2::int8[], $3::text[], $4::int2[], $5::text[], $6::int8[], $7::int8[]) \
       AS g(tenant, minute, service, severity, level, records, bytes) \
     ON CONFLICT (tenant, minute, service, severity, level, writer) DO UPDATE \
     SET records = v.records + EXCLUDED.records, bytes = v.bytes + EXCLUDED.bytes, \
         received_at = EXCLUDED.received_at";

/// Adds `rows` to the volume rollup on `conn`.
async fn add_volume(conn: &mut PgConnection, rows: &[Row<'_>]) -> Result<(), sqlx::Error> {
    let groups = volume::groups(rows);
    sqlx::query(VOLUME_SQL)
        .bind(groups.iter().map(|g| g.tenant).collect::<Vec<_>>())
        .bind(groups.iter().map(|g| g.minute).collect::<Vec<_>>())
        .bind(groups.iter().map(|g| g.service).collect::<Vec<_>>())
        .bind(groups.iter().map(|g| g.severity).collect::<Vec<_>>())
        .bind(groups.iter().map(|g| g.level.as_ref()).collect::<Vec<_>>())
        .bind(groups.iter().map(|g| g.records).collect::<Vec<_>>())
        .bind(groups.iter().map(|g| g.bytes).collect::<Vec<_>>())
        .execute(conn)
        .await?;
    Ok(())
}

/// Writes `rows` on `conn` with one binary COPY.
async fn write_rows(conn: &mut PgConnection, rows: &[Row<'_>]) -> Result<(), sqlx::Error> {
    let body = copy::encode(rows.iter());
    let mut copy = conn.copy_in_raw(copy::COPY_SQL).await?;
    copy.send(body).await?;
    copy.finish().await?;
    Ok(())
}

/// SQLSTATE classes that blame the database, not the rows: the connection (08), transactions
/// (0B, 25 such as a read-only standby after a fail-over, 2D, 3B, 40 serialization failures and
/// deadlocks), the schema and privileges (0A, 26 a prepared statement gone, 28, 3D, 3F, 42 a
/// table or column missing), resources (53 disk full, out of memory, too many connections),
/// locks and cursors (24, 34, 55), an operator (57: shutdown, statement timeout), the system
/// (58, F0, HV, XX, 72). Retries or an operator cure these, and every row would fail alike.
/// Every other class is a row's: 22 bad data, 23 constraints, 54 a value too large for an
/// index, P0 a trigger's `RAISE`, 09 and 27 triggered actions, 38 and 39 routines, 44 a check
/// option.
const STORE_CLASSES: [&str; 22] = [
    "08", "0A", "0B", "24", "25", "26", "28", "2D", "34", "3B", "3D", "3F", "40", "42", "53", "55",
    "57", "58", "72", "F0", "HV", "XX",
];

/// True when the SQLSTATE `code` blames the database rather than the rows written.
fn blames_the_store(code: &str, _message: &str) -> bool {
    STORE_CLASSES.iter().any(|class| code.starts_with(class))
}

/// Citus's SQLSTATE for a worker's refusal of a copied row: its COPY reports the worker's message
/// and detail as an internal error, without the worker's code. It uses the same code for a lost
/// connection to a worker, whose message says so.
const CITUS_COPY_ERROR: &str = "XX000";

impl PostgresStore {
    /// Sorts an error of the COPY itself. On Citus, an internal error that is not about a
    /// connection is a refused row: the batch is split to find it.
    fn copy_failed(&self, err: sqlx::Error) -> StoreError {
        if self.flavor == Flavor::Citus {
            if let sqlx::Error::Database(db) = &err {
                if db.code().as_deref() == Some(CITUS_COPY_ERROR)
                    && !db.message().contains("connection")
                {
                    return StoreError::RowRejected(db.message().to_owned());
                }
            }
        }
        classify(err, blames_the_store)
    }

    pub(in crate::storage) async fn insert(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        let fail = |err| classify(err, blames_the_store);
        let mut tx = self.pool.begin().await.map_err(fail)?;
        write_rows(&mut tx, rows)
            .await
            .map_err(|err| self.copy_failed(err))?;
        add_volume(&mut tx, rows).await.map_err(fail)?;
        add_streams(&mut tx, rows).await.map_err(fail)?;
        tx.commit().await.map_err(fail)
    }

    pub(in crate::storage) async fn insert_claimed(
        &self,
        rows: &[Row<'_>],
        claims: &[Claim<'_>],
    ) -> Result<Vec<bool>, StoreError> {
        let fail = |err| classify(err, blames_the_store);
        let mut tx = self.pool.begin().await.map_err(fail)?;
        let inserted: Vec<(String, Vec<u8>, i64)> = sqlx::query_as(CLAIM_SQL)
            .bind(
                claims
                    .iter()
                    .map(|claim| claim.key.tenant)
                    .collect::<Vec<_>>(),
            )
            .bind(
                claims
                    .iter()
                    .map(|claim| claim.key.producer_id)
                    .collect::<Vec<_>>(),
            )
            .bind(
                claims
                    .iter()
                    .map(|claim| claim.key.sequence as i64)
                    .collect::<Vec<_>>(),
            )
            .fetch_all(&mut *tx)
            .await
            .map_err(fail)?;
        let claimed = claimed_in_order(claims, inserted);
        let kept = kept_rows(rows, claims, &claimed);
        if !kept.is_empty() {
            write_rows(&mut tx, &kept)
                .await
                .map_err(|err| self.copy_failed(err))?;
            add_volume(&mut tx, &kept).await.map_err(fail)?;
            add_streams(&mut tx, &kept).await.map_err(fail)?;
        }
        tx.commit().await.map_err(fail)?;
        Ok(claimed)
    }

    pub(in crate::storage) async fn probe(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        let fail = |err| classify(err, blames_the_store);
        let mut tx = self.pool.begin().await.map_err(fail)?;
        write_rows(&mut tx, rows)
            .await
            .map_err(|err| self.copy_failed(err))?;
        tx.rollback().await.map_err(fail)
    }

    pub(in crate::storage) async fn prune_chunk_keys(
        &self,
        before: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let pool = &self.pool;
        if self.flavor == Flavor::Citus {
            let mut conn = pool.acquire().await.map_err(unavailable)?;
            return Ok(
                citus::delete_per_shard(&mut conn, "producer_chunks", "stored_at", before).await?,
            );
        }
        delete_in_chunks(move || async move {
            sqlx::query(PRUNE_SQL)
                .bind(before)
                .bind(DELETE_CHUNK)
                .execute(pool)
                .await
                .map(|done| done.rows_affected())
                .map_err(|err| StoreError::Unavailable(err.to_string()))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_errors_about_the_database_itself_are_retried() {
        let rows = [
            "22001", "22P02", "23505", "23514", "54000", "P0001", "P0004", "09000", "27000",
            "2F005", "38000", "39P01", "44000", "21000", "20000",
        ];
        for code in rows {
            assert!(!blames_the_store(code, ""), "{code} is a row's");
        }
        let store = [
            "08006", "0A000", "25006", "26000", "28P01", "3D000", "40001", "40P01", "42P01",
            "42501", "53100", "53200", "53300", "55P03", "57014", "57P01", "58030", "XX000",
        ];
        for code in store {
            assert!(blames_the_store(code, ""), "{code} is the database's");
        }
    }
}
