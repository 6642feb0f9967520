//! Every series the service emits, declared once with its help text and labels in [`Metrics`],
//! registered once when the recorder is installed, and used by field access.
//!
//! Names follow Prometheus conventions (`loghaul_` prefix, `_total`, `_seconds`, `_bytes`); labels
//! are bounded by construction: `shard` by the shard count, `tenant` by the configured keys,
//! `reason`/`kind`/`resource`/`outcome`/`trigger`/`protocol` by enums in the code, `listener` by the
//! three HTTP listeners. Series a record passes through (per tenant, per shard) are resolved once into
//! [`TenantMetrics`] and [`ShardMetrics`], so the hot path looks nothing up by name.

pub(crate) mod handles;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{Label, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub(crate) use handles::{
    Counter, CounterVec, Gauge, GaugeVec, Histogram, HistogramSnapshot, HistogramVec, Series,
};

use crate::model::reject::RejectReason;

const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const ROWS_BUCKETS: &[f64] = &[
    1.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 25000.0,
];

/// What triggered a batch's flush: the `trigger` label of `loghaul_batches_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushTrigger {
    /// The batch reached its row or byte limit.
    Full = 0,
    /// Its oldest row waited `--batch-linger`.
    Linger = 1,
    /// The service is draining.
    Shutdown = 2,
}

impl FlushTrigger {
    const ALL: [FlushTrigger; 3] = [
        FlushTrigger::Full,
        FlushTrigger::Linger,
        FlushTrigger::Shutdown,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            FlushTrigger::Full => "full",
            FlushTrigger::Linger => "linger",
            FlushTrigger::Shutdown => "shutdown",
        }
    }
}

/// The wire protocol a record came in by: the `protocol` label of `loghaul_ingest_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `loghaul.v1.LogIngest/Push`.
    Push = 0,
    /// OTLP over gRPC.
    OtlpGrpc = 1,
    /// OTLP over HTTP (`POST /v1/logs`).
    OtlpHttp = 2,
    /// The Loki push API (`POST /loki/api/v1/push`).
    Loki = 3,
}

impl Protocol {
    const ALL: [Protocol; 4] = [
        Protocol::Push,
        Protocol::OtlpGrpc,
        Protocol::OtlpHttp,
        Protocol::Loki,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Push => "push",
            Protocol::OtlpGrpc => "otlp_grpc",
            Protocol::OtlpHttp => "otlp_http",
            Protocol::Loki => "loki",
        }
    }
}

const RECORDS_RECEIVED: Series = Series::new(
    "loghaul_records_received_total",
    Unit::Count,
    "Records received by any protocol, valid or not, by tenant.",
);
const RECORDS_COMMITTED: Series = Series::new(
    "loghaul_records_committed_total",
    Unit::Count,
    "Records committed to the database, by tenant.",
);
const RECORDS_REJECTED: Series = Series::new(
    "loghaul_records_rejected_total",
    Unit::Count,
    "Records refused, by reason and tenant; each is reported to its client with its index.",
);
const RECORDS_FAILED: Series = Series::new(
    "loghaul_records_failed_total",
    Unit::Count,
    "Records whose batch could not be stored after retries, by tenant; their streams got UNAVAILABLE.",
);
const RATE_LIMITED: Series = Series::new(
    "loghaul_rate_limited_total",
    Unit::Count,
    "Push streams ended with RESOURCE_EXHAUSTED for exceeding their tenant's rate limit, by tenant.",
);
const QUEUE_DEPTH: Series = Series::new(
    "loghaul_queue_depth",
    Unit::Count,
    "Chunks waiting in a shard's queue.",
);
const QUEUE_CAPACITY: Series = Series::new(
    "loghaul_queue_capacity",
    Unit::Count,
    "Chunks a shard's queue holds before senders wait.",
);
const BATCH_ROWS: Series =
    Series::new("loghaul_batch_rows", Unit::Count, "Rows per flushed batch.");
