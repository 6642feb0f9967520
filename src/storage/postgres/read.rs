//! PostgreSQL reads: the read pool, and pages.
//!
//! **Pages.** `logs` has only BRIN indexes (on `ts` and `received_at`), which prune block ranges but
//! give no order; "the newest 100" over a whole table would read and sort every row. So a page is
//! looked for in time windows going back from its upper bound: 1 minute, then 8×, 64×… and, past a
//! few days, everything down to `from`. Each window is a BRIN-pruned scan plus a top-N sort, and
//! the work done is at most a few times what the page needs (`loghaul bench-query` times it; see
//! `docs/api.md`, "Reading logs").
//!
//! **Stopping.** Sessions run with `statement_timeout` a little above the service's read timeout
//! and, on PostgreSQL 14 and later, `client_connection_check_interval`. A read whose future is
//! dropped (its deadline passed, its client went away) closes its connection instead of returning
//! it to the pool, and the server stops the statement when it next checks the connection; the
//! statement timeout ends whatever the service lost track of, on any version.

use std::ops::{Deref, DerefMut};
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures::TryStreamExt;
use sqlx::error::BoxDynError;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{
    PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow, PgTypeInfo, PgValueFormat,
    PgValueRef,
};
use sqlx::{Decode, Postgres, QueryBuilder, Row, Type};

use super::copy::POSTGRES_EPOCH_MICROS;
use crate::model::cursor::Cursor;
use crate::model::filter::Filter;
use crate::storage::connect::redact_url;
use crate::storage::error::{unavailable, StoreError};
use crate::storage::stored::{from_micros, Collector, Page, PageSize, StoredRow};

/// First window a page is looked for in.
const FIRST_WINDOW: TimeDelta = TimeDelta::minutes(1);
/// Each empty-handed window is followed by one this many times longer.
const WINDOW_GROWTH: i32 = 8;
/// Past this window, the rest of the range is read in one go.
const MAX_WINDOW: TimeDelta = TimeDelta::days(4);

/// How far past the read timeout the server cancels a statement itself.
const STATEMENT_TIMEOUT_MARGIN: Duration = Duration::from_secs(1);
/// How often a backend running a read checks that its client is still connected (PostgreSQL 14+),
/// so a statement whose connection was closed stops within this.
const CONNECTION_CHECK_INTERVAL: &str = "1s";
/// First server version with `client_connection_check_interval`.
const CONNECTION_CHECK_SINCE: u32 = 140_000;
/// The sessions' `application_name`, so operators can tell reads apart in `pg_stat_activity`.
pub(crate) const APPLICATION_NAME: &str = "loghaul-reads";

/// The trace and span ids as hex text, from their bytes.
macro_rules! ids_from_bytes {
    () => {
        "encode(trace_id_bytes, 'hex'), encode(span_id_bytes, 'hex')"
    };
}

/// The trace and span ids as hex text, from their bytes or, in rows written before ids were
/// stored as bytes, from the text they were written as.
macro_rules! ids_from_bytes_or_text {
    () => {
        "coalesce(encode(trace_id_bytes, 'hex'), trace_id), coalesce(encode(span_id_bytes, 'hex'), span_id)"
    };
}

/// A read's select list and table, up to the tenant it is bound to, with `$ids` for the ids.
macro_rules! row_select {
    ($ids:expr) => {
        concat!(
            "SELECT id, ts, received_at, severity, service, message, labels::text AS labels, attributes::text AS attributes, ",
            $ids,
            " FROM logs WHERE tenant = "
        )
    };
}

/// The columns a database keeps trace and span ids in, which a reader asks once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum IdColumns {
    /// `trace_id_bytes` and `span_id_bytes`.
    Bytes,
    /// Those, and the hex text columns `trace_id` and `span_id` that a database upgraded with
    /// rows in it keeps for the rows written before ids were stored as bytes.
    BytesAndText,
}

impl IdColumns {
    async fn of(pool: &PgPool) -> Result<IdColumns, sqlx::Error> {
        let text: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_attribute \
             WHERE attrelid = 'logs'::regclass AND attname = 'trace_id' AND NOT attisdropped)",
        )
        .fetch_one(pool)
        .await?;
        Ok(if text {
            IdColumns::BytesAndText
        } else {
            IdColumns::Bytes
        })
    }

    /// A read's select list and table, decoded by [`decode`]; the tenant's bind follows.
    pub(super) fn select(self) -> &'static str {
        match self {
            IdColumns::Bytes => row_select!(ids_from_bytes!()),
            IdColumns::BytesAndText => row_select!(ids_from_bytes_or_text!()),
        }
    }

    /// The two ids as hex text, for a select list of rows grouped by [`IdColumns::group_by`].
    pub(super) fn as_hex(self) -> &'static str {
        match self {
            IdColumns::Bytes => ids_from_bytes!(),
            IdColumns::BytesAndText => ids_from_bytes_or_text!(),
        }
    }

    /// The columns to group by for rows of one pair of ids.
    pub(super) fn group_by(self) -> &'static str {
        match self {
            IdColumns::Bytes => "trace_id_bytes, span_id_bytes",
            IdColumns::BytesAndText => "trace_id_bytes, span_id_bytes, trace_id, span_id",
        }
    }
}

