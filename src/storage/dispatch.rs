//! The handles callers hold, one enum each with a variant per backend, and the one match that
//! sends each call to the backend a handle holds (`dispatch!`). [`Store::connect`] picks the
//! backend from the URL once; every other handle comes from the store, so it is of the same
//! backend, and no call can pair a handle of one backend with one of the other.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::connect::{Backend, PoolOptions};
use super::error::StoreError;
use super::postgres::{PgReader, PgTail, PostgresStore};
use super::row::{Claim, Row};
use super::sqlite::{SqliteReader, SqliteStore, SqliteTail};
use super::stored::{Batch, Budget, StoredRow};
use crate::model::cursor::Cursor;
use crate::model::filter::Filter;

/// Runs the same code on whichever backend the handle `$handle` (an enum with a `Postgres` and a
/// `Sqlite` variant) holds, with `$backend` bound to the backend's own value. With `into Other(…)`
/// the result is wrapped in the `Other` handle of the same backend.
macro_rules! dispatch {
    ($handle:expr, $backend:ident => into $into:ident($body:expr)) => {
        match $handle {
            Self::Postgres($backend) => $into::Postgres($body),
            Self::Sqlite($backend) => $into::Sqlite($body),
        }
    };
    ($handle:expr, $backend:ident => $body:expr) => {
        match $handle {
            Self::Postgres($backend) => $body,
            Self::Sqlite($backend) => $body,
        }
    };
}

/// A connected store: the writer's pool, where batches land.
#[derive(Clone, Debug)]
pub enum Store {
    /// PostgreSQL, the production store.
    Postgres(PostgresStore),
    /// SQLite, the embedded default.
    Sqlite(SqliteStore),
}

impl Store {
    /// Connects to the database the URL names: `postgres://…`/`postgresql://…` or `sqlite://…`.
    pub async fn connect(url: &str, pool: PoolOptions) -> Result<Store, StoreError> {
        Ok(match Backend::of(url)? {
            Backend::Postgres => Store::Postgres(PostgresStore::connect(url, pool).await?),
            Backend::Sqlite => Store::Sqlite(SqliteStore::connect(url).await?),
        })
    }

    /// Opens a read pool of `max_connections` on the same database, for reads that are stopped
    /// after `timeout`. Migrate first: readers expect the tables.
    pub async fn reader(
        &self,
        max_connections: u32,
        timeout: Duration,
    ) -> Result<Reader, StoreError> {
        Ok(dispatch!(self, store => into Reader(store.reader(max_connections, timeout).await?)))
    }

    /// Applies pending migrations (PostgreSQL: under an advisory lock, so replicas can start together).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        dispatch!(self, store => store.migrate().await)
    }

    /// Writes all rows in one statement or transaction; on error none of them is stored.
    pub async fn insert(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        dispatch!(self, store => store.insert(rows).await)
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
        dispatch!(self, store => store.insert_claimed(rows, claims).await)
    }

    /// Inserts the rows in a transaction that is rolled back: tells whether the database would
    /// refuse one of them without storing anything.
    pub async fn probe(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        dispatch!(self, store => store.probe(rows).await)
    }

    /// Deletes chunk keys stored before `before` (the dedup window's edge); returns how many.
    pub async fn prune_chunk_keys(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        dispatch!(self, store => store.prune_chunk_keys(before).await)
    }

    /// Closes every connection, waiting for those in use.
    pub async fn close(&self) {
        dispatch!(self, store => store.close().await)
    }

    /// "postgres" or "sqlite", for logs and the readiness page.
    pub fn backend(&self) -> &'static str {
        dispatch!(self, store => store.backend())
    }
}

/// A connected read pool: pages, tails and the readiness probe, on connections of their own.
#[derive(Clone, Debug)]
pub enum Reader {
    /// PostgreSQL reads.
    Postgres(PgReader),
    /// SQLite reads.
    Sqlite(SqliteReader),
}

impl Reader {
    /// The tenant's records matching `filter` within `budget`, newest first (by timestamp, then
    /// id), strictly after `after` in that order.
    pub async fn page(
        &self,
        tenant: &str,
        filter: &Filter,
        after: Option<Cursor>,
        budget: Budget,
    ) -> Result<Batch, StoreError> {
        dispatch!(self, reader => reader.page(tenant, filter, after, budget).await)
    }

    /// A tail reading on this pool: after the cursor's record, or from now.
    pub async fn tail(&self, after: Option<Cursor>) -> Result<Tail, StoreError> {
        Ok(dispatch!(self, reader => into Tail(reader.tail(after).await?)))
    }

    /// A cheap round trip, for readiness. On a connection of the read pool: SQLite has a single
    /// writer connection, and a probe queued behind a long write would call the store down.
    pub async fn ping(&self) -> Result<(), StoreError> {
        dispatch!(self, reader => reader.ping().await)
    }

    /// Closes the pool.
    pub async fn close(&self) {
        dispatch!(self, reader => reader.close().await)
    }
}

/// A live read of newly committed records, with the read pool it polls on and where it stands:
/// each backend keeps its own watermark.
#[derive(Debug)]
pub enum Tail {
    /// PostgreSQL: a received_at watermark with an overlap window.
    Postgres(PgTail),
    /// SQLite: the last id seen (ids are commit-ordered with one writer).
    Sqlite(SqliteTail),
}

impl Tail {
    /// Records committed since the last poll, oldest first, within `budget`; the flag says
    /// whether more are waiting (poll again at once). A poll dropped part-way leaves the tail
    /// where it was.
    pub async fn poll(
        &mut self,
        tenant: &str,
        filter: &Filter,
        budget: Budget,
    ) -> Result<(Vec<StoredRow>, bool), StoreError> {
        dispatch!(self, tail => tail.poll(tenant, filter, budget).await)
    }

    /// Ids remembered for de-duplication (0 on SQLite), which the caller caps.
    pub fn remembered(&self) -> usize {
        dispatch!(self, tail => tail.remembered())
    }
}