const BATCH_AGE: Series = Series::new(
    "loghaul_batch_age_seconds",
    Unit::Seconds,
    "Age of a batch's oldest row when its flush started.",
);
const FLUSH_DURATION: Series = Series::new(
    "loghaul_flush_duration_seconds",
    Unit::Seconds,
    "Time to write a batch, retries included.",
);
const BATCHES: Series = Series::new(
    "loghaul_batches_total",
    Unit::Count,
    "Batches flushed, by shard and by what triggered the flush (full, linger, shutdown).",
);

/// The process's series.
pub(crate) struct Metrics {
    /// Push streams open now.
    pub active_streams: Gauge,
    /// Push streams ended, by outcome.
    pub streams_ended: CounterVec<1>,
    /// OTLP Export calls answered, by outcome.
    pub otlp_exports: CounterVec<1>,
    /// Requests answered on the HTTP ingest listener, by protocol and outcome.
    pub http_ingest_requests: CounterVec<2>,
    /// Records received, by protocol (indexed like [`Protocol::ALL`]).
    ingest_records: Vec<Counter>,
    /// Bytes held by requests in progress and by queued records.
    pub buffered_bytes: Gauge,
    /// The buffer budget.
    pub buffered_bytes_limit: Gauge,
    /// Bytes the requests in progress have claimed plus the bytes of queued chunks: what
    /// admission to the budget counts.
    pub buffer_claimed_bytes: Gauge,
    /// Requests waiting for room in the budget.
    pub buffer_waiting_requests: Gauge,
    /// Time a chunk waited for room.
    pub backpressure_wait: Histogram,
    /// Streams ended after waiting the enqueue timeout, by the full resource.
    pub backpressure_timeouts: CounterVec<1>,
    /// Chunks not stored because they already were.
    pub duplicate_chunks: Counter,
    /// Records of those chunks.
    pub duplicate_records: Counter,
    /// Failed insert attempts, by kind.
    pub insert_errors: CounterVec<1>,
    /// 1 while the database answers.
    pub store_up: Gauge,
    /// 1 while the service is ready for traffic.
    pub ready: Gauge,
    /// Calls refused with UNAUTHENTICATED or PERMISSION_DENIED, by reason.
    pub auth_failures: CounterVec<1>,
    /// API keys in force.
    pub api_keys: Gauge,
    /// Key reloads, by outcome.
    pub api_keys_reloads: CounterVec<1>,
    /// Query calls, by outcome.
    pub queries: CounterVec<1>,
    /// Time to answer one Query page.
    pub query_duration: Histogram,
    /// Loki query API requests, by endpoint and outcome.
    pub loki_queries: CounterVec<2>,
    /// Time to answer one Loki query API request.
    pub loki_query_duration: Histogram,
    /// Metric queries' range functions, by what answered them: the rollup or a scan.
    pub loki_metric_sources: CounterVec<1>,
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
    /// Console requests, by endpoint and HTTP status.
    pub console_requests: CounterVec<2>,
    /// Connections open on an HTTP listener.
    pub http_connections: GaugeVec,
    /// Connections an HTTP listener closed at accept, over its cap with every connection busy.
    pub http_connections_refused: CounterVec<1>,
    /// Idle connections an HTTP listener closed to make room for a new one at its cap.
    pub http_connections_evicted: CounterVec<1>,
    /// Connections an HTTP listener closed for slow headers.
    pub http_header_timeouts: CounterVec<1>,
    /// Retention runs, by outcome.
    pub retention_runs: CounterVec<1>,
    /// Time one retention run took.
    pub retention_run_duration: Histogram,
    /// Unix time of this replica's last completed retention run.
    pub retention_last_run: Gauge,
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
    /// Failed SQLite checkpoint passes.
    pub sqlite_checkpoint_errors: Counter,
    /// Time a WAL rewind held the writers, by outcome.
    pub sqlite_checkpoint: HistogramVec<1>,
    tenants: Mutex<HashMap<Arc<str>, Arc<TenantMetrics>>>,
    shards: Mutex<Vec<Arc<ShardMetrics>>>,
}

