//! What the HTTP listeners report about their connections, each under its `listener` name.

use metrics::Unit;

use crate::observability::metrics::{CounterVec, GaugeVec, Registry, Series};

const CONNECTIONS: Series = Series::new(
    "loghaul_http_connections",
    Unit::Count,
    "Connections open now on an HTTP listener (metrics, console, ingest).",
);
const REFUSED: Series = Series::new("loghaul_http_connections_refused_total", Unit::Count, "Connections an HTTP listener (metrics, console, ingest) closed on accept because its connection cap (--http-max-connections; ingest: --http-ingest-max-connections) was reached and every open connection had a request in flight.");
const EVICTED: Series = Series::new("loghaul_http_connections_evicted_total", Unit::Count, "Idle connections (no request in flight: none sent yet, or kept alive between requests) an HTTP listener (metrics, console, ingest) closed to make room for a new connection at its connection cap; the one idle longest goes first.");
const HEADER_TIMEOUTS: Series = Series::new("loghaul_http_header_timeouts_total", Unit::Count, "Connections an HTTP listener (metrics, console, ingest) closed because no complete request headers came within --http-header-read-timeout.");

/// The series of every HTTP listener.
#[derive(Debug)]
pub(crate) struct ListenerMetrics {
    /// Connections open on an HTTP listener.
    pub connections: GaugeVec,
    /// Connections an HTTP listener closed at accept, over its cap with every connection busy.
    pub refused: CounterVec<1>,
    /// Idle connections an HTTP listener closed to make room for a new one at its cap.
    pub evicted: CounterVec<1>,
    /// Connections an HTTP listener closed for slow headers.
    pub header_timeouts: CounterVec<1>,
}

impl ListenerMetrics {
    /// Registers the series in `registry`.
    pub(crate) fn register(registry: &Registry) -> ListenerMetrics {
        ListenerMetrics {
            connections: GaugeVec::register(registry, CONNECTIONS, "listener"),
            refused: CounterVec::register(registry, REFUSED, ["listener"]),
            evicted: CounterVec::register(registry, EVICTED, ["listener"]),
            header_timeouts: CounterVec::register(registry, HEADER_TIMEOUTS, ["listener"]),
        }
    }
}
