//! From a validated chunk to a committed batch: a bounded queue per shard, one batching task each.
//!
//! Before reading a message a handler claims room in the process-wide byte [`budget`] through a
//! [`Meter`] ([`Ingress::meter`]), charging it as bytes arrive and records are built; after
//! decoding it calls [`Ingress::enqueue`], which hands what the records hold to their chunk and
//! waits for room in the shard's queue. While it waits the handler stops reading its stream, so
//! HTTP/2 flow control slows the client down; a wait is refused, and the stream told to back off,
//! only once what it waits for has not moved for the enqueue timeout ([`stall`]).

pub(crate) mod ack;
pub(crate) mod batcher;
pub(crate) mod budget;
pub(crate) mod meter;
pub(crate) mod metrics;
pub(crate) mod router;
pub(crate) mod stall;
pub(crate) mod writer;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(crate) use self::metrics::{FlushTrigger, PipelineMetrics, ShardMetrics};
use crate::auth::TenantMetrics;
use crate::config::PipelineOptions;
use crate::error::IngestError;
use crate::observability::readiness::Readiness;
use crate::record::Record;
use crate::storage::Store;
use ack::AckReceiver;
use batcher::{BatchLimits, Batcher};
use budget::{Budget, BudgetLimits, Held};
pub(crate) use meter::Meter;
use stall::{unless_stalled, Progress, Stalled};
use writer::Writer;

/// The name a client gave a chunk so that a retry of it is stored once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerSequence {
    /// The producer's id, 1 to 64 bytes.
    pub producer_id: Vec<u8>,
    /// The chunk's number within its producer.
    pub sequence: u64,
}

/// Who sent a chunk and, when it is deduplicated, its name.
#[derive(Clone, Debug)]
pub struct ChunkSource {
    /// Tenant that sent it.
    pub tenant: Arc<str>,
    /// The tenant's series, where the batcher counts what became of the records.
    pub counts: Arc<TenantMetrics>,
    /// Set when the chunk is stored at most once per (tenant, producer, sequence).
    pub key: Option<ProducerSequence>,
}

/// Records of one stream message on their way to the database.
#[derive(Debug)]
pub(crate) struct Chunk {
    /// Who sent them, and the chunk's name when it is deduplicated.
    pub source: ChunkSource,
    /// The valid records of the message, in stream order.
    pub records: Vec<Record>,
    /// What they are charged against the byte budget.
    pub bytes: usize,
    /// When the chunk was queued; a batch's linger runs from its first chunk's.
    pub enqueued_at: Instant,
    /// Resolved after the commit.
    pub ack: ack::AckSender,
    /// Returned to the budget when the chunk is dropped, after its batch is written.
    _budget: Held,
}

/// How the pipeline is sized.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PipelineConfig {
    /// Number of shards.
    pub shards: usize,
    /// Chunks each shard's queue holds.
    pub queue_capacity: usize,
    /// When shards flush.
    pub limits: BatchLimits,
    /// How long a stream may wait for room.
    pub enqueue_timeout: Duration,
    /// Bytes buffered in the whole process.
    pub max_buffered_bytes: usize,
    /// Bytes one tenant's requests in progress may claim of them.
    pub tenant_buffer_share: usize,
    /// How long a batch is retried against an unavailable store.
    pub store_retry_timeout: Duration,
}

impl From<&PipelineOptions> for PipelineConfig {
    fn from(options: &PipelineOptions) -> Self {
        PipelineConfig {
            shards: options.shard_count(),
            queue_capacity: options.queue_capacity,
            limits: BatchLimits {
                max_rows: options.batch_max_rows,
                max_bytes: options.batch_max_bytes.as_usize(),
                linger: options.batch_linger.0,
            },
            enqueue_timeout: options.enqueue_timeout.0,
            max_buffered_bytes: options.max_buffered_bytes.as_usize(),
            tenant_buffer_share: options.tenant_buffer_bytes(),
            store_retry_timeout: options.store_retry_timeout.0,
        }
    }
}

/// The running shards.
pub(crate) struct Pipeline {
    ingress: Ingress,
    closing: CancellationToken,
    batchers: Vec<JoinHandle<()>>,
}

impl Pipeline {
    /// Starts one batching task per shard, each registering its series in `metrics`.
    pub(crate) fn start(
        config: PipelineConfig,
        store: Store,
        readiness: Arc<Readiness>,
        metrics: Arc<PipelineMetrics>,
    ) -> Pipeline {
        let closing = CancellationToken::new();
        let writer = Writer::new(
            store,
            config.store_retry_timeout,
            readiness,
            Arc::clone(&metrics),
        );
        let mut shard_series = Vec::with_capacity(config.shards);
        let mut queues = Vec::with_capacity(config.shards);
        let mut dequeued = Vec::with_capacity(config.shards);
        let mut batchers = Vec::with_capacity(config.shards);
        for shard in 0..config.shards {
            let (sender, queue) = mpsc::channel(config.queue_capacity);
            let series = Arc::new(metrics.shard(shard));
            series.queue_capacity.set(config.queue_capacity as f64);
            shard_series.push(Arc::clone(&series));
            queues.push(sender);
            let progress = Arc::new(Progress::default());
            dequeued.push(Arc::clone(&progress));
            let batcher = Batcher {
                shard,
                series,
                metrics: Arc::clone(&metrics),
                queue,
                dequeued: progress,
                writer: writer.clone(),
                limits: config.limits,
                closing: closing.clone(),
            };
            batchers.push(tokio::spawn(batcher.run()));
        }
        let budget = Budget::new(BudgetLimits {
            total: config.max_buffered_bytes,
            tenant_share: config.tenant_buffer_share,
            stall_timeout: config.enqueue_timeout,
        });
        metrics
            .buffered_bytes_limit
            .set(config.max_buffered_bytes as f64);
        let ingress = Ingress {
            shard_series: shard_series.into(),
            metrics,
            queues: queues.into(),
            pins: (0..config.shards)
                .map(|_| std::sync::atomic::AtomicUsize::new(0))
                .collect(),
            dequeued: dequeued.into(),
            budget,
            enqueue_timeout: config.enqueue_timeout,
        };
        Pipeline {
            ingress,
            closing,
            batchers,
        }
    }