/// The series of one tenant's records.
#[derive(Debug)]
pub struct TenantMetrics {
    /// Records received, valid or not.
    pub received: Counter,
    /// Records committed.
    pub committed: Counter,
    /// Records refused, by reason (indexed like [`RejectReason::ALL`]).
    rejected: Vec<Counter>,
    /// Records of batches that failed for good.
    pub failed: Counter,
    /// Streams ended for exceeding the tenant's rate.
    pub rate_limited: Counter,
}

impl TenantMetrics {
    fn register(tenant: &str) -> TenantMetrics {
        let by_tenant = || vec![Label::new("tenant", tenant.to_owned())];
        let rejected = RejectReason::ALL
            .iter()
            .map(|reason| {
                let mut labels = vec![Label::from_static_parts("reason", reason.as_str())];
                labels.extend(by_tenant());
                Counter::register(RECORDS_REJECTED, labels)
            })
            .collect();
        TenantMetrics {
            received: Counter::register(RECORDS_RECEIVED, by_tenant()),
            committed: Counter::register(RECORDS_COMMITTED, by_tenant()),
            rejected,
            failed: Counter::register(RECORDS_FAILED, by_tenant()),
            rate_limited: Counter::register(RATE_LIMITED, by_tenant()),
        }
    }

    /// The counter of records refused for `reason`.
    pub fn rejected(&self, reason: RejectReason) -> &Counter {
        // Registered in `RejectReason::ALL` order, which is discriminant order (a test checks).
        &self.rejected[reason as usize]
    }

    /// Records refused, whatever the reason.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().map(Counter::get).sum()
    }
}

/// The series of one shard's queue and batches.
#[derive(Debug)]
pub struct ShardMetrics {
    /// Chunks waiting in the queue.
    pub queue_depth: Gauge,
    /// Chunks the queue holds.
    pub queue_capacity: Gauge,
    /// Rows per flushed batch.
    pub batch_rows: Histogram,
    /// Age of a batch's oldest row at flush.
    pub batch_age: Histogram,
    /// Time to write a batch.
    pub flush_duration: Histogram,
    batches: Vec<Counter>,
}

impl ShardMetrics {
    fn register(shard: usize) -> ShardMetrics {
        let by_shard = || vec![Label::new("shard", shard.to_string())];
        let batches = FlushTrigger::ALL
            .iter()
            .map(|trigger| {
                let mut labels = by_shard();
                labels.push(Label::from_static_parts("trigger", trigger.as_str()));
                Counter::register(BATCHES, labels)
            })
            .collect();
        ShardMetrics {
            queue_depth: Gauge::register(QUEUE_DEPTH, by_shard()),
            queue_capacity: Gauge::register(QUEUE_CAPACITY, by_shard()),
            batch_rows: Histogram::register(BATCH_ROWS, by_shard(), ROWS_BUCKETS),
            batch_age: Histogram::register(BATCH_AGE, by_shard(), SECONDS_BUCKETS),
            flush_duration: Histogram::register(FLUSH_DURATION, by_shard(), SECONDS_BUCKETS),
            batches,
        }
    }

    /// Counts a flushed batch.
    pub fn batch_flushed(&self, trigger: FlushTrigger) {
        // `ALL` lists the triggers in discriminant order, which a test checks.
        self.batches[trigger as usize].increment(1);
    }
}

