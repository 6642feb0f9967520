//! PostgreSQL's side of LogQL reads: a [`Selection`] as SQL conditions (every value bound), rows
//! streamed in the order a query asks for, and the volume rollup summed per minute.
//!
//! Ordered reads look in time windows going away from where they start, as pages do (see
//! `read.rs`): `logs` has only BRIN indexes, so "the newest 100" of a day is found in the last
//! minutes without sorting the day.

use chrono::{DateTime, TimeDelta, Utc};
use futures::TryStreamExt;
use sqlx::{Postgres, QueryBuilder, Row};
use tracing::Instrument;

use super::label_match::{push_label_conditions, push_plain_test};
use super::logql_row;
use super::read::{IdColumns, PgReader, ReadConnection};
use super::streams::{cataloged_streams, CatalogedStreams};
use crate::model::selection::{
    CountedAttributes, Counting, LineCondition, Order, Pattern, Selection, TextCondition, VolumeRow,
};
use crate::storage::error::{unavailable, StoreError};
use crate::storage::row_batches::{self, RowSender};
use crate::storage::stored::decode_counted;
use crate::storage::volume::{decode_volume, minute_of};
use crate::storage::{CountedRow, StoredRow};

/// First window an ordered read looks in.
const FIRST_WINDOW: TimeDelta = TimeDelta::minutes(1);
/// Each window is this many times longer than the one before.
const WINDOW_GROWTH: i32 = 8;

/// The stream's `level` label on `logs` (the empty text without one).
const LOGS_LEVEL: &str = "coalesce(labels ->> 'level', '')";
/// The same on `log_volume`.
const VOLUME_LEVEL: &str = "level";

/// ` AND column …` for a condition on a text column (or expression); a regular expression
/// PostgreSQL would read differently is left to the engine.
fn push_text(builder: &mut QueryBuilder<'_, Postgres>, column: &str, condition: &TextCondition) {
    match condition {
        TextCondition::Eq(text) => {
            builder.push(" AND ").push(column).push(" = ");
            builder.push_bind(text.clone());
        }
        TextCondition::Ne(text) => {
            builder.push(" AND ").push(column).push(" <> ");
            builder.push_bind(text.clone());
        }
        TextCondition::Matches(pattern) => push_regex(builder, column, pattern, false),
        TextCondition::NotMatches(pattern) => push_regex(builder, column, pattern, true),
    }
}

/// The conditions of `selection` other than its time range, on `logs` or `log_volume` (which
/// share the service column, and keep the `level` label in `level_column`; a volume selection
/// has no label or line condition). With `cataloged`, the streams the catalog found for its
/// labels stand for its label conditions.
fn push_conditions(
    builder: &mut QueryBuilder<'_, Postgres>,
    selection: &Selection,
    level_column: &str,
    cataloged: Option<&CatalogedStreams>,
) {
    push_stream_conditions(builder, selection, level_column);
    match cataloged {
        // A row of one of those streams: its service, which a past hour's btree and a sealed
        // hour's chunk groups find, and its label set, a comparison where a pattern would run a
        // regular expression on each row.
        Some(streams) => {
            builder
                .push(" AND service = ANY(")
                .push_bind(streams.services.clone())
                .push(") AND labels = ANY(")
                .push_bind(streams.labels.clone())
                .push("::jsonb[])");
        }
        None => push_label_conditions(builder, selection),
    }
    for condition in &selection.lines {
        match condition {
            LineCondition::Contains(text) => push_contains(builder, text, "> 0"),
            LineCondition::NotContains(text) => push_contains(builder, text, "= 0"),
            LineCondition::ContainsAny(texts) => push_contains_any(builder, texts),
            LineCondition::Matches(pattern) => push_regex(builder, "message", pattern, false),
            LineCondition::NotMatches(pattern) => push_regex(builder, "message", pattern, true),
            LineCondition::MayGiveLabel { name, json_only } => {
                push_may_give_label(builder, name, *json_only)
            }
        }
    }
}

/// ` AND (strpos(message, '{') > 0 AND (strpos(message, name) > 0 OR strpos(message, '\') > 0)
/// OR labels ? name OR attributes ? name)`, the `{` only where `| json` is the only parser: see
/// [`LineCondition::MayGiveLabel`]. A label set's keys are its label names, and a metadata key
/// without `_` is its label's name.
fn push_may_give_label(builder: &mut QueryBuilder<'_, Postgres>, name: &str, json_only: bool) {
    builder.push(" AND (");
    if json_only {
        builder.push("strpos(message, '{') > 0 AND ");
    }
    builder
        .push("(strpos(message, ")
        .push_bind(name.to_owned())
        .push(") > 0 OR strpos(message, ")
        .push_bind("\\")
        .push(") > 0) OR jsonb_exists(labels, ")
        .push_bind(name.to_owned())
        .push(") OR jsonb_exists(attributes, ")
        .push_bind(name.to_owned())
        .push("))");
}

