//! `loghaul.v1.LogIngest/Push`: reads a client stream chunk by chunk, validates each record,
//! queues the valid ones on the stream's shard, and answers once every queued record is committed.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use metrics::{counter, gauge};
use tokio::sync::oneshot::error::RecvError;
use tokio::time::Instant;
use tonic::{Request, Response, Status, Streaming};

use super::admission::{admit, respond};
use super::first_message::Gate;
use super::validate::{validate, Limits};
use crate::auth::{tenant_of, Tenant};
use crate::error::IngestError;
use crate::pipeline::ack::AckResult;
use crate::pipeline::{ChunkSource, Ingress, ProducerSequence};
use crate::proto::v1::log_ingest_server::LogIngest;
use crate::proto::v1::{PushRequest, PushResponse, Rejection};
use crate::server::validate::RejectReason;
use crate::storage::StoreError;

/// Rejections listed in one response; the `rejected` count stays exact beyond it, and the cap keeps
/// a stream of garbage from building an unbounded answer.
pub const MAX_REPORTED_REJECTIONS: usize = 1000;

/// How long a stream may hold its reservation while the client sends nothing; after that it waits
/// for the next message without one (idle streams hold no budget).
const IDLE_RESERVATION: Duration = Duration::from_millis(50);

/// Longest producer id accepted, in bytes.
pub const MAX_PRODUCER_ID_BYTES: usize = 64;

/// The chunk's deduplication key, if it names one; a malformed one ends the stream.
pub fn chunk_key(
    producer_id: Option<Vec<u8>>,
    sequence: Option<u64>,
) -> Result<Option<ProducerSequence>, IngestError> {
    match (producer_id, sequence) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(IngestError::InvalidChunk(
            "sequence is set but producer_id is not; a sequence is only meaningful per producer"
                .into(),
        )),
        (Some(id), _) if id.is_empty() || id.len() > MAX_PRODUCER_ID_BYTES => {
            Err(IngestError::InvalidChunk(format!(
                "producer_id is {} bytes; it must be 1 to {MAX_PRODUCER_ID_BYTES}",
                id.len()
            )))
        }
        (Some(_), None) => Ok(None),
        (Some(producer_id), Some(sequence)) => Ok(Some(ProducerSequence {
            producer_id,
            sequence,
        })),
    }
}

/// The smallest reservation taken before reading a message.
const MIN_RESERVATION: usize = 64 * 1024;

/// The ingest service.
#[derive(Clone, Debug)]
pub struct IngestService {
    ingress: Ingress,
    limits: Limits,
    max_request_bytes: u64,
    idle_timeout: Option<Duration>,
}

impl IngestService {
    /// A service feeding `ingress`.
    pub fn new(ingress: Ingress, limits: Limits, max_request_bytes: u64) -> Self {
        IngestService {
            ingress,
            limits,
            max_request_bytes,
            idle_timeout: None,
        }
    }

