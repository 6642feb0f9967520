//! SQLite: multi-row `INSERT … VALUES` statements of a fixed size inside one transaction, through a
//! single writer connection (SQLite allows one writer at a time; more would only wait on its lock).

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{QueryBuilder, Sqlite};

use super::{classify, Row, StoreError};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// Rows per statement. A fixed size keeps the prepared-statement cache at one entry (the remainder
/// of a batch runs unprepared); 9 binds a row stays far below SQLite's 32,766 bind-parameter limit.
const ROWS_PER_STATEMENT: usize = 1000;

/// A SQLite database in WAL mode with one writer connection.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
}

/// Primary result codes that blame the data: TOOBIG, CONSTRAINT, MISMATCH, RANGE.
fn is_data_error(code: &str) -> bool {
    code.parse::<i32>()
        .is_ok_and(|extended| matches!(extended & 0xff, 18 | 19 | 20 | 25))
}

impl SqliteStore {
    /// Opens (creating if missing) the database file named by a `sqlite://` URL.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|err| StoreError::Url(format!("{url}: {err}")))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL syncs the WAL at every commit: an acknowledged batch survives a power cut.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .map_err(|err| StoreError::Unavailable(format!("cannot open {url}: {err}")))?;
        Ok(SqliteStore { pool })
    }

    /// The underlying pool, for tests and tools that read back what was written.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR
            .run(&self.pool)
            .await
            .map_err(|err| StoreError::Migrate(err.to_string()))
    }

    pub(super) async fn insert(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        let received_at = chrono::Utc::now().timestamp_micros();
        let fail = |err| classify(err, is_data_error);
        let mut tx = self.pool.begin().await.map_err(fail)?;
        for statement_rows in rows.chunks(ROWS_PER_STATEMENT) {
            let mut builder: QueryBuilder<Sqlite> = QueryBuilder::new(
                "INSERT INTO logs (tenant, ts, received_at, severity, service, message, attributes, trace_id, span_id) ",
            );
            builder.push_values(statement_rows, |mut values, row| {
                let record = row.record;
                values
                    .push_bind(row.tenant)
                    .push_bind(record.ts.timestamp_micros())
                    .push_bind(received_at)
                    .push_bind(record.severity)
                    .push_bind(record.service.as_str())
                    .push_bind(record.message.as_str())
                    .push_bind(record.attributes.as_str())
                    .push_bind(record.trace_id.as_deref())
                    .push_bind(record.span_id.as_deref());
            });
            builder
                .build()
                .persistent(statement_rows.len() == ROWS_PER_STATEMENT)
                .execute(&mut *tx)
                .await
                .map_err(fail)?;
        }
        tx.commit().await.map_err(fail)?;
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