impl Metrics {
    fn register() -> Metrics {
        use Unit::{Bytes, Count, Seconds};
        let counter = |name, help| Counter::register(Series::new(name, Count, help), Vec::new());
        let gauge = |name, unit, help| Gauge::register(Series::new(name, unit, help), Vec::new());
        let seconds = |name, help| {
            Histogram::register(
                Series::new(name, Seconds, help),
                Vec::new(),
                SECONDS_BUCKETS,
            )
        };
        Metrics {
            active_streams: gauge("loghaul_active_streams", Count, "Push streams open now."),
            streams_ended: CounterVec::register(
                Series::new("loghaul_streams_total", Count, "Push streams ended, by outcome (ok or the error kind)."),
                ["outcome"],
            ),
            otlp_exports: CounterVec::register(
                Series::new("loghaul_otlp_exports_total", Count, "OTLP Export requests answered, by outcome (ok, possibly with partial success, or the error)."),
                ["outcome"],
            ),
            http_ingest_requests: CounterVec::register(
                Series::new("loghaul_http_ingest_requests_total", Count, "Requests answered on the HTTP ingest listener, by protocol (otlp_http, loki, cors_preflight, other) and outcome (ok, partial, or the error: unauthenticated, malformed_message, unsupported_media_type, request_too_large, backpressure, rate_limited, store_unavailable, ...)."),
                ["protocol", "outcome"],
            ),
            ingest_records: Protocol::ALL
                .iter()
                .map(|protocol| {
                    Counter::register(
                        Series::new("loghaul_ingest_records_total", Count, "Records received, valid or not, by protocol: push, otlp_grpc, otlp_http, loki."),
                        vec![Label::from_static_parts("protocol", protocol.as_str())],
                    )
                })
                .collect(),
            buffered_bytes: gauge("loghaul_buffered_bytes", Bytes, "Bytes held by requests being read and decoded (as they arrive) and by the records in queues and batches."),
            buffered_bytes_limit: gauge("loghaul_buffered_bytes_limit", Bytes, "The process-wide buffer budget (--max-buffered-bytes)."),
            buffer_claimed_bytes: gauge("loghaul_buffer_claimed_bytes", Bytes, "Bytes of the budget claimed by requests in progress (what each expects to need) plus queued records: what admission counts."),
            buffer_waiting_requests: gauge("loghaul_buffer_waiting_requests", Count, "Requests waiting, holding nothing, for room in the budget."),
            backpressure_wait: seconds("loghaul_backpressure_wait_seconds", "Time a chunk waited for room in the budget and its queue."),
            backpressure_timeouts: CounterVec::register(
                Series::new("loghaul_backpressure_timeouts_total", Count, "Streams ended with RESOURCE_EXHAUSTED after waiting the enqueue timeout, by full resource."),
                ["resource"],
            ),
            duplicate_chunks: counter("loghaul_duplicate_chunks_total", "Chunks not stored because their (producer_id, sequence) already was: retries, reported accepted."),
            duplicate_records: counter("loghaul_duplicate_records_total", "Records of those duplicate chunks."),
            insert_errors: CounterVec::register(
                Series::new("loghaul_insert_errors_total", Count, "Failed insert attempts, by kind (unavailable is retried; row_rejected is isolated)."),
                ["kind"],
            ),
            store_up: gauge("loghaul_store_up", Count, "1 when the database answered the last write or probe, else 0."),
            ready: gauge("loghaul_ready", Count, "1 when the service is ready for traffic, else 0."),
            auth_failures: CounterVec::register(
                Series::new("loghaul_auth_failures_total", Count, "Calls refused before their handler, by reason: missing_key, unknown_key, not_loopback, org_id_mismatch; and without API keys over HTTP: foreign_host (a Host that is not a loopback name or an IP address), foreign_origin (an Origin --http-cors-origins does not list), org_id_without_keys (an X-Scope-OrgID other than default without --allow-org-id-tenants)."),
                ["reason"],
            ),
            api_keys: gauge("loghaul_api_keys", Count, "API keys in force (0: the service serves tenant default, to loopback clients unless --allow-unauthenticated)."),
            api_keys_reloads: CounterVec::register(
                Series::new("loghaul_api_keys_reloads_total", Count, "API key reloads (SIGHUP or a changed keys file), by outcome: ok, failed (the previous keys stay)."),
                ["outcome"],
            ),
            queries: CounterVec::register(
                Series::new("loghaul_queries_total", Count, "Query calls, by outcome: ok, invalid_argument, store_unavailable, deadline_exceeded (past --query-timeout), too_many_reads, read_memory_full (past --max-read-bytes)."),
                ["outcome"],
            ),
            query_duration: seconds("loghaul_query_duration_seconds", "Time to answer one Query page."),
            loki_queries: CounterVec::register(
                Series::new("loghaul_loki_queries_total", Count, "Loki query API requests (the HTTP listener's /loki/api/v1/... reads), by endpoint (query_range, query, labels, label_values, series, volume, volume_range, tail) and outcome (ok, bad_request, unauthenticated, forbidden, too_many_reads, read_too_large, read_memory_full, deadline_exceeded, store_unavailable, ...)."),
                ["endpoint", "outcome"],
            ),
            loki_query_duration: seconds("loghaul_loki_query_duration_seconds", "Time to answer one Loki query API request."),
            loki_metric_sources: CounterVec::register(
                Series::new("loghaul_loki_metric_sources_total", Count, "Range functions of LogQL metric queries, by what answered them: rollup (the per-minute log_volume table) or scan (the rows)."),
                ["source"],
            ),
            reads_refused: CounterVec::register(
                Series::new("loghaul_reads_refused_total", Count, "Reads refused with RESOURCE_EXHAUSTED before they ran, by reason (tenant_reads: past --max-concurrent-reads-per-tenant; tenant_tails, tails: a Tail past --max-tails-per-tenant, --max-tails) and tenant."),
                ["reason", "tenant"],
            ),
            read_memory_bytes: gauge("loghaul_read_memory_bytes", Bytes, "Bytes the reads of every tenant hold now (series and points of LogQL queries, lines, pages, answers not yet sent), against --max-read-bytes."),
            read_memory_refusals: CounterVec::register(
                Series::new("loghaul_read_memory_refusals_total", Count, "Reads stopped and refused for memory, by the bound they met (query: one read past --max-query-bytes, answered 400 or RESOURCE_EXHAUSTED; all_reads: the reads together at --max-read-bytes, answered 503 or RESOURCE_EXHAUSTED with a retry delay) and tenant."),
                ["limit", "tenant"],
            ),
            tail_subscribers: gauge("loghaul_tail_subscribers", Count, "Tail streams open now."),
            tails_ended: CounterVec::register(
                Series::new("loghaul_tails_ended_total", Count, "Tail streams ended, by reason: client_gone, too_slow, store_unavailable, shutting_down, deadline_exceeded (polls past --query-timeout)."),
                ["reason"],
            ),
            tail_queued_bytes: gauge("loghaul_tail_queued_bytes", Bytes, "Bytes of records queued for tail subscribers until their connections take them, each subscriber's at most --tail-queue-bytes."),
            console_requests: CounterVec::register(
                Series::new("loghaul_console_requests_total", Count, "Console requests answered, by endpoint (logs, tail, health, session, other_api, page) and HTTP status."),
                ["endpoint", "status"],
            ),
            http_connections: GaugeVec::register(
                Series::new("loghaul_http_connections", Count, "Connections open now on an HTTP listener (metrics, console, ingest)."),
                "listener",
            ),
            http_connections_refused: CounterVec::register(
                Series::new("loghaul_http_connections_refused_total", Count, "Connections an HTTP listener (metrics, console, ingest) closed on accept because its connection cap (--http-max-connections; ingest: --http-ingest-max-connections) was reached and every open connection had a request in flight."),
                ["listener"],
            ),
            http_connections_evicted: CounterVec::register(
                Series::new("loghaul_http_connections_evicted_total", Count, "Idle connections (no request in flight: none sent yet, or kept alive between requests) an HTTP listener (metrics, console, ingest) closed to make room for a new connection at its connection cap; the one idle longest goes first."),
                ["listener"],
            ),
            http_header_timeouts: CounterVec::register(
                Series::new("loghaul_http_header_timeouts_total", Count, "Connections an HTTP listener (metrics, console, ingest) closed because no complete request headers came within --http-header-read-timeout."),
                ["listener"],
            ),
            retention_runs: CounterVec::register(
                Series::new("loghaul_retention_runs_total", Count, "Retention runs, by outcome: ok, skipped_locked (another replica runs it), failed."),
                ["outcome"],
            ),
            retention_run_duration: seconds("loghaul_retention_run_duration_seconds", "Time one retention run took."),
            retention_last_run: gauge("loghaul_retention_last_run_timestamp_seconds", Seconds, "Unix time of the last retention run this replica completed."),
            partitions_created: counter("loghaul_retention_partitions_created_total", "Daily partitions created ahead (PostgreSQL)."),
            partitions_dropped: counter("loghaul_retention_partitions_dropped_total", "Daily partitions dropped whole because their day left the retention window (PostgreSQL)."),
            rows_deleted: counter("loghaul_retention_rows_deleted_total", "Rows deleted in chunks (SQLite, and the PostgreSQL default partition)."),
            volume_rows_deleted: counter("loghaul_retention_volume_rows_deleted_total", "Rows of the per-minute volume rollup deleted because their minute left the retention window."),
            brin_ranges_summarized: counter("loghaul_brin_ranges_summarized_total", "BRIN page ranges the retention task summarized (PostgreSQL), so reads can skip them."),
            chunk_keys_pruned: counter("loghaul_chunk_keys_pruned_total", "Chunk keys deleted after the dedup window (--dedup-window)."),
            sqlite_checkpoint_errors: counter("loghaul_sqlite_checkpoint_errors_total", "SQLite checkpoint passes that failed (the WAL grows until a later pass gets through)."),
            sqlite_checkpoint: HistogramVec::register(
                Series::new("loghaul_sqlite_checkpoint_seconds", Seconds, "Time a SQLite WAL rewind held the writers, by outcome: rewound, busy."),
                ["outcome"],
            ),
            tenants: Mutex::default(),
            shards: Mutex::default(),
        }
    }

