//! What Loki's query API reports: its requests by endpoint and outcome, their time, and what
//! answered each range function of a metric query.

use metrics::Unit;

use crate::observability::metrics::{CounterVec, Histogram, Registry, Series};

const QUERIES: Series = Series::new("loghaul_loki_queries_total", Unit::Count, "Loki query API requests (the HTTP listener's /loki/api/v1/... reads), by endpoint (query_range, query, labels, label_values, series, volume, volume_range, index_stats, format_query, tail) and outcome (ok, bad_request, unauthenticated, forbidden, too_many_reads, read_too_large, read_memory_full, deadline_exceeded, store_unavailable, ...).");
const QUERY_DURATION: Series = Series::new(
    "loghaul_loki_query_duration_seconds",
    Unit::Seconds,
    "Time to answer one Loki query API request.",
);
const METRIC_SOURCES: Series = Series::new("loghaul_loki_metric_sources_total", Unit::Count, "Range functions of LogQL metric queries, by what answered them: rollup (the per-minute log_volume table), count (the rows, counted by the database) or scan (the rows, sent to the engine).");

/// The series of Loki's query API.
#[derive(Debug)]
pub(crate) struct LokiMetrics {
    /// Loki query API requests, by endpoint and outcome.
    pub queries: CounterVec<2>,
    /// Time to answer one Loki query API request.
    pub query_duration: Histogram,
    /// Metric queries' range functions, by what answered them: the rollup or a scan.
    pub metric_sources: CounterVec<1>,
}

impl LokiMetrics {
    /// Registers the series in `registry`.
    pub(crate) fn register(registry: &Registry) -> LokiMetrics {
        LokiMetrics {
            queries: CounterVec::register(registry, QUERIES, ["endpoint", "outcome"]),
            query_duration: Histogram::register(registry, QUERY_DURATION, Vec::new()),
            metric_sources: CounterVec::register(registry, METRIC_SOURCES, ["source"]),
        }
    }
}
