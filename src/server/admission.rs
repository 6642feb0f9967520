//! What both ingest protocols do around the pipeline: charge a tenant's rate limit before records
//! are queued, and count how each call ended.

use std::sync::Arc;

use metrics::counter;
use tonic::{Response, Status};

use crate::auth::Tenant;
use crate::error::{CallFailure, IngestError};
use crate::model::reject::RejectionCounts;
use crate::record::Record;

/// Takes the records from the tenant's rate limit; returns their size in bytes, or the refusal
/// with the delay after which they would be admitted.
pub fn admit(tenant: &Tenant, records: &[Record]) -> Result<usize, IngestError> {
    let bytes: usize = records.iter().map(Record::size_bytes).sum();
    match tenant.admit(records.len() as u64, bytes as u64) {
        Ok(()) => Ok(bytes),
        Err(retry_after) => {
            counter!("loghaul_rate_limited_total", "tenant" => tenant.name().to_string())
                .increment(1);
            Err(IngestError::RateLimited {
                tenant: Arc::clone(tenant.name()),
                retry_after,
            })
        }
    }
}

/// Counts a message's rejected records in `loghaul_records_rejected_total{reason,tenant}`.
pub fn count_rejections(tenant: &Tenant, counts: &RejectionCounts) {
    for (reason, count) in counts.nonzero() {
        counter!("loghaul_records_rejected_total", "reason" => reason.as_str(), "tenant" => tenant.name().to_string())
            .increment(count);
    }
}

/// Counts the call in `metric{outcome}` and turns the outcome into the gRPC answer.
pub fn respond<T, E: CallFailure>(
    outcome: Result<T, E>,
    metric: &'static str,
) -> Result<Response<T>, Status> {
    let label = match &outcome {
        Ok(_) => "ok",
        Err(err) => {
            tracing::debug!(error = %err, metric, "ingest call failed");
            err.kind()
        }
    };
    counter!(metric, "outcome" => label).increment(1);
    outcome.map(Response::new).map_err(Into::into)
}
