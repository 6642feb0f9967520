//! PostgreSQL, the production backend: a batch is one statement (`write.rs`), reads run on a pool
//! of their own (`read.rs`, and `tail.rs` for live follows), and retention drops daily partitions
//! whole (`retention.rs`). On a Citus coordinator the tables are distributed by tenant
//! (`citus.rs`).

mod citus;
mod copy;
mod hour_index;
mod label_match;
mod logql_row;
mod read;
mod retention;
mod seal;
mod select;
mod streams;
mod tail;
mod write;

use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::Connection;

// Public for the retention, sealing and Citus tests, which set partitions up and check them by
// name.
pub use citus::Flavor;
pub use hour_index::{index_leaf, INDEX_AFTER};
pub use read::READ_SETTINGS;
pub use retention::{
    create_partitions, hour_partition_name, partition_day, partition_name, RETENTION_LOCK_KEY,
};
pub use seal::{leaves, seal, sealing, Leaf, Pace, PgSealer, Sealed, Sealing};

pub(crate) use read::PgReader;
pub(crate) use retention::PgRetention;
pub(crate) use tail::PgTail;

use crate::storage::connect::{redact_url, DatabaseUrl, PoolOptions};
use crate::storage::error::StoreError;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// A PostgreSQL connection pool that writes batches.
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: PgPool,
    /// For the connections opened beside the pool: the read pool, retention sessions.
    url: DatabaseUrl,
    /// One server, or a Citus coordinator.
    flavor: Flavor,
}

/// Sets up a writer session: durable commits whatever the server's or the database's default,
/// and early writeback of the pages it dirties.
async fn prepare_writer_session(
    connection: &mut sqlx::PgConnection,
    flavor: Flavor,
) -> Result<(), sqlx::Error> {
    // An acknowledgement promises the records survive a crash of the database server; with
    // `synchronous_commit = off` (a setting some servers run with for speed) a commit returns
    // before its WAL is on disk, so a crash could lose acknowledged records.
    sqlx::query("SET synchronous_commit = on")
        .execute(&mut *connection)
        .await?;
    if flavor == Flavor::Citus {
        citus::prepare_writer_session(connection).await?;
    }
    ask_for_early_writeback(connection).await;
    Ok(())
}

/// Asks the server to start writing this session's dirty pages to disk as it evicts them.
///
/// With the default shared buffers our sessions write nearly all of the table's new pages
/// themselves; left in the page cache, they are flushed in one go by the checkpoint's sync, which
/// stalls the WAL syncs of every commit behind it. It changes nothing about durability. Servers
/// without `sync_file_range` refuse it; they work as before.
async fn ask_for_early_writeback(connection: &mut sqlx::PgConnection) {
    if let Err(err) = sqlx::query("SET backend_flush_after = '2MB'")
        .execute(connection)
        .await
    {
        tracing::debug!(error = %err, "the server keeps its default backend_flush_after");
    }
}

/// Asks the server, on a connection of its own, which flavor it is: the pool's sessions are set
/// up by it.
async fn detect_flavor(url: &str) -> Result<Flavor, sqlx::Error> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let flavor = Flavor::detect(&mut conn).await?;
    let _ = conn.close().await;
    Ok(flavor)
}

impl PostgresStore {
    /// Opens the pool and checks that the database answers.
    pub(in crate::storage) async fn connect(
        url: &str,
        options: PoolOptions,
    ) -> Result<Self, StoreError> {
        let unreachable =
            |err| StoreError::Unavailable(format!("cannot connect to {}: {err}", redact_url(url)));
        let flavor = detect_flavor(url).await.map_err(unreachable)?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .after_connect(move |connection, _| {
                Box::pin(prepare_writer_session(connection, flavor))
            })
            .connect(url)
            .await
            .map_err(unreachable)?;
        if flavor == Flavor::Citus {
            tracing::info!("the database is a Citus coordinator; tables are distributed by tenant");
        }
        Ok(PostgresStore {
            pool,
            url: DatabaseUrl::new(url),
            flavor,
        })
    }

    /// One server, or a Citus coordinator.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The underlying pool, for tests and tools that read back what was written.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub(in crate::storage) async fn reader(
        &self,
        max_connections: u32,
        timeout: Duration,
    ) -> Result<PgReader, StoreError> {
        PgReader::connect(self.url.as_str(), max_connections, timeout).await
    }

    pub(in crate::storage) async fn migrate(&self) -> Result<(), StoreError> {
        // sqlx's migrator holds a PostgreSQL advisory lock while it runs, so replicas that start
        // together apply each migration exactly once.
        MIGRATOR
            .run(&self.pool)
            .await
            .map_err(|err| StoreError::Migrate(err.to_string()))?;
        if self.flavor == Flavor::Citus {
            let mut conn = self
                .pool
                .acquire()
                .await
                .map_err(|err| StoreError::Migrate(err.to_string()))?;
            citus::distribute(&mut conn).await?;
        }
        Ok(())
    }

    pub(in crate::storage) async fn close(&self) {
        self.pool.close().await;
    }

    pub(in crate::storage) fn backend(&self) -> &'static str {
        "postgres"
    }
}
