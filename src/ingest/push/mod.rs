//! `loghaul.v1.LogIngest/Push`: reads a client stream message by message, validates each record,
//! queues the valid ones on the stream's shard, and answers once every queued record is committed.
//!
//! The stream's body is read here rather than by tonic's decoder (see [`crate::wire::grpc_body`]):
//! a message is read only once the budget holds room for it, and its records are decoded one at a
//! time ([`crate::wire::fields`]), each charged before the next is built.

pub(crate) mod settlement;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::Utc;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use prost::Message;
use tokio::sync::oneshot::error::RecvError;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::Status;

use crate::auth::{AuthFailure, Tenant};
use crate::error::{IngestError, StreamFailure};
use crate::ingest::charge::{admit, count_received, respond};
use crate::ingest::metrics::{IngestMetrics, Protocol};
use crate::ingest::validate::{validate_with, Invalid, Limits, StreamLabels};
use crate::model::reject::RejectionCounts;
use crate::observability::metrics::Gauge;
use crate::pipeline::ack::{AckReceiver, AckResult};
use crate::pipeline::router::ShardPin;
use crate::pipeline::{ChunkSource, Ingress, Meter, ProducerSequence};
use crate::proto::v1::{LogRecord, PushResponse};
use crate::record::{Record, RECORD_OVERHEAD_BYTES};
use crate::wire::body_rate::BodyPace;
use crate::wire::fields::{fields, repeated, Value};
use crate::wire::grpc_body::{answer, message_encoding, serve_raw_grpc, MessageReader, Prefix};
use settlement::{QueuedMessage, Tally};

/// The one method this service has.
const PUSH_PATH: &str = "/loghaul.v1.LogIngest/Push";

/// Longest producer id accepted, in bytes.
pub(crate) const MAX_PRODUCER_ID_BYTES: usize = 64;

/// What a stream's first message is expected to take in memory per byte on the wire, before the
/// stream has shown its own ratio; a guess that is too low only means one more wait for room.
const FIRST_DECODED_RATIO: f64 = 2.0;

