//! Writing to SQLite: one statement per batch, inside one transaction when chunk keys are claimed
//! with it, each write in a writer's turn (see `checkpoint.rs`).

use chrono::{DateTime, Utc};

use super::SqliteStore;
use crate::storage::chunked_delete::{delete_in_chunks, DELETE_CHUNK};
use crate::storage::error::{classify, StoreError};
use crate::storage::row::{claimed_in_order, kept_rows, Claim, Row};

/// One statement per batch whatever its size, so it is prepared once, and the whole batch is one
/// bound JSON array: multi-row `INSERT … VALUES` would bind 9 parameters a row and need a statement
/// per chunk size. Dropping the (tenant, ts) index would make inserts cheaper still, but reads
/// need it.
const INSERT_SQL: &str = "INSERT INTO logs (tenant, ts, received_at, severity, service, message, attributes, trace_id, span_id) \
     SELECT value->>0, value->>1, ?2, value->>2, value->>3, value->>4, value->>5, value->>6, value->>7 \
     FROM json_each(?1)";

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
            let hex: String = claim
                .key
                .producer_id
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect();
            (claim.key.tenant, hex, claim.key.sequence as i64)
        })
        .collect();
    serde_json::to_string(&keys).expect("keys serialize")
}

/// `[[tenant, ts, severity, service, message, attributes, trace_id, span_id], …]`.
fn batch_json<'r>(rows: &[Row<'r>]) -> String {
    let estimate: usize = rows.iter().map(|row| row.record.size_bytes()).sum();
    let mut json = Vec::with_capacity(estimate + 64);
    json.push(b'[');
    for (index, row) in rows.iter().enumerate() {
        if index > 0 {
            json.push(b',');
        }
        let record = row.record;
        let fields = (
            row.tenant,
            record.ts.timestamp_micros(),
            record.severity,
            &record.service,
            &record.message,
            &record.attributes,
            &record.trace_id,
            &record.span_id,
        );
        serde_json::to_writer(&mut json, &fields).expect("writing JSON to a Vec cannot fail");
    }
    json.push(b']');
    String::from_utf8(json).expect("serde_json writes UTF-8")
}

/// Primary result codes that blame the data: TOOBIG, CONSTRAINT, MISMATCH, RANGE.
fn is_data_error(code: &str) -> bool {
    code.parse::<i32>()
        .is_ok_and(|extended| matches!(extended & 0xff, 18 | 19 | 20 | 25))
}

impl SqliteStore {
    pub(in crate::storage) async fn insert(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        let received_at = chrono::Utc::now().timestamp_micros();
        let fail = |err| classify(err, is_data_error);
        let _turn = self.turn().await;
        // The whole batch travels as one JSON array bound to one parameter, which SQLite unpacks
        // with json_each in C: one statement and one bind per batch instead of nine binds per row.
        sqlx::query(INSERT_SQL)
            .bind(batch_json(rows))
            .bind(received_at)
            .execute(&self.pool)
            .await
            .map_err(fail)?;
        Ok(())
    }

    pub(in crate::storage) async fn insert_claimed(
        &self,
        rows: &[Row<'_>],
        claims: &[Claim<'_>],
    ) -> Result<Vec<bool>, StoreError> {
        let received_at = chrono::Utc::now().timestamp_micros();
        let fail = |err| classify(err, is_data_error);
        let _turn = self.turn().await;
        let mut tx = self.pool.begin().await.map_err(fail)?;
        let inserted: Vec<(String, Vec<u8>, i64)> = sqlx::query_as(CLAIM_SQL)
            .bind(claims_json(claims))
            .bind(received_at)
            .fetch_all(&mut *tx)
            .await
            .map_err(fail)?;
        let claimed = claimed_in_order(claims, inserted);
        let kept = kept_rows(rows, claims, &claimed);
        if !kept.is_empty() {
            sqlx::query(INSERT_SQL)
                .bind(batch_json(&kept))
                .bind(received_at)
                .execute(&mut *tx)
                .await
                .map_err(fail)?;
        }
        tx.commit().await.map_err(fail)?;
        Ok(claimed)
    }

    pub(in crate::storage) async fn probe(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        let fail = |err| classify(err, is_data_error);
        let _turn = self.turn().await;
        let mut tx = self.pool.begin().await.map_err(fail)?;
        sqlx::query(INSERT_SQL)
            .bind(batch_json(rows))
            .bind(chrono::Utc::now().timestamp_micros())
            .execute(&mut *tx)
            .await
            .map_err(fail)?;
        tx.rollback().await.map_err(fail)
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
    fn constraint_and_size_errors_blame_the_row() {
        assert!(is_data_error("19"));
        assert!(is_data_error("2067")); // SQLITE_CONSTRAINT_UNIQUE
        assert!(is_data_error("18"));
        assert!(!is_data_error("5")); // SQLITE_BUSY: retry
        assert!(!is_data_error("not a number"));
    }
}
