//! Past hours, looked after in the background: each is indexed once it is over, then sealed. This
//! module is the policy: when a run happens, which partitions are due, one replica at a time, and
//! what is reported; the store does the work (`storage/postgres/hour_index.rs` says what a past
//! hour is given, `storage/postgres/seal.rs` how a partition is rewritten and swapped).
//!
//! PostgreSQL only: SQLite keeps rows as written. A server without the `citus_columnar`
//! extension keeps its partitions heap, indexed; the start-up log says so once, and
//! `loghaul_sealing_enabled` is 0.

pub(crate) mod metrics;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use tokio_util::sync::CancellationToken;

use self::metrics::SealingMetrics;
use crate::config::SealingOptions;
use crate::storage::postgres::{Leaf, Pace, PgSealer, Sealing, INDEX_AFTER};
use crate::storage::{Store, StoreError};

/// When partitions are sealed and how often the sealer looks.
#[derive(Clone, Debug)]
pub struct SealingConfig {
    /// An hour is sealed once it has been over this long; `None` turns sealing off.
    pub seal_after: Option<TimeDelta>,
    /// Time between runs.
    pub interval: Duration,
    /// Percent of the time a seal keeps the database busy.
    pub busy_percent: u8,
}

impl From<&SealingOptions> for SealingConfig {
    fn from(options: &SealingOptions) -> Self {
        SealingConfig {
            seal_after: (!options.seal_after.0.is_zero())
                .then(|| TimeDelta::from_std(options.seal_after.0).unwrap_or(TimeDelta::MAX)),
            interval: options.seal_interval.0,
            busy_percent: options.seal_busy_percent,
        }
    }
}

/// What one run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SealReport {
    /// False when another replica holds the sealing lock and this run did nothing.
    pub ran: bool,
    /// Past heap hours given their indexes.
    pub indexed: u64,
    /// Partitions sealed.
    pub sealed: u64,
    /// Rows they hold.
    pub rows: u64,
    /// Seals (or index builds) that failed; the next run tries them again.
    pub failed: u64,
}

/// Gives every past heap hour its indexes and, when `seal_after` is set, seals every
/// partition due at `now`, oldest first, until `stopping` is cancelled; counts each in `metrics`.
/// Nothing while another replica holds the lock.
pub(crate) async fn run_once(
    sealer: &mut PgSealer,
    seal_after: Option<TimeDelta>,
    busy_percent: u8,
    now: DateTime<Utc>,
    metrics: &SealingMetrics,
    stopping: &CancellationToken,
) -> Result<SealReport, StoreError> {
    if !sealer.try_lock().await? {
        return Ok(SealReport::default());
    }
    let outcome = locked_run(sealer, seal_after, busy_percent, now, metrics, stopping).await;
    sealer.unlock().await;
    outcome
}

/// [`run_once`]'s work under the lock.
async fn locked_run(
    sealer: &mut PgSealer,
    seal_after: Option<TimeDelta>,
    busy_percent: u8,
    now: DateTime<Utc>,
    metrics: &SealingMetrics,
    stopping: &CancellationToken,
) -> Result<SealReport, StoreError> {
    let mut report = SealReport {
        ran: true,
        ..SealReport::default()
    };
    let cutoff = seal_after.map(|after| now - after);
    if cutoff.is_some() {
        sealer.drop_leftovers().await?;
    }
    let leaves = sealer.leaves().await?;
    // An hour about to be sealed is not worth an index its seal drops.
    let to_index: Vec<Leaf> = leaves
        .iter()
        .filter(|leaf| {
            leaf.wants_index(now - INDEX_AFTER) && !cutoff.is_some_and(|c| leaf.wants_sealing(c))
        })
        .cloned()
        .collect();
    for leaf in &to_index {
        if stopping.is_cancelled() {
            break;
        }
        let started = Instant::now();
        match sealer.index(leaf).await {
            Ok(false) => {}
            Ok(true) => {
                metrics.indexed.increment(1);
                report.indexed += 1;
                tracing::info!(
                    partition = %leaf.name,
                    seconds = started.elapsed().as_secs_f64(),
                    "indexed a past hour by service and by stream labels"
                );
            }
            Err(err) => {
                metrics.index_failures.increment(1);
                report.failed += 1;
                tracing::warn!(partition = %leaf.name, error = %err, "indexing a past hour failed; the next run tries again");
            }
        }
    }
    if let Some(cutoff) = cutoff {
        seal_due(
            sealer,
            leaves,
            cutoff,
            busy_percent,
            metrics,
            stopping,
            &mut report,
        )
        .await;
    }
    let (heap, columnar) = sealer.bytes_by_tier().await?;
    metrics.heap_bytes.set(heap as f64);
    metrics.columnar_bytes.set(columnar as f64);
    Ok(report)
}

