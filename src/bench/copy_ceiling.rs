//! The practical ceiling: the same rows loaded straight into `logs` with `COPY … FROM STDIN` over
//! one connection, with no gRPC, validation or batching in the way.

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
