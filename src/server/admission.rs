//! What every ingest protocol does around the pipeline: charge a tenant's rate limit before records
//! are queued, queue a request's records and wait for their commit, and count how each call ended.

use std::sync::Arc;

use tonic::{Response, Status};

use crate::auth::Tenant;
use crate::error::{CallFailure, IngestError};
use crate::model::reject::RejectionCounts;
use crate::observability::metrics::{metrics, CounterVec, Protocol};
use crate::pipeline::ack::Stored;
use crate::pipeline::{ChunkSource, Ingress, Meter};
use crate::record::Record;
use crate::storage::StoreError;

/// Takes the records from the tenant's rate limit; returns their size in bytes, or the refusal
/// with the delay after which they would be admitted.
pub fn admit(tenant: &Tenant, records: &[Record]) -> Result<usize, IngestError> {
    let bytes: usize = records.iter().map(Record::size_bytes).sum();
    match tenant.admit(records.len() as u64, bytes as u64) {
        Ok(()) => Ok(bytes),
        Err(retry_after) => {
            tenant.metrics().rate_limited.increment(1);
            Err(IngestError::RateLimited {
                tenant: Arc::clone(tenant.name()),
                retry_after,
            })
        }
    }
}

/// Counts a message's records: all of them received (by tenant and by `protocol`), and the
/// rejected ones by reason.
pub fn count_received(
    tenant: &Tenant,
    protocol: Protocol,
    received: u64,
    rejections: &RejectionCounts,
) {
    metrics().ingest_records(protocol).increment(received);
    let counts = tenant.metrics();
    counts.received.increment(received);
    for (reason, count) in rejections.nonzero() {
        counts.rejected(reason).increment(count);
    }
}

/// Queues the valid records of one request as one chunk, on the least loaded shard, and waits for
/// their commit: what a unary request (an OTLP export, a Loki push) does once it has decoded its
/// records under `meter`. The rate limit is charged first.
pub async fn store_request(
    ingress: &Ingress,
    tenant: &Tenant,
    records: Vec<Record>,
    meter: Meter<'_>,
) -> Result<Stored, IngestError> {
    if records.is_empty() {
        return Ok(Stored::default());
    }
    let bytes = admit(tenant, &records)?;
    let deadline = meter.deadline();
    let ack = ingress
        .enqueue(
            ingress.assign_shard(),
            ChunkSource {
                tenant: Arc::clone(tenant.name()),
                counts: Arc::clone(tenant.metrics()),
                key: None,
            },
            records,
            bytes,
            meter.into_reservation(),
            deadline,
        )
        .await?;
    let stored = ack
        .await
        .map_err(|_| StoreError::Unavailable("the batch was dropped before its commit".into()))??;
    Ok(stored)
}

/// Counts the call in `calls` by outcome and turns the outcome into the gRPC answer.
pub fn respond<T, E: CallFailure>(
    outcome: Result<T, E>,
    calls: &CounterVec<1>,
) -> Result<Response<T>, Status> {
    let label = match &outcome {
        Ok(_) => "ok",
        Err(err) => {
            tracing::debug!(error = %err, "ingest call failed");
            err.kind()
        }
    };
    calls.increment_static([label], 1);
    outcome.map(Response::new).map_err(Into::into)
}
