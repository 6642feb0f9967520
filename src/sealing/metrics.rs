//! What the sealer reports: whether it can seal, the past hours it indexed, what it sealed, how
//! long that took, how far it is behind, and the bytes on disk of each tier.

use std::time::Duration;

use metrics::Unit;

use crate::observability::metrics::{Counter, Gauge, GaugeVec, Histogram, Registry, Series};

const ENABLED: Series = Series::new(
    "loghaul_sealing_enabled",
    Unit::Count,
    "1 when past hours are sealed into columnar partitions; 0 when not (SQLite, --seal-after 0s, or no citus_columnar: the start-up log says which).",
);
const SEALED: Series = Series::new(
    "loghaul_partitions_sealed_total",
    Unit::Count,
    "Partitions (hours) rewritten into compressed columnar form, late-row reseals included.",
);
const SEAL_FAILURES: Series = Series::new(
    "loghaul_seal_failures_total",
    Unit::Count,
    "Seals that failed (a lock not granted in time, say); the next run tries again.",
);
const ROWS_SEALED: Series = Series::new(
    "loghaul_rows_sealed_total",
    Unit::Count,
    "Rows rewritten into columnar partitions.",
);
const SEAL_DURATION: Series = Series::new(
    "loghaul_seal_duration_seconds",
    Unit::Seconds,
    "Time one partition's seal took, copy and swap.",
);
const SEAL_SWAP: Series = Series::new(
    "loghaul_seal_swap_seconds",
    Unit::Seconds,
    "Time one seal's swap held its locks (waiting for them included, every try together): how long writes and reads of that day queued behind it.",
);
const SEAL_LAG: Series = Series::new(
    "loghaul_seal_lag_seconds",
    Unit::Seconds,
    "How long the oldest hour due for sealing has waited past --seal-after; 0 when none waits.",
);
const HOURS_INDEXED: Series = Series::new(
    "loghaul_hours_indexed_total",
    Unit::Count,
    "Past heap hours given their indexes (by tenant, service and time; of stream labels), which reads of one service or stream use until the hour is sealed.",
);
const INDEX_FAILURES: Series = Series::new(
    "loghaul_hour_index_failures_total",
    Unit::Count,
    "Index builds of past hours that failed; the next run tries again.",
);
const STORAGE_BYTES: Series = Series::new(
    "loghaul_storage_bytes",
    Unit::Bytes,
    "Bytes on disk of the log partitions by tier: heap (rows as written) and columnar (sealed).",
);

/// The series of the sealer.
#[derive(Debug)]
pub(crate) struct SealingMetrics {
    /// 1 when sealing runs.
    pub enabled: Gauge,
    /// Partitions sealed.
    pub sealed: Counter,
    /// Seals that failed.
    pub failures: Counter,
    /// Rows sealed.
    pub rows: Counter,
    /// Time per seal.
    pub duration: Histogram,
    /// Time per seal that its swap held or waited for its locks.
    pub swap: Histogram,
    /// Seconds the oldest due hour has waited.
    pub lag: Gauge,
    /// Past hours indexed.
    pub indexed: Counter,
    /// Index builds that failed.
    pub index_failures: Counter,
    /// Bytes of heap partitions.
    pub heap_bytes: Gauge,
    /// Bytes of columnar partitions.
    pub columnar_bytes: Gauge,
}

impl SealingMetrics {
    /// Registers the series in `registry`.
    pub(crate) fn register(registry: &Registry) -> SealingMetrics {
        let counter = |series| Counter::register(registry, series, Vec::new());
        let tiers = GaugeVec::register(registry, STORAGE_BYTES, "tier");
        SealingMetrics {
            enabled: Gauge::register(registry, ENABLED, Vec::new()),
            sealed: counter(SEALED),
            failures: counter(SEAL_FAILURES),
            rows: counter(ROWS_SEALED),
            duration: Histogram::register(registry, SEAL_DURATION, Vec::new()),
            swap: Histogram::register(registry, SEAL_SWAP, Vec::new()),
            lag: Gauge::register(registry, SEAL_LAG, Vec::new()),
            indexed: counter(HOURS_INDEXED),
            index_failures: counter(INDEX_FAILURES),
            heap_bytes: tiers.handle("heap"),
            columnar_bytes: tiers.handle("columnar"),
        }
    }

    /// Counts one seal of `rows` rows that took `took`, its locks held for `swap`.
    pub(crate) fn sealed(&self, rows: u64, took: Duration, swap: Duration) {
        self.sealed.increment(1);
        self.rows.increment(rows);
        self.duration.record(took.as_secs_f64());
        self.swap.record(swap.as_secs_f64());
    }
}
