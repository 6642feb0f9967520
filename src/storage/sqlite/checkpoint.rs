//! SQLite's WAL checkpoint, taken off the commit path.
//!
//! Left to itself, the commit that pushes the WAL past its threshold copies every frame into the
//! database file and syncs it before it returns, so that batch's acknowledgements wait for the
//! whole copy: the tail of the ack latency. Here the writer never checkpoints. A task with its own
//! connection copies frames as they arrive (PASSIVE, which blocks nobody) and, once the WAL holds
//! [`REWIND_FRAMES`], rewinds it with a RESTART, which holds writers off only while it copies what
//! was appended since its last pass. The RESTART is what bounds the file: a writer rewinds only a
//! WAL that is copied to its end, which never happens under constant writes if every pass is
//! passive.
//!
//! A RESTART needs SQLite's write lock, which it would otherwise poll for with sleeps while a busy
//! writer takes it back between transactions (in a test writing without pause the WAL reached
//! 170 MB). So writers take a [`Checkpointer::turn`] for each transaction: a rewind waits for the
//! transaction in progress and holds the next one back until it is done. Both sides are in this
//! process, and a turn is one uncontended read lock per batch.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, SqliteConnection};
use tokio::sync::{RwLock, RwLockReadGuard};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::storage::metrics::StorageMetrics;

/// How often the WAL is copied. Even at tens of MB of WAL a second a pass copies only a few MiB,
/// so the RESTART that rewinds the WAL has little left to copy while it holds writers off.
const PASS_INTERVAL: Duration = Duration::from_millis(100);

/// WAL frames (64 KiB pages, so 16 MiB) after which the WAL is rewound to its start.
const REWIND_FRAMES: i64 = 256;

/// How long a RESTART waits for the writer or a reader before it gives up until the next pass.
/// Writers wait behind a pending RESTART, so a long read must not keep one pending.
const REWIND_PATIENCE: Duration = Duration::from_millis(500);

/// The running checkpoint task of one database file.
#[derive(Debug)]
pub(super) struct Checkpointer {
    turns: Arc<RwLock<()>>,
    stop: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
}

/// What `PRAGMA wal_checkpoint` reports: whether it was blocked, frames in the WAL, frames copied.
type Progress = (i64, i64, i64);

impl Checkpointer {
    /// Opens a connection of its own with `options` and starts checkpointing, counted in
    /// `metrics`.
    pub(super) async fn start(
        options: &SqliteConnectOptions,
        metrics: Arc<StorageMetrics>,
    ) -> Result<Checkpointer, sqlx::Error> {
        let options = options
            .clone()
            .busy_timeout(REWIND_PATIENCE)
            .disable_statement_logging();
        let connection = options.connect().await?;
        let turns = Arc::new(RwLock::new(()));
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(connection, Arc::clone(&turns), stop.clone(), metrics));
        Ok(Checkpointer {
            turns,
            stop,
            task: Mutex::new(Some(task)),
        })
    }

    /// Held by a writer for the length of one transaction.
    pub(super) async fn turn(&self) -> RwLockReadGuard<'_, ()> {
        self.turns.read().await
    }

    /// Stops the task and closes its connection.
    pub(super) async fn stop(&self) {
        self.stop.cancel();
        let task = self.task.lock().expect("never poisoned").take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// When to rewind. SQLite still reports the old frame count after a RESTART until the next write
/// starts the WAL over, so without the first rule an idle database after a burst was rewound
/// every pass, each time holding writers off; the second keeps a reader that blocks the rewind
/// from holding them off every pass as well.
#[derive(Debug)]
struct Rewinds {
    /// Frame count at the last rewind: nothing was written since while it still reads the same.
    settled: Option<i64>,
    /// No rewind below this many frames: the threshold, or 16 MiB more after a blocked one.
    retry_from: i64,
}

impl Default for Rewinds {
    fn default() -> Self {
        Rewinds {
            settled: None,
            retry_from: REWIND_FRAMES,
        }
    }
}

impl Rewinds {
    fn due(&self, frames: i64) -> bool {
        frames >= self.retry_from && self.settled != Some(frames)
    }

    fn record(&mut self, frames: i64, blocked: bool) {
        if blocked {
            self.retry_from = frames + REWIND_FRAMES;
        } else {
            *self = Rewinds {
                settled: Some(frames),
                ..Rewinds::default()
            };
        }
    }
}

async fn run(
    mut connection: SqliteConnection,
    turns: Arc<RwLock<()>>,
    stop: CancellationToken,
    metrics: Arc<StorageMetrics>,
) {
    let mut rewinds = Rewinds::default();
    let mut ticks = tokio::time::interval(PASS_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = ticks.tick() => {}
        }
        if let Err(err) = pass(&mut connection, &turns, &mut rewinds, &metrics).await {
            // The writer reports a broken database itself; here it only means the WAL grows until
            // a later pass gets through.
            metrics.sqlite_checkpoint_errors.increment(1);
            tracing::warn!(error = %err, "SQLite checkpoint failed; retrying");
        }
    }
    let _ = connection.close().await;
}

