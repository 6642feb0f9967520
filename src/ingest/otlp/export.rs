//! One OTLP export, whatever carried it (gRPC or HTTP): maps each record of an encoded
//! `ExportLogsServiceRequest` onto the wire record of `LogIngest`, validates it with the same
//! rules, queues the valid ones as one chunk, and answers once that chunk is committed. Bad
//! records are reported through `partial_success`, as the OTLP specification asks, while the rest
//! of the request is stored.

use std::sync::Arc;

use bytes::Bytes;
use chrono::Utc;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::logs::v1::LogRecord as OtlpLogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use super::mapping::{self, Shared};
use crate::auth::Tenant;
use crate::error::IngestError;
use crate::ingest::charge::Collected;
use crate::ingest::metrics::{IngestMetrics, Protocol};
use crate::ingest::rejections::RequestTally;
use crate::ingest::transcode::Refused;
use crate::ingest::validate::{validate_with, Invalid, Limits};
use crate::pipeline::{Ingress, Meter};
use crate::wire::fields::{last, repeated};

/// Stores OTLP exports: the part of the logs service both transports share.
#[derive(Clone, Debug)]
pub struct Exporter {
    ingress: Ingress,
    limits: Limits,
    metrics: Arc<IngestMetrics>,
}

impl Exporter {
    /// An exporter feeding `ingress`, checking records against `limits`, counting them in
    /// `metrics`.
    pub fn new(ingress: Ingress, limits: Limits, metrics: Arc<IngestMetrics>) -> Self {
        Exporter {
            ingress,
            limits,
            metrics,
        }
    }

    /// Where exports are counted.
    pub(crate) fn metrics(&self) -> &IngestMetrics {
        &self.metrics
    }

    /// The pipeline it feeds, for the transports' meters.
    pub fn ingress(&self) -> &Ingress {
        &self.ingress
    }

    /// Stores the encoded request `message`, which `meter` holds, for `tenant`, arrived by
    /// `protocol`; answers after the commit. `upfront` holds the records the transport already
    /// refused (in OTLP/JSON), by request index; `message` leaves them out.
    pub async fn export(
        &self,
        tenant: &Tenant,
        protocol: Protocol,
        message: Bytes,
        upfront: Refused,
        mut meter: Meter<'_>,
    ) -> Result<ExportLogsServiceResponse, IngestError> {
        let wire_bytes = message.len();
        let mut collected = Collected::new(upfront);
        self.decode(message, &mut meter, &mut collected).await?;
        meter.release(wire_bytes);
        let tally = collected
            .store(&self.ingress, tenant, self.metrics.records(protocol), meter)
            .await?;
        Ok(response(tally))
    }

    /// Walks the request's resources and scopes and decodes its records one at a time, each
    /// charged to `meter` as it is built: a record's size includes every resource and scope
    /// attribute it inherits (held once, but written with each row), so a request whose shared
    /// attributes would be repeated past the message limit is refused before it is all built.
    async fn decode(
        &self,
        message: Bytes,
        meter: &mut Meter<'_>,
        collected: &mut Collected,
    ) -> Result<(), IngestError> {
        let malformed =
            |detail: String| IngestError::Malformed(format!("ExportLogsServiceRequest: {detail}"));
        let now = Utc::now();
        for resource_logs in repeated(&message, field::RESOURCE_LOGS) {
            let resource_logs = resource_logs.map_err(malformed)?;
            let resource =
                decode_last::<Resource>(&resource_logs, field::RESOURCE).map_err(malformed)?;
            let resource = Shared::from_resource(resource.as_ref());
            for scope_logs in repeated(&resource_logs, field::SCOPE_LOGS) {
                let scope_logs = scope_logs.map_err(malformed)?;
                let scope = decode_last::<InstrumentationScope>(&scope_logs, field::SCOPE)
                    .map_err(malformed)?;
                let shared = resource.with_scope(scope.as_ref());
                collected
                    .reserve(repeated(&scope_logs, field::LOG_RECORDS).count(), meter)
                    .await?;
                for record in repeated(&scope_logs, field::LOG_RECORDS) {
                    let record = record.map_err(malformed)?;
                    collected
                        .take(meter, || {
                            let record =
                                OtlpLogRecord::decode(record).map_err(Invalid::malformed)?;
                            let wire = mapping::to_wire(record, &shared)?;
                            validate_with(wire, &shared.labels, &self.limits, now)
                        })
                        .await?;
                }
            }
        }
        Ok(())
    }
}

/// The OTLP fields an export is walked by, and the JSON form is transcoded into.
pub(crate) mod field {
    /// `ExportLogsServiceRequest.resource_logs`.
    pub(crate) const RESOURCE_LOGS: u32 = 1;
    /// `ResourceLogs.resource`.
    pub(crate) const RESOURCE: u32 = 1;
    /// `ResourceLogs.scope_logs`.
    pub(crate) const SCOPE_LOGS: u32 = 2;
    /// `ScopeLogs.scope`.
    pub(crate) const SCOPE: u32 = 1;
    /// `ScopeLogs.log_records`.
    pub(crate) const LOG_RECORDS: u32 = 2;
    /// `ResourceLogs.schema_url` and `ScopeLogs.schema_url`.
    pub(crate) const SCHEMA_URL: u32 = 3;

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_walked_field_numbers_are_otlps() {
            let request = "opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest";
            let resource_logs = "opentelemetry.proto.logs.v1.ResourceLogs";
            let scope_logs = "opentelemetry.proto.logs.v1.ScopeLogs";
            crate::wire::fields::assert_field_numbers(
                opentelemetry_proto::DESCRIPTORS,
                &[
                    (request, "resource_logs", RESOURCE_LOGS),
                    (resource_logs, "resource", RESOURCE),
                    (resource_logs, "scope_logs", SCOPE_LOGS),
                    (resource_logs, "schema_url", SCHEMA_URL),
                    (scope_logs, "scope", SCOPE),
                    (scope_logs, "log_records", LOG_RECORDS),
                    (scope_logs, "schema_url", SCHEMA_URL),
                ],
            );
        }
    }
}

/// OTLP's answer: no `partial_success` when everything was stored; otherwise the exact count and
/// a message naming the first rejected records by their index in the request.
fn response(tally: RequestTally) -> ExportLogsServiceResponse {
    let numbering = "#n is a record's position in the request, counting from 0 across all resource_logs and scope_logs";
    ExportLogsServiceResponse {
        partial_success: tally.summary("log records", numbering).map(
            |(rejected, error_message)| ExportLogsPartialSuccess {
                rejected_log_records: i64::try_from(rejected).unwrap_or(i64::MAX),
                error_message,
            },
        ),
    }
}

/// The last occurrence of the embedded message `number`, decoded.
fn decode_last<M: Message + Default>(message: &Bytes, number: u32) -> Result<Option<M>, String> {
    match last(message, number)? {
        None => Ok(None),
        Some(bytes) => M::decode(bytes).map(Some).map_err(|err| err.to_string()),
    }
}
