//! SQLite reads, on read-only connections of their own: in WAL mode they read a consistent
//! snapshot while the single writer connection keeps writing.
//!
//! Pages walk the `(tenant, ts, service)` index backwards (the rowid id is the last key of every
//! index entry, so `ORDER BY ts DESC, id DESC` sorts only rows of the same `ts`, a few at a time).
//!
//! **Stopping.** sqlx runs a statement on a thread of its own and, when the future is dropped,
//! goes on stepping it until it has a row to hand over: a scan that matches nothing would run to
//! the end of the table, holding its snapshot (and so the WAL, which cannot be checkpointed past
//! it). So every read installs a progress handler that interrupts the statement once its
//! connection guard is dropped, whatever dropped it: the read's deadline, or its client leaving.

use std::ops::{Deref, DerefMut};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqlitePool, SqlitePoolOptions, SqliteRow,
};
use sqlx::{QueryBuilder, Row, Sqlite};

use crate::model::cursor::Cursor;
use crate::model::filter::Filter;
use crate::storage::error::{unavailable, StoreError};
use crate::storage::stored::{from_micros, Collector, Page, PageSize, StoredRow};

/// How long a read waits for a second connection ([`SqliteReader::spare`]) before it reads
/// alone: opening one takes milliseconds, and a pool whose connections are all busy has none to
/// spare anyway.
const SPARE_WAIT: Duration = Duration::from_millis(100);

/// Virtual-machine steps between checks of the stop flag: a check is one atomic load, and this
/// many steps take well under a millisecond.
const PROGRESS_STEPS: i32 = 1000;
/// Longest wait for a lock; a read waiting longer than its deadline is stopped anyway.
const MAX_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) const COLUMNS: &str = "SELECT id, ts, received_at, severity, service, message, labels, attributes, trace_id, span_id FROM logs WHERE tenant = ";

/// A pool of read-only SQLite connections.
#[derive(Clone, Debug)]
pub struct SqliteReader {
    pool: SqlitePool,
}

pub(super) fn push_filter(builder: &mut QueryBuilder<'_, Sqlite>, tenant: &str, filter: &Filter) {
    builder.push_bind(tenant.to_owned());
    if let Some(from) = filter.from {
        builder
            .push(" AND ts >= ")
            .push_bind(from.timestamp_micros());
    }
    if let Some(to) = filter.to {
        builder.push(" AND ts < ").push_bind(to.timestamp_micros());
    }
    if !filter.services.is_empty() {
        builder.push(" AND service IN (");
        let mut services = builder.separated(", ");
        for service in &filter.services {
            services.push_bind(service.clone());
        }
        builder.push(")");
    }
    if filter.min_severity > 0 {
        builder
            .push(" AND severity >= ")
            .push_bind(filter.min_severity);
    }
    if let Some(text) = &filter.contains {
        builder
            .push(" AND instr(message, ")
            .push_bind(text.clone())
            .push(") > 0");
    }
    for (key, value) in &filter.attributes {
        builder
            // A record's labels and attributes read as one map, its own attributes winning.
            .push(" AND EXISTS (SELECT 1 FROM json_each(json_patch(logs.labels, logs.attributes)) WHERE json_each.key = ")
            .push_bind(key.clone())
            .push(" AND json_each.value = ")
            .push_bind(value.clone())
            .push(")");
    }
}

/// A read's connection; dropping it interrupts whatever statement still runs on it.
pub(super) struct ReadConnection {
    conn: PoolConnection<Sqlite>,
    stop: Arc<AtomicBool>,
}

impl ReadConnection {
    /// The flag that stops this read's statement once set.
    pub(super) fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }
}

impl Drop for ReadConnection {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Deref for ReadConnection {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        &self.conn
    }
}

impl DerefMut for ReadConnection {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.conn
    }
}

/// A row of [`COLUMNS`], read by position: looking each column up by its name is a measurable
/// share of a long scan.
pub(super) fn decode(row: SqliteRow) -> Result<StoredRow, sqlx::Error> {
    Ok(StoredRow {
        id: row.try_get(0)?,
        ts: from_micros(row.try_get(1)?),
        received_at: from_micros(row.try_get(2)?),
        severity: row.try_get(3)?,
        service: row.try_get(4)?,
        message: row.try_get(5)?,
        labels: row.try_get(6)?,
        attributes: row.try_get(7)?,
        trace_id: row.try_get(8)?,
        span_id: row.try_get(9)?,
    })
}

