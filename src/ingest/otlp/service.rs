//! `opentelemetry.proto.collector.logs.v1.LogsService/Export` over gRPC: reads the request's one
//! message under the memory budget and hands it to the shared [`Exporter`].

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::SERVICE_NAME;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::Status;

use super::export::Exporter;
use crate::auth::{AuthFailure, Tenant};
use crate::error::IngestError;
use crate::ingest::charge::respond;
use crate::ingest::metrics::Protocol;
use crate::ingest::transcode::Refused;
use crate::wire::body_rate::BodyPace;
use crate::wire::grpc_body::{answer, message_encoding, serve_raw_grpc, MessageReader};
use crate::wire::EXPECTED_DECODED_RATIO;

/// The path of the one method this service has.
const EXPORT_PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

/// The OTLP logs service, served from the request body directly (see [`crate::wire::grpc_body`]).
#[derive(Clone, Debug)]
pub struct OtlpLogsService {
    exporter: Exporter,
    max_request_bytes: usize,
    pace: BodyPace,
}

impl OtlpLogsService {
    /// A service storing through `exporter`, taking requests of up to `max_request_bytes`
    /// (before and after decompression) that arrive at `pace`.
    pub fn new(exporter: Exporter, max_request_bytes: usize, pace: BodyPace) -> Self {
        OtlpLogsService {
            exporter,
            max_request_bytes,
            pace,
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
        let encoding = match message_encoding(request.headers()) {
            Ok(encoding) => encoding,
            Err(status) => return status.into_http(),
        };
        let mut reader = MessageReader::new(
            request.into_body(),
            encoding,
            self.max_request_bytes,
            self.pace,
        );
        let outcome = self.store(&tenant, &mut reader).await;
        let exports = &self.exporter.metrics().otlp_exports;
        answer(respond(outcome, exports).map(tonic::Response::into_inner))
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
        let mut meter = self.exporter.ingress().meter(tenant.name());
        meter.reserve(prefix.len * EXPECTED_DECODED_RATIO).await?;
        let message = reader.read_message(prefix, &mut meter).await?;
        self.exporter
            .export(
                tenant,
                Protocol::OtlpGrpc,
                message,
                Refused::default(),
                meter,
            )
            .await
    }
}

serve_raw_grpc!(OtlpLogsService, SERVICE_NAME);
