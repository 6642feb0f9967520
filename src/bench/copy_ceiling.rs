//! The practical ceiling of each store: the same rows loaded straight into `logs` over one
//! connection, with no gRPC, validation or batching in the way. PostgreSQL: `COPY … FROM STDIN`
//! (text). SQLite, which has no COPY: one prepared `INSERT` per row, all in one transaction, with
//! the server's own settings (WAL, `synchronous=FULL`, its page size and cache).

use std::fmt::Write;
use std::time::{Duration, Instant};

use sqlx::postgres::PgPoolOptions;

use crate::proto::v1::LogRecord;

/// Rows per COPY data message.
const ROWS_PER_SEND: usize = 5000;

/// Loads `rows` rows cycling over `records` and returns how long the COPY took.
pub async fn copy_rows(
    database_url: &str,
    records: &[LogRecord],
    rows: u64,
) -> Result<Duration, sqlx::Error> {
    // The text is built before the clock starts, as the gRPC run's records were.
    let blocks = text_blocks(records);
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(database_url)
        .await?;
    let mut conn = pool.acquire().await?;
    let started = Instant::now();
    let mut copy = conn
        .copy_in_raw("COPY logs (tenant, ts, severity, service, message, attributes, trace_id, span_id) FROM STDIN")
        .await?;
    let mut sent = 0u64;
    'outer: loop {
        for (block, count) in &blocks {
            if sent >= rows {
                break 'outer;
            }
            copy.send(block.as_bytes()).await?;
            sent += *count as u64;
        }
    }
    copy.finish().await?;
    let elapsed = started.elapsed();
    drop(conn);
    pool.close().await;
    Ok(elapsed)
}

/// One row's values: ts, severity, service, message, attributes, trace id, span id.
type SqliteRow<'a> = (
    i64,
    i16,
    &'a str,
    &'a str,
    String,
    Option<&'a str>,
    Option<&'a str>,
);

/// Inserts `rows` rows cycling over `records` into the SQLite file of `database_url`, one
/// prepared statement per row in one transaction, and returns how long it took, commit included.
pub async fn sqlite_insert_rows(
    database_url: &str,
    records: &[LogRecord],
    rows: u64,
) -> Result<Duration, sqlx::Error> {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
    use sqlx::{ConnectOptions, Connection};
    use std::str::FromStr;

    const INSERT: &str = "INSERT INTO logs (tenant, ts, received_at, severity, service, message, attributes, trace_id, span_id) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)";
    // The values are made before the clock starts, as the gRPC run's records were.
    let now = chrono::Utc::now().timestamp_micros();
    let prepared: Vec<SqliteRow<'_>> = records
        .iter()
        .map(|record| {
            let ts = record.timestamp.as_ref().map_or(now, |ts| {
                ts.seconds * 1_000_000 + i64::from(ts.nanos) / 1000
            });
            fn id(id: &str) -> Option<&str> {
                (!id.is_empty()).then_some(id)
            }
            (
                ts,
                record.severity as i16,
                record.service.as_str(),
                record.message.as_str(),
                serde_json::to_string(&record.attributes).expect("strings serialize"),
                id(&record.trace_id),
                id(&record.span_id),
            )
        })
        .collect();
    let mut conn = SqliteConnectOptions::from_str(database_url)?
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .pragma("cache_size", "-65536")
        .connect()
        .await?;
    let started = Instant::now();
    let mut tx = conn.begin().await?;
    for row in prepared.iter().cycle().take(rows as usize) {
        sqlx::query(INSERT)
            .bind("default")
            .bind(row.0)
            .bind(now)
            .bind(row.1)
            .bind(row.2)
            .bind(row.3)
            .bind(&row.4)
            .bind(row.5)
            .bind(row.6)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    let elapsed = started.elapsed();
    conn.close().await?;
    Ok(elapsed)
}

fn text_blocks(records: &[LogRecord]) -> Vec<(String, usize)> {
    records
        .chunks(ROWS_PER_SEND)
        .map(|chunk| {
            let mut text = String::new();
            for record in chunk {
                let ts = record
                    .timestamp
                    .as_ref()
                    .and_then(|ts| chrono::DateTime::from_timestamp(ts.seconds, ts.nanos as u32))
                    .unwrap_or_else(chrono::Utc::now);
                let attributes =
                    serde_json::to_string(&record.attributes).expect("strings serialize");
                let optional = |id: &str| {
                    if id.is_empty() {
                        "\\N".to_owned()
                    } else {
                        escape(id)
                    }
                };
                let _ = writeln!(
                    text,
                    "default\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    ts.format("%Y-%m-%d %H:%M:%S%.6f+00"),
                    record.severity,
                    escape(&record.service),
                    escape(&record.message),
                    escape(&attributes),
                    optional(&record.trace_id),
                    optional(&record.span_id),
                );
            }
            (text, chunk.len())
        })
        .collect()
}

/// COPY text format escaping.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_text_escapes_separators() {
        assert_eq!(escape("a\tb\nc\\d"), "a\\tb\\nc\\\\d");
    }
}