impl SqliteReader {
    /// Opens read-only connections to an existing database; `timeout` is the service's limit on
    /// one read.
    pub(super) async fn connect(
        url: &str,
        max_connections: u32,
        timeout: Duration,
    ) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|err| StoreError::Url(format!("{url}: {err}")))?
            .read_only(true)
            // LogQL's regular expressions, with Rust's engine (the one the query engine uses).
            .with_regexp()
            .busy_timeout(timeout.min(MAX_BUSY_TIMEOUT));
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options)
            .await
            .map_err(|err| StoreError::Unavailable(format!("cannot open {url}: {err}")))?;
        Ok(SqliteReader { pool })
    }

    /// A connection whose statements stop when it is dropped. The handler is installed on every
    /// acquisition, with a flag of its own, so a connection never carries an earlier read's.
    pub(super) async fn acquire(&self) -> Result<ReadConnection, StoreError> {
        let conn = self.pool.acquire().await.map_err(unavailable)?;
        Self::guarded(conn).await
    }

    /// A connection for a read's second reader, which the read can do without: one only while
    /// another stays free (idle, or room for a new one), so that a read of another tenant
    /// never waits for a second reader.
    pub(super) async fn spare(&self) -> Option<ReadConnection> {
        let room = self
            .pool
            .options()
            .get_max_connections()
            .saturating_sub(self.pool.size());
        if room as usize + self.pool.num_idle() < 2 {
            return None;
        }
        let conn = tokio::time::timeout(SPARE_WAIT, self.pool.acquire())
            .await
            .ok()?
            .ok()?;
        Self::guarded(conn).await.ok()
    }

    /// `conn`, its statements stopped by its read's flag.
    async fn guarded(mut conn: PoolConnection<Sqlite>) -> Result<ReadConnection, StoreError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        conn.lock_handle()
            .await
            .map_err(unavailable)?
            .set_progress_handler(PROGRESS_STEPS, move || !flag.load(Ordering::Relaxed));
        Ok(ReadConnection { conn, stop })
    }

    /// Streams the query's rows within `budget`; dropping the stream stops the statement.
    pub(super) async fn collect(
        conn: &mut SqliteConnection,
        mut builder: QueryBuilder<'_, Sqlite>,
        budget: PageSize,
    ) -> Result<Page, StoreError> {
        let mut collector = Collector::new(budget);
        let mut rows = builder.build().fetch(conn);
        while let Some(row) = rows.try_next().await.map_err(unavailable)? {
            if !collector.offer(decode(row).map_err(unavailable)?) {
                break;
            }
        }
        Ok(collector.finish())
    }

    pub(in crate::storage) async fn page(
        &self,
        tenant: &str,
        filter: &Filter,
        after: Option<Cursor>,
        budget: PageSize,
    ) -> Result<Page, StoreError> {
        let mut builder = QueryBuilder::new(COLUMNS);
        push_filter(&mut builder, tenant, filter);
        if let Some(cursor) = after {
            builder
                .push(" AND ts <= ")
                .push_bind(cursor.ts_micros)
                .push(" AND (ts < ")
                .push_bind(cursor.ts_micros)
                .push(" OR id < ")
                .push_bind(cursor.id)
                .push(")");
        }
        builder
            .push(" ORDER BY ts DESC, id DESC LIMIT ")
            .push_bind(budget.rows as i64);
        Self::collect(&mut *self.acquire().await?, builder, budget).await
    }

    pub(in crate::storage) async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(unavailable)
    }

    pub(in crate::storage) async fn close(&self) {
        self.pool.close().await;
    }
}

/// A reader of one connection on a new, empty database in WAL mode, which lives as long as the
/// directory returned with it.
#[cfg(test)]
pub(super) async fn one_connection_reader() -> (tempfile::TempDir, SqliteReader) {
    reader_of(1).await
}

/// The same, of `connections` connections.
#[cfg(test)]
pub(super) async fn reader_of(connections: u32) -> (tempfile::TempDir, SqliteReader) {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("reads.db").display());
    let mut writer = SqliteConnection::connect(&format!("{url}?mode=rwc"))
        .await
        .unwrap();
    sqlx::query("PRAGMA journal_mode = WAL")
        .execute(&mut writer)
        .await
        .unwrap();
    let reader = SqliteReader::connect(&url, connections, Duration::from_secs(5))
        .await
        .unwrap();
    (dir, reader)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_abandoned_statement_is_interrupted_and_frees_its_connection() {
        let (_dir, reader) = one_connection_reader().await;
        // Never ends, and never has a row to hand over.
        let endless = async {
            let mut conn = reader.acquire().await?;
            sqlx::query_scalar::<_, i64>(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n",
            )
            .fetch_one(&mut *conn)
            .await
            .map_err(unavailable)
        };
        let abandoned = tokio::time::timeout(Duration::from_millis(50), endless).await;
        assert!(abandoned.is_err(), "the endless statement was abandoned");
        // The only connection is free again: the statement stopped.
        let next = tokio::time::timeout(Duration::from_secs(4), async {
            let mut conn = reader.acquire().await?;
            sqlx::query_scalar::<_, i64>("SELECT 1")
                .fetch_one(&mut *conn)
                .await
                .map_err(unavailable)
        })
        .await
        .expect("the connection is free within 4 s");
        assert_eq!(next.unwrap(), 1);
        reader.close().await;
    }
}