/// Seals the `leaves` due at `cutoff`, oldest first, until `stopping` is cancelled.
async fn seal_due(
    sealer: &mut PgSealer,
    leaves: Vec<Leaf>,
    cutoff: DateTime<Utc>,
    busy_percent: u8,
    metrics: &SealingMetrics,
    stopping: &CancellationToken,
    report: &mut SealReport,
) {
    // The end of the oldest hour still waiting after this run, for the lag.
    let mut waiting = None;
    let due: Vec<Leaf> = leaves
        .into_iter()
        .filter(|leaf| leaf.wants_sealing(cutoff))
        .collect();
    for leaf in &due {
        if stopping.is_cancelled() {
            waiting = waiting.or(Some(leaf.to));
            break;
        }
        let started = Instant::now();
        match sealer.seal(leaf, Pace::new(busy_percent)).await {
            Ok(sealed) => {
                let rows = sealed.rows + sealed.caught_up;
                metrics.sealed(rows, started.elapsed(), sealed.swap);
                report.sealed += 1;
                report.rows += rows;
                tracing::info!(
                    partition = %leaf.name,
                    rows,
                    caught_up = sealed.caught_up,
                    swap_seconds = sealed.swap.as_secs_f64(),
                    seconds = started.elapsed().as_secs_f64(),
                    "sealed a partition into columnar form"
                );
            }
            Err(err) => {
                waiting = waiting.or(Some(leaf.to));
                metrics.failures.increment(1);
                report.failed += 1;
                tracing::warn!(partition = %leaf.name, error = %err, "sealing failed; the next run tries again");
            }
        }
    }
    metrics.lag.set(waiting.map_or(0.0, |due| {
        (cutoff - due).num_milliseconds().max(0) as f64 / 1000.0
    }));
}

/// How long after start-up the first run waits (one interval, if that is shorter): a restart is
/// when clients send what they buffered meanwhile, no moment for rewriting hours.
const FIRST_RUN_DELAY: Duration = Duration::from_secs(60);

/// Runs the sealer every `interval` until `stopping` is cancelled. It first finds out whether the
/// store can seal, says once in the log what it found, and stops if it cannot.
pub(crate) async fn run(
    store: Store,
    config: SealingConfig,
    metrics: Arc<SealingMetrics>,
    stopping: CancellationToken,
) {
    let mut sealer = match store.sealer().await {
        Ok(Some(sealer)) => sealer,
        Ok(None) => return,
        Err(err) => {
            tracing::warn!(error = %err, "cannot open the sealer's session; sealing is off until restart");
            return;
        }
    };
    // Without sealing, past hours are still indexed: they stay heap for good.
    let seal_after = match config.seal_after {
        None => {
            tracing::info!("sealing is off (--seal-after 0s): partitions stay heap");
            None
        }
        Some(seal_after) => match sealer.sealing().await {
            Ok(Sealing::On) => {
                metrics.enabled.set(1.0);
                tracing::info!(seal_after = %humantime::format_duration(seal_after.to_std().unwrap_or_default()), "sealing past hours into compressed columnar partitions");
                Some(seal_after)
            }
            Ok(Sealing::Off(why)) => {
                tracing::warn!(reason = %why, "sealing is off: partitions stay heap");
                None
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot tell whether the store can seal; sealing is off until restart");
                None
            }
        },
    };
    let first = tokio::time::Instant::now() + config.interval.min(FIRST_RUN_DELAY);
    let mut every = tokio::time::interval_at(first, config.interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stopping.cancelled() => break,
            _ = every.tick() => {}
        }
        // Shutdown does not wait for a seal: dropping the session rolls back its copy or swap,
        // which leaves the heap in place, and the next seal of that hour starts over.
        let run = tokio::select! {
            () = stopping.cancelled() => return,
            report = run_once(&mut sealer, seal_after, config.busy_percent, Utc::now(), &metrics, &stopping) => report,
        };
        match run {
            Ok(report) if report.sealed > 0 || report.failed > 0 => tracing::info!(
                indexed = report.indexed,
                sealed = report.sealed,
                rows = report.rows,
                failed = report.failed,
                "sealing run finished"
            ),
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(error = %err, "sealing run failed; retrying at the next interval");
                // A broken session is opened again at the next run.
                match store.sealer().await {
                    Ok(Some(fresh)) => sealer = fresh,
                    _ => continue,
                }
            }
        }
    }
    sealer.close().await;
}
