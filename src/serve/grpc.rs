//! The third step of `serve`: the gRPC port (ingest, OTLP, query, health, reflection) behind the
//! auth layer, served until shutdown is requested and the open streams have finished or run out
//! of grace.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::codec::CompressionEncoding;
use tonic::transport::Server;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::HealthService;
use tonic_health::ServingStatus;

use super::background::Background;
use super::build::Core;
use super::health::set_health;
use super::ServeError;
use crate::auth::AuthLayer;
use crate::config::ServeConfig;
use crate::ingest::otlp;
use crate::ingest::push::IngestService;
use crate::proto::v1::log_query_server::LogQueryServer;
use crate::query::service::QueryService;
use crate::query::Reads;
use crate::wire::body_rate::BodyPace;
use crate::wire::refusal::ExplainRefusal;

/// HTTP/2 flow-control windows. A stream whose handler waits for room stops reading, so its client
/// stops once `STREAM_WINDOW` bytes are in flight; those bytes sit in the server's memory outside
/// the budget, so the window is small (a stalled stream holds at most 64 KiB). The connection
/// window is several stream windows so that one stalled stream cannot starve the others sharing
/// its connection.
const STREAM_WINDOW: u32 = 64 << 10;
const CONNECTION_WINDOW: u32 = 4 << 20;
/// Streams one connection may open at once.
const MAX_CONCURRENT_STREAMS: u32 = 256;
/// How often idle connections are pinged, and how long a ping may go unanswered, so streams of
/// clients that vanished without a FIN are closed instead of held forever.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves the gRPC port until `shutdown` completes, then drains it: readiness and health off, no
/// new streams, open streams and HTTP ingest requests in flight get `--shutdown-grace` to finish.
pub(super) async fn serve(
    core: &Core,
    config: &ServeConfig,
    listener: TcpListener,
    background: &Background,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let limits = core.limits;
    let ingress = core.pipeline.ingress();
    let pace = BodyPace::from(&config.ingest);
    let ingest = IngestService::new(
        ingress.clone(),
        limits,
        config.ingest.max_request_bytes.0,
        pace,
        Arc::clone(&core.metrics.ingest),
    );
    let otlp_logs = otlp::logs_server(
        ingress,
        limits,
        config.ingest.max_request_bytes.0,
        pace,
        Arc::clone(&core.metrics.ingest),
    );
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_file_descriptor_set(otlp::file_descriptor_set())
        .build_v1()?;
    let health = HealthServer::new(HealthService::from_health_reporter(core.health.clone()));

    let mut builder = Server::builder();
    if let Some(tls) = core.tls.clone() {
        builder = builder.tls_config(tls)?;
    }
    if !config.ingest.max_connection_age.0.is_zero() {
        builder = builder
            .max_connection_age(config.ingest.max_connection_age.0)
            .max_connection_age_grace(config.ingest.max_connection_age_grace.0);
    }
    announce(core, config, &listener, background)?;
    let grpc = builder
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .tcp_nodelay(true)
        // Every service below is authenticated here (health and reflection exempt by path).
        .layer(AuthLayer::new(Arc::clone(&core.keys)))
        .add_service(health)
        .add_service(reflection)
        .add_service(ingest)
        .add_service(otlp_logs)
        .add_service(query_server(core.reads.clone(), config))
        .serve_with_incoming_shutdown(
            TcpListenerStream::new(listener),
            start_draining(core, shutdown),
        );
    let grace = config.shutdown_grace.0;
    let draining = core.draining.clone();
    let http_ingest_done = background.http_ingest_done();
    // Once draining, HTTP ingest requests in flight (a body still arriving, say) share the
    // streams' grace: the pipeline is flushed and closed only after both.
    let drained = async {
        let served = grpc.await;
        if served.is_ok() && draining.is_cancelled() {
            http_ingest_done.cancelled().await;
        }
        served
    };
    tokio::select! {
        served = drained => served.map_err(ServeError::from),
        () = async { draining.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace = ?grace, "streams or HTTP requests still open after the shutdown grace; flushing what they queued");
            Ok(())
        }
    }
}

/// Logs where the service listens, once every listener is bound.
fn announce(
    core: &Core,
    config: &ServeConfig,
    listener: &TcpListener,
    background: &Background,
) -> Result<(), ServeError> {
    let transport = match (&core.tls, config.tls.tls_client_ca.is_some()) {
        (None, _) => "plaintext",
        (Some(_), false) => "tls",
        (Some(_), true) => "tls+client-certificates",
    };
    tracing::info!(
        grpc = %super::background::local_addr(listener, "gRPC")?,
        http = %background.http_addr,
        console = %background.console_addr(),
        http_ingest = %background.http_ingest_addr(),
        shards = config.pipeline.shard_count(),
        transport,
        "loghaul is serving"
    );
    Ok(())
}

/// Completes when `shutdown` does, after turning readiness and health off and telling open streams
/// and tails to finish.
fn start_draining(
    core: &Core,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let draining = core.draining.clone();
    let readiness = Arc::clone(&core.readiness);
    let health = core.health.clone();
    async move {
        shutdown.await;
        tracing::info!("shutdown requested: draining open streams");
        readiness.start_draining();
        set_health(&health, ServingStatus::NotServing).await;
        draining.cancel();
    }
}

/// The `LogQuery` server for `loghaul serve`, with the same compression and size limit as ingest,
/// and a request tonic cannot decode answered as the client's fault (INVALID_ARGUMENT).
fn query_server(
    reads: Reads,
    config: &ServeConfig,
) -> ExplainRefusal<LogQueryServer<QueryService>> {
    let queries = reads.metrics().queries.clone();
    let server = LogQueryServer::new(QueryService::new(reads))
        .max_decoding_message_size(config.ingest.max_request_bytes.as_usize())
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd)
        .send_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Zstd);
    ExplainRefusal::new(server, config.ingest.max_request_bytes.0, queries)
}
