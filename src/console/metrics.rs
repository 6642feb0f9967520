//! What the console reports: its answers, by endpoint and status.

use metrics::Unit;

use crate::observability::metrics::{CounterVec, Registry, Series};

const REQUESTS: Series = Series::new("loghaul_console_requests_total", Unit::Count, "Console requests answered, by endpoint (logs, tail, health, session, other_api, page) and HTTP status.");

/// The series of the console.
#[derive(Debug)]
pub(crate) struct ConsoleMetrics {
    /// Console requests, by endpoint and HTTP status.
    pub requests: CounterVec<2>,
}

impl ConsoleMetrics {
    /// Registers the series in `registry`.
    pub(crate) fn register(registry: &Registry) -> ConsoleMetrics {
        ConsoleMetrics {
            requests: CounterVec::register(registry, REQUESTS, ["endpoint", "status"]),
        }
    }
}
