//! What the stores report beside their answers: SQLite's WAL checkpoints.

use metrics::Unit;

use crate::observability::metrics::{Counter, HistogramVec, Registry, Series};

const SQLITE_CHECKPOINT_ERRORS: Series = Series::new(
    "loghaul_sqlite_checkpoint_errors_total",
    Unit::Count,
    "SQLite checkpoint passes that failed (the WAL grows until a later pass gets through).",
);
const SQLITE_CHECKPOINT: Series = Series::new(
    "loghaul_sqlite_checkpoint_seconds",
    Unit::Seconds,
    "Time a SQLite WAL rewind held the writers, by outcome: rewound, busy.",
);

/// The series of the store.
#[derive(Debug)]
pub(crate) struct StorageMetrics {
    /// Failed SQLite checkpoint passes.
    pub sqlite_checkpoint_errors: Counter,
    /// Time a WAL rewind held the writers, by outcome.
    pub sqlite_checkpoint: HistogramVec<1>,
}

impl StorageMetrics {
    /// Registers the series in `registry`.
    pub(crate) fn register(registry: &Registry) -> StorageMetrics {
        StorageMetrics {
            sqlite_checkpoint_errors: Counter::register(
                registry,
                SQLITE_CHECKPOINT_ERRORS,
                Vec::new(),
            ),
            sqlite_checkpoint: HistogramVec::register(registry, SQLITE_CHECKPOINT, ["outcome"]),
        }
    }
}
