//! The options of the ingest pipeline (`crate::pipeline`): shards, batching and the memory budget.

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{ByteSize, HumanDuration};

/// The options the pipeline is started with; `PipelineConfig` is made from them.
#[derive(Clone, Debug, Args, Serialize, Deserialize)]
pub struct PipelineOptions {
    /// Number of shards (queue + batching task + writer each); 0 means one per CPU core.
    #[arg(long, env = "LOGHAUL_SHARDS", default_value_t = 0)]
    pub shards: usize,

    /// A shard flushes once it holds this many records.
    #[arg(long, env = "LOGHAUL_BATCH_MAX_ROWS", default_value_t = 20000)]
    pub batch_max_rows: usize,

    /// A shard flushes once its records hold this many bytes.
    #[arg(long, env = "LOGHAUL_BATCH_MAX_BYTES", default_value = "16MiB")]
    pub batch_max_bytes: ByteSize,

    /// A shard flushes when its oldest buffered record has waited this long. Under load batches
    /// fill while the previous one is written, so this only bounds how long a record in a quiet
    /// shard waits for company before it is written.
    #[arg(long, env = "LOGHAUL_BATCH_LINGER", default_value = "10ms")]
    pub batch_linger: HumanDuration,

    /// Chunks (PushRequest messages) each shard's queue holds before senders wait.
    #[arg(long, env = "LOGHAUL_QUEUE_CAPACITY", default_value_t = 64)]
    pub queue_capacity: usize,

    /// How long a request may wait for room (in the memory budget or its shard's queue) while that
    /// room does not move at all, before it ends with RESOURCE_EXHAUSTED (HTTP 503); waiting in
    /// line behind requests that are being served is not limited.
    #[arg(long, env = "LOGHAUL_ENQUEUE_TIMEOUT", default_value = "5s")]
    pub enqueue_timeout: HumanDuration,

    /// Bytes the whole process may hold for ingest: requests being read and decoded, and records
    /// in queues and batches. Requests claim room before they are read and wait, in order and
    /// holding nothing, while there is none.
    #[arg(long, env = "LOGHAUL_MAX_BUFFERED_BYTES", default_value = "64MiB")]
    pub max_buffered_bytes: ByteSize,

    /// Percent of --max-buffered-bytes that one tenant's requests may claim while they are read
    /// and decoded (its records queued for the database do not count), so that one tenant's slow
    /// or stuck clients never hold the room of the others.
    #[arg(long, env = "LOGHAUL_TENANT_BUFFER_SHARE", default_value_t = 50)]
    pub tenant_buffer_share: u8,

    /// How long a batch is retried against an unreachable database before its streams get UNAVAILABLE.
    #[arg(long, env = "LOGHAUL_STORE_RETRY_TIMEOUT", default_value = "15s")]
    pub store_retry_timeout: HumanDuration,
}

impl PipelineOptions {
    /// Bytes of --max-buffered-bytes one tenant's requests in progress may claim.
    pub fn tenant_buffer_bytes(&self) -> usize {
        self.max_buffered_bytes.as_usize() / 100 * usize::from(self.tenant_buffer_share)
    }

    /// The number of shards to run: the configured count, or one per CPU core.
    pub fn shard_count(&self) -> usize {
        if self.shards > 0 {
            return self.shards;
        }
        std::thread::available_parallelism().map_or(2, usize::from)
    }
}
