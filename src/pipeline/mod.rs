//! From a validated chunk to a committed batch: a bounded queue per shard, one batching task each.
//!
//! Before reading a message the stream handler takes a [`Reservation`] of the process-wide byte
//! budget ([`Ingress::reserve`]); after decoding it calls [`Ingress::enqueue`], which trims or tops
//! up that reservation to the records' size and waits for room in the shard's queue. While it waits
//! the handler stops reading its stream, so HTTP/2 flow control slows the client down; after the
//! enqueue timeout the stream is told to back off.

pub mod ack;
pub mod batcher;
pub mod router;
pub mod writer;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::IngestError;
use crate::observability::metrics::{metrics, ShardMetrics, TenantMetrics};
use crate::observability::readiness::Readiness;
use crate::record::Record;
use crate::storage::Store;
use ack::AckReceiver;
use batcher::{BatchLimits, Batcher};
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
pub struct Chunk {
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
    _budget: OwnedSemaphorePermit,
}

/// How the pipeline is sized.
#[derive(Clone, Copy, Debug)]
pub struct PipelineConfig {
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
    /// How long a batch is retried against an unavailable store.
    pub store_retry_timeout: Duration,
}

/// The running shards.
pub struct Pipeline {
    ingress: Ingress,
    closing: CancellationToken,
    batchers: Vec<JoinHandle<()>>,
}

impl Pipeline {
    /// Starts one batching task per shard.
    pub fn start(config: PipelineConfig, store: Store, readiness: Arc<Readiness>) -> Pipeline {
        let closing = CancellationToken::new();
        let writer = Writer::new(store, config.store_retry_timeout, readiness);
        let mut queues = Vec::with_capacity(config.shards);
        let mut batchers = Vec::with_capacity(config.shards);
        for shard in 0..config.shards {
            let (sender, queue) = mpsc::channel(config.queue_capacity);
            let series = metrics().shard(shard);
            series.queue_capacity.set(config.queue_capacity as f64);
            queues.push(sender);
            let batcher = Batcher {
                shard,
                series,
                queue,
                writer: writer.clone(),
                limits: config.limits,
                closing: closing.clone(),
            };
            batchers.push(tokio::spawn(batcher.run()));
        }
        // The semaphore counts bytes; tokio caps permits per acquire at u32::MAX, config checks that.
        let budget_total = u32::try_from(config.max_buffered_bytes).unwrap_or(u32::MAX);
        metrics().buffered_bytes_limit.set(f64::from(budget_total));
        let ingress = Ingress {
            shard_series: (0..config.shards)
                .map(|shard| metrics().shard(shard))
                .collect(),
            queues: queues.into(),
            budget: Arc::new(Semaphore::new(budget_total as usize)),
            budget_total,
            enqueue_timeout: config.enqueue_timeout,
        };
        Pipeline {
            ingress,
            closing,
            batchers,
        }
    }

    /// The handle stream handlers enqueue through.
    pub fn ingress(&self) -> Ingress {
        self.ingress.clone()
    }

    /// Stops taking chunks, flushes everything queued regardless of linger, and waits for every
    /// acknowledgement to be resolved.
    pub async fn shutdown(self) {
        self.closing.cancel();
        for batcher in self.batchers {
            if let Err(err) = batcher.await {
                tracing::error!(error = %err, "a batching task failed");
            }
        }
    }
}

/// Budget held for a message about to be read; returned when dropped.
#[derive(Debug)]
pub struct Reservation(OwnedSemaphorePermit);

/// Budget taken for one message while it is read and decoded: every byte is charged before it
/// is held, the reservation grows as needed (waiting until the deadline), and a message that
/// would need more than its share of the budget is refused before it is in memory.
pub struct Meter<'a> {
    ingress: &'a Ingress,
    held: Option<OwnedSemaphorePermit>,
    charged: usize,
    deadline: Instant,
    started: Instant,
}

impl Meter<'_> {
    /// Charges `bytes` more, taking budget first when what is held does not cover them.
    pub async fn charge(&mut self, bytes: usize) -> Result<(), IngestError> {
        self.charged += bytes;
        let limit = self.ingress.message_limit();
        if self.charged > limit {
            return Err(IngestError::DecodedTooLarge { limit });
        }
        self.expect(self.charged).await
    }

    /// Gives back the charge of `bytes` no longer held (the reservation stays, for what comes).
    pub fn release(&mut self, bytes: usize) {
        self.charged = self.charged.saturating_sub(bytes);
    }

    /// Makes sure `bytes` are held, so that a message expected to need them waits for room once
    /// rather than growing step by step.
    pub async fn expect(&mut self, bytes: usize) -> Result<(), IngestError> {
        let bytes = bytes.min(self.ingress.message_limit());
        let have = self
            .held
            .as_ref()
            .map_or(0, OwnedSemaphorePermit::num_permits);
        if bytes <= have {
            return Ok(());
        }
        let missing = u32::try_from(bytes - have).unwrap_or(u32::MAX);
        let more = tokio::time::timeout_at(
            self.deadline,
            Arc::clone(&self.ingress.budget).acquire_many_owned(missing),
        )
        .await
        .map_err(|_| self.ingress.backpressure("memory budget", self.started))?
        .map_err(|_| IngestError::ShuttingDown)?;
        match &mut self.held {
            Some(held) => held.merge(more),
            None => self.held = Some(more),
        }
        Ok(())
    }

    /// When waits for room end.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Bytes charged so far.
    pub fn charged(&self) -> usize {
        self.charged
    }

    /// What is held, for [`Ingress::enqueue`] to trim to the records' size.
    pub fn into_reservation(self) -> Option<Reservation> {
        self.held.map(Reservation)
    }
}

