//! What every ingest protocol does around the pipeline: charge a tenant's rate limit before records
//! are queued, collect a unary request's records and wait for their commit ([`Collected`]), and
//! count how each call ended.

use std::sync::Arc;

use tonic::{Response, Status};

use crate::auth::Tenant;
use crate::error::{CallFailure, IngestError};
use crate::ingest::rejections::RequestTally;
use crate::ingest::transcode::Refused;
use crate::ingest::validate::Invalid;
use crate::model::reject::RejectionCounts;
use crate::observability::metrics::{Counter, CounterVec};
use crate::pipeline::{ChunkSource, Ingress, Meter};
use crate::record::{Record, RECORD_OVERHEAD_BYTES};
use crate::storage::StoreError;

/// Takes the records from the tenant's rate limit; returns their size in bytes, or the refusal
/// with the delay after which they would be admitted.
pub(crate) fn admit(tenant: &Tenant, records: &[Record]) -> Result<usize, IngestError> {
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

/// Counts a message's records: all of them received (by tenant, and in `by_protocol`, the
/// counter of the protocol they came by), and the rejected ones by reason.
pub(crate) fn count_received(
    tenant: &Tenant,
    by_protocol: &Counter,
    received: u64,
    rejections: &RejectionCounts,
) {
    by_protocol.increment(received);
    let counts = tenant.metrics();
    counts.received.increment(received);
    for (reason, count) in rejections.nonzero() {
        counts.rejected(reason).increment(count);
    }
}

/// A unary request (an OTLP export, a Loki push) as its records are decoded one by one: the
/// valid ones, each charged to the request's meter before the next is built, with the request
/// index of each, and the tally of the refused.
pub(crate) struct Collected {
    records: Vec<Record>,
    queued_at: Vec<u64>,
    tally: RequestTally,
}

impl Collected {
    /// An empty collection, with the records the transport refused (a JSON record that did not
    /// deserialize), which the encoding leaves out and the tally numbers in.
    pub(crate) fn new(upfront: Refused) -> Self {
        Collected {
            records: Vec::new(),
            queued_at: Vec::new(),
            tally: RequestTally::new(upfront),
        }
    }

    /// Makes room for `count` more records, charging their fixed cost before any is built: 2
    /// bytes on the wire can be a few hundred in memory.
    pub(crate) async fn reserve(
        &mut self,
        count: usize,
        meter: &mut Meter<'_>,
    ) -> Result<(), IngestError> {
        meter.charge(count * RECORD_OVERHEAD_BYTES).await?;
        self.records.reserve(count);
        Ok(())
    }

    /// Counts the next record and keeps what `check` makes of it, charged to `meter`, or its
    /// rejection.
    pub(crate) async fn take(
        &mut self,
        meter: &mut Meter<'_>,
        check: impl FnOnce() -> Result<Record, Invalid>,
    ) -> Result<(), IngestError> {
        let index = self.tally.next_index();
        match check() {
            Ok(record) => {
                meter
                    .charge(record.size_bytes() - RECORD_OVERHEAD_BYTES)
                    .await?;
                self.records.push(record);
                self.queued_at.push(index);
            }
            Err(invalid) => self.tally.invalid(index, &invalid),
        }
        Ok(())
    }

    /// Counts the request's records for `tenant` and in `by_protocol` (the counter of the
    /// protocol they came by), queues the valid ones as one chunk on the least loaded shard (its
    /// rate limit charged first), and waits for their commit; returns the tally, the rows the
    /// database refused included.
    pub(crate) async fn store(
        self,
        ingress: &Ingress,
        tenant: &Tenant,
        by_protocol: &Counter,
        meter: Meter<'_>,
    ) -> Result<RequestTally, IngestError> {
        let Collected {
            records,
            queued_at,
            mut tally,
        } = self;
        tally.end_of_records();
        count_received(tenant, by_protocol, tally.received, &tally.by_reason);
        if records.is_empty() {
            return Ok(tally);
        }
        let bytes = admit(tenant, &records)?;
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
                meter,
            )
            .await?;
        let stored = ack.await.map_err(|_| {
            StoreError::Unavailable("the batch was dropped before its commit".into())
        })??;
        tally.refused(stored.refused, &queued_at);
        Ok(tally)
    }
}

/// Counts the call in `calls` by outcome and turns the outcome into the gRPC answer.
pub(crate) fn respond<T, E: CallFailure>(
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