    /// The counter of records received by `protocol`.
    pub(crate) fn ingest_records(&self, protocol: Protocol) -> &Counter {
        // `ALL` lists the protocols in discriminant order, which a test checks.
        &self.ingest_records[protocol as usize]
    }

    /// The series of `tenant`'s records. Resolved when a tenant is set up (a key ring is loaded),
    /// not per record: the map's lock is off the hot path.
    pub(crate) fn tenant(&self, tenant: &str) -> Arc<TenantMetrics> {
        let mut tenants = self
            .tenants
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(known) = tenants.get(tenant) {
            return Arc::clone(known);
        }
        let registered = Arc::new(TenantMetrics::register(tenant));
        tenants.insert(Arc::from(tenant), Arc::clone(&registered));
        registered
    }

    /// The series of shard `shard`, shared by every pipeline of the process (tests run several).
    pub(crate) fn shard(&self, shard: usize) -> Arc<ShardMetrics> {
        let mut shards = self
            .shards
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        while shards.len() <= shard {
            let next = shards.len();
            shards.push(Arc::new(ShardMetrics::register(next)));
        }
        Arc::clone(&shards[shard])
    }
}

/// The process's series, registered with the recorder on first use.
pub(crate) fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        // Handles made before the recorder is installed would go to the no-op recorder.
        let _ = recorder();
        Metrics::register()
    })
}

