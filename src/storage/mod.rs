//! Where batches land: one concrete store per backend behind a small enum, chosen by the URL.
//!
//! sqlx's `Any` driver is not used on purpose: it has no timestamptz, arrays or jsonb, and its
//! placeholders do not suit PostgreSQL. Each backend writes a batch as one statement (PostgreSQL)
//! or one transaction (SQLite).

pub mod chunked_delete;
mod connect;
mod error;
pub mod postgres;
pub mod read_postgres;
pub mod read_sqlite;
pub mod reader;
mod row;
pub mod sqlite;
pub mod sqlite_checkpoint;
mod stored;

pub use connect::{redact_url, Backend, PoolOptions};
pub use error::StoreError;
pub use row::{ChunkKey, Claim, Row};
pub use stored::{Batch, Budget, StoredRow};

use chrono::{DateTime, Utc};

/// A connected store.
#[derive(Clone, Debug)]
pub enum Store {
    /// PostgreSQL, the production store.
    Postgres(postgres::PostgresStore),
    /// SQLite, the embedded default.
    Sqlite(sqlite::SqliteStore),
}

impl Store {
    /// Connects to the database the URL names: `postgres://…`/`postgresql://…` or `sqlite://…`.
    pub async fn connect(url: &str, pool: PoolOptions) -> Result<Store, StoreError> {
        match Backend::of(url)? {
            Backend::Postgres => postgres::PostgresStore::connect(url, pool)
                .await
                .map(Store::Postgres),
            Backend::Sqlite => sqlite::SqliteStore::connect(url).await.map(Store::Sqlite),
        }
    }

    /// Applies pending migrations (PostgreSQL: under an advisory lock, so replicas can start together).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        match self {
            Store::Postgres(store) => store.migrate().await,
            Store::Sqlite(store) => store.migrate().await,
        }
    }

    /// Writes all rows in one statement or transaction; on error none of them is stored.
    pub async fn insert(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        match self {
            Store::Postgres(store) => store.insert(rows).await,
            Store::Sqlite(store) => store.insert(rows).await,
        }
    }

    /// Claims `claims`' keys and writes the rows in one transaction, leaving out the rows of
    /// claims whose key was already taken. Returns, per claim, whether it was claimed now (its
    /// rows written) or is a duplicate (its rows skipped). On error nothing is stored or claimed.
    /// Without claims this is [`Store::insert`], with no transaction around it.
    pub async fn insert_claimed(
        &self,
        rows: &[Row<'_>],
        claims: &[Claim<'_>],
    ) -> Result<Vec<bool>, StoreError> {
        if claims.is_empty() {
            return self.insert(rows).await.map(|()| Vec::new());
        }
        match self {
            Store::Postgres(store) => store.insert_claimed(rows, claims).await,
            Store::Sqlite(store) => store.insert_claimed(rows, claims).await,
        }
    }

    /// Inserts the rows in a transaction that is rolled back: tells whether the database would
    /// refuse one of them without storing anything.
    pub async fn probe(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        match self {
            Store::Postgres(store) => store.probe(rows).await,
            Store::Sqlite(store) => store.probe(rows).await,
        }
    }

    /// Deletes chunk keys stored before `before` (the dedup window's edge); returns how many.
    pub async fn prune_chunk_keys(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        match self {
            Store::Postgres(store) => store.prune_chunk_keys(before).await,
            Store::Sqlite(store) => store.prune_chunk_keys(before).await,
        }
    }

    /// Closes every connection, waiting for those in use.
    pub async fn close(&self) {
        match self {
            Store::Postgres(store) => store.close().await,
            Store::Sqlite(store) => store.close().await,
        }
    }

    /// "postgres" or "sqlite", for logs and the readiness page.
    pub fn backend(&self) -> &'static str {
        match self {
            Store::Postgres(_) => "postgres",
            Store::Sqlite(_) => "sqlite",
        }
    }
}