/// A PostgreSQL read pool.
#[derive(Clone, Debug)]
pub struct PgReader {
    pool: PgPool,
    /// Where the ids are, asked at connection: a server starts after its migrations.
    pub(super) ids: IdColumns,
}

pub(super) fn push_filter(builder: &mut QueryBuilder<'_, Postgres>, tenant: &str, filter: &Filter) {
    builder.push_bind(tenant.to_owned());
    if let Some(from) = filter.from {
        builder.push(" AND ts >= ").push_bind(from);
    }
    if let Some(to) = filter.to {
        builder.push(" AND ts < ").push_bind(to);
    }
    if !filter.services.is_empty() {
        builder
            .push(" AND service = ANY(")
            .push_bind(filter.services.clone())
            .push(")");
    }
    if filter.min_severity > 0 {
        builder
            .push(" AND severity >= ")
            .push_bind(filter.min_severity);
    }
    if let Some(text) = &filter.contains {
        builder
            .push(" AND strpos(message, ")
            .push_bind(text.clone())
            .push(") > 0");
    }
    if !filter.attributes.is_empty() {
        builder
            // A record's labels and attributes read as one map, its own attributes winning.
            .push(" AND (labels || attributes) @> ")
            .push_bind(filter.attributes_json())
            .push("::jsonb");
    }
}

/// A row of [`IdColumns::select`], read by position: looking each column up by its name is a
/// measurable share of a long scan, and so is checking each value's type against the Rust one,
/// which the select list fixes (a NULL where none may be is still an error).
pub(super) fn decode(row: PgRow) -> Result<StoredRow, sqlx::Error> {
    let PgTime(ts) = row.try_get_unchecked(1)?;
    let PgTime(received_at) = row.try_get_unchecked(2)?;
    Ok(StoredRow {
        id: row.try_get_unchecked(0)?,
        ts,
        received_at,
        severity: row.try_get_unchecked(3)?,
        service: row.try_get_unchecked(4)?,
        message: row.try_get_unchecked(5)?,
        labels: row.try_get_unchecked(6)?,
        attributes: row.try_get_unchecked(7)?,
        trace_id: row.try_get_unchecked(8)?,
        span_id: row.try_get_unchecked(9)?,
    })
}

/// A `timestamptz` read from its microseconds: the driver's own decoding goes through a
/// calendar date, which was a measurable share of a long scan.
pub(super) struct PgTime(pub(super) DateTime<Utc>);

impl Type<Postgres> for PgTime {
    fn type_info() -> PgTypeInfo {
        <DateTime<Utc> as Type<Postgres>>::type_info()
    }
}

impl<'r> Decode<'r, Postgres> for PgTime {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        if value.format() == PgValueFormat::Text {
            return <DateTime<Utc> as Decode<Postgres>>::decode(value).map(PgTime);
        }
        let micros = i64::from_be_bytes(value.as_bytes()?.try_into()?);
        Ok(PgTime(from_micros(
            micros.saturating_add(POSTGRES_EPOCH_MICROS),
        )))
    }
}

/// A read's connection. Dropped before [`ReadConnection::finish`], it is closed rather than
/// returned: a statement may still be running on it, and a returned connection would keep it
/// running (and the connection busy) until it ended.
pub(super) struct ReadConnection {
    conn: PoolConnection<Postgres>,
    finished: bool,
}

impl ReadConnection {
    /// Returns the connection to the pool; nothing is left running on it.
    pub(super) fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for ReadConnection {
    fn drop(&mut self) {
        if !self.finished {
            self.conn.close_on_drop();
        }
    }
}

impl Deref for ReadConnection {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.conn
    }
}

impl DerefMut for ReadConnection {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}

/// The settings of every read session, beside its statement timeout.
pub const READ_SETTINGS: [(&str, &str); 3] = [
    // Reads are small, index-pruned scans: compiling them (JIT) costs more than it saves, and the
    // planner's estimates over unsummarized BRIN ranges would switch it on.
    ("jit", "off"),
    // Each read planned for its own values, not by the plan a prepared statement falls back to
    // after five runs: that plan knows neither the time range nor the services, takes the read
    // for one over every partition, and starts parallel workers that cost more than the read.
    ("plan_cache_mode", "force_custom_plan"),
    // A sealed hour skips the chunk groups whose minimum and maximum rule out a condition, but by
    // default only for columns the statistics call correlated with its order. Sorted by tenant,
    // then service, the service's correlation falls under that bar once an hour holds two
    // tenants, and a read of one service would decompress every chunk group of its tenant's
    // hour. Testing a group's bounds costs nothing beside reading it: test them all. A server
    // without the extension keeps the setting as a placeholder.
    ("columnar.qual_pushdown_correlation_threshold", "0"),
];

