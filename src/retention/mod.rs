//! Retention that leaves nothing behind, run in the background. This module is the policy: when a
//! run happens, which days the window keeps, a run skipped while another replica holds the lock,
//! and what a run reports; the store does the work ([`RetentionSession`]).
//!
//! - PostgreSQL: `logs` is partitioned by day on `ts`. Partitions are created ahead of time, and a
//!   partition whose whole day is older than the retention window is dropped whole, its indexes
//!   with it. Old rows in the default partition are deleted in small chunks. One replica at a
//!   time does this, under a PostgreSQL advisory lock.
//! - SQLite: old rows are deleted through the `(tenant, ts, service)` index in transactions of
//!   [`DELETE_CHUNK`] rows, yielding to ingest between chunks.
//!
//! The per-minute volume rollup (`log_volume`) is trimmed with the rows: every minute that ended
//! before the window's start is deleted, in chunks, on both stores.
//!
//! The PostgreSQL run also summarizes the BRIN ranges of the newest partitions, which keeps reads
//! fast when autovacuum falls behind (see `storage/postgres/retention.rs`).
//!
//! Ingest refuses records already older than the window (`timestamp_too_old`), so nothing is
//! written only to be deleted at the next run.
//!
//! [`DELETE_CHUNK`]: crate::storage::chunked_delete::DELETE_CHUNK

pub(crate) mod metrics;
mod window;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use tokio_util::sync::CancellationToken;

use self::metrics::RetentionMetrics;
use crate::config::RetentionOptions;
use crate::storage::{RetentionSession, Store, StoreError};
use window::needed_days;
pub(crate) use window::DROP_GRACE;

/// What retention keeps and how often it looks.
#[derive(Clone, Debug)]
pub struct RetentionConfig {
    /// Records older than this are removed; `None` keeps everything.
    pub keep: Option<TimeDelta>,
    /// Time between runs.
    pub interval: Duration,
    /// Chunk keys older than this are deleted (the dedup window).
    pub dedup_window: Duration,
}

/// What one run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunReport {
    /// False when another replica holds the retention lock and this run did nothing.
    pub ran: bool,
    /// Partitions created ahead of time.
    pub partitions_created: u64,
    /// Partitions dropped whole.
    pub partitions_dropped: u64,
    /// Rows deleted one chunk at a time.
    pub rows_deleted: u64,
    /// BRIN page ranges summarized (PostgreSQL), so reads can skip them.
    pub ranges_summarized: u64,
    /// Chunk keys deleted because they left the dedup window.
    pub chunk_keys_pruned: u64,
    /// Rows of the volume rollup deleted because their minute left the window.
    pub volume_rows_deleted: u64,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    /// The store failed.
    #[error("retention: {0}")]
    Store(#[from] StoreError),
}

impl From<&RetentionOptions> for RetentionConfig {
    fn from(config: &RetentionOptions) -> Self {
        RetentionConfig {
            keep: (!config.retention.0.is_zero())
                .then(|| TimeDelta::from_std(config.retention.0).unwrap_or(TimeDelta::MAX)),
            interval: config.retention_interval.0,
            dedup_window: config.dedup_window.0,
        }
    }
}

impl RetentionConfig {
    /// The oldest timestamp kept, now.
    pub fn horizon(&self) -> Option<chrono::DateTime<Utc>> {
        self.keep.map(|keep| Utc::now() - keep)
    }
}

/// Prepares the store before serving: on PostgreSQL, creates the daily partitions the window
/// needs (from the horizon to a few days ahead), so records land in their own partition from the
/// first one on. Without the retention lock: creation is idempotent, and a replica racing another
/// may fail one statement, which the next run repairs.
pub async fn prepare(store: &Store, config: &RetentionConfig) -> Result<u64, RetentionError> {
    let mut session = store.retention().await?;
    let (first, last) = needed_days(config.keep, Utc::now());
    let created = session.create_partitions(first, last).await?;
    session.close().await?;
    Ok(created)
}

/// One run: create partitions ahead, drop or delete what is older than the window.
pub async fn run_once(
    store: &Store,
    config: &RetentionConfig,
) -> Result<RunReport, RetentionError> {
    let outcome = apply(store, config.keep).await;
    // Every replica prunes: the delete is idempotent and cheap when another replica already did it.
    match outcome {
        Ok(mut report) => {
            let window = TimeDelta::from_std(config.dedup_window).unwrap_or(TimeDelta::MAX);
            let edge = Utc::now()
                .checked_sub_signed(window)
                .unwrap_or(chrono::DateTime::<Utc>::MIN_UTC);
            match store.prune_chunk_keys(edge).await {
                Ok(pruned) => {
                    report.chunk_keys_pruned = pruned;
                    Ok(report)
                }
                Err(err) => Err(RetentionError::Store(err)),
            }
        }
        Err(err) => Err(err),
    }
}