/// The conditions of `selection` on what the volume rollup also has columns for: its services,
/// and its levels in `level_column`.
fn push_stream_conditions(
    builder: &mut QueryBuilder<'_, Postgres>,
    selection: &Selection,
    level_column: &str,
) {
    for condition in &selection.services {
        push_text(builder, "service", condition);
    }
    for condition in &selection.levels {
        push_text(builder, level_column, condition);
    }
}

/// ` AND column = ANY(literals)` (`<> ALL`) for literal alternatives, which a past hour's index
/// of services answers, and `<> ''` or nothing for `.+` and `.*`; else ` AND (column || '') ~
/// pattern` (`!~`, `~*`, `!~*`), when PostgreSQL reads the pattern as the engine does; else
/// nothing, and the engine alone checks it.
///
/// PostgreSQL prices `~` as one operator, as it does `=`, and of conditions priced alike it checks
/// the equalities it derives (`tenant = …`, `service = …`) last: a bare regex would run on every
/// row of the time range, every tenant's. Appending `''` prices it as two operators, so it runs
/// after them, on the rows they keep.
fn push_regex(
    builder: &mut QueryBuilder<'_, Postgres>,
    column: &str,
    pattern: &Pattern,
    negated: bool,
) {
    if let Some(test) = pattern.plain_test(negated) {
        push_plain_test(builder, test, |builder| {
            builder.push(column);
        });
        return;
    }
    let Some(pg) = &pattern.postgres else { return };
    let operator = match (negated, pg.case_insensitive) {
        (false, false) => " ~ ",
        (false, true) => " ~* ",
        (true, false) => " !~ ",
        (true, true) => " !~* ",
    };
    builder
        .push(" AND (")
        .push(column)
        .push(" || '')")
        .push(operator)
        .push_bind(pg.expression.clone());
}

/// ` AND strpos(message, text) <test>`: whether the message holds `text`.
fn push_contains(builder: &mut QueryBuilder<'_, Postgres>, text: &str, test: &str) {
    builder
        .push(" AND strpos(message, ")
        .push_bind(text.to_owned())
        .push(") ")
        .push(test);
}

/// ` AND (strpos(message, a) > 0 OR …)`: whether the message holds one of `texts`.
fn push_contains_any(builder: &mut QueryBuilder<'_, Postgres>, texts: &[String]) {
    builder.push(" AND (");
    for (at, text) in texts.iter().enumerate() {
        if at > 0 {
            builder.push(" OR ");
        }
        builder
            .push("strpos(message, ")
            .push_bind(text.clone())
            .push(") > 0");
    }
    builder.push(")");
}

impl PgReader {
    /// Streams the rows of `selection` in `order` to `sink` until it returns false; at most
    /// `limit` when every condition of the query is in the selection. The rows are fetched and
    /// decoded by a task of their own, while `sink` runs (`storage/row_batches.rs`).
    pub(in crate::storage) async fn select(
        &self,
        tenant: &str,
        selection: &Selection,
        order: Order,
        limit: Option<usize>,
        sink: &mut (dyn FnMut(&StoredRow) -> bool + Send),
    ) -> Result<(), StoreError> {
        let conn = self.acquire().await?;
        let (sender, mut batches) = row_batches::channel();
        let reading = tokio::spawn(
            Self::read_windows(
                conn,
                self.ids,
                tenant.to_owned(),
                selection.clone(),
                (order, limit),
                sender,
            )
            .in_current_span(),
        );
        row_batches::deliver(&mut batches, sink).await;
        drop(batches);
        match reading.await {
            Ok(result) => result,
            Err(join) => Err(StoreError::Unavailable(format!(
                "the read's task failed: {join}"
            ))),
        }
    }

