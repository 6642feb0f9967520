//! `loghaul.v1.LogIngest/Push`: reads a client stream chunk by chunk, validates each record,
//! queues the valid ones on the stream's shard, and answers once every queued record is committed.

use std::future::Future;
use std::pin::Pin;
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
use super::settlement::{QueuedMessage, Tally};
use super::validate::{validate, Limits};
use crate::auth::{tenant_of, Tenant};
use crate::error::{IngestError, StreamFailure};
use crate::pipeline::ack::{AckReceiver, AckResult};
use crate::pipeline::{ChunkSource, Ingress, ProducerSequence, Reservation};
use crate::proto::v1::log_ingest_server::LogIngest;
use crate::proto::v1::{PushRequest, PushResponse};

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

    /// Reads the stream to its end and answers with what was stored; or, when something stops
    /// it part-way, stops reading, lets what is already queued settle, and says exactly which
    /// messages were stored and which were not.
    async fn ingest(
        &self,
        tenant: &Tenant,
        mut stream: Streaming<PushRequest>,
        gate: Option<Arc<Gate>>,
    ) -> Result<PushResponse, StreamFailure> {
        let mut run = StreamRun {
            shard: self.ingress.assign_shard(),
            tally: Tally::default(),
            in_flight: FuturesUnordered::new(),
            next_message: 0,
            next_index: 0,
        };
        let (mut cause, from) = match self.read(tenant, &mut stream, gate, &mut run).await {
            Ok(()) => (None, None),
            Err((cause, from)) => (Some(cause), Some(from)),
        };
        while let Some((outcome, queued)) = run.in_flight.next().await {
            if let Err(err) = run.tally.settle(outcome, queued) {
                cause.get_or_insert(err);
            }
        }
        let Some(cause) = cause else {
            return Ok(run.tally.into_response());
        };
        let (settled, not_stored) = run.tally.into_parts(from);
        Err(StreamFailure {
            cause,
            settled,
            not_stored,
        })
    }

    /// Reads and queues messages until the stream ends or something stops it; the error comes
    /// with the first message not stored because of it.
    async fn read(
        &self,
        tenant: &Tenant,
        stream: &mut Streaming<PushRequest>,
        mut gate: Option<Arc<Gate>>,
        run: &mut StreamRun,
    ) -> Result<(), (IngestError, u64)> {
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
                    Ok(None) => return Ok(()),
                    Ok(Some(_)) => unreachable!("the gate holds the first message back"),
                    Err(status) => return Err((IngestError::from_stream(status, self.max_request_bytes), 0)),
                },
                () = silent, if self.idle_timeout.is_some() => {
                    return Err((IngestError::StreamIdle(self.idle_timeout.unwrap_or_default()), 0));
                }
            }
        }
        loop {
            let message = run.next_message;
            let deadline = Instant::now() + self.ingress.enqueue_timeout();
            let mut held = Some(
                self.ingress
                    .reserve(expected_bytes, deadline)
                    .await
                    .map_err(|err| (err, message))?,
            );
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
                        // is in flight; a batch that failed stops the stream.
                        Some((outcome, queued)) = run.in_flight.next() => {
                            run.tally.settle(outcome, queued).map_err(|err| (err, message))?;
                        }
                        // A client with nothing to send must not sit on budget others need.
                        () = &mut idle, if held.is_some() => held = None,
                        // Nor may it hold a stream (and its handler) forever.
                        () = &mut silent, if self.idle_timeout.is_some() => {
                            return Err((IngestError::StreamIdle(self.idle_timeout.unwrap_or_default()), message));
                        }
                        message = &mut read => break message,
                    }
                }
            };
            let request = match next {
                Ok(Some(request)) => request,
                Ok(None) => return Ok(()),
                Err(status) => {
                    return Err((
                        IngestError::from_stream(status, self.max_request_bytes),
                        message,
                    ))
                }
            };
            // A stream that gave its reservation back waited for its client, not for room: its
            // wait for room starts now.
            let deadline = match held {
                Some(_) => deadline,
                None => Instant::now() + self.ingress.enqueue_timeout(),
            };
            let queued = self.queue(tenant, request, held, deadline, run).await;
            if let Some(bytes) = queued.map_err(|err| (err, message))? {
                expected_bytes = (bytes + bytes / 4).max(MIN_RESERVATION);
            }
            run.next_message += 1;
        }
    }

    /// Validates one message and queues its valid records on the stream's shard; returns their
    /// size, or `None` when none was valid.
    async fn queue(
        &self,
        tenant: &Tenant,
        request: PushRequest,
        held: Option<Reservation>,
        deadline: Instant,
        run: &mut StreamRun,
    ) -> Result<Option<usize>, IngestError> {
        let key = chunk_key(request.producer_id, request.sequence)?;
        let first_index = run.next_index;
        let count = request.records.len();
        counter!("loghaul_records_received_total").increment(count as u64);

        let now = Utc::now();
        let mut records = Vec::with_capacity(count);
        let mut invalid = Vec::new();
        for (position, wire) in request.records.into_iter().enumerate() {
            match validate(wire, &self.limits, now) {
                Ok(record) => records.push(record),
                Err(rejected) => {
                    counter!("loghaul_records_rejected_total", "reason" => rejected.reason.as_str())
                        .increment(1);
                    invalid.push((position, rejected.to_reason()));
                }
            }
        }
        if records.is_empty() {
            run.next_index += count as u64;
            run.tally.reject_invalid(first_index, invalid);
            return Ok(None);
        }
        let bytes = admit(tenant, &records)?;
        let queued = QueuedMessage {
            message: run.next_message,
            first_index,
            invalid,
            valid: records.len(),
        };
        let ack = self
            .ingress
            .enqueue(
                run.shard,
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
        run.next_index += count as u64;
        run.in_flight.push(settle_later(ack, queued));
        Ok(Some(bytes))
    }
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

/// A stream being read: its shard, what it has settled, what it has in flight, and where it is.
struct StreamRun {
    shard: usize,
    tally: Tally,
    in_flight: FuturesUnordered<Settling>,
    /// The next message's position in the stream.
    next_message: u64,
    /// The stream index of the next message's first record.
    next_index: u64,
}

/// A queued message's acknowledgement, with the message it belongs to.
type Settling = Pin<Box<dyn Future<Output = (Result<AckResult, RecvError>, QueuedMessage)> + Send>>;

fn settle_later(ack: AckReceiver, queued: QueuedMessage) -> Settling {
    Box::pin(async move { (ack.await, queued) })
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
}
