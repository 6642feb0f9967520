//! What retention reports: its runs, their time, and what each removed or prepared.

use std::time::Duration;

use chrono::Utc;
use metrics::Unit;

use super::{RetentionError, RunReport};
use crate::observability::metrics::{Counter, CounterVec, Gauge, Histogram, Registry, Series};

const RUNS: Series = Series::new(
    "loghaul_retention_runs_total",
    Unit::Count,
    "Retention runs, by outcome: ok, skipped_locked (another replica runs it), failed.",
);
const RUN_DURATION: Series = Series::new(
    "loghaul_retention_run_duration_seconds",
    Unit::Seconds,
    "Time one retention run took.",
);
const LAST_RUN: Series = Series::new(
    "loghaul_retention_last_run_timestamp_seconds",
    Unit::Seconds,
    "Unix time of the last retention run this replica completed.",
);
const PARTITIONS_CREATED: Series = Series::new(
    "loghaul_retention_partitions_created_total",
    Unit::Count,
    "Daily partitions created ahead (PostgreSQL).",
);
const PARTITIONS_DROPPED: Series = Series::new(
    "loghaul_retention_partitions_dropped_total",
    Unit::Count,
    "Daily partitions dropped whole because their day left the retention window (PostgreSQL).",
);
const ROWS_DELETED: Series = Series::new(
    "loghaul_retention_rows_deleted_total",
    Unit::Count,
    "Rows deleted in chunks (SQLite, and the PostgreSQL default partition).",
);
const VOLUME_ROWS_DELETED: Series = Series::new(
    "loghaul_retention_volume_rows_deleted_total",
    Unit::Count,
    "Rows of the per-minute volume rollup deleted because their minute left the retention window.",
);
const BRIN_RANGES_SUMMARIZED: Series = Series::new(
    "loghaul_brin_ranges_summarized_total",
    Unit::Count,
    "BRIN page ranges the retention task summarized (PostgreSQL), so reads can skip them.",
);
const CHUNK_KEYS_PRUNED: Series = Series::new(
    "loghaul_chunk_keys_pruned_total",
    Unit::Count,
    "Chunk keys deleted after the dedup window (--dedup-window).",
);

/// The series of the retention task.
#[derive(Debug)]
pub(crate) struct RetentionMetrics {
    /// Retention runs, by outcome.
    pub runs: CounterVec<1>,
    /// Time one retention run took.
    pub run_duration: Histogram,
    /// Unix time of this replica's last completed retention run.
    pub last_run: Gauge,
    /// Daily partitions created ahead.
    pub partitions_created: Counter,
    /// Daily partitions dropped whole.
    pub partitions_dropped: Counter,
    /// Rows deleted in chunks by retention.
    pub rows_deleted: Counter,
    /// Volume rollup rows deleted by retention.
    pub volume_rows_deleted: Counter,
    /// BRIN ranges summarized by retention.
    pub brin_ranges_summarized: Counter,
    /// Chunk keys deleted after the dedup window.
    pub chunk_keys_pruned: Counter,
}

impl RetentionMetrics {
    /// Registers the series in `registry`.
    pub(crate) fn register(registry: &Registry) -> RetentionMetrics {
        let counter = |series| Counter::register(registry, series, Vec::new());
        RetentionMetrics {
            runs: CounterVec::register(registry, RUNS, ["outcome"]),
            run_duration: Histogram::register(registry, RUN_DURATION, Vec::new()),
            last_run: Gauge::register(registry, LAST_RUN, Vec::new()),
            partitions_created: counter(PARTITIONS_CREATED),
            partitions_dropped: counter(PARTITIONS_DROPPED),
            rows_deleted: counter(ROWS_DELETED),
            volume_rows_deleted: counter(VOLUME_ROWS_DELETED),
            brin_ranges_summarized: counter(BRIN_RANGES_SUMMARIZED),
            chunk_keys_pruned: counter(CHUNK_KEYS_PRUNED),
        }
    }

    /// Counts one run that took `took` and ended with `outcome`.
    pub(crate) fn record(&self, outcome: &Result<RunReport, RetentionError>, took: Duration) {
        self.run_duration.record(took.as_secs_f64());
        let label = match outcome {
            Ok(report) if report.ran => "ok",
            Ok(_) => "skipped_locked",
            Err(_) => "failed",
        };
        self.runs.increment_static([label], 1);
        let Ok(report) = outcome else {
            return;
        };
        self.partitions_created.increment(report.partitions_created);
        self.partitions_dropped.increment(report.partitions_dropped);
        self.rows_deleted.increment(report.rows_deleted);
        self.brin_ranges_summarized
            .increment(report.ranges_summarized);
        self.chunk_keys_pruned.increment(report.chunk_keys_pruned);
        self.volume_rows_deleted
            .increment(report.volume_rows_deleted);
        if report.ran {
            self.last_run
                .set(Utc::now().timestamp_millis() as f64 / 1000.0);
        }
    }
}
