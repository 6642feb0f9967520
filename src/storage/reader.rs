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

use chrono::{DateTime, Utc};

use super::{read_postgres, read_sqlite, StoreError};
use crate::model::cursor::Cursor;
use crate::model::filter::Filter;

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

/// Bytes of a `StoredRecord` on the wire that do not depend on its text: its framing in the
/// answer, the cursor, two timestamps, the severity, and the tags and lengths of the strings.
const FIXED_WIRE_BYTES: usize = 128;

impl StoredRow {
    /// The row's position, for cursors.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            ts_micros: self.ts.timestamp_micros(),
            id: self.id,
            received_micros: self.received_at.timestamp_micros(),
        }
    }

    /// At least the bytes the row takes as a `StoredRecord` in a Query or Tail answer, so that
    /// answers sized by it stay within their limit. Attributes are JSON here and a map on the
    /// wire: an entry's tags and lengths take at most 6 bytes more than its quotes, colon and
    /// comma, and an entry takes at least 6 bytes of JSON, so twice the JSON bounds the map.
    pub fn wire_bytes(&self) -> usize {
        FIXED_WIRE_BYTES
            + self.service.len()
            + self.message.len()
            + 2 * self.attributes.len()
            + self.trace_id.as_ref().map_or(0, String::len)
            + self.span_id.as_ref().map_or(0, String::len)
    }
}

/// How much one read may return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Rows at most.
    pub rows: usize,
    /// Bytes at most, counted by [`StoredRow::wire_bytes`]; the first row is returned whatever
    /// its size, so a record larger than the budget is still readable, alone.
    pub bytes: usize,
}

/// The rows one read returned.
#[derive(Debug, Default, PartialEq)]
pub struct Batch {
    /// In the read's order.
    pub rows: Vec<StoredRow>,
    /// True when a matching row was left out because it would have gone past the byte budget:
    /// there is more to read after the last row.
    pub cut_short: bool,
}

/// Gathers streamed rows until a budget is spent; the backends stop reading when it says so.
#[derive(Debug)]
pub(super) struct Collector {
    budget: Budget,
    bytes: usize,
    batch: Batch,
}

impl Collector {
    pub(super) fn new(budget: Budget) -> Self {
        Collector {
            budget,
            bytes: 0,
            batch: Batch::default(),
        }
    }

    /// Takes `row` if it fits; false once the budget is spent and reading should stop.
    pub(super) fn offer(&mut self, row: StoredRow) -> bool {
        let size = row.wire_bytes();
        if !self.batch.rows.is_empty() && self.bytes + size > self.budget.bytes {
            self.batch.cut_short = true;
            return false;
        }
        self.bytes += size;
        self.batch.rows.push(row);
        !self.is_done()
    }

    /// True when no more rows may be taken.
    pub(super) fn is_done(&self) -> bool {
        self.batch.cut_short || self.batch.rows.len() >= self.budget.rows
    }

    /// Rows that may still be taken.
    pub(super) fn rows_left(&self) -> usize {
        self.budget.rows.saturating_sub(self.batch.rows.len())
    }

    pub(super) fn finish(self) -> Batch {
        self.batch
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

/// A microsecond count as a time (saturating at the representable range).
pub(super) fn from_micros(micros: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(micros).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, message_bytes: usize) -> StoredRow {
        StoredRow {
            id,
            ts: from_micros(1_795_946_400_000_000),
            received_at: from_micros(1_795_946_400_000_000),
            severity: 9,
            service: "api".into(),
            message: "m".repeat(message_bytes),
            attributes: "{}".into(),
            trace_id: None,
            span_id: None,
        }
    }

    #[test]
    fn a_collector_stops_before_the_row_that_would_not_fit() {
        let budget = Budget {
            rows: 10,
            bytes: 3 * row(0, 1000).wire_bytes(),
        };
        let mut collector = Collector::new(budget);
        assert!(collector.offer(row(1, 1000)));
        assert!(collector.offer(row(2, 1000)));
        assert!(collector.offer(row(3, 1000)));
        assert!(!collector.offer(row(4, 1000)), "the fourth does not fit");
        let batch = collector.finish();
        assert!(batch.cut_short);
        assert_eq!(
            batch.rows.iter().map(|r| r.id).collect::<Vec<_>>(),
            [1, 2, 3]
        );
    }

    #[test]
    fn a_row_larger_than_the_budget_goes_alone_and_the_row_limit_holds() {
        let mut collector = Collector::new(Budget {
            rows: 10,
            bytes: 100,
        });
        assert!(
            collector.offer(row(1, 5000)),
            "the first row is taken whatever its size"
        );
        assert!(!collector.offer(row(2, 1)));
        let batch = collector.finish();
        assert_eq!(batch.rows.len(), 1);
        assert!(batch.cut_short);

        let mut collector = Collector::new(Budget {
            rows: 2,
            bytes: usize::MAX,
        });
        assert!(collector.offer(row(1, 1)));
        assert!(!collector.offer(row(2, 1)), "full at two rows");
        let batch = collector.finish();
        assert_eq!(batch.rows.len(), 2);
        assert!(!batch.cut_short, "full by rows is not cut short");
    }
}
