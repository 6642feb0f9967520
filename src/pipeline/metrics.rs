//! What the pipeline reports: the byte budget and the waits for it, duplicates, failed inserts,
//! and per shard its queue and batches ([`ShardMetrics`], resolved when the shard starts).

use metrics::{Label, Unit};

use crate::observability::metrics::{Counter, CounterVec, Gauge, Histogram, Registry, Series};

const BUFFERED_BYTES: Series = Series::new("loghaul_buffered_bytes", Unit::Bytes, "Bytes held by requests being read and decoded (as they arrive) and by the records in queues and batches.");
const BUFFERED_BYTES_LIMIT: Series = Series::new(
    "loghaul_buffered_bytes_limit",
    Unit::Bytes,
    "The process-wide buffer budget (--max-buffered-bytes).",
);
const BUFFER_CLAIMED_BYTES: Series = Series::new("loghaul_buffer_claimed_bytes", Unit::Bytes, "Bytes of the budget claimed by requests in progress (what each expects to need) plus queued records: what admission counts.");
const BUFFER_WAITING_REQUESTS: Series = Series::new(
    "loghaul_buffer_waiting_requests",
    Unit::Count,
    "Requests waiting, holding nothing, for room in the budget.",
);
const BACKPRESSURE_WAIT: Series = Series::new(
    "loghaul_backpressure_wait_seconds",
    Unit::Seconds,
    "Time a chunk waited for room in the budget and its queue.",
);
const BACKPRESSURE_TIMEOUTS: Series = Series::new(
    "loghaul_backpressure_timeouts_total",
    Unit::Count,
    "Streams ended with RESOURCE_EXHAUSTED after waiting the enqueue timeout, by full resource.",
);
const DUPLICATE_CHUNKS: Series = Series::new("loghaul_duplicate_chunks_total", Unit::Count, "Chunks not stored because their (producer_id, sequence) already was: retries, reported accepted.");
const DUPLICATE_RECORDS: Series = Series::new(
    "loghaul_duplicate_records_total",
    Unit::Count,
    "Records of those duplicate chunks.",
);
const INSERT_ERRORS: Series = Series::new(
    "loghaul_insert_errors_total",
    Unit::Count,
    "Failed insert attempts, by kind (unavailable is retried; row_rejected is isolated).",
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

/// The pipeline's series, shared by its shards.
#[derive(Debug)]
pub(crate) struct PipelineMetrics {
    /// Where each shard's series are registered when it starts.
    registry: Registry,
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
}

impl PipelineMetrics {
    /// Registers the series in `registry`.
    pub(crate) fn register(registry: &Registry) -> PipelineMetrics {
        let gauge = |series| Gauge::register(registry, series, Vec::new());
        let counter = |series| Counter::register(registry, series, Vec::new());
        PipelineMetrics {
            registry: registry.clone(),
            buffered_bytes: gauge(BUFFERED_BYTES),
            buffered_bytes_limit: gauge(BUFFERED_BYTES_LIMIT),
            buffer_claimed_bytes: gauge(BUFFER_CLAIMED_BYTES),
            buffer_waiting_requests: gauge(BUFFER_WAITING_REQUESTS),
            backpressure_wait: Histogram::register(registry, BACKPRESSURE_WAIT, Vec::new()),
            backpressure_timeouts: CounterVec::register(
                registry,
                BACKPRESSURE_TIMEOUTS,
                ["resource"],
            ),
            duplicate_chunks: counter(DUPLICATE_CHUNKS),
            duplicate_records: counter(DUPLICATE_RECORDS),
            insert_errors: CounterVec::register(registry, INSERT_ERRORS, ["kind"]),
        }
    }

    /// Registers the series of shard `shard`, once, when the shard starts.
    pub(crate) fn shard(&self, shard: usize) -> ShardMetrics {
        ShardMetrics::register(&self.registry, shard)
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
    fn register(registry: &Registry, shard: usize) -> ShardMetrics {
        let by_shard = || vec![Label::new("shard", shard.to_string())];
        let batches = FlushTrigger::ALL
            .iter()
            .map(|trigger| {
                let mut labels = by_shard();
                labels.push(Label::from_static_parts("trigger", trigger.as_str()));
                Counter::register(registry, BATCHES, labels)
            })
            .collect();
        ShardMetrics {
            queue_depth: Gauge::register(registry, QUEUE_DEPTH, by_shard()),
            queue_capacity: Gauge::register(registry, QUEUE_CAPACITY, by_shard()),
            batch_rows: Histogram::register(registry, BATCH_ROWS, by_shard()),
            batch_age: Histogram::register(registry, BATCH_AGE, by_shard()),
            flush_duration: Histogram::register(registry, FLUSH_DURATION, by_shard()),
            batches,
        }
    }

    /// Counts a flushed batch.
    pub fn batch_flushed(&self, trigger: FlushTrigger) {
        // `ALL` lists the triggers in discriminant order, which a test checks.
        self.batches[trigger as usize].increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_are_listed_in_discriminant_order() {
        for (index, trigger) in FlushTrigger::ALL.iter().enumerate() {
            assert_eq!(*trigger as usize, index, "{trigger:?}");
        }
    }

    #[test]
    fn a_shards_batches_are_counted_under_their_trigger() {
        let registry = Registry::new();
        let shard = PipelineMetrics::register(&registry).shard(3);
        shard.batch_flushed(FlushTrigger::Linger);
        shard.batch_flushed(FlushTrigger::Linger);
        shard.batch_rows.record(120.0);
        let text = registry.render();
        assert!(
            text.contains("loghaul_batches_total{shard=\"3\",trigger=\"linger\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("loghaul_batch_rows_bucket{shard=\"3\",le=\"250\"} 1"),
            "{text}"
        );
    }
}