/// The chunk's deduplication key, if it names one; a malformed one ends the stream.
pub(crate) fn chunk_key(
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

/// The ingest service, `loghaul.v1.LogIngest`.
#[derive(Clone, Debug)]
pub(crate) struct IngestService {
    ingress: Ingress,
    limits: Limits,
    max_request_bytes: u64,
    pace: BodyPace,
    metrics: Arc<IngestMetrics>,
}

impl IngestService {
    /// A service feeding `ingress`, taking messages of up to `max_request_bytes` that arrive at
    /// `pace` (which also ends streams that send nothing for its idle timeout), counting streams
    /// and records in `metrics`.
    pub(crate) fn new(
        ingress: Ingress,
        limits: Limits,
        max_request_bytes: u64,
        pace: BodyPace,
        metrics: Arc<IngestMetrics>,
    ) -> Self {
        IngestService {
            ingress,
            limits,
            max_request_bytes,
            pace,
            metrics,
        }
    }

    /// Serves one call: checks what it is, reads the stream, and answers.
    async fn serve(self, request: http::Request<Body>) -> http::Response<Body> {
        if request.uri().path() != PUSH_PATH {
            let path = request.uri().path().to_owned();
            return Status::unimplemented(format!("no method {path}")).into_http();
        }
        let Some(tenant) = request.extensions().get::<Tenant>().cloned() else {
            return Status::from(AuthFailure::NoTenant).into_http();
        };
        let encoding = match message_encoding(request.headers()) {
            Ok(encoding) => encoding,
            Err(status) => return status.into_http(),
        };
        let _open = OpenStream::start(&self.metrics.active_streams);
        let max_message = usize::try_from(self.max_request_bytes).unwrap_or(usize::MAX);
        let reader = MessageReader::new(request.into_body(), encoding, max_message, self.pace);
        let outcome = self.ingest(&tenant, reader).await;
        answer(respond(outcome, &self.metrics.streams_ended).map(tonic::Response::into_inner))
    }

    /// Reads the stream to its end and answers with what was stored; or, when something stops
    /// it part-way, stops reading, lets what is already queued settle, and says exactly which
    /// messages were stored and which were not.
    async fn ingest(
        &self,
        tenant: &Tenant,
        mut reader: MessageReader,
    ) -> Result<PushResponse, StreamFailure> {
        let mut run = StreamRun {
            shard: self.ingress.pin_stream(),
            tally: Tally::default(),
            in_flight: FuturesUnordered::new(),
            next_message: 0,
            next_index: 0,
            decoded_ratio: FIRST_DECODED_RATIO,
        };
        let (mut cause, from) = match self.read(tenant, &mut reader, &mut run).await {
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
        reader: &mut MessageReader,
        run: &mut StreamRun,
    ) -> Result<(), (IngestError, u64)> {
        let idle = self.pace.idle.unwrap_or(Duration::MAX);
        loop {
            let message = run.next_message;
            let at = |err| (err, message);
            let Some(prefix) = self.next_prefix(reader, run, idle).await.map_err(at)? else {
                return Ok(());
            };
            self.read_and_queue(tenant, reader, prefix, run)
                .await
                .map_err(at)?;
            run.next_message += 1;
        }
    }

    /// Waits for the next message's prefix (`None` at the end of the stream), settling
    /// acknowledgements as they come. Between messages the stream holds no budget.
    async fn next_prefix(
        &self,
        reader: &mut MessageReader,
        run: &mut StreamRun,
        idle: Duration,
    ) -> Result<Option<Prefix>, IngestError> {
        let next = reader.next_prefix();
        tokio::pin!(next);
        let silent = tokio::time::sleep(idle);
        tokio::pin!(silent);
        loop {
            tokio::select! {
                biased;
                Some((outcome, queued)) = run.in_flight.next() => run.tally.settle(outcome, queued)?,
                () = &mut silent, if self.pace.idle.is_some() => {
                    return Err(IngestError::StreamIdle(idle));
                }
                prefix = &mut next => return prefix,
            }
        }
    }

    /// Claims what the message `prefix` announced is expected to need, reads it under that
    /// claim, then validates its records and queues the valid ones on the stream's shard.
    async fn read_and_queue(
        &self,
        tenant: &Tenant,
        reader: &mut MessageReader,
        prefix: Prefix,
        run: &mut StreamRun,
    ) -> Result<(), IngestError> {
        let mut meter = self.ingress.meter(tenant.name());
        meter
            .reserve((prefix.len as f64 * run.decoded_ratio) as usize)
            .await?;
        let message = reader.read_message(prefix, &mut meter).await?;
        let wire_bytes = message.len();
        let (records, invalid, key) = self.decode(tenant, message, &mut meter).await?;
        run.decoded_ratio = (meter.charged() as f64 / prefix.len.max(1) as f64) * 1.1;
        meter.release(wire_bytes);
        self.queue(tenant, records, invalid, key, meter, run).await
    }

    /// Decodes a PushRequest record by record, charging each before the next is built.
    async fn decode(
        &self,
        tenant: &Tenant,
        message: Bytes,
        meter: &mut Meter<'_>,
    ) -> Result<(Vec<Record>, Vec<(usize, String)>, Option<ProducerSequence>), IngestError> {
        let malformed = |detail: String| IngestError::Malformed(format!("PushRequest: {detail}"));
        let count = repeated(&message, push_request::RECORDS).count();
        // Every record costs its slot and headers whatever its bytes: 2 bytes on the wire can be
        // a few hundred in memory, so a message of many tiny records is refused here, unbuilt.
        meter.charge(count * RECORD_OVERHEAD_BYTES).await?;
        let now = Utc::now();
        // A Push record has no stream labels: every record of the request points to one empty
        // set instead of allocating its own.
        let no_labels = StreamLabels::default();
        let mut records = Vec::with_capacity(count);
        let mut invalid = Vec::new();
        let mut rejections = RejectionCounts::default();
        let (mut producer_id, mut sequence) = (None, None);
        let mut position = 0;
        for field in fields(&message) {
            match field.map_err(malformed)? {
                (push_request::RECORDS, Value::Bytes(bytes)) => {
                    let checked = LogRecord::decode(bytes)
                        .map_err(Invalid::malformed)
                        .and_then(|wire| validate_with(wire, &no_labels, &self.limits, now));
                    match checked {
                        Ok(record) => {
                            meter
                                .charge(record.size_bytes() - RECORD_OVERHEAD_BYTES)
                                .await?;
                            records.push(record);
                        }
                        Err(rejected) => {
                            rejections.add(rejected.reason);
                            invalid.push((position, rejected.to_reason()));
                        }
                    }
                    position += 1;
                }
                (push_request::PRODUCER_ID, Value::Bytes(bytes)) => {
                    producer_id = Some(bytes.to_vec())
                }
                (push_request::SEQUENCE, Value::Varint(value)) => sequence = Some(value),
                (
                    number @ (push_request::RECORDS
                    | push_request::PRODUCER_ID
                    | push_request::SEQUENCE),
                    _,
                ) => return Err(malformed(format!("field {number} has the wrong wire type"))),
                _ => {}
            }
        }
        count_received(
            tenant,
            self.metrics.records(Protocol::Push),
            position as u64,
            &rejections,
        );
        let key = chunk_key(producer_id, sequence)?;
        Ok((records, invalid, key))
    }

    /// Queues a message's valid records on the stream's shard, or settles it at once when none
    /// was valid.
    async fn queue(
        &self,
        tenant: &Tenant,
        records: Vec<Record>,
        invalid: Vec<(usize, String)>,
        key: Option<ProducerSequence>,
        meter: Meter<'_>,
        run: &mut StreamRun,
    ) -> Result<(), IngestError> {
        let first_index = run.next_index;
        let count = (records.len() + invalid.len()) as u64;
        if records.is_empty() {
            run.next_index += count;
            run.tally.reject_invalid(first_index, invalid);
            return Ok(());
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
                run.shard.shard(),
                ChunkSource {
                    tenant: Arc::clone(tenant.name()),
                    counts: Arc::clone(tenant.metrics()),
                    key,
                },
                records,
                bytes,
                meter,
            )
            .await?;
        run.next_index += count;
        run.in_flight.push(settle_later(ack, queued));
        Ok(())
    }
}

serve_raw_grpc!(IngestService, "loghaul.v1.LogIngest");

/// A stream being read: its shard, what it has settled, what it has in flight, and where it is.
struct StreamRun {
    shard: ShardPin,
    tally: Tally,
    in_flight: FuturesUnordered<Settling>,
    /// The next message's position in the stream.
    next_message: u64,
    /// The stream index of the next message's first record.
    next_index: u64,
    /// Memory per wire byte the stream's last message took, padded: what the next one reserves
    /// before it is read.
    decoded_ratio: f64,
}

/// A queued message's acknowledgement, with the message it belongs to.
type Settling = Pin<Box<dyn Future<Output = (Result<AckResult, RecvError>, QueuedMessage)> + Send>>;

fn settle_later(ack: AckReceiver, queued: QueuedMessage) -> Settling {
    Box::pin(async move { (ack.await, queued) })
}

/// Counts the stream in `loghaul_active_streams` for as long as it lives, however it ends.
struct OpenStream(Gauge);

impl OpenStream {
    fn start(active: &Gauge) -> Self {
        active.add(1.0);
        OpenStream(active.clone())
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.add(-1.0);
    }
}

/// The fields of `loghaul.v1.PushRequest`, which a message is walked by instead of decoded whole.
mod push_request {
    /// `repeated LogRecord records`.
    pub(super) const RECORDS: u32 = 1;
    /// `optional bytes producer_id`.
    pub(super) const PRODUCER_ID: u32 = 2;
    /// `optional uint64 sequence`.
    pub(super) const SEQUENCE: u32 = 3;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walked_field_numbers_are_the_contracts() {
        let request = "loghaul.v1.PushRequest";
        crate::wire::fields::assert_field_numbers(
            crate::proto::FILE_DESCRIPTOR_SET,
            &[
                (request, "records", push_request::RECORDS),
                (request, "producer_id", push_request::PRODUCER_ID),
                (request, "sequence", push_request::SEQUENCE),
            ],
        );
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
}
