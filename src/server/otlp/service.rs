//! `opentelemetry.proto.collector.logs.v1.LogsService/Export`: maps each OTLP record onto the wire
//! record of `LogIngest`, validates it with the same rules, queues the valid ones as one chunk,
//! and answers once that chunk is committed. Bad records are reported through `partial_success`,
//! as the OTLP specification asks, while the rest of the request is stored.

use std::sync::Arc;

use bytes::Bytes;
use chrono::Utc;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::SERVICE_NAME;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::logs::v1::LogRecord as OtlpLogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::Status;

use super::mapping::{self, Shared};
use crate::auth::{AuthFailure, Tenant};
use crate::error::IngestError;
use crate::model::reject::RejectionCounts;
use crate::observability::metrics::metrics;
use crate::pipeline::{ChunkSource, Ingress, Meter};
use crate::record::{Record, RECORD_OVERHEAD_BYTES};
use crate::server::admission::{admit, count_received, respond};
use crate::server::fields::{last, repeated};
use crate::server::grpc_body::{answer, serve_raw_grpc, Encoding, MessageReader};
use crate::server::validate::{validate_with, Invalid, Limits, RejectReason};
use crate::storage::StoreError;

/// Rejections spelled out in `error_message`; `rejected_log_records` stays exact beyond it. OTLP
/// clients log the message, so it should stay readable in one log line.
pub const MAX_LISTED_REJECTIONS: usize = 10;
/// Longest reason quoted in `error_message`; a database's refusal can be long.
const MAX_REASON_CHARS: usize = 200;

/// The path of the one method this service has.
const EXPORT_PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

/// The OTLP logs service, served from the request body directly (see [`crate::server::grpc_body`]).
#[derive(Clone, Debug)]
pub struct OtlpLogsService {
    ingress: Ingress,
    limits: Limits,
    max_request_bytes: usize,
}

impl OtlpLogsService {
    /// A service feeding `ingress`, checking records against `limits`, taking requests of up to
    /// `max_request_bytes` (before and after decompression).
    pub fn new(ingress: Ingress, limits: Limits, max_request_bytes: usize) -> Self {
        OtlpLogsService {
            ingress,
            limits,
            max_request_bytes,
        }
    }

    /// Serves one call: checks what it is, reads the request, and answers.
    async fn serve(self, request: http::Request<Body>) -> http::Response<Body> {
        if request.uri().path() != EXPORT_PATH {
            let path = request.uri().path().to_owned();
            return Status::unimplemented(format!("no method {path}")).into_http();
        }
        let Some(tenant) = request.extensions().get::<Tenant>().cloned() else {
            return Status::from(AuthFailure::NoTenant).into_http();
        };
        let encoding = match Encoding::of(request.headers()) {
            Ok(encoding) => encoding,
            Err(status) => return status.into_http(),
        };
        let mut reader = MessageReader::new(request.into_body(), encoding, self.max_request_bytes);
        let outcome = self.store(&tenant, &mut reader).await;
        answer(respond(outcome, &metrics().otlp_exports).map(tonic::Response::into_inner))
    }

