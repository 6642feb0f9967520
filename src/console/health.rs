//! The health snapshot the console's Health view samples every few seconds: the service's own
//! metric handles (the same numbers `/metrics` shows) summed over their labels, plus readiness and
//! the storage backend. Counters and histogram sums are cumulative; the page turns successive
//! samples into rates and per-interval means.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::observability::metrics::{metrics, HistogramSnapshot};
use crate::observability::readiness::Readiness;
use crate::pipeline::Ingress;

/// What the snapshot is taken from.
#[derive(Clone)]
pub(crate) struct HealthSource {
    /// Readiness flags.
    pub readiness: Arc<Readiness>,
    /// The pipeline, whose queue gauges are sampled on demand.
    pub ingress: Ingress,
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
}

impl HealthSource {
    /// The snapshot as JSON, as `tenant` may see it: its own records' counters and the shared
    /// pipeline's health.
    pub(crate) fn snapshot(&self, tenant: &str) -> Value {
        self.ingress.sample_gauges();
        let series = metrics();
        let own = series.tenant(tenant);
        let shards = self.ingress.shard_series();
        let over_shards =
            |pick: fn(&crate::observability::metrics::ShardMetrics) -> HistogramSnapshot| {
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
                "backpressure_timeouts": series.backpressure_timeouts.total(),
                "insert_errors": series.insert_errors.total(),
            },
            "gauges": {
                "buffered_bytes": series.buffered_bytes.get(),
                "buffered_bytes_limit": series.buffered_bytes_limit.get(),
                "active_streams": series.active_streams.get(),
                "tail_subscribers": series.tail_subscribers.get(),
            },
            "histograms": {
                "batch_rows": histogram(&over_shards(|shard| shard.batch_rows.snapshot())),
                "flush_seconds": histogram(&over_shards(|shard| shard.flush_duration.snapshot())),
                "backpressure_wait_seconds": histogram(&series.backpressure_wait.snapshot()),
            },
            "shards": shard_rows,
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