/// Cloneable entry to the shards, held by every stream handler.
#[derive(Clone, Debug)]
pub struct Ingress {
    queues: Arc<[mpsc::Sender<Chunk>]>,
    shard_series: Arc<[Arc<ShardMetrics>]>,
    budget: Arc<Semaphore>,
    budget_total: u32,
    enqueue_timeout: Duration,
}

/// Delay suggested to clients refused for backpressure: long enough for a queue to drain.
const BACKPRESSURE_RETRY_AFTER: Duration = Duration::from_secs(1);

impl Ingress {
    /// Sets the queue-depth and buffered-bytes gauges from the live values. Called when metrics are
    /// scraped, so the hot path never touches a gauge.
    pub fn sample_gauges(&self) {
        for (queue, series) in self.queues.iter().zip(self.shard_series.iter()) {
            series
                .queue_depth
                .set((queue.max_capacity() - queue.capacity()) as f64);
        }
        let in_use = self.budget_total as usize - self.budget.available_permits();
        metrics().buffered_bytes.set(in_use as f64);
    }

    /// The series of each shard, in shard order.
    pub fn shard_series(&self) -> &[Arc<ShardMetrics>] {
        &self.shard_series
    }

    /// The shard a new stream is pinned to.
    pub fn assign_shard(&self) -> usize {
        router::pick_shard(&self.queues)
    }

    /// A meter for one message, whose waits for room end at `deadline`.
    pub fn meter(&self, deadline: Instant) -> Meter<'_> {
        Meter {
            ingress: self,
            held: None,
            charged: 0,
            deadline,
            started: Instant::now(),
        }
    }

    /// Most bytes one message may hold while it is read and decoded: half the budget, so that a
    /// message never waits for room only it could free, and no single request can take it all.
    pub fn message_limit(&self) -> usize {
        self.budget_total as usize / 2
    }

    /// Holds `bytes` of the budget for a message not yet read, waiting until `deadline` for room.
    /// Taking it before reading is what keeps memory bounded: while the budget is full the handler
    /// stops reading, so the message stays on the client's side of HTTP/2 flow control instead of
    /// being decoded into memory nobody accounts for.
    pub async fn reserve(
        &self,
        bytes: usize,
        deadline: Instant,
    ) -> Result<Reservation, IngestError> {
        let started = Instant::now();
        let charge = self.clamp_to_budget(bytes);
        let permit = tokio::time::timeout_at(
            deadline,
            Arc::clone(&self.budget).acquire_many_owned(charge),
        )
        .await
        .map_err(|_| self.backpressure("memory budget", started))?
        .map_err(|_| IngestError::ShuttingDown)?;
        Ok(Reservation(permit))
    }

    /// Queues records from `source` for `shard` (deduplicated when the source names a key), charging their `bytes` (the sum of [`Record::size_bytes`],
    /// which the caller has already computed for the rate limit) to `held` (a reservation taken
    /// before the message was read, topped up or trimmed) and waiting until `deadline` for room in
    /// the queue. The receiver resolves once the records are committed (or have failed for good).
    pub async fn enqueue(
        &self,
        shard: usize,
        source: ChunkSource,
        records: Vec<Record>,
        bytes: usize,
        held: Option<Reservation>,
        deadline: Instant,
    ) -> Result<AckReceiver, IngestError> {
        let started = Instant::now();
        let charge = self.clamp_to_budget(bytes) as usize;
        let budget = match held {
            Some(Reservation(mut permit)) if permit.num_permits() >= charge => {
                // Give back what the message did not need.
                let _surplus = permit.split(permit.num_permits() - charge);
                permit
            }
            held => {
                let have = held
                    .as_ref()
                    .map_or(0, |Reservation(permit)| permit.num_permits());
                let missing = u32::try_from(charge - have).unwrap_or(u32::MAX);
                let mut extra = tokio::time::timeout_at(
                    deadline,
                    Arc::clone(&self.budget).acquire_many_owned(missing),
                )
                .await
                .map_err(|_| self.backpressure("memory budget", started))?
                .map_err(|_| IngestError::ShuttingDown)?;
                if let Some(Reservation(permit)) = held {
                    extra.merge(permit);
                }
                extra
            }
        };
        let queue = &self.queues[shard];
        let slot = tokio::time::timeout_at(deadline, queue.reserve())
            .await
            .map_err(|_| self.backpressure("shard queue", started))?
            .map_err(|_| IngestError::ShuttingDown)?;
        metrics()
            .backpressure_wait
            .record(started.elapsed().as_secs_f64());
        let (ack, receiver) = ack::channel();
        slot.send(Chunk {
            source,
            records,
            bytes,
            enqueued_at: Instant::now(),
            ack,
            _budget: budget,
        });
        Ok(receiver)
    }

    /// How long a stream may wait for room before it is told to back off.
    pub fn enqueue_timeout(&self) -> Duration {
        self.enqueue_timeout
    }

    /// A chunk larger than the whole budget would wait forever; let it take the whole budget.
    fn clamp_to_budget(&self, bytes: usize) -> u32 {
        u32::try_from(bytes)
            .unwrap_or(u32::MAX)
            .min(self.budget_total)
    }

    fn backpressure(&self, resource: &'static str, started: Instant) -> IngestError {
        let waited = started.elapsed();
        metrics().backpressure_wait.record(waited.as_secs_f64());
        metrics()
            .backpressure_timeouts
            .increment_static([resource], 1);
        IngestError::Backpressure {
            resource,
            waited,
            retry_after: BACKPRESSURE_RETRY_AFTER,
        }
    }
}