/// One pass: copy what is new, and rewind the WAL once it is long.
async fn pass(
    connection: &mut SqliteConnection,
    turns: &RwLock<()>,
    rewinds: &mut Rewinds,
    metrics: &StorageMetrics,
) -> Result<(), sqlx::Error> {
    let (_, frames, _): Progress = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(&mut *connection)
        .await?;
    if !rewinds.due(frames) {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let _writers_held = turns.write().await;
    let (blocked, _, _): Progress = sqlx::query_as("PRAGMA wal_checkpoint(RESTART)")
        .fetch_one(&mut *connection)
        .await?;
    rewinds.record(frames, blocked != 0);
    let outcome = if blocked == 0 { "rewound" } else { "busy" };
    metrics
        .sqlite_checkpoint
        .record([outcome], started.elapsed().as_secs_f64());
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;
    use crate::observability::metrics::Registry;

    async fn open(path: &std::path::Path) -> (SqliteConnectOptions, SqliteConnection) {
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .unwrap()
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .page_size(65536)
            .pragma("wal_autocheckpoint", "0");
        let mut writer = options.connect().await.unwrap();
        sqlx::query("CREATE TABLE t (v BLOB)")
            .execute(&mut writer)
            .await
            .unwrap();
        (options, writer)
    }

    /// Writes about `mib` MiB in 256 KiB transactions, as a busy writer does, each in a turn when
    /// there is a checkpointer.
    async fn write(writer: &mut SqliteConnection, checkpointer: Option<&Checkpointer>, mib: usize) {
        for _ in 0..mib * 4 {
            let _turn = match checkpointer {
                Some(checkpointer) => Some(checkpointer.turn().await),
                None => None,
            };
            sqlx::query("INSERT INTO t VALUES (randomblob(262144))")
                .execute(&mut *writer)
                .await
                .unwrap();
        }
    }

    #[tokio::test]
    async fn the_wal_is_rewound_under_constant_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.db");
        let (options, mut writer) = open(&path).await;
        let registry = Registry::new();
        let metrics = Arc::new(StorageMetrics::register(&registry));
        let checkpointer = Checkpointer::start(&options, metrics).await.unwrap();
        let wal = dir.path().join("wal.db-wal");
        let mut largest = 0;
        // 256 MiB through the WAL with no pause for the checkpointer to catch up in.
        for _ in 0..64 {
            write(&mut writer, Some(&checkpointer), 4).await;
            largest = largest.max(std::fs::metadata(&wal).unwrap().len());
        }
        checkpointer.stop().await;
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM t")
            .fetch_one(&mut writer)
            .await
            .unwrap();
        assert_eq!(rows, 64 * 4 * 4);
        // Never rewound, the file would hold all 256 MiB (the test below shows it grows).
        // Rewound, it stays near the threshold (16 MiB) plus what is written between passes:
        // 21 MB alone, up to 54 MB beside the other tests on two cores; half the total is the
        // bound that cannot be met without rewinding.
        assert!(
            largest < 128 << 20,
            "the WAL grew to {largest} bytes despite the checkpointer"
        );
    }

    #[test]
    fn an_unchanged_wal_is_not_rewound_again_and_a_blocked_rewind_waits_for_more() {
        let mut rewinds = Rewinds::default();
        assert!(!rewinds.due(REWIND_FRAMES - 1));
        assert!(rewinds.due(300));
        rewinds.record(300, false);
        // Nothing written since: SQLite still says 300.
        assert!(!rewinds.due(300));
        // Written since: the WAL started over and grew past the threshold again.
        assert!(rewinds.due(REWIND_FRAMES));
        rewinds.record(REWIND_FRAMES, true);
        assert!(!rewinds.due(REWIND_FRAMES + 10));
        assert!(rewinds.due(2 * REWIND_FRAMES));
        rewinds.record(2 * REWIND_FRAMES, false);
        assert!(rewinds.due(REWIND_FRAMES));
    }

    #[tokio::test]
    async fn without_a_checkpointer_the_wal_only_grows() {
        // The control for the test above: the same writes with nobody checkpointing.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.db");
        let (_options, mut writer) = open(&path).await;
        write(&mut writer, None, 64).await;
        let wal = std::fs::metadata(dir.path().join("wal.db-wal"))
            .unwrap()
            .len();
        assert!(wal > 64 << 20, "the WAL holds {wal} bytes");
    }
}