    /// The handle stream handlers enqueue through.
    pub(crate) fn ingress(&self) -> Ingress {
        self.ingress.clone()
    }

    /// Stops taking chunks, flushes everything queued regardless of linger, and waits for every
    /// acknowledgement to be resolved.
    pub(crate) async fn shutdown(self) {
        self.closing.cancel();
        for batcher in self.batchers {
            if let Err(err) = batcher.await {
                tracing::error!(error = %err, "a batching task failed");
            }
        }
    }
}

/// Cloneable entry to the shards, held by every stream handler.
#[derive(Clone, Debug)]
pub struct Ingress {
    queues: Arc<[mpsc::Sender<Chunk>]>,
    /// Streams pinned to each shard.
    pins: router::PinCounts,
    shard_series: Arc<[Arc<ShardMetrics>]>,
    metrics: Arc<PipelineMetrics>,
    /// Moves when each shard's batcher takes a chunk off its queue.
    dequeued: Arc<[Arc<Progress>]>,
    budget: Budget,
    enqueue_timeout: Duration,
}

/// Delay suggested to clients refused for backpressure: long enough for a queue to drain.
const BACKPRESSURE_RETRY_AFTER: Duration = Duration::from_secs(1);

impl Ingress {
    /// Sets the queue-depth and budget gauges from the live values. Called when metrics are
    /// scraped, so the hot path never touches a gauge.
    pub fn sample_gauges(&self) {
        for (queue, series) in self.queues.iter().zip(self.shard_series.iter()) {
            series
                .queue_depth
                .set((queue.max_capacity() - queue.capacity()) as f64);
        }
        let metrics = &self.metrics;
        metrics.buffered_bytes.set(self.budget.charged() as f64);
        let (claimed, waiting) = self.budget.reserved_and_waiting();
        metrics.buffer_claimed_bytes.set(claimed as f64);
        metrics.buffer_waiting_requests.set(waiting as f64);
    }

    /// The series of each shard, in shard order.
    pub fn shard_series(&self) -> &[Arc<ShardMetrics>] {
        &self.shard_series
    }

    /// The series every shard shares.
    pub(crate) fn metrics(&self) -> &PipelineMetrics {
        &self.metrics
    }

    /// The shard a request's records go to.
    pub fn assign_shard(&self) -> usize {
        router::pick_shard(&self.queues)
    }

    /// The shard a new stream is pinned to, for as long as the pin is held.
    pub fn pin_stream(&self) -> router::ShardPin {
        router::pin_stream(&self.pins)
    }

    /// A meter for one message of `tenant`'s, which claims its place in the budget on first use.
    pub fn meter(&self, tenant: &Arc<str>) -> Meter<'_> {
        Meter::new(self, tenant)
    }

    /// Most bytes one message may hold while it is read and decoded: half the budget (and no more
    /// than a tenant's share), so that a message never waits for room only it could free, and no
    /// single request can take it all.
    pub fn message_limit(&self) -> usize {
        self.budget.message_cap()
    }

    /// Queues records from `source` for `shard` (deduplicated when the source names a key): the
    /// `bytes` they hold (the sum of [`Record::size_bytes`], which the caller has already computed
    /// for the rate limit) move from `meter`'s claim to the chunk, and the handler waits for room
    /// in the queue for as long as the queue keeps moving. The receiver resolves once the records
    /// are committed (or have failed for good).
    pub async fn enqueue(
        &self,
        shard: usize,
        source: ChunkSource,
        records: Vec<Record>,
        bytes: usize,
        meter: Meter<'_>,
    ) -> Result<AckReceiver, IngestError> {
        let started = Instant::now();
        let claim = meter.covering(bytes).await?;
        let held = claim.into_held(bytes);
        let queue = &self.queues[shard];
        let slot = unless_stalled(queue.reserve(), &self.dequeued[shard], self.enqueue_timeout)
            .await
            .map_err(|stalled| self.backpressure("shard queue", stalled))?
            .map_err(|_| IngestError::ShuttingDown)?;
        self.metrics
            .backpressure_wait
            .record(started.elapsed().as_secs_f64());
        let (ack, receiver) = ack::channel();
        slot.send(Chunk {
            source,
            records,
            bytes,
            enqueued_at: Instant::now(),
            ack,
            _budget: held,
        });
        Ok(receiver)
    }

    /// The refusal of a wait for `resource` that saw it stand still, counted.
    fn backpressure(&self, resource: &'static str, stalled: Stalled) -> IngestError {
        self.metrics
            .backpressure_wait
            .record(stalled.waited.as_secs_f64());
        self.metrics
            .backpressure_timeouts
            .increment_static([resource], 1);
        IngestError::Backpressure {
            resource,
            waited: stalled.waited,
            retry_after: BACKPRESSURE_RETRY_AFTER,
        }
    }
}