/// The handle `/metrics` renders, with every series registered.
pub(crate) fn handle() -> PrometheusHandle {
    let _ = metrics();
    recorder()
}

/// The process-wide Prometheus recorder. The `metrics` facade has one global recorder, so every
/// server in a process (tests start several) shares it.
fn recorder() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
                .and_then(|builder| {
                    builder
                        .set_buckets_for_metric(Matcher::Full(BATCH_ROWS.name.into()), ROWS_BUCKETS)
                })
                .expect("bucket lists are non-empty constants")
                .build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("another metrics recorder is installed; /metrics will be empty");
            }
            handle
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_arrays_are_indexed_by_discriminant() {
        for (index, reason) in RejectReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, index, "{reason:?}");
        }
        for (index, trigger) in FlushTrigger::ALL.iter().enumerate() {
            assert_eq!(*trigger as usize, index, "{trigger:?}");
        }
        for (index, protocol) in Protocol::ALL.iter().enumerate() {
            assert_eq!(*protocol as usize, index, "{protocol:?}");
        }
    }

    #[test]
    fn a_tenants_rejections_are_counted_under_their_reason() {
        let tenant = metrics().tenant("metrics-unit-test");
        tenant.rejected(RejectReason::InvalidSeverity).increment(2);
        tenant.rejected(RejectReason::MalformedRecord).increment(1);
        assert_eq!(tenant.rejected(RejectReason::InvalidSeverity).get(), 2);
        assert_eq!(tenant.rejected_total(), 3);
        assert!(Arc::ptr_eq(&tenant, &metrics().tenant("metrics-unit-test")));
    }
}
