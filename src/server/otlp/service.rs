//! `opentelemetry.proto.collector.logs.v1.LogsService/Export`: maps each OTLP record onto the wire
//! record of `LogIngest`, validates it with the same rules, queues the valid ones as one chunk,
//! and answers once that chunk is committed. Bad records are reported through `partial_success`,
//! as the OTLP specification asks, while the rest of the request is stored.

use std::sync::Arc;

use chrono::Utc;
use metrics::counter;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::LogsService;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use tonic::{Request, Response, Status};

use super::mapping::{self, Shared};
use crate::auth::{tenant_of, Tenant};
use crate::error::IngestError;
use crate::pipeline::{ChunkSource, Ingress};
use crate::server::admission::{admit, respond};
use crate::server::validate::{validate, Limits, RejectReason};
use crate::storage::StoreError;

/// Rejections spelled out in `error_message`; `rejected_log_records` stays exact beyond it. OTLP
/// clients log the message, so it should stay readable in one log line.
pub const MAX_LISTED_REJECTIONS: usize = 10;
/// Longest reason quoted in `error_message`; a database's refusal can be long.
const MAX_REASON_CHARS: usize = 200;

/// The OTLP logs service.
#[derive(Clone, Debug)]
pub struct OtlpLogsService {
    ingress: Ingress,
    limits: Limits,
}

impl OtlpLogsService {
    /// A service feeding `ingress`, checking records against `limits`.
    pub fn new(ingress: Ingress, limits: Limits) -> Self {
        OtlpLogsService { ingress, limits }
    }

    async fn store(
        &self,
        tenant: &Tenant,
        request: ExportLogsServiceRequest,
    ) -> Result<ExportLogsServiceResponse, IngestError> {
        let now = Utc::now();
        let mut tally = Tally::default();
        let mut records = Vec::new();
        // The request index of each queued record, to map a database refusal back to it.
        let mut queued_at = Vec::new();
        for resource_logs in request.resource_logs {
            let resource = Shared::from_resource(resource_logs.resource.as_ref());
            for scope_logs in resource_logs.scope_logs {
                let shared = resource.with_scope(scope_logs.scope.as_ref());
                for record in scope_logs.log_records {
                    let index = tally.received;
                    tally.received += 1;
                    let checked = mapping::to_wire(record, &shared)
                        .and_then(|wire| validate(wire, &self.limits, now));
                    match checked {
                        Ok(record) => {
                            records.push(record);
                            queued_at.push(index);
                        }
                        Err(invalid) => {
                            counter!("loghaul_records_rejected_total", "reason" => invalid.reason.as_str())
                                .increment(1);
                            tally.reject(index, invalid.to_reason());
                        }
                    }
                }
            }
        }
        counter!("loghaul_records_received_total").increment(tally.received);
        if !records.is_empty() {
            let bytes = admit(tenant, &records)?;
            let shard = self.ingress.assign_shard();
            // A unary request is decoded before the handler runs, so there is no reservation to
            // take before reading; --max-request-bytes bounds what one request can hold.
            let deadline = tokio::time::Instant::now() + self.ingress.enqueue_timeout();
            let ack = self
                .ingress
                .enqueue(
                    shard,
                    ChunkSource {
                        tenant: Arc::clone(tenant.name()),
                        key: None,
                    },
                    records,
                    bytes,
                    None,
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
}

#[tonic::async_trait]
impl LogsService for OtlpLogsService {
    async fn export(
        &self,
        request: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let outcome = self.store(&tenant, request.into_inner()).await;
        respond(outcome, "loghaul_otlp_exports_total")
    }
}

/// The running outcome of one request.
#[derive(Debug, Default)]
struct Tally {
    received: u64,
    rejected: u64,
    /// The first rejections found, `(request index, reason)`.
    listed: Vec<(u64, String)>,
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
