//! The Prometheus recorder and the description of every metric the service emits.
//!
//! Names follow Prometheus conventions (`loghaul_` prefix, `_total`, `_seconds`, `_bytes`); labels
//! are bounded by construction: `shard` by the shard count, `reason`/`kind`/`resource`/`outcome`/
//! `trigger` by enums in the code, `listener` by the two HTTP listeners.

use std::sync::OnceLock;

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const ROWS_BUCKETS: &[f64] = &[
    1.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 25000.0,
];

/// The process-wide recorder. The `metrics` facade has one global recorder, so every server in a
/// process (tests start several) shares it; it is installed on first use.
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
                .and_then(|builder| {
                    builder.set_buckets_for_metric(
                        Matcher::Full("loghaul_batch_rows".into()),
                        ROWS_BUCKETS,
                    )
                })
                .expect("bucket lists are non-empty constants")
                .build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("another metrics recorder is installed; /metrics will be empty");
            }
            describe();
            handle
        })
        .clone()
}

fn describe() {
    describe_counter!(
        "loghaul_records_received_total",
        Unit::Count,
        "Records received in Push streams and OTLP exports, valid or not, by tenant."
    );
    describe_counter!(
        "loghaul_records_committed_total",
        Unit::Count,
        "Records committed to the database, by tenant."
    );
    describe_counter!(
        "loghaul_records_rejected_total",
        Unit::Count,
        "Records refused, by reason and tenant; each is reported to its client with its index."
    );
    describe_counter!(
        "loghaul_duplicate_chunks_total",
        Unit::Count,
        "Chunks not stored because their (producer_id, sequence) already was: retries, reported accepted."
    );
    describe_counter!(
        "loghaul_duplicate_records_total",
        Unit::Count,
        "Records of those duplicate chunks."
    );
    describe_counter!(
        "loghaul_chunk_keys_pruned_total",
        Unit::Count,
        "Chunk keys deleted after the dedup window (--dedup-window)."
    );
    describe_counter!(
        "loghaul_records_failed_total",
        Unit::Count,
        "Records whose batch could not be stored after retries, by tenant; their streams got UNAVAILABLE."
    );
    describe_gauge!(
        "loghaul_queue_depth",
        Unit::Count,
        "Chunks waiting in a shard's queue."
    );
    describe_gauge!(
        "loghaul_queue_capacity",
        Unit::Count,
        "Chunks a shard's queue holds before senders wait."
    );
    describe_gauge!(
        "loghaul_buffered_bytes",
        Unit::Bytes,
        "Bytes of records held in queues and batches."
    );
    describe_gauge!(
        "loghaul_buffered_bytes_limit",
        Unit::Bytes,
        "The process-wide buffer budget (--max-buffered-bytes)."
    );
    describe_histogram!("loghaul_batch_rows", Unit::Count, "Rows per flushed batch.");
    describe_histogram!(
        "loghaul_batch_age_seconds",
        Unit::Seconds,
        "Age of a batch's oldest row when its flush started."
    );
    describe_histogram!(
        "loghaul_flush_duration_seconds",
        Unit::Seconds,
        "Time to write a batch, retries included."
    );
    describe_counter!(
        "loghaul_batches_total",
        Unit::Count,
        "Batches flushed, by what triggered the flush."
    );
    describe_counter!(
        "loghaul_insert_errors_total",
        Unit::Count,
        "Failed insert attempts, by kind (unavailable is retried; row_rejected is isolated)."
    );
    describe_gauge!(
        "loghaul_active_streams",
        Unit::Count,
        "Push streams open now."
    );
    describe_counter!(
        "loghaul_streams_total",
        Unit::Count,
        "Push streams ended, by outcome (ok or the error kind)."
    );
    describe_counter!(
        "loghaul_otlp_exports_total",
        Unit::Count,
        "OTLP Export requests answered, by outcome (ok, possibly with partial success, or the error)."
    );
    describe_histogram!(
        "loghaul_backpressure_wait_seconds",
        Unit::Seconds,
        "Time a chunk waited for room in the budget and its queue."
    );
    describe_counter!("loghaul_backpressure_timeouts_total", Unit::Count, "Streams ended with RESOURCE_EXHAUSTED after waiting the enqueue timeout, by full resource.");
    describe_gauge!(
        "loghaul_store_up",
        Unit::Count,
        "1 when the database answered the last write or probe, else 0."
    );
    describe_gauge!(
        "loghaul_ready",
        Unit::Count,
        "1 when the service is ready for traffic, else 0."
    );
    describe_counter!(
        "loghaul_auth_failures_total",
        Unit::Count,
        "Calls refused with UNAUTHENTICATED, by reason: missing_key, unknown_key."
    );
    describe_gauge!(
        "loghaul_api_keys",
        Unit::Count,
        "API keys in force (0: the service is open as tenant default)."
    );
    describe_counter!(
        "loghaul_api_keys_reloads_total",
        Unit::Count,
        "API key reloads (SIGHUP or a changed keys file), by outcome: ok, failed (the previous keys stay)."
    );
    describe_counter!(
        "loghaul_rate_limited_total",
        Unit::Count,
        "Push streams ended with RESOURCE_EXHAUSTED for exceeding their tenant's rate limit, by tenant."
    );
    describe_counter!(
        "loghaul_queries_total",
        Unit::Count,
        "Query calls, by outcome: ok, invalid_argument, store_unavailable, deadline_exceeded (past --query-timeout), too_many_reads."
    );
    describe_counter!(
        "loghaul_reads_refused_total",
        Unit::Count,
        "Reads refused with RESOURCE_EXHAUSTED before they ran, by reason (tenant_reads: past --max-concurrent-reads-per-tenant; tenant_tails, tails: a Tail past --max-tails-per-tenant, --max-tails) and tenant."
    );
    describe_histogram!(
        "loghaul_query_duration_seconds",
        Unit::Seconds,
        "Time to answer one Query page."
    );
    describe_gauge!(
        "loghaul_tail_subscribers",
        Unit::Count,
        "Tail streams open now."
    );
    describe_counter!(
        "loghaul_tails_ended_total",
        Unit::Count,
        "Tail streams ended, by reason: client_gone, too_slow, store_unavailable, shutting_down, deadline_exceeded (polls past --query-timeout)."
    );
    describe_counter!(
        "loghaul_console_requests_total",
        Unit::Count,
        "Console requests answered, by endpoint (logs, tail, health, session, other_api, page) and HTTP status."
    );
    describe_gauge!(
        "loghaul_http_connections",
        Unit::Count,
        "Connections open now on an HTTP listener (metrics, console)."
    );
    describe_counter!(
        "loghaul_http_connections_refused_total",
        Unit::Count,
        "Connections an HTTP listener (metrics, console) closed on accept because --http-max-connections were open."
    );
    describe_counter!(
        "loghaul_http_header_timeouts_total",
        Unit::Count,
        "Connections an HTTP listener (metrics, console) closed because no complete request headers came within --http-header-read-timeout."
    );
    describe_counter!(
        "loghaul_retention_runs_total",
        Unit::Count,
        "Retention runs, by outcome: ok, skipped_locked (another replica runs it), failed."
    );
    describe_histogram!(
        "loghaul_retention_run_duration_seconds",
        Unit::Seconds,
        "Time one retention run took."
    );
    describe_gauge!(
        "loghaul_retention_last_run_timestamp_seconds",
        Unit::Seconds,
        "Unix time of the last retention run this replica completed."
    );
    describe_counter!(
        "loghaul_retention_partitions_created_total",
        Unit::Count,
        "Daily partitions created ahead (PostgreSQL)."
    );
    describe_counter!(
        "loghaul_retention_partitions_dropped_total",
        Unit::Count,
        "Daily partitions dropped whole because their day left the retention window (PostgreSQL)."
    );
    describe_counter!(
        "loghaul_retention_rows_deleted_total",
        Unit::Count,
        "Rows deleted in chunks (SQLite, and the PostgreSQL default partition)."
    );
    describe_counter!(
        "loghaul_brin_ranges_summarized_total",
        Unit::Count,
        "BRIN page ranges the retention task summarized (PostgreSQL), so reads can skip them."
    );
}
