//! The gRPC health statuses (`grpc.health.v1`) of the services the gRPC port serves, set as the
//! store's probe and shutdown change them.

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::ingest::otlp;
use crate::ingest::push::IngestService;
use crate::proto::v1::log_query_server::LogQueryServer;
use crate::query::service::QueryService;

/// Sets the gRPC health status of every service the port serves; all of them need the store.
pub(super) async fn set_health(health: &HealthReporter, status: ServingStatus) {
    health
        .set_service_status(<IngestService as tonic::server::NamedService>::NAME, status)
        .await;
    health.set_service_status(otlp::SERVICE_NAME, status).await;
    health
        .set_service_status(
            <LogQueryServer<QueryService> as tonic::server::NamedService>::NAME,
            status,
        )
        .await;
}
