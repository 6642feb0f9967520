//! PostgreSQL tails.
//!
//! Ids come from a sequence with `CACHE 1000`, so each connection hands out its own block
//! of ids: they are not commit-ordered, and an id watermark would skip rows committed late by
//! another connection or replica. `received_at` (the inserting transaction's start time) is not
//! commit-ordered either, but it trails the commit by at most the length of the insert
//! transaction. So each poll re-reads a window of `TAIL_OVERLAP` before the newest `received_at`
//! already sent and drops ids it already sent: a row is missed only if its insert transaction took
//! longer than `TAIL_OVERLAP` from start to commit (inserts are single statements of one batch;
//! retention DDL waits at most its `lock_timeout`, 1 s, so ingest never queues longer than that
//! behind it). Memory per subscriber is the ids sent within the overlap window, capped.
//!
//! A poll first asks the volume rollup which minutes of `ts` received rows in its window (the
//! rollup's rows are written in the batch's transaction and stamped with the same
//! `received_at`), and bounds its scan by the oldest and newest: a late row with an old timestamp
//! widens the bounds to its minute, and a poll with nothing new reads no partition at all.

use std::collections::HashMap;

use chrono::{DateTime, TimeDelta, Utc};
use sqlx::postgres::PgConnection;
use sqlx::QueryBuilder;

use super::read::{push_filter, PgReader};
use crate::model::cursor::Cursor;
use crate::model::filter::Filter;
use crate::storage::error::{unavailable, StoreError};
use crate::storage::stored::{from_micros, Collector, PageSize, StoredRow};

/// How far behind the newest `received_at` sent a tail poll looks again; see the module docs.
pub(crate) const TAIL_OVERLAP: TimeDelta = TimeDelta::seconds(3);

/// A PostgreSQL tail: its read pool and where it stands.
#[derive(Debug)]
pub struct PgTail {
    reader: PgReader,
    /// Nothing at or before (received_at, id) = floor is ever sent.
    floor: (i64, i64),
    /// The newest received_at sent (or the floor).
    high: i64,
    /// Ids sent within the overlap window, with their received_at.
    seen: HashMap<i64, i64>,
    /// Where to continue when the last poll hit its limit.
    resume: Option<(i64, i64)>,
}

/// The database's clock, which stamps received_at, not ours.
async fn db_now(conn: &mut PgConnection) -> Result<DateTime<Utc>, StoreError> {
    sqlx::query_scalar("SELECT now()")
        .fetch_one(conn)
        .await
        .map_err(unavailable)
}

/// The oldest and newest minutes of `ts` the tenant received rows for since `from`, from the
/// volume rollup, which every batch updates in its own transaction: a poll reads only the
/// partitions of those minutes and between, not all of them (a day has 24, each planned and
/// opened by a scan of `logs` not bounded on `ts`). `None` when nothing was received since.
async fn minutes_received(
    conn: &mut PgConnection,
    tenant: &str,
    from: DateTime<Utc>,
) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>, StoreError> {
    let (oldest, newest): (Option<DateTime<Utc>>, Option<DateTime<Utc>>) = sqlx::query_as(
        "SELECT min(minute), max(minute) FROM log_volume WHERE tenant = $1 AND received_at >= $2",
    )
    .bind(tenant)
    .bind(from)
    .fetch_one(conn)
    .await
    .map_err(unavailable)?;
    Ok(oldest.zip(newest))
}

impl PgReader {
    /// A tail after the cursor's record, or from the database's now.
    pub(in crate::storage) async fn tail(
        &self,
        after: Option<Cursor>,
    ) -> Result<PgTail, StoreError> {
        let floor = match after {
            Some(cursor) => (cursor.received_micros, cursor.id),
            None => {
                let mut conn = self.acquire().await?;
                let now = db_now(&mut conn).await?;
                conn.finish();
                (now.timestamp_micros(), i64::MAX)
            }
        };
        Ok(PgTail {
            reader: self.clone(),
            floor,
            high: floor.0,
            seen: HashMap::new(),
            resume: None,
        })
    }
}

impl PgTail {
    /// Ids remembered for de-duplication: the records sent within the overlap window.
    pub(in crate::storage) fn remembered(&self) -> usize {
        self.seen.len()
    }

    pub(in crate::storage) async fn poll(
        &mut self,
        tenant: &str,
        filter: &Filter,
        budget: PageSize,
    ) -> Result<(Vec<StoredRow>, bool), StoreError> {
        let overlap = TAIL_OVERLAP.num_microseconds().expect("a few seconds");
        // The database's time before a fresh scan: once the scan has read everything, the
        // watermark may move up to it even when nothing matched, so polls do not rescan more and
        // more of the table.
        let mut conn = self.reader.acquire().await?;
        let scan_started = match self.resume {
            Some(_) => None,
            None => Some(db_now(&mut conn).await?.timestamp_micros()),
        };
        let (from_received, from_id) = self.resume.unwrap_or_else(|| {
            let lower = self.high - overlap;
            if lower <= self.floor.0 {
                self.floor
            } else {
                (lower, i64::MIN)
            }
        });
        let from_time = from_micros(from_received);
        let Some((oldest, newest)) = minutes_received(&mut conn, tenant, from_time).await? else {
            // Nothing was received since: no scan at all.
            conn.finish();
            if let Some(started) = scan_started {
                self.high = self.high.max(started);
            }
            return Ok((Vec::new(), false));
        };
        let mut builder = QueryBuilder::new(self.reader.ids.select());
        push_filter(&mut builder, tenant, filter);
        builder
            .push(" AND ts >= ")
            .push_bind(oldest)
            .push(" AND ts < ")
            .push_bind(newest + TimeDelta::minutes(1));
        builder.push(" AND received_at >= ").push_bind(from_time);
        builder
            .push(" AND (received_at, id) > (")
            .push_bind(from_time)
            .push(", ")
            .push_bind(from_id)
            .push(") ORDER BY received_at, id LIMIT ")
            .push_bind(budget.rows as i64);
        let mut collector = Collector::new(budget);
        PgReader::collect(&mut conn, builder, &mut collector).await?;
        let more = collector.is_done();
        let batch = collector.finish();
        PgReader::release(conn, &batch);
        let rows = batch.rows;
        self.resume = rows
            .last()
            .filter(|_| more)
            .map(|row| (row.received_at.timestamp_micros(), row.id));
        let mut fresh = Vec::with_capacity(rows.len());
        for row in rows {
            let received = row.received_at.timestamp_micros();
            if self.seen.insert(row.id, received).is_none() {
                self.high = self.high.max(received);
                fresh.push(row);
            }
        }
        if let (Some(started), false) = (scan_started, more) {
            self.high = self.high.max(started);
        }
        let keep_from = self.high - overlap;
        self.seen.retain(|_, received| *received >= keep_from);
        Ok((fresh, more))
    }
}