impl PgReader {
    /// Opens the read pool; `timeout` is the service's limit on one read.
    pub(super) async fn connect(
        url: &str,
        max_connections: u32,
        timeout: Duration,
    ) -> Result<Self, StoreError> {
        let statement_timeout = (timeout + STATEMENT_TIMEOUT_MARGIN).as_millis().to_string();
        let options = PgConnectOptions::from_str(url)
            .map_err(|err| StoreError::Url(format!("{}: {err}", redact_url(url))))?
            .application_name(APPLICATION_NAME)
            .options(READ_SETTINGS)
            .options([("statement_timeout", statement_timeout.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(Duration::from_secs(5))
            // Set after connecting, not in the start-up options: older servers refuse the unknown
            // setting, which would refuse the connection.
            .after_connect(|conn, _| {
                Box::pin(async move {
                    if conn
                        .server_version_num()
                        .is_some_and(|version| version >= CONNECTION_CHECK_SINCE)
                    {
                        sqlx::query(&format!(
                            "SET client_connection_check_interval = '{CONNECTION_CHECK_INTERVAL}'"
                        ))
                        .execute(conn)
                        .await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await
            .map_err(|err| {
                StoreError::Unavailable(format!("cannot connect to {}: {err}", redact_url(url)))
            })?;
        let ids = IdColumns::of(&pool).await.map_err(unavailable)?;
        Ok(PgReader { pool, ids })
    }

    pub(super) async fn acquire(&self) -> Result<ReadConnection, StoreError> {
        let conn = self.pool.acquire().await.map_err(unavailable)?;
        Ok(ReadConnection {
            conn,
            finished: false,
        })
    }

    /// Gives `conn` back after a read that returned `batch`: closed when the batch was cut short,
    /// since rows it will not send may still be on their way, and closing stops the server from
    /// sending them (draining them could move hundreds of megabytes for nothing).
    pub(super) fn release(conn: ReadConnection, batch: &Page) {
        if !batch.cut_short {
            conn.finish();
        }
    }

    /// Streams the query's rows into `collector` until it is full.
    pub(super) async fn collect(
        conn: &mut PgConnection,
        mut builder: QueryBuilder<'_, Postgres>,
        collector: &mut Collector,
    ) -> Result<(), StoreError> {
        let mut rows = builder.build().fetch(conn);
        while let Some(row) = rows.try_next().await.map_err(unavailable)? {
            if !collector.offer(decode(row).map_err(unavailable)?) {
                break;
            }
        }
        Ok(())
    }

    pub(in crate::storage) async fn page(
        &self,
        tenant: &str,
        filter: &Filter,
        after: Option<Cursor>,
        budget: PageSize,
    ) -> Result<Page, StoreError> {
        // Rows strictly before `upper` in (ts, id) order; (t, i64::MIN) means "ts < t".
        let mut upper = after.map(|cursor| (from_micros(cursor.ts_micros), cursor.id));
        let mut anchor = match (upper, filter.to) {
            (Some((ts, _)), _) => ts,
            (None, Some(to)) => to.min(Utc::now()),
            (None, None) => Utc::now(),
        };
        let mut window = FIRST_WINDOW;
        let mut collector = Collector::new(budget);
        let mut conn = self.acquire().await?;
        loop {
            let mut lower = (window <= MAX_WINDOW)
                .then(|| anchor.checked_sub_signed(window))
                .flatten();
            let reaches_bottom = match (lower, filter.from) {
                (None, _) => true,
                (Some(at), Some(from)) if at <= from => {
                    lower = None;
                    true
                }
                _ => false,
            };
            let mut builder = QueryBuilder::new(self.ids.select());
            push_filter(&mut builder, tenant, filter);
            if let Some(lower) = lower {
                builder.push(" AND ts >= ").push_bind(lower);
            }
            if let Some((ts, id)) = upper {
                // The plain `ts <=` lets the BRIN index prune; the row comparison is the keyset.
                builder.push(" AND ts <= ").push_bind(ts);
                builder
                    .push(" AND (ts, id) < (")
                    .push_bind(ts)
                    .push(", ")
                    .push_bind(id)
                    .push(")");
            }
            builder
                .push(" ORDER BY ts DESC, id DESC LIMIT ")
                .push_bind(collector.rows_left() as i64);
            Self::collect(&mut conn, builder, &mut collector).await?;
            let Some(lower) = lower.filter(|_| !collector.is_done() && !reaches_bottom) else {
                let batch = collector.finish();
                Self::release(conn, &batch);
                return Ok(batch);
            };
            upper = Some((lower, i64::MIN));
            anchor = lower;
            window = window * WINDOW_GROWTH;
        }
    }

    pub(in crate::storage) async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(|err| StoreError::Unavailable(err.to_string()))
    }

    pub(in crate::storage) async fn close(&self) {
        self.pool.close().await;
    }
}
