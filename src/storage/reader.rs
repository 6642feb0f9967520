//! Reading records back, on connections of their own so reads never wait behind ingest: a small
//! PostgreSQL pool, or read-only SQLite connections (WAL lets them read while the single writer
//! writes).

use chrono::{DateTime, Utc};

use super::{read_postgres, read_sqlite, StoreError};
use crate::query::cursor::Cursor;
use crate::query::filter::Filter;

/// A stored record as read back.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRow {
    /// Unique id (not commit-ordered on PostgreSQL; see `read_postgres`).
    pub id: i64,
    /// The record's timestamp.
    pub ts: DateTime<Utc>,
    /// When the database received it.
    pub received_at: DateTime<Utc>,
    /// Severity number.
    pub severity: i16,
    /// Emitting service.
    pub service: String,
    /// The log line.
    pub message: String,
    /// Attributes as a JSON object.
    pub attributes: String,
    /// Trace id, lowercase hex.
    pub trace_id: Option<String>,
    /// Span id, lowercase hex.
    pub span_id: Option<String>,
}

impl StoredRow {
    /// The row's position, for cursors.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            ts_micros: self.ts.timestamp_micros(),
            id: self.id,
            received_micros: self.received_at.timestamp_micros(),
        }
    }
}

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
    /// Opens a read pool of `max_connections` on the database the URL names. The database must
    /// exist and be migrated (the writer does both first).
    pub async fn connect(url: &str, max_connections: u32) -> Result<Reader, StoreError> {
        match super::Backend::of(url)? {
            super::Backend::Postgres => read_postgres::PgReader::connect(url, max_connections)
                .await
                .map(Reader::Postgres),
            super::Backend::Sqlite => read_sqlite::SqliteReader::connect(url, max_connections)
                .await
                .map(Reader::Sqlite),
        }
    }

    /// Up to `limit` of the tenant's records matching `filter`, newest first (by timestamp, then
    /// id), strictly after `after` in that order.
    pub async fn page(
        &self,
        tenant: &str,
        filter: &Filter,
        after: Option<Cursor>,
        limit: usize,
    ) -> Result<Vec<StoredRow>, StoreError> {
        match self {
            Reader::Postgres(reader) => reader.page(tenant, filter, after, limit).await,
            Reader::Sqlite(reader) => reader.page(tenant, filter, after, limit).await,
        }
    }

    /// A tail position: after the cursor's record, or from now.
    pub async fn tail_start(&self, after: Option<Cursor>) -> Result<TailState, StoreError> {
        match self {
            Reader::Postgres(reader) => reader.tail_start(after).await.map(TailState::Postgres),
            Reader::Sqlite(reader) => reader.tail_start(after).await.map(TailState::Sqlite),
        }
    }

    /// Records committed since the last poll, oldest first, at most `limit`; the flag says whether
    /// more are waiting (poll again at once).
    pub async fn tail_poll(
        &self,
        tenant: &str,
        filter: &Filter,
        state: &mut TailState,
        limit: usize,
    ) -> Result<(Vec<StoredRow>, bool), StoreError> {
        match (self, state) {
            (Reader::Postgres(reader), TailState::Postgres(state)) => {
                reader.tail_poll(tenant, filter, state, limit).await
            }
            (Reader::Sqlite(reader), TailState::Sqlite(state)) => {
                reader.tail_poll(tenant, filter, state, limit).await
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

/// A microsecond count as a time (saturating at the representable range).
pub(super) fn from_micros(micros: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(micros).unwrap_or(DateTime::<Utc>::MIN_UTC)
}
