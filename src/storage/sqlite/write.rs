//! Writing to SQLite: a batch in one transaction (with the claim of its chunk keys and its counts
//! in the volume rollup), as a few multi-row `INSERT … VALUES` with every value bound, each write
//! in a writer's turn (see `checkpoint.rs`).

use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use sqlx::SqliteConnection;

use super::streams::add_streams;
use super::SqliteStore;
use crate::storage::chunked_delete::{delete_in_chunks, DELETE_CHUNK};
use crate::storage::error::{classify, StoreError};
use crate::storage::row::{claimed_in_order, kept_rows, Claim, Row};
use crate::storage::volume;

/// Rows per multi-row `INSERT … VALUES`: the largest statement binds 10 values a row, 2560 in all,
/// far below SQLite's limit of 32766. A batch is written as statements of 256 rows and one of each
/// smaller power of two for the rest, so a connection prepares at most nine statements, whatever
/// the batch sizes.
const MAX_ROWS_PER_STATEMENT: usize = 256;

/// The `INSERT` of `rows` rows, a power of two up to [`MAX_ROWS_PER_STATEMENT`].
fn insert_sql(rows: usize) -> &'static str {
    static STATEMENTS: OnceLock<Vec<String>> = OnceLock::new();
    let statements = STATEMENTS.get_or_init(|| {
        (0..=MAX_ROWS_PER_STATEMENT.trailing_zeros())
            .map(|power| {
                let values = vec!["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"; 1 << power].join(", ");
                format!(
                    "INSERT INTO logs (tenant, ts, received_at, severity, service, message, labels, attributes, trace_id, span_id) VALUES {values}"
                )
            })
            .collect()
    });
    &statements[rows.trailing_zeros() as usize]
}

