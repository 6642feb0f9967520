//! Reading records back, on connections of their own so reads never wait behind ingest: a small
//! PostgreSQL pool, or read-only SQLite connections (WAL lets them read while the single writer
//! writes).
//!
//! Every read is bounded in rows and in bytes ([`Budget`]): rows are streamed from the database
//! and the read stops at the first row that would not fit, so neither an answer nor the memory
//! behind it grows with the size of the records.
//!
//! Dropping a read's future stops its work in the database, not only in the service: SQLite
//! statements are interrupted, and a PostgreSQL connection with a statement running is closed,
//! which the server acts on (see each backend's module docs). Callers bound reads in time by
//! dropping them at their deadline.

use std::time::Duration;

use super::{read_postgres, read_sqlite, Batch, Budget, StoreError, StoredRow};
use crate::model::cursor::Cursor;
use crate::model::filter::Filter;

/// Where a tail stands; each backend keeps its own watermark.
#[derive(Debug)]
pub enum TailState {
    /// PostgreSQL: a received_at watermark with an overlap window.
    Postgres(read_postgres::PgTail),
    /// SQLite: the last id seen (ids are commit-ordered with one writer).
    Sqlite(read_sqlite::SqliteTail),
}

impl TailState {
    /// Ids remembered for de-duplication (0 on SQLite), which the caller caps.
    pub fn remembered(&self) -> usize {
        match self {
            TailState::Postgres(state) => state.remembered(),
            TailState::Sqlite(_) => 0,
        }
    }
}

/// A connected reader.
#[derive(Clone, Debug)]
pub enum Reader {
    /// PostgreSQL reads.
    Postgres(read_postgres::PgReader),
    /// SQLite reads.
    Sqlite(read_sqlite::SqliteReader),
}

impl Reader {
    /// Opens a read pool of `max_connections` on the database the URL names, for reads that are
    /// stopped after `timeout`. The database must exist and be migrated (the writer does both
    /// first).
    pub async fn connect(
        url: &str,
        max_connections: u32,
        timeout: Duration,
    ) -> Result<Reader, StoreError> {
        match super::Backend::of(url)? {
            super::Backend::Postgres => {
                read_postgres::PgReader::connect(url, max_connections, timeout)
                    .await
                    .map(Reader::Postgres)
            }
            super::Backend::Sqlite => {
                read_sqlite::SqliteReader::connect(url, max_connections, timeout)
                    .await
                    .map(Reader::Sqlite)
            }
        }
    }

    /// The tenant's records matching `filter` within `budget`, newest first (by timestamp, then
    /// id), strictly after `after` in that order.
    pub async fn page(
        &self,
        tenant: &str,
        filter: &Filter,
        after: Option<Cursor>,
        budget: Budget,
    ) -> Result<Batch, StoreError> {
        match self {
            Reader::Postgres(reader) => reader.page(tenant, filter, after, budget).await,
            Reader::Sqlite(reader) => reader.page(tenant, filter, after, budget).await,
        }
    }

    /// A tail position: after the cursor's record, or from now.
    pub async fn tail_start(&self, after: Option<Cursor>) -> Result<TailState, StoreError> {
        match self {
            Reader::Postgres(reader) => reader.tail_start(after).await.map(TailState::Postgres),
            Reader::Sqlite(reader) => reader.tail_start(after).await.map(TailState::Sqlite),
        }
    }

    /// Records committed since the last poll, oldest first, within `budget`; the flag says
    /// whether more are waiting (poll again at once).
    pub async fn tail_poll(
        &self,
        tenant: &str,
        filter: &Filter,
        state: &mut TailState,
        budget: Budget,
    ) -> Result<(Vec<StoredRow>, bool), StoreError> {
        match (self, state) {
            (Reader::Postgres(reader), TailState::Postgres(state)) => {
                reader.tail_poll(tenant, filter, state, budget).await
            }
            (Reader::Sqlite(reader), TailState::Sqlite(state)) => {
                reader.tail_poll(tenant, filter, state, budget).await
            }
            _ => unreachable!("a tail state comes from the same reader"),
        }
    }

    /// A cheap round trip, for readiness. On a connection of the read pool: SQLite has a single
    /// writer connection, and a probe queued behind a long write would call the store down.
    pub async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Reader::Postgres(reader) => reader.ping().await,
            Reader::Sqlite(reader) => reader.ping().await,
        }
    }

    /// Closes the pool.
    pub async fn close(&self) {
        match self {
            Reader::Postgres(reader) => reader.close().await,
            Reader::Sqlite(reader) => reader.close().await,
        }
    }
}
