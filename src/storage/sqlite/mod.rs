//! SQLite, the embedded default: one writer connection in WAL mode (SQLite allows one writer at a
//! time; more would only wait on its lock), whose batches are one statement each (`write.rs`);
//! the WAL is checkpointed beside it (`checkpoint.rs`), reads run on read-only connections of
//! their own (`read.rs`, and `tail.rs` for live follows), label selectors consult the stream
//! catalog the writes keep (`streams.rs`), and retention deletes old rows in chunks
//! (`retention.rs`).

mod batched_rows;
mod checkpoint;
mod label_match;
mod read;
mod retention;
mod select;
mod split_read;
mod statement;
mod streams;
mod tail;
mod write;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

pub(crate) use read::SqliteReader;
pub(crate) use retention::SqliteRetention;
pub(crate) use tail::SqliteTail;

use crate::storage::connect::DatabaseUrl;
use crate::storage::error::StoreError;
use crate::storage::metrics::StorageMetrics;
use checkpoint::Checkpointer;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// A SQLite database in WAL mode with one writer connection.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    checkpointer: Option<Arc<Checkpointer>>,
    /// For the connections opened beside the writer: the read-only pool.
    url: DatabaseUrl,
}

/// The file path of a `sqlite://` URL, without its query.
pub(crate) fn options_path(url: &str) -> Option<std::path::PathBuf> {
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
    /// Opens (creating if missing) the database file named by a `sqlite://` URL; its checkpoints
    /// are counted in `metrics`.
    pub(in crate::storage) async fn connect(
        url: &str,
        metrics: Arc<StorageMetrics>,
    ) -> Result<Self, StoreError> {
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
                Checkpointer::start(&options, metrics)
                    .await
                    .map_err(cannot_open)?,
            )),
            None => None,
        };
        Ok(SqliteStore {
            pool,
            checkpointer,
            url: DatabaseUrl::new(url),
        })
    }

    /// A writer's turn: held for each write transaction so that the checkpointer can rewind the
    /// WAL between two of them.
    async fn turn(&self) -> Option<tokio::sync::RwLockReadGuard<'_, ()>> {
        match &self.checkpointer {
            Some(checkpointer) => Some(checkpointer.turn().await),
            None => None,
        }
    }

    /// The underlying pool, for tests and tools that read back what was written.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    pub(in crate::storage) async fn reader(
        &self,
        max_connections: u32,
        timeout: Duration,
    ) -> Result<SqliteReader, StoreError> {
        SqliteReader::connect(self.url.as_str(), max_connections, timeout).await
    }

    pub(in crate::storage) async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR
            .run(&self.pool)
            .await
            .map_err(|err| StoreError::Migrate(err.to_string()))
    }

    pub(in crate::storage) async fn close(&self) {
        self.pool.close().await;
        // Last, so that its connection is the last one closed and SQLite folds the WAL back in.
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.stop().await;
        }
    }

    pub(in crate::storage) fn backend(&self) -> &'static str {
        "sqlite"
    }
}
