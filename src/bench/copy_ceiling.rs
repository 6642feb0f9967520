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
pub(crate) async fn copy_rows(
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
        .copy_in_raw("COPY logs (tenant, ts, severity, service, message, attributes, trace_id_bytes, span_id_bytes) FROM STDIN")
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

/// Inserts `rows` rows cycling over `records` into the SQLite file at `path`, one prepared
/// statement stepped per row in one transaction, straight through SQLite's C API (no driver, no
/// async hop per row), with the server's settings (WAL, `synchronous=FULL`, its page cache).
/// Returns how long it took, commit included.
pub(crate) async fn sqlite_insert_rows(
    path: std::path::PathBuf,
    records: &[LogRecord],
    rows: u64,
) -> Result<Duration, SqliteCeilingError> {
    // The values are made before the clock starts, as the gRPC run's records were.
    let now = chrono::Utc::now().timestamp_micros();
    let prepared: Vec<SqliteRow> = records
        .iter()
        .map(|record| SqliteRow {
            ts: record.timestamp.as_ref().map_or(now, |ts| {
                ts.seconds * 1_000_000 + i64::from(ts.nanos) / 1000
            }),
            severity: i64::from(record.severity),
            service: record.service.clone(),
            message: record.message.clone(),
            attributes: serde_json::to_string(&record.attributes).expect("strings serialize"),
            trace_id: (!record.trace_id.is_empty()).then(|| record.trace_id.clone()),
            span_id: (!record.span_id.is_empty()).then(|| record.span_id.clone()),
        })
        .collect();
    tokio::task::spawn_blocking(move || sqlite_ffi::insert(&path, &prepared, rows, now))
        .await
        .map_err(|err| SqliteCeilingError(err.to_string()))?
}

/// Why the SQLite ceiling could not be measured: SQLite's own message.
#[derive(Debug, thiserror::Error)]
#[error("SQLite ceiling: {0}")]
pub struct SqliteCeilingError(String);

/// One row's values, owned so the loop runs on a blocking thread.
struct SqliteRow {
    ts: i64,
    severity: i64,
    service: String,
    message: String,
    attributes: String,
    trace_id: Option<String>,
    span_id: Option<String>,
}

/// The C calls, kept together: every pointer below is SQLite's own or a live Rust string whose
/// length is passed with it.
mod sqlite_ffi {
    use std::ffi::{c_int, CStr, CString};
    use std::time::{Duration, Instant};

    use libsqlite3_sys as ffi;

    use super::{SqliteCeilingError, SqliteRow};

    const INSERT: &CStr = c"INSERT INTO logs (tenant, ts, received_at, severity, service, message, attributes, trace_id, span_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)";
    const SETTINGS: &CStr =
        c"PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA cache_size = -65536;";

    /// An open connection, closed on drop.
    struct Db(*mut ffi::sqlite3);

    impl Drop for Db {
        fn drop(&mut self) {
            // SAFETY: the handle came from sqlite3_open_v2 and every statement on it is finalized.
            unsafe { ffi::sqlite3_close(self.0) };
        }
    }

    impl Db {
        fn error(&self) -> SqliteCeilingError {
            // SAFETY: sqlite3_errmsg returns a NUL-terminated string owned by the connection.
            let message = unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(self.0)) };
            SqliteCeilingError(message.to_string_lossy().into_owned())
        }

        fn check(&self, code: c_int) -> Result<(), SqliteCeilingError> {
            if code == ffi::SQLITE_OK || code == ffi::SQLITE_DONE {
                Ok(())
            } else {
                Err(self.error())
            }
        }

        fn exec(&self, sql: &CStr) -> Result<(), SqliteCeilingError> {
            // SAFETY: a valid connection and a NUL-terminated statement; no callback.
            let code = unsafe {
                ffi::sqlite3_exec(
                    self.0,
                    sql.as_ptr(),
                    None,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
            self.check(code)
        }
    }

    pub(super) fn insert(
        path: &std::path::Path,
        rows: &[SqliteRow],
        count: u64,
        received_at: i64,
    ) -> Result<Duration, SqliteCeilingError> {
        let path = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|err| SqliteCeilingError(err.to_string()))?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: a NUL-terminated path and an out-pointer; the handle is closed by Db's drop
        // even when the open failed.
        let code = unsafe {
            ffi::sqlite3_open_v2(
                path.as_ptr(),
                &mut handle,
                ffi::SQLITE_OPEN_READWRITE,
                std::ptr::null(),
            )
        };
        let db = Db(handle);
        db.check(code)?;
        db.exec(SETTINGS)?;
        let mut statement = std::ptr::null_mut();
        // SAFETY: a valid connection, a NUL-terminated statement (-1: read to the NUL).
        let code = unsafe {
            ffi::sqlite3_prepare_v2(
                db.0,
                INSERT.as_ptr(),
                -1,
                &mut statement,
                std::ptr::null_mut(),
            )
        };
        db.check(code)?;
        let started = Instant::now();
        let outcome = (|| {
            db.exec(c"BEGIN")?;
            for row in rows.iter().cycle().take(count as usize) {
                // SAFETY: `statement` is prepared on `db`; each text is a live &str of the given
                // length, copied by SQLite (SQLITE_TRANSIENT) before the call returns.
                unsafe {
                    let text = |index: c_int, value: Option<&str>| match value {
                        Some(value) => ffi::sqlite3_bind_text(
                            statement,
                            index,
                            value.as_ptr().cast(),
                            value.len() as c_int,
                            ffi::SQLITE_TRANSIENT(),
                        ),
                        None => ffi::sqlite3_bind_null(statement, index),
                    };
                    text(1, Some("default"));
                    ffi::sqlite3_bind_int64(statement, 2, row.ts);
                    ffi::sqlite3_bind_int64(statement, 3, received_at);
                    ffi::sqlite3_bind_int64(statement, 4, row.severity);
                    text(5, Some(&row.service));
                    text(6, Some(&row.message));
                    text(7, Some(&row.attributes));
                    text(8, row.trace_id.as_deref());
                    text(9, row.span_id.as_deref());
                    let code = ffi::sqlite3_step(statement);
                    ffi::sqlite3_reset(statement);
                    db.check(code)?;
                }
            }
            db.exec(c"COMMIT")
        })();
        let elapsed = started.elapsed();
        // SAFETY: finalized once, before the connection closes.
        unsafe { ffi::sqlite3_finalize(statement) };
        outcome.map(|()| elapsed)
    }
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
                        // bytea's hex input, its backslash escaped for COPY's text format.
                        format!("\\\\x{id}")
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
