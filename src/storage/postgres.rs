//! PostgreSQL: one `INSERT … SELECT FROM UNNEST(array binds)` per batch.
//!
//! Whatever the batch size the statement text is the same, so it is prepared once per connection;
//! the arrays travel in binary, which skips the text parsing that `COPY … FROM STDIN` pays for.

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgPool, PgPoolOptions};

use super::{classify, PoolOptions, Row, StoreError};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

const INSERT_SQL: &str =
    "INSERT INTO logs (tenant, ts, severity, service, message, attributes, trace_id, span_id) \
     SELECT * FROM UNNEST($1::text[], $2::timestamptz[], $3::int2[], $4::text[], $5::text[], \
                          $6::text[]::jsonb[], $7::text[], $8::text[])";

/// A PostgreSQL connection pool that writes batches.
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: PgPool,
}

/// SQLSTATE classes that blame the data, not the database: 22 data exception, 23 integrity
/// constraint violation, 54 program limit exceeded (a value too large for an index, say).
fn is_data_error(code: &str) -> bool {
    code.starts_with("22") || code.starts_with("23") || code.starts_with("54")
}

impl PostgresStore {
    /// Opens the pool and checks that the database answers.
    pub async fn connect(url: &str, options: PoolOptions) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect(url)
            .await
            .map_err(|err| {
                StoreError::Unavailable(format!(
                    "cannot connect to {}: {err}",
                    super::redact_url(url)
                ))
            })?;
        Ok(PostgresStore { pool })
    }

    /// The underlying pool, for tests and tools that read back what was written.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
        // sqlx's migrator holds a PostgreSQL advisory lock while it runs, so replicas that start
        // together apply each migration exactly once.
        MIGRATOR
            .run(&self.pool)
            .await
            .map_err(|err| StoreError::Migrate(err.to_string()))
    }

    pub(super) async fn insert(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
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
            .execute(&self.pool)
            .await
            .map_err(|err| classify(err, is_data_error))?;
        Ok(())
    }

    pub(super) async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(|err| StoreError::Unavailable(err.to_string()))
    }

    pub(super) async fn close(&self) {
        self.pool.close().await;
    }
}
