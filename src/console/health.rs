//! The health snapshot the console's Health view samples every few seconds: the service's own
//! metric handles (the same numbers `/metrics` shows) summed over their labels, plus readiness and
//! the storage backend. Counters and histogram sums are cumulative; the page turns successive
//! samples into rates and per-interval means.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::auth::Tenant;
use crate::ingest::metrics::IngestMetrics;
use crate::observability::metrics::HistogramSnapshot;
use crate::observability::readiness::Readiness;
use crate::pipeline::{Ingress, ShardMetrics};
use crate::query::metrics::QueryMetrics;
use crate::sealing::metrics::SealingMetrics;

/// What the snapshot is taken from.
#[derive(Clone)]
pub(crate) struct HealthSource {
    /// Readiness flags.
    pub readiness: Arc<Readiness>,
    /// The pipeline, whose queue gauges are sampled on demand.
    pub ingress: Ingress,
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// Open push streams.
    pub ingest: Arc<IngestMetrics>,
    /// Open tails.
    pub query: Arc<QueryMetrics>,
    /// Sealing and the bytes of each storage tier.
    pub sealing: Arc<SealingMetrics>,
}

impl HealthSource {
    /// The snapshot as JSON, as `tenant` may see it: its own records' counters and the shared
    /// pipeline's health.
    pub(crate) fn snapshot(&self, tenant: &Tenant) -> Value {
        self.ingress.sample_gauges();
        let pipeline = self.ingress.metrics();
        let own = tenant.metrics();
        let shards = self.ingress.shard_series();
        let over_shards = |pick: fn(&ShardMetrics) -> HistogramSnapshot| {
            shards
                .iter()
                .fold(HistogramSnapshot::default(), |mut total, shard| {
                    total.merge(&pick(shard));
                    total
                })
        };
        let shard_rows: Vec<Value> = shards
            .iter()
            .enumerate()
            .map(|(shard, series)| {
                json!({
                    "shard": shard,
                    "depth": series.queue_depth.get(),
                    "capacity": series.queue_capacity.get(),
                })
            })
            .collect();
        let readiness = &self.readiness;
        json!({
            "time_ms": chrono::Utc::now().timestamp_millis(),
            "ready": readiness.is_ready(),
            "store_up": readiness.store_up(),
            "draining": readiness.draining(),
            "backend": self.backend,
            "counters": {
                "received": own.received.get(),
                "committed": own.committed.get(),
                "rejected": own.rejected_total(),
                "failed": own.failed.get(),
                "rate_limited": own.rate_limited.get(),
                "backpressure_timeouts": pipeline.backpressure_timeouts.total(),
                "insert_errors": pipeline.insert_errors.total(),
            },
            "gauges": {
                "buffered_bytes": pipeline.buffered_bytes.get(),
                "buffered_bytes_limit": pipeline.buffered_bytes_limit.get(),
                "active_streams": self.ingest.active_streams.get(),
                "tail_subscribers": self.query.tail_subscribers.get(),
            },
            "histograms": {
                "batch_rows": histogram(&over_shards(|shard| shard.batch_rows.snapshot())),
                "flush_seconds": histogram(&over_shards(|shard| shard.flush_duration.snapshot())),
                "backpressure_wait_seconds": histogram(&pipeline.backpressure_wait.snapshot()),
            },
            "shards": shard_rows,
            "sealing": {
                "enabled": self.sealing.enabled.get() > 0.0,
                "heap_bytes": self.sealing.heap_bytes.get(),
                "columnar_bytes": self.sealing.columnar_bytes.get(),
                "lag_seconds": self.sealing.lag.get(),
                "partitions_sealed": self.sealing.sealed.get(),
                "failures": self.sealing.failures.get(),
            },
        })
    }
}

/// A histogram as the page charts it: sum, count and cumulative `[bound, count]` buckets, the
/// last bound `"+Inf"`.
fn histogram(snapshot: &HistogramSnapshot) -> Value {
    let buckets: Vec<Value> = snapshot
        .buckets
        .iter()
        .map(|(bound, count)| {
            let bound = if bound.is_finite() {
                json!(bound)
            } else {
                json!("+Inf")
            };
            json!([bound, count])
        })
        .collect();
    json!({"sum": snapshot.sum, "count": snapshot.count, "buckets": buckets})
}
