//! Rows of `logs` read on the connection's own SQLite handle, on a blocking thread, and handed to
//! the reading task in batches.
//!
//! **Why not the driver.** sqlx steps a statement on a worker thread and hands each row over on
//! its own: one wake of the reading task per row, and every value of the row copied into a fresh
//! allocation on one thread and freed on the other. Measured on a scan of 38,000 lines, that
//! handover took most of the read's time. Here a blocking thread steps the statement, builds the
//! rows it hands over directly from SQLite's column buffers, and sends them a batch at a time
//! (`storage/row_batches.rs`).
//!
//! **Safety.** The handle comes from [`sqlx::sqlite::LockedSqliteHandle`], which guarantees that
//! the driver makes no call on it (or its statements) while it is held; it is held for the whole
//! life of the statement prepared here, which is finalized before the lock is released.
//!
//! **Stopping.** The connection's progress handler stops the statement once the read's flag is
//! set: by [`StopOnDrop`] when the reading task lets go of the read (its deadline, its client
//! leaving, or its sink having had enough), so a scan that matches nothing does not run on.

use std::ffi::{c_char, c_int, CStr};
use std::ptr::{null_mut, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use libsqlite3_sys as ffi;

use super::read::ReadConnection;
use super::statement::{Bind, Statement};
use crate::storage::error::StoreError;
use crate::storage::row_batches::{self, RowSender};
use crate::storage::stored::{from_micros, overwrite, overwrite_option, StoredRow};

/// Sets the read's stop flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs each statement, which selects `read::COLUMNS`, on its connection, all side by side, and
/// gives their rows to `sink` until it returns false: each statement's in order.
pub(super) async fn each_row(
    parts: Vec<(ReadConnection, Statement)>,
    sink: &mut (dyn FnMut(&StoredRow) -> bool + Send),
) -> Result<(), StoreError> {
    let (senders, mut batches) = row_batches::channels(parts.len());
    let flags: Vec<Arc<AtomicBool>> = parts.iter().map(|(conn, _)| conn.stop_flag()).collect();
    let mut steppings = Vec::with_capacity(parts.len());
    for ((conn, statement), sender) in parts.into_iter().zip(senders) {
        let others = flags.clone();
        steppings.push(tokio::task::spawn_blocking(move || {
            let stepped = step_rows(conn, &statement, sender);
            // A read with a part that failed fails: the other parts stop, not run to their end.
            if stepped.is_err() {
                for flag in &others {
                    flag.store(true, Ordering::Relaxed);
                }
            }
            stepped
        }));
    }
    let stops: Vec<StopOnDrop> = flags.into_iter().map(StopOnDrop).collect();
    row_batches::deliver(&mut batches, sink).await;
    // The statements may still be stepping if the sink had enough.
    drop(stops);
    drop(batches);
    let mut result = Ok(());
    for stepping in steppings {
        let stepped = stepping.await.unwrap_or_else(|join| {
            Err(StoreError::Unavailable(format!(
                "the read's thread failed: {join}"
            )))
        });
        result = result.and(stepped);
    }
    result
}

/// Steps `statement` on `conn`'s handle, sending its rows in batches until the statement ends,
/// fails, or the receiver is gone.
fn step_rows(
    mut conn: ReadConnection,
    statement: &Statement,
    mut sender: RowSender,
) -> Result<(), StoreError> {
    let stop = conn.stop_flag();
    let runtime = tokio::runtime::Handle::current();
    let mut locked = runtime
        .block_on(conn.lock_handle())
        .map_err(|err| StoreError::Unavailable(err.to_string()))?;
    let mut prepared = Prepared::new(locked.as_raw_handle(), statement)?;
    loop {
        match prepared.step() {
            Ok(true) => {
                let mut row = sender.spare();
                prepared.fill(&mut row)?;
                if !sender.push_blocking(row) {
                    return Ok(());
                }
            }
            Ok(false) => break,
            // Stopped on purpose: nobody waits for the rest.
            Err(_) if stop.load(Ordering::Relaxed) => return Ok(()),
            Err(err) => return Err(err),
        }
    }
    sender.finish_blocking();
    Ok(())
}

/// A prepared statement on a locked handle, finalized when dropped.
struct Prepared {
    db: NonNull<ffi::sqlite3>,
    statement: NonNull<ffi::sqlite3_stmt>,
}

impl Prepared {
    /// Prepares `statement` on `db` and binds its values.
    fn new(db: NonNull<ffi::sqlite3>, statement: &Statement) -> Result<Self, StoreError> {
        let length = c_int::try_from(statement.sql.len())
            .map_err(|_| StoreError::Unavailable("the statement is too long".into()))?;
        let mut raw = null_mut();
        // SAFETY: `db` is a live handle nobody else uses while the lock is held; the text is
        // read for `length` bytes only.
        let code = unsafe {
            ffi::sqlite3_prepare_v2(
                db.as_ptr(),
                statement.sql.as_ptr().cast::<c_char>(),
                length,
                &mut raw,
                null_mut(),
            )
        };
        let Some(raw) = NonNull::new(raw).filter(|_| code == ffi::SQLITE_OK) else {
            return Err(error(db, code));
        };
        let prepared = Prepared { db, statement: raw };
        for (index, bind) in statement.binds.iter().enumerate() {
            prepared.bind(index as c_int + 1, bind)?;
        }
        Ok(prepared)
    }

    fn bind(&self, index: c_int, bind: &Bind) -> Result<(), StoreError> {
        let statement = self.statement.as_ptr();
        // SAFETY: the statement is live; SQLITE_TRANSIENT makes SQLite copy the text before
        // the call returns.
        let code = unsafe {
            match bind {
                Bind::Int(value) => ffi::sqlite3_bind_int64(statement, index, *value),
                Bind::Text(text) => ffi::sqlite3_bind_text(
                    statement,
                    index,
                    text.as_ptr().cast::<c_char>(),
                    c_int::try_from(text.len()).unwrap_or(c_int::MAX),
                    ffi::SQLITE_TRANSIENT(),
                ),
            }
        };
        if code == ffi::SQLITE_OK {
            Ok(())
        } else {
            Err(error(self.db, code))
        }
    }

    /// Moves to the next row: true if there is one.
    fn step(&mut self) -> Result<bool, StoreError> {
        // SAFETY: the statement is live and used by this thread alone.
        match unsafe { ffi::sqlite3_step(self.statement.as_ptr()) } {
            ffi::SQLITE_ROW => Ok(true),
            ffi::SQLITE_DONE => Ok(false),
            code => Err(error(self.db, code)),
        }
    }

    fn int(&self, column: c_int) -> i64 {
        // SAFETY: the statement is on a row and `column` is one of its columns.
        unsafe { ffi::sqlite3_column_int64(self.statement.as_ptr(), column) }
    }

    /// The column's text; None for NULL. It lasts until the next step.
    fn text(&self, column: c_int) -> Result<Option<&str>, StoreError> {
        let statement = self.statement.as_ptr();
        // SAFETY: the statement is on a row and `column` is one of its columns; the text
        // pointer, asked for before the length as SQLite requires, stays valid until the next
        // step, and is copied before then.
        unsafe {
            if ffi::sqlite3_column_type(statement, column) == ffi::SQLITE_NULL {
                return Ok(None);
            }
            let text = ffi::sqlite3_column_text(statement, column);
            // A value that is not NULL has a text, if only an empty one: no text means SQLite
            // could not allocate it.
            if text.is_null() {
                return Err(error(self.db, ffi::SQLITE_NOMEM));
            }
            let length = ffi::sqlite3_column_bytes(statement, column);
            if length <= 0 {
                return Ok(Some(""));
            }
            let bytes = std::slice::from_raw_parts(text, length as usize);
            std::str::from_utf8(bytes).map(Some).map_err(|_| {
                StoreError::Unavailable(format!("column {column} of a row is not UTF-8"))
            })
        }
    }

    fn required_text(&self, column: c_int) -> Result<&str, StoreError> {
        self.text(column)?
            .ok_or_else(|| StoreError::Unavailable(format!("column {column} of a row is NULL")))
    }

    /// Writes the current row, whose columns are `read::COLUMNS`, over `row`.
    fn fill(&self, row: &mut StoredRow) -> Result<(), StoreError> {
        let severity = self.int(3);
        row.id = self.int(0);
        row.ts = from_micros(self.int(1));
        row.received_at = from_micros(self.int(2));
        row.severity = i16::try_from(severity).map_err(|_| {
            StoreError::Unavailable(format!("a row's severity {severity} is out of range"))
        })?;
        overwrite(&mut row.service, self.required_text(4)?);
        overwrite(&mut row.message, self.required_text(5)?);
        overwrite(&mut row.labels, self.required_text(6)?);
        overwrite(&mut row.attributes, self.required_text(7)?);
        overwrite_option(&mut row.trace_id, self.text(8)?);
        overwrite_option(&mut row.span_id, self.text(9)?);
        Ok(())
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        // SAFETY: the statement is live and finalized once.
        unsafe { ffi::sqlite3_finalize(self.statement.as_ptr()) };
    }
}

/// The connection's error, as the driver would report it.
fn error(db: NonNull<ffi::sqlite3>, code: c_int) -> StoreError {
    // SAFETY: `db` is live; the message is copied before any other call on it.
    let message = unsafe {
        let text = ffi::sqlite3_errmsg(db.as_ptr());
        if text.is_null() {
            String::new()
        } else {
            CStr::from_ptr(text).to_string_lossy().into_owned()
        }
    };
    StoreError::Unavailable(format!(
        "error returned from database: (code: {code}) {message}"
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::storage::sqlite::read::{one_connection_reader, reader_of};
    use crate::storage::sqlite::SqliteReader;

    /// Rows of `read::COLUMNS`' shape numbered from 1, without end, kept where `condition` holds;
    /// their lines differ in length, and some have ids where others have none.
    fn endless(condition: &str) -> Statement {
        numbered("", condition)
    }

    /// The same, numbered up to `last`.
    fn up_to(last: i64, condition: &str) -> Statement {
        numbered(&format!(" WHERE i < {last}"), condition)
    }

    fn numbered(bound: &str, condition: &str) -> Statement {
        Statement::new(&format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n{bound}) \
             SELECT i, i, i, 9, 'svc', 'line ' || i || substr('xxxxxx', 1, i % 7), '{{}}', '{{}}', \
             CASE WHEN i % 3 = 0 THEN NULL ELSE 'trace ' || i END, \
             CASE WHEN i % 5 = 0 THEN 'span' END FROM n WHERE {condition}"
        ))
    }

    /// The pool's only connection can be taken again within 4 s.
    async fn assert_connection_free(reader: &SqliteReader) {
        tokio::time::timeout(Duration::from_secs(4), reader.acquire())
            .await
            .expect("the connection is free within 4 s")
            .unwrap();
    }

    #[tokio::test]
    async fn rows_arrive_whole_and_in_order_until_the_sink_has_enough() {
        // Past the first batches, rows are written into the buffers of spent ones.
        let (_dir, reader) = one_connection_reader().await;
        let mut seen = Vec::new();
        let mut sink = |row: &StoredRow| {
            seen.push(row.clone());
            seen.len() < 1000
        };
        each_row(
            vec![(reader.acquire().await.unwrap(), endless("i % 2 = 1"))],
            &mut sink,
        )
        .await
        .unwrap();
        assert_eq!(seen.len(), 1000);
        for (n, row) in seen.iter().enumerate() {
            let i = 2 * n as i64 + 1;
            assert_eq!((row.id, row.ts.timestamp_micros()), (i, i));
            assert_eq!(row.severity, 9);
            let tail = "x".repeat((i % 7).min(6) as usize);
            assert_eq!(row.message, format!("line {i}{tail}"));
            assert_eq!((row.service.as_str(), row.labels.as_str()), ("svc", "{}"));
            let trace = (i % 3 != 0).then(|| format!("trace {i}"));
            assert_eq!(row.trace_id, trace);
            assert_eq!(row.span_id.as_deref(), (i % 5 == 0).then_some("span"));
        }
        assert_connection_free(&reader).await;
    }

    #[tokio::test]
    async fn statements_side_by_side_give_every_row_once_each_in_its_order() {
        let (_dir, reader) = reader_of(3).await;
        let first = reader.acquire().await.unwrap();
        let second = reader
            .spare()
            .await
            .expect("the pool has room for a second");
        let parts = vec![
            (first, up_to(4000, "i % 2 = 1")),
            (second, up_to(4000, "i % 2 = 0")),
        ];
        let mut seen = Vec::new();
        each_row(parts, &mut |row| {
            seen.push(row.id);
            true
        })
        .await
        .unwrap();
        let (odd, even): (Vec<i64>, Vec<i64>) = seen.iter().partition(|id| *id % 2 == 1);
        assert_eq!(odd, (0..2000).map(|n| 2 * n + 1).collect::<Vec<_>>());
        assert_eq!(even, (1..=2000).map(|n| 2 * n).collect::<Vec<_>>());

        // A sink that has enough stops both, and frees their connections.
        let first = reader.acquire().await.unwrap();
        let parts = vec![
            (first, endless("i % 2 = 1")),
            (spared_within_4_s(&reader).await, endless("i % 2 = 0")),
        ];
        let mut left = 1000;
        each_row(parts, &mut |_| {
            left -= 1;
            left > 0
        })
        .await
        .unwrap();
        let held = reader.acquire().await.unwrap();
        let other = tokio::time::timeout(Duration::from_secs(4), reader.acquire())
            .await
            .expect("the second connection is free within 4 s")
            .unwrap();
        // One connection left: it stays for another read, not a second reader.
        assert!(reader.spare().await.is_none());
        drop(other);
        spared_within_4_s(&reader).await;
        drop(held);
    }

    /// A spare connection, once the pool has one: a dropped connection goes back to the pool by
    /// a task of its own.
    async fn spared_within_4_s(reader: &SqliteReader) -> ReadConnection {
        let spared = tokio::time::timeout(Duration::from_secs(4), async {
            loop {
                if let Some(conn) = reader.spare().await {
                    return conn;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        spared.await.expect("two connections free: one is spared")
    }

    #[tokio::test]
    async fn a_part_that_fails_stops_the_others() {
        let (_dir, reader) = reader_of(3).await;
        let parts = vec![
            (reader.acquire().await.unwrap(), endless("i % 2 = 1")),
            (
                reader.spare().await.unwrap(),
                Statement::new("SELECT * FROM no_such_table"),
            ),
        ];
        let mut sink = |_: &StoredRow| true;
        let read = each_row(parts, &mut sink);
        let err = tokio::time::timeout(Duration::from_secs(4), read)
            .await
            .expect("the endless part stopped with the failed one")
            .unwrap_err();
        assert!(err.to_string().contains("no such table"), "{err}");
    }

    #[tokio::test]
    async fn an_abandoned_scan_that_finds_nothing_stops() {
        let (_dir, reader) = one_connection_reader().await;
        let mut sink = |_: &StoredRow| true;
        let scan = each_row(
            vec![(reader.acquire().await.unwrap(), endless("i < 0"))],
            &mut sink,
        );
        let abandoned = tokio::time::timeout(Duration::from_millis(50), scan).await;
        assert!(abandoned.is_err(), "the endless scan was abandoned");
        assert_connection_free(&reader).await;
    }

    #[tokio::test]
    async fn errors_are_the_databases_own() {
        let (_dir, reader) = one_connection_reader().await;
        let mut sink = |_: &StoredRow| true;
        let missing = Statement::new("SELECT * FROM no_such_table");
        let err = each_row(vec![(reader.acquire().await.unwrap(), missing)], &mut sink)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("no such table"), "{err}");
        // A row that does not fit StoredRow is refused, not misread.
        let severity = Statement::new("SELECT 1, 1, 1, 99999, 's', 'm', '{}', '{}', NULL, NULL");
        let err = each_row(vec![(reader.acquire().await.unwrap(), severity)], &mut sink)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("severity 99999"), "{err}");
        let text = Statement::new("SELECT 1, 1, 1, 1, NULL, 'm', '{}', '{}', NULL, NULL");
        let err = each_row(vec![(reader.acquire().await.unwrap(), text)], &mut sink)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("NULL"), "{err}");
        assert_connection_free(&reader).await;
    }
}
