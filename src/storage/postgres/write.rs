//! PostgreSQL: one `INSERT … SELECT FROM UNNEST(array binds)` per batch.
//!
//! Whatever the batch size the statement text is the same, so it is prepared once per connection;
//! the arrays travel in binary, which skips the text parsing that `COPY … FROM STDIN` pays for.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::Postgres;

use super::PostgresStore;
use crate::storage::chunked_delete::{delete_in_chunks, DELETE_CHUNK};
use crate::storage::error::{classify, StoreError};
use crate::storage::row::{claimed_in_order, kept_rows, Claim, Row};

const INSERT_SQL: &str =
    "INSERT INTO logs (tenant, ts, severity, service, message, attributes, trace_id, span_id) \
     SELECT * FROM UNNEST($1::text[], $2::timestamptz[], $3::int2[], $4::text[], $5::text[], \
                          $6::text[]::jsonb[], $7::text[], $8::text[])";

/// Claims chunk keys; RETURNING names those inserted now (a key already present, or claimed by a
/// transaction that commits first, is skipped). Sorted so two transactions claiming overlapping
/// keys take their index locks in the same order.
const CLAIM_SQL: &str = "INSERT INTO producer_chunks (tenant, producer_id, sequence) \
     SELECT * FROM UNNEST($1::text[], $2::bytea[], $3::int8[]) ORDER BY 1, 2, 3 \
     ON CONFLICT DO NOTHING RETURNING tenant, producer_id, sequence";

/// Deletes keys older than the dedup window, a bounded number per statement.
const PRUNE_SQL: &str = "DELETE FROM producer_chunks WHERE ctid = ANY(ARRAY( \
     SELECT ctid FROM producer_chunks WHERE stored_at < $1 LIMIT $2))";

/// The batch insert with its array binds.
fn insert_query<'q>(
    rows: impl ExactSizeIterator<Item = &'q Row<'q>>,
) -> Query<'q, Postgres, PgArguments> {
    let count = rows.len();
    let mut tenants: Vec<&str> = Vec::with_capacity(count);
    let mut timestamps: Vec<DateTime<Utc>> = Vec::with_capacity(count);
    let mut severities: Vec<i16> = Vec::with_capacity(count);
    let mut services: Vec<&str> = Vec::with_capacity(count);
    let mut messages: Vec<&str> = Vec::with_capacity(count);
    let mut attributes: Vec<&str> = Vec::with_capacity(count);
    let mut trace_ids: Vec<Option<&str>> = Vec::with_capacity(count);
    let mut span_ids: Vec<Option<&str>> = Vec::with_capacity(count);
    for row in rows {
        let record = row.record;
        tenants.push(row.tenant);
        timestamps.push(record.ts);
        severities.push(record.severity);
        services.push(&record.service);
        messages.push(&record.message);
        attributes.push(&record.attributes);
        trace_ids.push(record.trace_id.as_deref());
        span_ids.push(record.span_id.as_deref());
    }
    sqlx::query(INSERT_SQL)
        .bind(tenants)
        .bind(timestamps)
        .bind(severities)
        .bind(services)
        .bind(messages)
        .bind(attributes)
        .bind(trace_ids)
        .bind(span_ids)
}

/// SQLSTATE classes that blame the data, not the database: 22 data exception, 23 integrity
/// constraint violation, 54 program limit exceeded (a value too large for an index, say).
fn is_data_error(code: &str) -> bool {
    code.starts_with("22") || code.starts_with("23") || code.starts_with("54")
}

impl PostgresStore {
    pub(in crate::storage) async fn insert(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        insert_query(rows.iter())
            .execute(&self.pool)
            .await
            .map_err(|err| classify(err, is_data_error))?;
        Ok(())
    }

    pub(in crate::storage) async fn insert_claimed(
        &self,
        rows: &[Row<'_>],
        claims: &[Claim<'_>],
    ) -> Result<Vec<bool>, StoreError> {
        let fail = |err| classify(err, is_data_error);
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
            insert_query(kept.iter())
                .execute(&mut *tx)
                .await
                .map_err(fail)?;
        }
        tx.commit().await.map_err(fail)?;
        Ok(claimed)
    }

    pub(in crate::storage) async fn probe(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        let fail = |err| classify(err, is_data_error);
        let mut tx = self.pool.begin().await.map_err(fail)?;
        insert_query(rows.iter())
            .execute(&mut *tx)
            .await
            .map_err(fail)?;
        tx.rollback().await.map_err(fail)
    }

    pub(in crate::storage) async fn prune_chunk_keys(
        &self,
        before: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let pool = &self.pool;
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
