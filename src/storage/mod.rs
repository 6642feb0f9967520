//! Where batches land: one concrete store per backend behind a small enum, chosen by the URL.
//!
//! sqlx's `Any` driver is not used on purpose: it has no timestamptz, arrays or jsonb, and its
//! placeholders do not suit PostgreSQL. Each backend writes a batch as one statement (PostgreSQL)
//! or one transaction (SQLite).

pub mod postgres;
pub mod read_postgres;
pub mod read_sqlite;
pub mod reader;
pub mod sqlite;

use std::time::Duration;

use crate::record::Record;

/// One row of a batch: a record and the tenant that sent it.
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    /// Tenant that owns the record.
    pub tenant: &'a str,
    /// The record itself.
    pub record: &'a Record,
}

/// What can go wrong talking to the database.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused the data itself (a constraint or a value it cannot hold); retrying
    /// the same rows cannot help, so the batch is split to find the culprit.
    #[error("the database refused the row: {0}")]
    RowRejected(String),
    /// The database is unreachable, overloaded or failing; the same write may succeed later.
    #[error("{0}")]
    Unavailable(String),
    /// The URL names no supported database or is malformed.
    #[error("invalid database url: {0}")]
    Url(String),
    /// A migration could not be applied.
    #[error("migration failed: {0}")]
    Migrate(String),
}

impl StoreError {
    /// A stable label value for the insert-errors metric.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::RowRejected(_) => "row_rejected",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Url(_) => "url",
            StoreError::Migrate(_) => "migrate",
        }
    }
}

/// Sizing of the connection pool.
#[derive(Clone, Copy, Debug)]
pub struct PoolOptions {
    /// Most connections open at once.
    pub max_connections: u32,
    /// How long a writer waits for a connection before the attempt counts as failed.
    pub acquire_timeout: Duration,
}

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
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return postgres::PostgresStore::connect(url, pool)
                .await
                .map(Store::Postgres);
        }
        if url.starts_with("sqlite:") {
            return sqlite::SqliteStore::connect(url).await.map(Store::Sqlite);
        }
        Err(StoreError::Url(format!(
            "{:?} is neither postgres://… nor sqlite://…",
            redact_url(url)
        )))
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

    /// A cheap round trip, for readiness.
    pub async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Store::Postgres(store) => store.ping().await,
            Store::Sqlite(store) => store.ping().await,
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

/// The URL with any password replaced, safe to log.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((credentials, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    match credentials.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

/// Maps a sqlx error to retryable or row-level, given the backend's test for "the data is bad".
fn classify(err: sqlx::Error, is_data_error: impl Fn(&str) -> bool) -> StoreError {
    match &err {
        sqlx::Error::Database(db) if db.code().is_some_and(|code| is_data_error(&code)) => {
            StoreError::RowRejected(db.message().to_owned())
        }
        _ => StoreError::Unavailable(err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_logs() {
        assert_eq!(
            redact_url("postgres://loghaul:s3cret@db:5432/logs"),
            "postgres://loghaul:***@db:5432/logs"
        );
        assert_eq!(
            redact_url("postgres://root@db/test"),
            "postgres://root@db/test"
        );
        assert_eq!(redact_url("sqlite://loghaul.db"), "sqlite://loghaul.db");
    }
}
