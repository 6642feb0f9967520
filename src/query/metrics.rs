//! What reads report: queries and their time, reads refused before they ran, the memory reads
//! hold, and open tails.

use metrics::Unit;

use crate::observability::metrics::{CounterVec, Gauge, Histogram, Registry, Series};

const QUERIES: Series = Series::new("loghaul_queries_total", Unit::Count, "Query calls, by outcome: ok, invalid_argument, store_unavailable, deadline_exceeded (past --query-timeout), too_many_reads, read_memory_full (past --max-read-bytes).");
const QUERY_DURATION: Series = Series::new(
    "loghaul_query_duration_seconds",
    Unit::Seconds,
    "Time to answer one Query page.",
);
const READS_REFUSED: Series = Series::new("loghaul_reads_refused_total", Unit::Count, "Reads refused with RESOURCE_EXHAUSTED before they ran, by reason (tenant_reads: past --max-concurrent-reads-per-tenant; tenant_tails, tails: a Tail past --max-tails-per-tenant, --max-tails) and tenant.");
const READ_MEMORY_BYTES: Series = Series::new("loghaul_read_memory_bytes", Unit::Bytes, "Bytes the reads of every tenant hold now (series and points of LogQL queries, lines, pages, answers not yet sent), against --max-read-bytes.");
const READ_MEMORY_REFUSALS: Series = Series::new("loghaul_read_memory_refusals_total", Unit::Count, "Reads stopped and refused for memory, by the bound they met (query: one read past --max-query-bytes, answered 400 or RESOURCE_EXHAUSTED; all_reads: the reads together at --max-read-bytes, answered 503 or RESOURCE_EXHAUSTED with a retry delay) and tenant.");
const TAIL_SUBSCRIBERS: Series = Series::new(
    "loghaul_tail_subscribers",
    Unit::Count,
    "Tail streams open now.",
);
const TAILS_ENDED: Series = Series::new("loghaul_tails_ended_total", Unit::Count, "Tail streams ended, by reason: client_gone, too_slow, store_unavailable, shutting_down, deadline_exceeded (polls past --query-timeout).");
const TAIL_QUEUED_BYTES: Series = Series::new("loghaul_tail_queued_bytes", Unit::Bytes, "Bytes of records queued for tail subscribers until their connections take them, each subscriber's at most --tail-queue-bytes.");

/// The series of every read, whichever API made it.
#[derive(Debug)]
pub(crate) struct QueryMetrics {
    /// Query calls, by outcome.
    pub queries: CounterVec<1>,
    /// Time to answer one Query page.
    pub query_duration: Histogram,
    /// Reads refused before they ran, by reason and tenant.
    pub reads_refused: CounterVec<2>,
    /// Bytes every read holds now, against `--max-read-bytes`.
    pub read_memory_bytes: Gauge,
    /// Reads stopped for memory, by the bound they met and tenant.
    pub read_memory_refusals: CounterVec<2>,
    /// Tail streams open now.
    pub tail_subscribers: Gauge,
    /// Tail streams ended, by reason.
    pub tails_ended: CounterVec<1>,
    /// Bytes of records queued for tail subscribers.
    pub tail_queued_bytes: Gauge,
}

impl QueryMetrics {
    /// Registers the series in `registry`.
    pub(crate) fn register(registry: &Registry) -> QueryMetrics {
        QueryMetrics {
            queries: CounterVec::register(registry, QUERIES, ["outcome"]),
            query_duration: Histogram::register(registry, QUERY_DURATION, Vec::new()),
            reads_refused: CounterVec::register(registry, READS_REFUSED, ["reason", "tenant"]),
            read_memory_bytes: Gauge::register(registry, READ_MEMORY_BYTES, Vec::new()),
            read_memory_refusals: CounterVec::register(
                registry,
                READ_MEMORY_REFUSALS,
                ["limit", "tenant"],
            ),
            tail_subscribers: Gauge::register(registry, TAIL_SUBSCRIBERS, Vec::new()),
            tails_ended: CounterVec::register(registry, TAILS_ENDED, ["reason"]),
            tail_queued_bytes: Gauge::register(registry, TAIL_QUEUED_BYTES, Vec::new()),
        }
    }
}
