//! SQLite's side of LogQL reads: a [`Selection`] as SQL conditions (every value bound; regular
//! expressions through `REGEXP`, which runs Rust's engine, the query's own), rows streamed in the
//! order a query asks for along the `(tenant, ts, service)` index (in batches, `batched_rows.rs`), and the
//! volume rollup per minute.

use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use sqlx::Row;

use super::batched_rows::each_row;
use super::label_match::{push_label_matches, push_plain_test};
use super::read::{SqliteReader, COLUMNS};
use super::statement::{Bind, Statement};
use super::streams::push_cataloged_services;
use crate::model::selection::{
    CountedAttributes, Counting, LineCondition, Order, Pattern, Selection, TextCondition, VolumeRow,
};
use crate::storage::error::{unavailable, StoreError};
use crate::storage::stored::{decode_counted, from_micros};
use crate::storage::volume::{decode_volume, minute_of};
use crate::storage::{CountedRow, StoredRow};

/// The stream's `level` label on `logs` (the empty text without one).
const LOGS_LEVEL: &str = "coalesce(json_extract(labels, '$.level'), '')";
/// The same on `log_volume`.
pub(super) const VOLUME_LEVEL: &str = "level";

/// ` AND column …` for a condition on a text column (or expression).
fn push_text(builder: &mut Statement, column: &str, condition: &TextCondition) {
    match condition {
        TextCondition::Eq(text) => {
            builder.push(" AND ").push(column).push(" = ");
            builder.push_bind(text.as_str());
        }
        TextCondition::Ne(text) => {
            builder.push(" AND ").push(column).push(" <> ");
            builder.push_bind(text.as_str());
        }
        TextCondition::Matches(pattern) => push_regexp(builder, column, pattern, false),
        TextCondition::NotMatches(pattern) => push_regexp(builder, column, pattern, true),
    }
}

/// The conditions of `selection` other than its time range, on `logs` or `log_volume` (which
/// share the service column, and keep the `level` label in `level_column`; a volume selection
/// has no label or line condition).
fn push_conditions(builder: &mut Statement, selection: &Selection, level_column: &str) {
    push_stream_conditions(builder, selection, level_column);
    push_label_matches(builder, &selection.labels);
    for condition in &selection.lines {
        match condition {
            LineCondition::Contains(text) => push_contains(builder, text, "> 0"),
            LineCondition::NotContains(text) => push_contains(builder, text, "= 0"),
            LineCondition::ContainsAny(texts) => push_contains_any(builder, texts),
            LineCondition::Matches(pattern) => push_regexp(builder, "message", pattern, false),
            LineCondition::NotMatches(pattern) => push_regexp(builder, "message", pattern, true),
            // Of [`LineCondition::MayGiveLabel`], the `{` of `| json`'s lines and the labels and
            // metadata (JSON text here). The name in the line is left to the engine: SQLite's
            // `instr` costs about as much as the row where the name is far into the line.
            LineCondition::MayGiveLabel {
                name,
                json_only: true,
            } => {
                builder.push(" AND (instr(message, '{') > 0 OR ");
                push_holds_any(builder, "labels", [name.as_str()]);
                builder.push(" OR ");
                push_holds_any(builder, "attributes", [name.as_str()]);
                builder.push(")");
            }
            LineCondition::MayGiveLabel { .. } => {}
        }
    }
}