/// Writes `rows` on `conn`, received at `received_at`, in as few statements as [`insert_sql`]
/// allows. The values are bound as they are, so SQLite parses nothing but the statement, once.
async fn write_rows(
    conn: &mut SqliteConnection,
    rows: &[Row<'_>],
    received_at: i64,
) -> Result<(), sqlx::Error> {
    let mut rest = rows;
    while !rest.is_empty() {
        let size = 1 << rest.len().min(MAX_ROWS_PER_STATEMENT).ilog2();
        let (statement, tail) = rest.split_at(size);
        let mut query = sqlx::query(insert_sql(size));
        for row in statement {
            let record = row.record;
            query = query
                .bind(row.tenant)
                .bind(record.ts.timestamp_micros())
                .bind(received_at)
                .bind(record.severity)
                .bind(record.service.as_str())
                .bind(record.message.as_str())
                .bind(&*record.labels)
                .bind(record.attributes.as_str())
                .bind(record.trace_id.map(hex::encode))
                .bind(record.span_id.map(hex::encode));
        }
        query.execute(&mut *conn).await?;
        rest = tail;
    }
    Ok(())
}

/// Adds a batch's groups, bound as one JSON array `[[tenant, minute, service, severity, level,
/// records, bytes], …]`, to the rollup.
const VOLUME_SQL: &str = "INSERT INTO log_volume (tenant, minute, service, severity, level, records, bytes) \
     SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6 FROM json_each(?1) WHERE true \
     ON CONFLICT (tenant, minute, service, severity, level) DO UPDATE \
     SET records = records + excluded.records, bytes = bytes + excluded.bytes";

/// Adds `rows` to the volume rollup on `conn`.
async fn add_volume(conn: &mut SqliteConnection, rows: &[Row<'_>]) -> Result<(), sqlx::Error> {
    let groups = volume::groups(rows);
    let groups: Vec<(&str, i64, &str, i16, &str, i64, i64)> = groups
        .iter()
        .map(|g| {
            (
                g.tenant,
                g.minute,
                g.service,
                g.severity,
                g.level.as_ref(),
                g.records,
                g.bytes,
            )
        })
        .collect();
    let groups = serde_json::to_string(&groups).expect("groups serialize");
    sqlx::query(VOLUME_SQL).bind(groups).execute(conn).await?;
    Ok(())
}

/// Writes `rows` on `conn` with their counts in the volume rollup and their streams in the
/// catalog, which must never miss a stored row's stream.
async fn write_batch(
    conn: &mut SqliteConnection,
    rows: &[Row<'_>],
    received_at: i64,
) -> Result<(), sqlx::Error> {
    write_rows(conn, rows, received_at).await?;
    add_volume(conn, rows).await?;
    add_streams(conn, rows).await
}

/// Claims chunk keys bound as one JSON array `[[tenant, producer_id_hex, sequence], …]`;
/// RETURNING names those inserted now. (`WHERE true` tells the parser that ON CONFLICT belongs to
/// the INSERT, not to a join.)
const CLAIM_SQL: &str = "INSERT INTO producer_chunks (tenant, producer_id, sequence, stored_at) \
     SELECT value->>0, unhex(value->>1), value->>2, ?2 FROM json_each(?1) WHERE true \
     ON CONFLICT DO NOTHING RETURNING tenant, producer_id, sequence";

/// Deletes keys older than the dedup window, a bounded number per transaction.
const PRUNE_SQL: &str = "DELETE FROM producer_chunks WHERE rowid IN \
     (SELECT rowid FROM producer_chunks WHERE stored_at < ? LIMIT ?)";

fn claims_json(claims: &[Claim<'_>]) -> String {
    let keys: Vec<(&str, String, i64)> = claims
        .iter()
        .map(|claim| {
            let producer_id = hex::encode(claim.key.producer_id);
            (claim.key.tenant, producer_id, claim.key.sequence as i64)
        })
        .collect();
    serde_json::to_string(&keys).expect("keys serialize")
}

/// Runs `work` on `conn` in a transaction of this module's own making: `BEGIN IMMEDIATE`, then
/// `COMMIT` when `work` succeeds and `keep` is set, else `ROLLBACK`. sqlx's transactions count
/// their depth on the side, and when SQLite has already rolled back on its own (as it does when a
/// COMMIT finds the disk full), their ROLLBACK fails and the count stays one too high, so that the
/// connection's next transaction is only a SAVEPOINT whose release commits nothing: batches were
/// acknowledged and lost. Here a failed transaction always ends in a ROLLBACK that may fail
/// harmlessly, and a connection still inside one (a write cancelled part-way) is rolled back first.
async fn in_transaction<T>(
    conn: &mut SqliteConnection,
    keep: bool,
    work: impl AsyncFnOnce(&mut SqliteConnection) -> Result<T, sqlx::Error>,
) -> Result<T, sqlx::Error> {
    if sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut *conn)
        .await
        .is_err()
    {
        // Still inside a transaction (a write cancelled part-way): end it and begin again.
        rollback(conn).await;
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
    }
    let outcome = match work(&mut *conn).await {
        Ok(value) if keep => sqlx::query("COMMIT")
            .execute(&mut *conn)
            .await
            .map(|_| value),
        Ok(value) => {
            rollback(conn).await;
            return Ok(value);
        }
        Err(err) => Err(err),
    };
    if outcome.is_err() {
        rollback(conn).await;
    }
    outcome
}

/// Ends the transaction in progress, if SQLite has not already.
async fn rollback(conn: &mut SqliteConnection) {
    if let Err(err) = sqlx::query("ROLLBACK").execute(&mut *conn).await {
        tracing::debug!(error = %err, "ROLLBACK after a failed write");
    }
}

/// Primary result codes that blame the database, not the rows: INTERNAL, PERM, ABORT, BUSY,
/// LOCKED, NOMEM, READONLY, INTERRUPT, IOERR, CORRUPT, FULL, CANTOPEN, PROTOCOL, SCHEMA,
/// MISUSE, NOLFS, AUTH, NOTADB. Retries or an operator cure these, and every row would fail
/// alike.
const STORE_CODES: [i32; 18] = [
    2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 17, 21, 22, 23, 26,
];

/// True when the result `code` blames the database rather than the rows written. The generic
/// ERROR is a row's (a function a trigger calls failed on its values), unless it says a table,
/// column or function is missing: every row would fail alike.
fn blames_the_store(code: &str, message: &str) -> bool {
    let Ok(extended) = code.parse::<i32>() else {
        return true;
    };
    match extended & 0xff {
        1 => message.starts_with("no such "),
        primary => STORE_CODES.contains(&primary),
    }
}

impl SqliteStore {
    pub(in crate::storage) async fn insert(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        let received_at = chrono::Utc::now().timestamp_micros();
        let fail = |err| classify(err, blames_the_store);
        let _turn = self.turn().await;
        let mut conn = self.pool.acquire().await.map_err(fail)?;
        // A batch of several statements is still stored whole or not at all.
        in_transaction(&mut conn, true, async |conn| {
            write_batch(conn, rows, received_at).await
        })
        .await
        .map_err(fail)
    }

    pub(in crate::storage) async fn insert_claimed(
        &self,
        rows: &[Row<'_>],
        claims: &[Claim<'_>],
    ) -> Result<Vec<bool>, StoreError> {
        let received_at = chrono::Utc::now().timestamp_micros();
        let fail = |err| classify(err, blames_the_store);
        let _turn = self.turn().await;
        let mut conn = self.pool.acquire().await.map_err(fail)?;
        in_transaction(&mut conn, true, async |conn| {
            let inserted: Vec<(String, Vec<u8>, i64)> = sqlx::query_as(CLAIM_SQL)
                .bind(claims_json(claims))
                .bind(received_at)
                .fetch_all(&mut *conn)
                .await?;
            let claimed = claimed_in_order(claims, inserted);
            let kept = kept_rows(rows, claims, &claimed);
            if !kept.is_empty() {
                write_batch(conn, &kept, received_at).await?;
            }
            Ok(claimed)
        })
        .await
        .map_err(fail)
    }

    pub(in crate::storage) async fn probe(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        let fail = |err| classify(err, blames_the_store);
        let _turn = self.turn().await;
        let mut conn = self.pool.acquire().await.map_err(fail)?;
        let received_at = chrono::Utc::now().timestamp_micros();
        in_transaction(&mut conn, false, async |conn| {
            write_rows(conn, rows, received_at).await
        })
        .await
        .map_err(fail)
    }

    pub(in crate::storage) async fn prune_chunk_keys(
        &self,
        before: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let before = before.timestamp_micros();
        delete_in_chunks(move || async move {
            let _turn = self.turn().await;
            sqlx::query(PRUNE_SQL)
                .bind(before)
                .bind(DELETE_CHUNK)
                .execute(&self.pool)
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
    fn a_statement_per_power_of_two() {
        assert!(insert_sql(1).ends_with("VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
        assert_eq!(insert_sql(4).matches('(').count(), 5);
        assert_eq!(
            insert_sql(MAX_ROWS_PER_STATEMENT).matches('?').count(),
            10 * MAX_ROWS_PER_STATEMENT
        );
    }

    #[test]
    fn constraint_trigger_and_size_errors_blame_the_row() {
        let rows = |code| !blames_the_store(code, "");
        assert!(rows("19"));
        assert!(rows("2067")); // SQLITE_CONSTRAINT_UNIQUE
        assert!(rows("1811")); // SQLITE_CONSTRAINT_TRIGGER: RAISE(ABORT, …)
        assert!(rows("18"));
        assert!(!blames_the_store("1", "malformed JSON"));
        assert!(blames_the_store("1", "no such table: logs"));
        assert!(blames_the_store("5", "database is locked")); // SQLITE_BUSY: retry
        assert!(blames_the_store("13", "database or disk is full"));
        assert!(blames_the_store(
            "1032",
            "attempt to write a readonly database"
        )); // READONLY_DBMOVED
        assert!(blames_the_store("not a number", ""));
    }
}