    /// [`PgReader::select`]'s reading half: the rows to `sender`, window after window, until they
    /// end or its consumer is gone.
    async fn read_windows(
        mut conn: ReadConnection,
        ids: IdColumns,
        tenant: String,
        selection: Selection,
        (order, limit): (Order, Option<usize>),
        mut sender: RowSender,
    ) -> Result<(), StoreError> {
        let (tenant, selection) = (tenant.as_str(), &selection);
        let cataloged = cataloged_streams(&mut conn, tenant, selection)
            .await
            .map_err(unavailable)?;
        if cataloged.as_ref().is_some_and(CatalogedStreams::is_empty) {
            conn.finish();
            sender.finish().await;
            return Ok(());
        }
        let mut left = limit;
        let (mut low, mut high) = match order {
            Order::Newest => (
                selection
                    .to
                    .checked_sub_signed(FIRST_WINDOW)
                    .unwrap_or(selection.from)
                    .max(selection.from),
                selection.to,
            ),
            Order::Oldest => (
                selection.from,
                selection
                    .from
                    .checked_add_signed(FIRST_WINDOW)
                    .unwrap_or(selection.to)
                    .min(selection.to),
            ),
            Order::Any => (selection.from, selection.to),
        };
        let mut window = FIRST_WINDOW;
        loop {
            let mut builder = QueryBuilder::new(ids.logql_select());
            builder.push_bind(tenant.to_owned());
            builder.push(" AND ts >= ").push_bind(low);
            builder.push(" AND ts < ").push_bind(high);
            push_conditions(&mut builder, selection, LOGS_LEVEL, cataloged.as_ref());
            match order {
                Order::Newest => builder.push(" ORDER BY ts DESC, id DESC"),
                Order::Oldest => builder.push(" ORDER BY ts, id"),
                Order::Any => &mut builder,
            };
            if let Some(left) = left {
                builder.push(" LIMIT ").push_bind(left as i64);
            }
            let mut rows = builder.build().fetch(&mut *conn);
            loop {
                let next = tokio::select! {
                    // Rows first: the consumer's end is only watched (a waiter registered under
                    // a lock) while the next row is not there yet, not once per row.
                    biased;
                    next = rows.try_next() => next.map_err(unavailable)?,
                    // The consumer is gone (its deadline, its client): so is the statement.
                    () = sender.closed() => return Ok(()),
                };
                let Some(row) = next else { break };
                left = left.map(|n| n - 1);
                // Stopped with rows still coming: the connection is closed, not drained.
                let mut stored = sender.spare();
                logql_row::decode_into(&row, ids, &mut stored).map_err(unavailable)?;
                if !sender.push(stored).await {
                    return Ok(());
                }
            }
            drop(rows);
            let done = left == Some(0)
                || match order {
                    Order::Newest => low <= selection.from,
                    Order::Oldest => high >= selection.to,
                    Order::Any => true,
                };
            if done {
                conn.finish();
                sender.finish().await;
                return Ok(());
            }
            window = window.checked_mul(WINDOW_GROWTH).unwrap_or(TimeDelta::MAX);
            (low, high) = match order {
                Order::Newest => (step_back(low, window).max(selection.from), low),
                _ => (high, step_forward(high, window).min(selection.to)),
            };
        }
    }

    /// Streams the rows of `selection` counted per window of `counting` and label columns to
    /// `sink` until it returns false, in no order.
    pub(in crate::storage) async fn count(
        &self,
        tenant: &str,
        selection: &Selection,
        counting: Counting,
        sink: &mut (dyn FnMut(CountedRow) -> bool + Send),
    ) -> Result<(), StoreError> {
        let mut conn = self.acquire().await?;
        let cataloged = cataloged_streams(&mut conn, tenant, selection)
            .await
            .map_err(unavailable)?;
        if cataloged.as_ref().is_some_and(CatalogedStreams::is_empty) {
            conn.finish();
            return Ok(());
        }
        let width = TimeDelta::microseconds(counting.width_micros);
        let origin = DateTime::from_timestamp_micros(counting.origin_micros)
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        // `date_bin` puts a time in `[start, start + width)`; a window is `(end − width, end]`,
        // which is the same, one microsecond (the stored resolution) earlier.
        let mut builder = QueryBuilder::new("SELECT date_bin(");
        builder
            .push_bind(counting.width_micros)
            .push(" * interval '1 microsecond', ts - interval '1 microsecond', ")
            .push_bind(origin)
            .push(") AS slot, service, labels::text AS labels, ");
        builder.push(if counting.severity {
            "severity"
        } else {
            "0::int2"
        });
        match &counting.attributes {
            CountedAttributes::None => {
                builder.push(", '{}'::text");
            }
            CountedAttributes::Only(keys) => {
                // `?|` passes over the rows without any of the keys before an object is made.
                builder
                    .push(", CASE WHEN attributes ?| ")
                    .push_bind(keys.clone())
                    .push("::text[] THEN jsonb_strip_nulls(jsonb_build_object(");
                for (n, key) in keys.iter().enumerate() {
                    if n > 0 {
                        builder.push(", ");
                    }
                    builder
                        .push_bind(key.clone())
                        .push("::text, attributes -> ")
                        .push_bind(key.clone())
                        .push("::text");
                }
                builder.push("))::text ELSE '{}' END");
            }
            CountedAttributes::All => {
                builder.push(", attributes::text");
            }
        }
        if counting.trace {
            builder.push(", ").push(self.ids.as_hex());
        } else {
            builder.push(", NULL::text, NULL::text");
        }
        builder.push(
            ", count(*)::int8 AS lines, sum(octet_length(message))::int8 AS bytes FROM logs WHERE tenant = ",
        );
        builder.push_bind(tenant.to_owned());
        builder.push(" AND ts >= ").push_bind(selection.from);
        builder.push(" AND ts < ").push_bind(selection.to);
        push_conditions(&mut builder, selection, LOGS_LEVEL, cataloged.as_ref());
        // By the stored jsonb: each group's text is made once, not once per row.
        builder.push(" GROUP BY 1, service, logs.labels, 4");
        builder.push(match counting.attributes {
            CountedAttributes::None => "",
            CountedAttributes::Only(_) => ", 5",
            CountedAttributes::All => ", logs.attributes",
        });
        if counting.trace {
            builder.push(", ").push(self.ids.group_by());
        }
        // An hour not analyzed yet (autovacuum looks once a minute, if it is on) has no
        // statistics, and the planner, taking its groups for a handful, sorts the rows to group
        // them, spilling to disk. The groups are always far fewer than the rows: a hash table
        // groups them in one pass. The setting is undone below, or the connection closed.
        sqlx::query("SET enable_sort = off")
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        let mut rows = builder.build().fetch(&mut *conn);
        while let Some(row) = rows.try_next().await.map_err(unavailable)? {
            // Stopped with rows still coming: the connection is closed, not drained.
            let start: DateTime<Utc> = row.try_get(0).map_err(unavailable)?;
            let counted = decode_counted(&row, start + width).map_err(unavailable)?;
            if !sink(counted) {
                return Ok(());
            }
        }
        drop(rows);
        sqlx::query("RESET enable_sort")
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        conn.finish();
        Ok(())
    }