    /// Ends streams that send nothing for `timeout` (`--stream-idle-timeout`); `None` never does.
    pub fn with_idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle_timeout = timeout;
        self
    }

    async fn ingest(
        &self,
        tenant: &Tenant,
        mut stream: Streaming<PushRequest>,
        mut gate: Option<Arc<Gate>>,
    ) -> Result<PushResponse, IngestError> {
        let shard = self.ingress.assign_shard();
        let mut tally = Tally::default();
        let mut next_index: u64 = 0;
        let mut in_flight = FuturesUnordered::new();
        // Until the stream has shown its chunk size, assume the largest message allowed.
        let mut expected_bytes = self.max_request_bytes as usize;
        if let Some(gate) = &gate {
            // Nothing is reserved until the client sends something; see `first_message`.
            let silent = tokio::time::sleep(self.idle_timeout.unwrap_or(Duration::MAX));
            tokio::select! {
                () = gate.arrived() => {}
                // Polling the read is what reads the body; the gate keeps it from completing
                // with a message, so it ends here only when the stream ended or failed.
                early = stream.message() => match early {
                    Ok(None) => return Ok(tally.into_response()),
                    Ok(Some(_)) => unreachable!("the gate holds the first message back"),
                    Err(status) => return Err(IngestError::from_stream(status, self.max_request_bytes)),
                },
                () = silent, if self.idle_timeout.is_some() => {
                    return Err(IngestError::StreamIdle {
                        idle: self.idle_timeout.unwrap_or_default(),
                        accepted: 0,
                        rejected: 0,
                    });
                }
            }
        }
        loop {
            let deadline = Instant::now() + self.ingress.enqueue_timeout();
            let mut held = Some(self.ingress.reserve(expected_bytes, deadline).await?);
            if let Some(gate) = gate.take() {
                gate.open();
            }
            let next = {
                let read = stream.message();
                tokio::pin!(read);
                let idle = tokio::time::sleep(IDLE_RESERVATION);
                tokio::pin!(idle);
                let silent = tokio::time::sleep(self.idle_timeout.unwrap_or(Duration::MAX));
                tokio::pin!(silent);
                loop {
                    tokio::select! {
                        biased;
                        // Settle acknowledgements as they come so a long stream holds only what
                        // is in flight.
                        Some((outcome, chunk)) = in_flight.next() => tally.settle(outcome, &chunk)?,
                        // A client with nothing to send must not sit on budget others need.
                        () = &mut idle, if held.is_some() => held = None,
                        // Nor may it hold a stream (and its handler) forever.
                        () = &mut silent, if self.idle_timeout.is_some() => break None,
                        message = &mut read => break Some(message
                            .map_err(|status| IngestError::from_stream(status, self.max_request_bytes))?),
                    }
                }
            };
            let Some(message) = next else {
                drop(held);
                // What the stream sent before it went quiet is committed and counted, so the
                // client learns it need not resend it.
                while let Some((outcome, chunk)) = in_flight.next().await {
                    tally.settle(outcome, &chunk)?;
                }
                return Err(IngestError::StreamIdle {
                    idle: self.idle_timeout.unwrap_or_default(),
                    accepted: tally.accepted,
                    rejected: tally.rejected,
                });
            };
            let Some(request) = message else { break };
            // A stream that gave its reservation back waited for its client, not for room: its
            // wait for room starts now.
            let deadline = match held {
                Some(_) => deadline,
                None => Instant::now() + self.ingress.enqueue_timeout(),
            };
            let key = chunk_key(request.producer_id, request.sequence)?;
            let first_index = next_index;
            let count = request.records.len();
            next_index += count as u64;
            counter!("loghaul_records_received_total").increment(count as u64);

            let now = Utc::now();
            let mut records = Vec::with_capacity(count);
            let mut skipped = Vec::new();
            for (position, wire) in request.records.into_iter().enumerate() {
                match validate(wire, &self.limits, now) {
                    Ok(record) => records.push(record),
                    Err(invalid) => {
                        counter!("loghaul_records_rejected_total", "reason" => invalid.reason.as_str())
                            .increment(1);
                        tally.reject(first_index + position as u64, invalid.to_reason());
                        skipped.push(position);
                    }
                }
            }
            if records.is_empty() {
                continue;
            }
            let bytes = admit(tenant, &records)?;
            expected_bytes = (bytes + bytes / 4).max(MIN_RESERVATION);
            let chunk = ChunkIndex {
                first_index,
                skipped,
                valid: records.len(),
            };
            let ack = self
                .ingress
                .enqueue(
                    shard,
                    ChunkSource {
                        tenant: Arc::clone(tenant.name()),
                        key,
                    },
                    records,
                    bytes,
                    held,
                    deadline,
                )
                .await?;
            in_flight.push(settle_later(ack, chunk));
        }
        while let Some((outcome, chunk)) = in_flight.next().await {
            tally.settle(outcome, &chunk)?;
        }
        Ok(tally.into_response())
    }
}

async fn settle_later(
    ack: crate::pipeline::ack::AckReceiver,
    chunk: ChunkIndex,
) -> (Result<AckResult, RecvError>, ChunkIndex) {
    (ack.await, chunk)
}

#[tonic::async_trait]
impl LogIngest for IngestService {
    async fn push(
        &self,
        request: Request<Streaming<PushRequest>>,
    ) -> Result<Response<PushResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let _open = OpenStream::start();
        let gate = request.extensions().get::<Arc<Gate>>().cloned();
        let outcome = self.ingest(&tenant, request.into_inner(), gate).await;
        respond(outcome, "loghaul_streams_total")
    }
}