/// [`run_once`], its time, outcome and work counted in `metrics`.
async fn counted_run(
    store: &Store,
    config: &RetentionConfig,
    metrics: &RetentionMetrics,
) -> Result<RunReport, RetentionError> {
    let started = Instant::now();
    let outcome = run_once(store, config).await;
    metrics.record(&outcome, started.elapsed());
    outcome
}

/// One run's work under the retention lock; nothing (`ran` false) while another replica holds it.
async fn apply(store: &Store, keep: Option<TimeDelta>) -> Result<RunReport, RetentionError> {
    let mut session = store.retention().await?;
    if !session.try_lock().await? {
        session.close().await?;
        return Ok(RunReport::default());
    }
    let outcome = locked_run(&mut session, keep).await;
    session.unlock().await;
    let _ = session.close().await;
    outcome
}

/// Creates the partitions ahead and summarizes the recent BRIN ranges; then, with a window, drops
/// the days past it whole and deletes the older rows left elsewhere.
async fn locked_run(
    session: &mut RetentionSession,
    keep: Option<TimeDelta>,
) -> Result<RunReport, RetentionError> {
    let now = Utc::now();
    let (first, last) = needed_days(keep, now);
    let mut report = RunReport {
        ran: true,
        partitions_created: session.create_partitions(first, last).await?,
        ..RunReport::default()
    };
    report.ranges_summarized = session.summarize_recent(now).await;
    let Some(keep) = keep else {
        return Ok(report);
    };
    let horizon = now - keep;
    report.partitions_dropped = session
        .drop_partitions_ending_by(horizon - DROP_GRACE)
        .await?;
    report.rows_deleted = session.delete_before(horizon).await?;
    report.volume_rows_deleted = session.delete_volume_before(horizon).await?;
    Ok(report)
}

/// How long after start-up the first run waits (one interval, if that is shorter). A restart is
/// when clients reconnect and send what they buffered meanwhile, the worst moment for a run that
/// may summarize millions of rows; the partitions the first records need were created before
/// serving (`prepare`).
const FIRST_RUN_DELAY: Duration = Duration::from_secs(60);

/// When the first run after a start at `started` is due.
fn first_run_at(started: tokio::time::Instant, interval: Duration) -> tokio::time::Instant {
    started + interval.min(FIRST_RUN_DELAY)
}

/// Runs retention every `interval`, the first run `FIRST_RUN_DELAY` after start-up, until
/// `stopping` is cancelled. Failures are logged and counted in `metrics`, and the next run tries
/// again.
pub(crate) async fn run(
    store: Store,
    config: RetentionConfig,
    metrics: Arc<RetentionMetrics>,
    stopping: CancellationToken,
) {
    let first = first_run_at(tokio::time::Instant::now(), config.interval);
    let mut every = tokio::time::interval_at(first, config.interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stopping.cancelled() => return,
            _ = every.tick() => {}
        }
        // A run in progress is not interrupted by shutdown half-way through a chunk: it finishes
        // its current statement, and the next chunk is never started.
        let run = tokio::select! {
            () = stopping.cancelled() => return,
            report = counted_run(&store, &config, &metrics) => report,
        };
        match run {
            Ok(report) if report.ran => tracing::info!(
                partitions_created = report.partitions_created,
                partitions_dropped = report.partitions_dropped,
                rows_deleted = report.rows_deleted,
                ranges_summarized = report.ranges_summarized,
                chunk_keys_pruned = report.chunk_keys_pruned,
                "retention run finished"
            ),
            Ok(_) => tracing::debug!("retention skipped: another replica holds the lock"),
            Err(err) => {
                tracing::error!(error = %err, "retention run failed; retrying at the next interval")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_run_waits_a_minute_or_one_shorter_interval() {
        let started = tokio::time::Instant::now();
        let ten_minutes = Duration::from_secs(600);
        assert_eq!(
            first_run_at(started, ten_minutes),
            started + Duration::from_secs(60)
        );
        let short = Duration::from_millis(200);
        assert_eq!(first_run_at(started, short), started + short);
    }
}