    async fn store(
        &self,
        tenant: &Tenant,
        reader: &mut MessageReader,
    ) -> Result<ExportLogsServiceResponse, IngestError> {
        let Some(prefix) = reader.next_prefix().await? else {
            return Err(IngestError::Malformed(
                "the request ended before its message".into(),
            ));
        };
        let deadline = tokio::time::Instant::now() + self.ingress.enqueue_timeout();
        let mut meter = self.ingress.meter(deadline);
        meter.expect(prefix.len * EXPECTED_DECODED_RATIO).await?;
        let message = reader.read_message(prefix, &mut meter).await?;
        let wire_bytes = message.len();
        let mut tally = Tally::default();
        let (records, queued_at) = self.decode(message, &mut meter, &mut tally).await?;
        meter.release(wire_bytes);
        count_received(tenant, tally.received, &tally.by_reason);
        if !records.is_empty() {
            let bytes = admit(tenant, &records)?;
            let shard = self.ingress.assign_shard();
            let ack = self
                .ingress
                .enqueue(
                    shard,
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
            let stored = ack.await.map_err(|_| {
                StoreError::Unavailable("the batch was dropped before its commit".into())
            })??;
            for row in stored.refused {
                let reason = format!("{}: {}", RejectReason::StorageRefused.as_str(), row.reason);
                tally.reject(queued_at[row.position], reason);
            }
        }
        Ok(tally.into_response())
    }

    /// Walks the request's resources and scopes and decodes its records one at a time, each
    /// charged to `meter` as it is built: a record's stored size includes every resource and
    /// scope attribute it inherits, so a request whose shared attributes would be repeated past
    /// the message limit is refused before it is all in memory. Returns the valid records and
    /// the request index of each.
    async fn decode(
        &self,
        message: Bytes,
        meter: &mut Meter<'_>,
        tally: &mut Tally,
    ) -> Result<(Vec<Record>, Vec<u64>), IngestError> {
        let malformed =
            |detail: String| IngestError::Malformed(format!("ExportLogsServiceRequest: {detail}"));
        let now = Utc::now();
        let mut records = Vec::new();
        let mut queued_at = Vec::new();
        for resource_logs in repeated(&message, 1) {
            let resource_logs = resource_logs.map_err(malformed)?;
            let resource = decode_last::<Resource>(&resource_logs, 1).map_err(malformed)?;
            let resource = Shared::from_resource(resource.as_ref());
            for scope_logs in repeated(&resource_logs, 2) {
                let scope_logs = scope_logs.map_err(malformed)?;
                let scope =
                    decode_last::<InstrumentationScope>(&scope_logs, 1).map_err(malformed)?;
                let shared = resource.with_scope(scope.as_ref());
                let count = repeated(&scope_logs, 2).count();
                meter.charge(count * RECORD_OVERHEAD_BYTES).await?;
                records.reserve(count);
                for record in repeated(&scope_logs, 2) {
                    let record = record.map_err(malformed)?;
                    let index = tally.received;
                    tally.received += 1;
                    let checked = OtlpLogRecord::decode(record)
                        .map_err(Invalid::malformed)
                        .and_then(|record| mapping::to_wire(record, &shared))
                        .and_then(|wire| {
                            validate_with(wire, &shared.attributes, &self.limits, now)
                        });
                    match checked {
                        Ok(record) => {
                            meter
                                .charge(record.size_bytes() - RECORD_OVERHEAD_BYTES)
                                .await?;
                            records.push(record);
                            queued_at.push(index);
                        }
                        Err(invalid) => {
                            tally.by_reason.add(invalid.reason);
                            tally.reject(index, invalid.to_reason());
                        }
                    }
                }
            }
        }
        Ok((records, queued_at))
    }
}

/// Memory per wire byte an OTLP request is expected to take once decoded; reserved before the
/// request is read, so that most requests wait for room once.
const EXPECTED_DECODED_RATIO: usize = 2;

/// The last occurrence of the embedded message `number`, decoded.
fn decode_last<M: Message + Default>(message: &Bytes, number: u32) -> Result<Option<M>, String> {
    match last(message, number)? {
        None => Ok(None),
        Some(bytes) => M::decode(bytes).map(Some).map_err(|err| err.to_string()),
    }
}

serve_raw_grpc!(OtlpLogsService, SERVICE_NAME);

/// The running outcome of one request.
#[derive(Debug, Default)]
struct Tally {
    received: u64,
    rejected: u64,
    /// The first rejections found, `(request index, reason)`.
    listed: Vec<(u64, String)>,
    /// Validation rejections by reason, for the metric.
    by_reason: RejectionCounts,
}

impl Tally {
    fn reject(&mut self, index: u64, reason: String) {
        self.rejected += 1;
        if self.listed.len() < MAX_LISTED_REJECTIONS {
            self.listed.push((index, reason));
        }
    }

    /// OTLP's answer: no `partial_success` when everything was stored; otherwise the exact count
    /// and a message naming the first rejected records by their index in the request.
    fn into_response(mut self) -> ExportLogsServiceResponse {
        if self.rejected == 0 {
            return ExportLogsServiceResponse::default();
        }
        self.listed.sort_by_key(|(index, _)| *index);
        let listed: Vec<String> = self
            .listed
            .iter()
            .map(|(index, reason)| {
                let reason: String = reason.chars().take(MAX_REASON_CHARS).collect();
                format!("#{index} {reason}")
            })
            .collect();
        let mut error_message = format!(
            "{} of {} log records rejected (#n is a record's position in the request, counting from 0 across all resource_logs and scope_logs): {}",
            self.rejected,
            self.received,
            listed.join("; ")
        );
        let unlisted = self.rejected - self.listed.len() as u64;
        if unlisted > 0 {
            error_message.push_str(&format!("; and {unlisted} more"));
        }
        ExportLogsServiceResponse {
            partial_success: Some(ExportLogsPartialSuccess {
                rejected_log_records: i64::try_from(self.rejected).unwrap_or(i64::MAX),
                error_message,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_request_has_no_partial_success() {
        let tally = Tally {
            received: 5,
            ..Tally::default()
        };
        assert_eq!(tally.into_response().partial_success, None);
    }

    #[test]
    fn the_message_lists_the_first_rejections_in_request_order_and_counts_the_rest() {
        let mut tally = Tally {
            received: 100,
            ..Tally::default()
        };
        for index in (0..30).rev() {
            tally.reject(index * 3, format!("invalid_severity: number {index}"));
        }
        let partial = tally.into_response().partial_success.unwrap();
        assert_eq!(partial.rejected_log_records, 30);
        assert!(
            partial
                .error_message
                .starts_with("30 of 100 log records rejected"),
            "{}",
            partial.error_message
        );
        assert!(partial
            .error_message
            .contains("#60 invalid_severity: number 20; #63"));
        assert!(partial.error_message.ends_with("; and 20 more"));
        assert_eq!(
            partial.error_message.matches('#').count(),
            MAX_LISTED_REJECTIONS + 1
        );
    }

    #[test]
    fn long_reasons_are_cut() {
        let mut tally = Tally {
            received: 1,
            ..Tally::default()
        };
        tally.reject(0, "x".repeat(5000));
        let partial = tally.into_response().partial_success.unwrap();
        assert!(
            partial.error_message.len() < 500,
            "{}",
            partial.error_message.len()
        );
    }
}