/// The conditions of `selection` on what the volume rollup also has columns for: its services,
/// and its levels in `level_column`.
pub(super) fn push_stream_conditions(
    builder: &mut Statement,
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

/// The tenant (the statement ends in `tenant = `) and the rollup minutes that count the rows of
/// `selection`'s range: from the minute that counts a row stamped `from` (a row on a minute's
/// boundary is counted by the minute before it) to the last that starts before `to`.
pub(super) fn push_rollup_range(builder: &mut Statement, tenant: &str, selection: &Selection) {
    builder.push_bind(tenant);
    builder
        .push(" AND minute >= ")
        .push_bind(minute_of(selection.from));
    builder
        .push(" AND minute < ")
        .push_bind(seconds_ceil(selection.to));
}

/// `at` in whole seconds since the epoch, rounded up: every rollup minute (kept in seconds) that
/// starts before `at` starts before this.
fn seconds_ceil(at: DateTime<Utc>) -> i64 {
    (at.timestamp_micros() + 999_999).div_euclid(1_000_000)
}

/// The tenant (the statement ends in `tenant = `), the time range and the conditions of
/// `selection` on `logs`.
fn push_selection(builder: &mut Statement, tenant: &str, selection: &Selection) {
    builder.push_bind(tenant);
    builder
        .push(" AND ts >= ")
        .push_bind(selection.from.timestamp_micros());
    builder
        .push(" AND ts < ")
        .push_bind(selection.to.timestamp_micros());
    push_catalog_narrowing(builder, tenant, selection);
    push_conditions(builder, selection, LOGS_LEVEL);
}

/// The services whose streams carry `selection`'s labels, by the stream catalog, when it names
/// labels and not one service: with one service named, the read index already skips every
/// other.
pub(super) fn push_catalog_narrowing(builder: &mut Statement, tenant: &str, selection: &Selection) {
    if selection.wants_catalog() {
        push_cataloged_services(builder, tenant, selection);
    }
}

/// ` AND column IN (literals)` (`NOT IN`) for literal alternatives, which the read index answers
/// without calling the engine per row, and `<> ''` or nothing for `.+` and `.*`; else ` AND
/// column REGEXP pattern` (or its negation), with Rust's engine: the query's own.
fn push_regexp(builder: &mut Statement, column: &str, pattern: &Pattern, negated: bool) {
    if let Some(test) = pattern.plain_test(negated) {
        push_plain_test(builder, test, |builder| {
            builder.push(column);
        });
        return;
    }
    builder
        .push(if negated { " AND NOT (" } else { " AND (" })
        .push(column)
        .push(" REGEXP ")
        .push_bind(pattern.rust.as_str())
        .push(")");
}

/// ` AND instr(message, text) <test>`: whether the message holds `text`.
fn push_contains(builder: &mut Statement, text: &str, test: &str) {
    builder
        .push(" AND instr(message, ")
        .push_bind(text)
        .push(") ")
        .push(test);
}

/// ` AND (instr(message, a) > 0 OR …)`: whether the message holds one of `texts`.
fn push_contains_any(builder: &mut Statement, texts: &[String]) {
    builder.push(" AND (");
    push_holds_any(builder, "message", texts.iter().map(String::as_str));
    builder.push(")");
}

/// `instr(column, a) > 0 OR …`: whether `column` holds one of `texts`.
fn push_holds_any<T: Into<Bind>>(
    builder: &mut Statement,
    column: &str,
    texts: impl IntoIterator<Item = T>,
) {
    for (at, text) in texts.into_iter().enumerate() {
        if at > 0 {
            builder.push(" OR ");
        }
        builder
            .push("instr(")
            .push(column)
            .push(", ")
            .push_bind(text)
            .push(") > 0");
    }
}

/// The count of `part`'s rows per window of `counting` and its label columns, with their bytes.
fn count_statement(tenant: &str, part: &Selection, counting: &Counting) -> Statement {
    let (origin, width) = (counting.origin_micros, counting.width_micros);
    // Every row is after the origin, so the integer division rounds the window up.
    let mut builder = Statement::new("SELECT ((ts - ");
    builder.push_bind(origin).push(" + ").push_bind(width - 1);
    builder
        .push(") / ")
        .push_bind(width)
        .push(") AS slot, service, labels, ");
    builder.push(if counting.severity { "severity" } else { "0" });
    match &counting.attributes {
        CountedAttributes::None => {
            builder.push(", '{}'");
        }
        CountedAttributes::Only(keys) => {
            // A substring test passes over the rows without any of the keys before their
            // JSON is read; `json_patch` leaves out the keys a row lacks.
            builder.push(", CASE WHEN ");
            let quoted = keys
                .iter()
                .map(|key| format!("{}:", serde_json::Value::from(key.as_str())));
            push_holds_any(&mut builder, "attributes", quoted);
            builder.push(" THEN json_patch('{}', json_object(");
            for (n, key) in keys.iter().enumerate() {
                if n > 0 {
                    builder.push(", ");
                }
                builder
                    .push_bind(key.as_str())
                    .push(", attributes -> ")
                    .push_bind(format!("$.\"{key}\""));
            }
            builder.push(")) ELSE '{}' END");
        }
        CountedAttributes::All => {
            builder.push(", attributes");
        }
    }
    builder.push(if counting.trace {
        ", trace_id, span_id"
    } else {
        ", NULL, NULL"
    });
    // The cast reads the text's bytes, as the engine counts them, not its characters.
    builder.push(
        ", count(*) AS lines, sum(length(CAST(message AS BLOB))) AS bytes FROM logs WHERE tenant = ",
    );
    push_selection(&mut builder, tenant, part);
    builder.push(" GROUP BY 1, 2, 3, 4, 5, 6, 7");
    builder
}

impl SqliteReader {
    /// Streams the rows of `selection` in `order` to `sink` until it returns false; at most
    /// `limit` when every condition of the query is in the selection.
    pub(in crate::storage) async fn select(
        &self,
        tenant: &str,
        selection: &Selection,
        order: Order,
        limit: Option<usize>,
        sink: &mut (dyn FnMut(&StoredRow) -> bool + Send),
    ) -> Result<(), StoreError> {
        let statement = |part: &Selection| {
            let mut builder = Statement::new(COLUMNS);
            push_selection(&mut builder, tenant, part);
            match order {
                Order::Newest => builder.push(" ORDER BY ts DESC, id DESC"),
                Order::Oldest => builder.push(" ORDER BY ts, id"),
                Order::Any => &mut builder,
            };
            if let Some(limit) = limit {
                builder.push(" LIMIT ").push_bind(limit as i64);
            }
            builder
        };
        let mut conn = self.acquire().await?;
        // A long read in no order of a few streams among many is stepped by two threads.
        let parts = match self
            .split_read(&mut conn, tenant, selection, order, limit)
            .await?
        {
            Some((early, late, second)) => {
                vec![(conn, statement(&early)), (second, statement(&late))]
            }
            None => vec![(conn, statement(selection))],
        };
        each_row(parts, sink).await
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
        let Counting {
            width_micros: width,
            origin_micros: origin,
            ..
        } = counting;
        let statement = |part: &Selection| count_statement(tenant, part, &counting);
        let mut conn = self.acquire().await?;
        // A count of a few streams among many is the index walk: two connections halve it, each
        // counting half of the range (a window the halves share is counted by both, in part).
        let split = self
            .split_read(&mut conn, tenant, selection, Order::Any, None)
            .await?;
        let (statements, mut second) = match split {
            Some((early, late, second)) => {
                (vec![statement(&early), statement(&late)], Some(second))
            }
            None => (vec![statement(selection)], None),
        };
        let mut rows = match &mut second {
            Some(second) => futures::stream::select(
                statements[0].query().fetch(&mut *conn),
                statements[1].query().fetch(&mut **second),
            )
            .boxed(),
            None => statements[0].query().fetch(&mut *conn),
        };
        while let Some(row) = rows.try_next().await.map_err(unavailable)? {
            let slot: i64 = row.try_get(0).map_err(unavailable)?;
            let end = from_micros(origin + slot * width);
            if !sink(decode_counted(&row, end).map_err(unavailable)?) {
                break;
            }
        }
        Ok(())
    }

    /// The first and last minute of `selection`'s range in which the volume rollup holds rows of
    /// its services and levels (its other conditions are not the rollup's), or `None` when it
    /// holds none: each is the first row of the rollup's `(tenant, minute, …)` key one way.
    pub(in crate::storage) async fn held_minutes(
        &self,
        tenant: &str,
        selection: &Selection,
    ) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>, StoreError> {
        let mut builder = Statement::new("SELECT ");
        for direction in ["", " DESC"] {
            builder.push("(SELECT minute FROM log_volume WHERE tenant = ");
            push_rollup_range(&mut builder, tenant, selection);
            push_stream_conditions(&mut builder, selection, VOLUME_LEVEL);
            builder
                .push(" ORDER BY minute")
                .push(direction)
                .push(" LIMIT 1)");
            if direction.is_empty() {
                builder.push(", ");
            }
        }
        let mut conn = self.acquire().await?;
        let (first, last): (Option<i64>, Option<i64>) = builder
            .query()
            .try_map(|row: sqlx::sqlite::SqliteRow| Ok((row.try_get(0)?, row.try_get(1)?)))
            .fetch_one(&mut *conn)
            .await
            .map_err(unavailable)?;
        let minute = |seconds: i64| DateTime::from_timestamp(seconds, 0);
        Ok(first.and_then(minute).zip(last.and_then(minute)))
    }

    /// Streams the rollup's rows of `selection` (its services and levels) to `sink` until it
    /// returns false, in (minute, service, severity, level) order, at most `max_rows`.
    pub(in crate::storage) async fn volume(
        &self,
        tenant: &str,
        selection: &Selection,
        max_rows: usize,
        sink: &mut (dyn FnMut(VolumeRow) -> bool + Send),
    ) -> Result<(), StoreError> {
        let mut builder = Statement::new(
            "SELECT minute, service, severity, level, records, bytes FROM log_volume WHERE tenant = ",
        );
        builder.push_bind(tenant);
        builder
            .push(" AND minute >= ")
            .push_bind(selection.from.timestamp().div_euclid(60) * 60);
        // Every minute that starts before `to`, as on PostgreSQL.
        builder
            .push(" AND minute < ")
            .push_bind(seconds_ceil(selection.to));
        push_conditions(&mut builder, selection, VOLUME_LEVEL);
        builder
            .push(" ORDER BY minute, service, severity, level LIMIT ")
            .push_bind(max_rows as i64);
        let mut conn = self.acquire().await?;
        let mut rows = builder.query().fetch(&mut *conn);
        while let Some(row) = rows.try_next().await.map_err(unavailable)? {
            if !sink(decode_volume(&row).map_err(unavailable)?) {
                break;
            }
        }
        Ok(())
    }
}
