//! SQLite: multi-row `INSERT … VALUES` statements of a fixed size inside one transaction, through a
//! single writer connection (SQLite allows one writer at a time; more would only wait on its lock).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use chrono::{DateTime, Utc};

use super::sqlite_checkpoint::Checkpointer;
use super::{claimed_in_order, classify, kept_rows, Claim, Row, StoreError};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

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

/// A SQLite database in WAL mode with one writer connection.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    checkpointer: Option<Arc<Checkpointer>>,
}

/// Primary result codes that blame the data: TOOBIG, CONSTRAINT, MISMATCH, RANGE.
fn is_data_error(code: &str) -> bool {
    code.parse::<i32>()
        .is_ok_and(|extended| matches!(extended & 0xff, 18 | 19 | 20 | 25))
}

/// The file path of a `sqlite://` URL, without its query.
fn options_path(url: &str) -> Option<std::path::PathBuf> {
    let path = url.strip_prefix("sqlite://")?;
    let path = path.split('?').next()?;
    (!path.is_empty() && path != ":memory:").then(|| path.into())
}

/// SQLite says only "unable to open database file" when the directory is the problem; say which.
fn directory_hint(path: Option<&std::path::Path>) -> String {
    let Some(parent) = path.and_then(std::path::Path::parent) else {
        return String::new();
    };
    if parent.as_os_str().is_empty() {
        return String::new();
    }
    let mut ancestor = Some(parent);
    while let Some(dir) = ancestor {
        match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => break,
            Ok(_) => return format!(" ({} is not a directory)", dir.display()),
            Err(_) => ancestor = dir.parent(),
        }
    }
    if parent.is_dir() {
        String::new()
    } else {
        format!(" (directory {} does not exist)", parent.display())
    }
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
            .busy_timeout(Duration::from_secs(5))
            // The single writer is SQLite's limit, and with 4 KiB pages much of its time goes to
            // reading and writing pages: a 64 MiB page cache (default 2 MiB) keeps the hot pages
            // in memory, and 64 KiB pages (taken when the file is created) cut the per-page work.
            .pragma("cache_size", "-65536")
            .page_size(65536)
            // The writer never checkpoints: a commit that did would hold its batch's acks while it
            // copies the WAL into the database file. The checkpointer does it beside the writer.
            .pragma("wal_autocheckpoint", "0");
        let cannot_open = |err| {
            StoreError::Unavailable(format!(
                "cannot open {url}: {err}{}",
                directory_hint(options_path(url).as_deref())
            ))
        };
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options.clone())
            .await
            .map_err(cannot_open)?;
        // An in-memory database has no WAL to checkpoint.
        let checkpointer = match options_path(url) {
            Some(_) => Some(Arc::new(
                Checkpointer::start(&options).await.map_err(cannot_open)?,
            )),
            None => None,
        };
        Ok(SqliteStore { pool, checkpointer })
    }

    /// A writer's turn: held for each write transaction so that the checkpointer can rewind the
    /// WAL between two of them.
    pub(crate) async fn turn(&self) -> Option<tokio::sync::RwLockReadGuard<'_, ()>> {
        match &self.checkpointer {
            Some(checkpointer) => Some(checkpointer.turn().await),
            None => None,
        }
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

    pub(super) async fn insert_claimed(
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

    pub(super) async fn probe(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
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

    pub(super) async fn prune_chunk_keys(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let before = before.timestamp_micros();
        super::chunked_delete::delete_in_chunks(move || async move {
            let _turn = self.turn().await;
            sqlx::query(PRUNE_SQL)
                .bind(before)
                .bind(super::chunked_delete::DELETE_CHUNK)
                .execute(&self.pool)
                .await
                .map(|done| done.rows_affected())
                .map_err(|err| StoreError::Unavailable(err.to_string()))
        })
        .await
    }

    pub(super) async fn close(&self) {
        self.pool.close().await;
        // Last, so that its connection is the last one closed and SQLite folds the WAL back in.
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.stop().await;
        }
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
