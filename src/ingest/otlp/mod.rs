//! OpenTelemetry compatibility: `opentelemetry.proto.collector.logs.v1.LogsService/Export` on the
//! same port and through the same pipeline as `LogIngest`, with the same durable acknowledgement.
//!
//! - [`mapping`]: an OTLP record → loghaul's wire record (pure, no I/O), then the shared validation.
//! - [`export`]: one export, whatever carried it: decodes the request record by record under the
//!   memory budget, enqueues, and answers after the commit with OTLP's partial success.
//! - [`service`]: the gRPC `Export` method: reads the request's message and exports it.
//! - [`http`]: `POST /v1/logs`: reads the body (protobuf or JSON) and exports it.
//! - [`json`]: OTLP/JSON transcoded to protobuf, record by record.

pub(crate) mod export;
pub(crate) mod http;
pub mod json;
pub mod mapping;
pub(crate) mod service;

use std::collections::HashSet;
use std::sync::Arc;

use prost::Message;
use prost_types::FileDescriptorSet;

use crate::ingest::metrics::IngestMetrics;
use crate::ingest::validate::Limits;
use crate::pipeline::Ingress;
use crate::wire::body_rate::BodyPace;
use export::Exporter;
use service::OtlpLogsService;

pub use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::SERVICE_NAME;

/// The `.proto` file that defines the service; reflection serves it and what it imports.
const SERVICE_FILE: &str = "opentelemetry/proto/collector/logs/v1/logs_service.proto";

/// The gRPC service as it is mounted: requests of up to `max_request_bytes` (after
/// decompression) arriving at `pace`, gzip and zstd accepted, counted in `metrics`.
pub fn logs_server(
    ingress: Ingress,
    limits: Limits,
    max_request_bytes: u64,
    pace: BodyPace,
    metrics: Arc<IngestMetrics>,
) -> OtlpLogsService {
    OtlpLogsService::new(
        Exporter::new(ingress, limits, metrics),
        usize::try_from(max_request_bytes).unwrap_or(usize::MAX),
        pace,
    )
}

/// Descriptors of the logs service and the files it imports, for server reflection. The crate
/// ships descriptors of every OTLP signal; serving them all would make reflection list trace,
/// metrics and profiles services this server does not implement.
pub fn file_descriptor_set() -> FileDescriptorSet {
    let all = FileDescriptorSet::decode(opentelemetry_proto::DESCRIPTORS)
        .expect("opentelemetry-proto ships a valid descriptor set");
    let mut wanted = HashSet::from([SERVICE_FILE.to_owned()]);
    let mut pending = vec![SERVICE_FILE.to_owned()];
    while let Some(name) = pending.pop() {
        let Some(file) = all.file.iter().find(|file| file.name() == name) else {
            continue;
        };
        for dependency in &file.dependency {
            if wanted.insert(dependency.clone()) {
                pending.push(dependency.clone());
            }
        }
    }
    FileDescriptorSet {
        file: all
            .file
            .into_iter()
            .filter(|file| wanted.contains(file.name()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflection_gets_the_logs_service_and_its_imports_only() {
        let mut names: Vec<String> = file_descriptor_set()
            .file
            .iter()
            .map(|file| file.name().to_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "opentelemetry/proto/collector/logs/v1/logs_service.proto",
                "opentelemetry/proto/common/v1/common.proto",
                "opentelemetry/proto/logs/v1/logs.proto",
                "opentelemetry/proto/resource/v1/resource.proto",
            ]
        );
    }
}