    /// The first and last minute of `selection`'s range in which the volume rollup holds rows of
    /// its services and levels (its other conditions are not the rollup's), or `None` when it
    /// holds none. One aggregate over the tenant's rollup rows, which Citus runs on the tenant's
    /// shard as it is (it refuses a subquery in the select list).
    pub(in crate::storage) async fn held_minutes(
        &self,
        tenant: &str,
        selection: &Selection,
    ) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>, StoreError> {
        let mut builder =
            QueryBuilder::new("SELECT min(minute), max(minute) FROM log_volume WHERE tenant = ");
        builder.push_bind(tenant.to_owned());
        // The minute that counts a row stamped `from` and every later one: a row on a minute's
        // boundary is counted by the minute before it.
        let first =
            DateTime::from_timestamp(minute_of(selection.from), 0).unwrap_or(selection.from);
        builder.push(" AND minute >= ").push_bind(first);
        builder.push(" AND minute < ").push_bind(selection.to);
        push_stream_conditions(&mut builder, selection, VOLUME_LEVEL);
        let mut conn = self.acquire().await?;
        let (first, last): (Option<DateTime<Utc>>, Option<DateTime<Utc>>) = builder
            .build_query_as()
            .fetch_one(&mut *conn)
            .await
            .map_err(unavailable)?;
        conn.finish();
        Ok(first.zip(last))
    }

    /// Streams the rollup's rows of `selection` (its services and levels), summed over writers,
    /// to `sink` until it returns false, in (minute, service, severity, level) order, at most
    /// `max_rows`.
    pub(in crate::storage) async fn volume(
        &self,
        tenant: &str,
        selection: &Selection,
        max_rows: usize,
        sink: &mut (dyn FnMut(VolumeRow) -> bool + Send),
    ) -> Result<(), StoreError> {
        let mut builder = QueryBuilder::new(
            "SELECT extract(epoch FROM minute)::int8 AS minute, service, severity, level, \
             sum(records)::int8 AS records, sum(bytes)::int8 AS bytes \
             FROM log_volume WHERE tenant = ",
        );
        builder.push_bind(tenant.to_owned());
        builder
            .push(" AND minute >= ")
            .push_bind(minute_floor(selection.from));
        builder.push(" AND minute < ").push_bind(selection.to);
        push_conditions(&mut builder, selection, VOLUME_LEVEL, None);
        builder
            .push(" GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4 LIMIT ")
            .push_bind(max_rows as i64);
        let mut conn = self.acquire().await?;
        let mut rows = builder.build().fetch(&mut *conn);
        while let Some(row) = rows.try_next().await.map_err(unavailable)? {
            // Stopped with rows still coming: the connection is closed, not drained.
            if !sink(decode_volume(&row).map_err(unavailable)?) {
                return Ok(());
            }
        }
        drop(rows);
        conn.finish();
        Ok(())
    }
}

fn step_back(at: DateTime<Utc>, by: TimeDelta) -> DateTime<Utc> {
    at.checked_sub_signed(by)
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

fn step_forward(at: DateTime<Utc>, by: TimeDelta) -> DateTime<Utc> {
    at.checked_add_signed(by)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The start of the minute `at` is in: the rollup row that holds it.
fn minute_floor(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(at.timestamp().div_euclid(60) * 60, 0).unwrap_or(at)
}
