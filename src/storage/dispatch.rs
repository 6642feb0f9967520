//! The handles callers hold, one enum each with a variant per backend, and the one match that
//! sends each call to the backend a handle holds (`dispatch!`). [`Store::connect`] picks the
//! backend from the URL once; every other handle comes from the store, so it is of the same
//! backend, and no call can pair a handle of one backend with one of the other.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};

use super::connect::{Backend, PoolOptions};
use super::error::StoreError;
use super::metrics::StorageMetrics;
use super::postgres::{PgReader, PgRetention, PgSealer, PgTail, PostgresStore};
use super::row::{Claim, Row};
use super::sqlite::{SqliteReader, SqliteRetention, SqliteStore, SqliteTail};
use super::stored::{CountedRow, Page, PageSize, StoredRow};
use crate::model::cursor::Cursor;
use crate::model::filter::Filter;
use crate::model::selection::{Counting, LineCondition, Order, Selection, VolumeRow};
use crate::observability::metrics::Registry;

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
    /// Connects to the database the URL names: `postgres://…`/`postgresql://…` or `sqlite://…`,
    /// counting what the store reports in a registry of its own (a server counts in its own,
    /// through [`Store::connect_counted`]).
    pub async fn connect(url: &str, pool: PoolOptions) -> Result<Store, StoreError> {
        let metrics = StorageMetrics::register(&Registry::new());
        Store::connect_counted(url, pool, Arc::new(metrics)).await
    }

    /// The same, counting what the store reports (SQLite's checkpoints) in `metrics`.
    pub(crate) async fn connect_counted(
        url: &str,
        pool: PoolOptions,
        metrics: Arc<StorageMetrics>,
    ) -> Result<Store, StoreError> {
        Ok(match Backend::of(url)? {
            Backend::Postgres => Store::Postgres(PostgresStore::connect(url, pool).await?),
            Backend::Sqlite => Store::Sqlite(SqliteStore::connect(url, metrics).await?),
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

    /// Opens a session for one retention run: a connection of its own on PostgreSQL, the writer
    /// on SQLite.
    pub async fn retention(&self) -> Result<RetentionSession, StoreError> {
        Ok(dispatch!(self, store => into RetentionSession(store.retention().await?)))
    }

    /// Opens a session for sealing past hours into columnar partitions: PostgreSQL only, SQLite
    /// keeps rows as written (`None`).
    pub async fn sealer(&self) -> Result<Option<PgSealer>, StoreError> {
        match self {
            Self::Postgres(store) => Ok(Some(store.sealer().await?)),
            Self::Sqlite(_) => Ok(None),
        }
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
        budget: PageSize,
    ) -> Result<Page, StoreError> {
        dispatch!(self, reader => reader.page(tenant, filter, after, budget).await)
    }

    /// Streams the tenant's rows of `selection` in `order` to `sink` until it returns false, at
    /// most `limit` (given only when the selection holds every condition of the query). A row
    /// the selection lets through may still fail the query: its engine checks each one. A row's
    /// id and receive time are not read on every store (0 and its `ts` there): a LogQL read,
    /// the only one made this way, uses neither.
    pub async fn select(
        &self,
        tenant: &str,
        selection: &Selection,
        order: Order,
        limit: Option<usize>,
        sink: &mut (dyn FnMut(&StoredRow) -> bool + Send),
    ) -> Result<(), StoreError> {
        dispatch!(self, reader => reader.select(tenant, selection, order, limit, sink).await)
    }

    /// `selection` with its range narrowed to the minutes in which the volume rollup holds rows
    /// of its services and levels, or `None` when the rollup holds none: a read of a stream that
    /// has nothing in the range reads no rows at all. The rollup is written in each batch's
    /// transaction, so every row a read could see is counted there; retention trims both alike.
    pub(crate) async fn narrow(
        &self,
        tenant: &str,
        selection: &Selection,
    ) -> Result<Option<Selection>, StoreError> {
        let held = dispatch!(self, reader => reader.held_minutes(tenant, selection).await)?;
        // A minute row keyed `m` counts the rows of `(m, m + 1 min]`; the stores keep
        // microseconds.
        Ok(held.map(|(first, last)| Selection {
            from: selection.from.max(first),
            to: selection
                .to
                .min(last + TimeDelta::minutes(1) + TimeDelta::microseconds(1)),
            ..selection.clone()
        }))
    }

    /// Streams the tenant's rows of `selection` to `sink`, counted per time window and label
    /// columns as `counting` says, until it returns false. Only for a selection whose line
    /// conditions the store checks all of ([`Reader::checks_lines`]): a counted row cannot be
    /// checked again.
    pub(crate) async fn count(
        &self,
        tenant: &str,
        selection: &Selection,
        counting: Counting,
        sink: &mut (dyn FnMut(CountedRow) -> bool + Send),
    ) -> Result<(), StoreError> {
        dispatch!(self, reader => reader.count(tenant, selection, counting, sink).await)
    }

    /// True when this store checks every line condition of `selection` itself; PostgreSQL leaves
    /// out a regular expression its engine would read differently, and neither decides whether
    /// a parser gives a label ([`LineCondition::MayGiveLabel`] only passes over rows).
    pub(crate) fn checks_lines(&self, selection: &Selection) -> bool {
        selection.lines.iter().all(|condition| match condition {
            LineCondition::Matches(pattern) | LineCondition::NotMatches(pattern) => {
                matches!(self, Self::Sqlite(_)) || pattern.postgres.is_some()
            }
            LineCondition::Contains(_)
            | LineCondition::NotContains(_)
            | LineCondition::ContainsAny(_) => true,
            LineCondition::MayGiveLabel { .. } => false,
        })
    }

    /// Streams the tenant's volume rollup over `selection` (its time range, services and
    /// severities) to `sink` until it returns false: per minute, service and severity, in that
    /// order, at most `max_rows` rows.
    pub async fn volume(
        &self,
        tenant: &str,
        selection: &Selection,
        max_rows: usize,
        sink: &mut (dyn FnMut(VolumeRow) -> bool + Send),
    ) -> Result<(), StoreError> {
        dispatch!(self, reader => reader.volume(tenant, selection, max_rows, sink).await)
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
        budget: PageSize,
    ) -> Result<(Vec<StoredRow>, bool), StoreError> {
        dispatch!(self, tail => tail.poll(tenant, filter, budget).await)
    }

    /// Ids remembered for de-duplication (0 on SQLite), which the caller caps.
    pub fn remembered(&self) -> usize {
        dispatch!(self, tail => tail.remembered())
    }
}

/// The operations of one retention run, which `retention` puts in order and decides the days of.
/// What a backend does not have (SQLite: partitions, BRIN indexes, other replicas) it skips,
/// reporting nothing done.
#[derive(Debug)]
pub enum RetentionSession {
    /// PostgreSQL: partitions, BRIN summaries, the default partition, an advisory lock.
    Postgres(PgRetention),
    /// SQLite: chunked deletes on the writer.
    Sqlite(SqliteRetention),
}

impl RetentionSession {
    /// Takes the retention lock unless another replica holds it; false when it does.
    pub async fn try_lock(&mut self) -> Result<bool, StoreError> {
        dispatch!(self, session => session.try_lock().await)
    }

    /// Releases the retention lock (closing the session releases it too).
    pub async fn unlock(&mut self) {
        dispatch!(self, session => session.unlock().await)
    }

    /// Creates the daily partitions of `first..=last` that do not exist; returns how many.
    pub async fn create_partitions(
        &mut self,
        first: NaiveDate,
        last: NaiveDate,
    ) -> Result<u64, StoreError> {
        dispatch!(self, session => session.create_partitions(first, last).await)
    }

    /// Summarizes the BRIN ranges that filled since the last summary in the partitions of `now`'s
    /// day, the day before and the default one; returns how many. Failures are logged, not
    /// returned: the next run tries again.
    pub async fn summarize_recent(&mut self, now: DateTime<Utc>) -> u64 {
        dispatch!(self, session => session.summarize_recent(now).await)
    }

    /// Drops every daily partition whose day ends at or before `cutoff`; returns how many.
    pub async fn drop_partitions_ending_by(
        &mut self,
        cutoff: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        dispatch!(self, session => session.drop_partitions_ending_by(cutoff).await)
    }

    /// Deletes the rows older than `horizon` that no dropped partition took with it, in chunks
    /// that let ingest in between; returns how many.
    pub async fn delete_before(&mut self, horizon: DateTime<Utc>) -> Result<u64, StoreError> {
        dispatch!(self, session => session.delete_before(horizon).await)
    }

    /// Deletes the volume rollup's minutes that ended before `horizon`, in chunks, each tenant
    /// through its index; returns how many rows.
    pub async fn delete_volume_before(
        &mut self,
        horizon: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        dispatch!(self, session => session.delete_volume_before(horizon).await)
    }

    /// Ends the session.
    pub async fn close(self) -> Result<(), StoreError> {
        dispatch!(self, session => session.close().await)
    }
}