/// Where a chunk's records stand in the stream: which message positions were rejected before
/// queueing, so a database refusal of the n-th queued record maps back to its stream index.
#[derive(Debug)]
struct ChunkIndex {
    first_index: u64,
    skipped: Vec<usize>,
    valid: usize,
}

impl ChunkIndex {
    fn stream_index(&self, queued_position: usize) -> u64 {
        let mut position = queued_position;
        for &skipped in &self.skipped {
            if skipped <= position {
                position += 1;
            } else {
                break;
            }
        }
        self.first_index + position as u64
    }
}

/// The running outcome of a stream.
#[derive(Debug, Default)]
struct Tally {
    accepted: u64,
    duplicates: u64,
    rejected: u64,
    rejections: Vec<Rejection>,
}

impl Tally {
    fn reject(&mut self, index: u64, reason: String) {
        self.rejected += 1;
        if self.rejections.len() < MAX_REPORTED_REJECTIONS {
            self.rejections.push(Rejection { index, reason });
        }
    }

    fn settle(
        &mut self,
        outcome: Result<AckResult, RecvError>,
        chunk: &ChunkIndex,
    ) -> Result<(), IngestError> {
        let stored = outcome.map_err(|_| {
            StoreError::Unavailable("the batch was dropped before its commit".into())
        })??;
        self.accepted += (chunk.valid - stored.refused.len()) as u64;
        if stored.duplicate {
            self.duplicates += chunk.valid as u64;
        }
        for row in stored.refused {
            let reason = format!("{}: {}", RejectReason::StorageRefused.as_str(), row.reason);
            self.reject(chunk.stream_index(row.position), reason);
        }
        Ok(())
    }

    fn into_response(mut self) -> PushResponse {
        self.rejections.sort_by_key(|rejection| rejection.index);
        PushResponse {
            accepted: self.accepted,
            rejected: self.rejected,
            rejections: self.rejections,
            duplicate_records: self.duplicates,
        }
    }
}

/// Counts the stream in `loghaul_active_streams` for as long as it lives, however it ends.
struct OpenStream;

impl OpenStream {
    fn start() -> Self {
        gauge!("loghaul_active_streams").increment(1.0);
        OpenStream
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        gauge!("loghaul_active_streams").decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_rows_map_back_past_rejected_positions() {
        // Message positions 0..6 at stream index 100; positions 1 and 3 failed validation, so the
        // queued records are positions 0, 2, 4, 5.
        let chunk = ChunkIndex {
            first_index: 100,
            skipped: vec![1, 3],
            valid: 4,
        };
        let mapped: Vec<u64> = (0..4).map(|queued| chunk.stream_index(queued)).collect();
        assert_eq!(mapped, vec![100, 102, 104, 105]);
    }

    #[test]
    fn a_chunk_key_needs_a_sane_producer_id() {
        assert_eq!(chunk_key(None, None).unwrap(), None);
        assert_eq!(chunk_key(Some(vec![1]), None).unwrap(), None);
        let key = chunk_key(Some(vec![7; 16]), Some(3)).unwrap().unwrap();
        assert_eq!((key.producer_id.len(), key.sequence), (16, 3));
        for (id, sequence) in [
            (None, Some(1)),
            (Some(vec![]), Some(1)),
            (Some(vec![0; 65]), Some(1)),
        ] {
            let err = chunk_key(id, sequence).unwrap_err();
            assert_eq!(Status::from(err).code(), tonic::Code::InvalidArgument);
        }
    }

    #[test]
    fn the_rejection_list_is_capped_but_the_count_is_exact() {
        let mut tally = Tally::default();
        for index in 0..(MAX_REPORTED_REJECTIONS as u64 + 10) {
            tally.reject(index, "bad".into());
        }
        let response = tally.into_response();
        assert_eq!(response.rejected, MAX_REPORTED_REJECTIONS as u64 + 10);
        assert_eq!(response.rejections.len(), MAX_REPORTED_REJECTIONS);
    }
}
