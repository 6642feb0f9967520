//! What both ingest protocols do around the pipeline: charge a tenant's rate limit before records
//! are queued, and count how each call ended.

use std::sync::Arc;

use tonic::{Response, Status};

use crate::auth::Tenant;
use crate::error::{CallFailure, IngestError};
use crate::model::reject::RejectionCounts;
use crate::observability::metrics::CounterVec;
use crate::record::Record;

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

/// Counts a message's records: all of them received, and the rejected ones by reason.
pub fn count_received(tenant: &Tenant, received: u64, rejections: &RejectionCounts) {
    let counts = tenant.metrics();
    counts.received.increment(received);
    for (reason, count) in rejections.nonzero() {
        counts.rejected(reason).increment(count);
    }
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
