//! The service: wires the store, the pipeline, the gRPC services and the HTTP probes together, and
//! shuts them down in the order that loses nothing.

pub mod admission;
pub mod fields;
pub mod grpc_body;
pub mod ingest;
pub mod otlp;
pub mod refusal;
pub mod settlement;
pub mod validate;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;
use tonic_health::ServingStatus;

use crate::auth::keys::{KeySources, KeysError};
use crate::auth::{AuthLayer, KeyStore, OpenAccess};
use crate::config::{ConfigError, ServeConfig};
use crate::console::health::HealthSource;
use crate::console::ConsoleState;
use crate::observability::readiness::Readiness;
use crate::observability::{http, metrics};
use crate::pipeline::batcher::BatchLimits;
use crate::pipeline::{Pipeline, PipelineConfig};
use crate::proto::v1::log_query_server::LogQueryServer;
use crate::query::service::QueryService;
use crate::query::Reads;
use crate::retention::RetentionConfig;
use crate::serve_http::HttpLimits;
use crate::storage::{redact_url, PoolOptions, Reader, Store, StoreError};
use ingest::IngestService;
use refusal::ExplainRefusal;
use tonic::codec::CompressionEncoding;
use validate::Limits;

/// Encoded descriptors of every `loghaul.v1` file (from `build.rs`), for server reflection.
const LOGHAUL_DESCRIPTORS: &[u8] = tonic::include_file_descriptor_set!("loghaul_descriptor");

/// Why the service could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration cannot work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The API keys could not be loaded.
    #[error(transparent)]
    Keys(#[from] KeysError),
    /// The database could not be opened or migrated.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The reflection service could not be built.
    #[error("reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The TLS certificate, key or client CA could not be loaded.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The HTTP listener failed.
    #[error("metrics listener failed: {0}")]
    Http(#[from] std::io::Error),
    /// A listener could not be bound.
    #[error("cannot listen for {what} on {addr}: {source}{hint}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// What to change, when there is an easy way out.
        hint: &'static str,
        /// The configured address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

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
/// How often the store is probed for readiness.
const STORE_PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// Connections a writer waits for before an attempt counts as failed.
const POOL_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// The sockets the service serves on, bound by the caller: the binary from the configuration,
/// tests on ephemeral ports.
#[derive(Debug)]
pub struct Listeners {
    /// gRPC: ingest, OTLP, query, health, reflection.
    pub grpc: TcpListener,
    /// HTTP: `/metrics`, `/healthz`, `/readyz`.
    pub http: TcpListener,
    /// The browser console and its API; `None` when `--console-listen off`.
    pub console: Option<TcpListener>,
}

impl Listeners {
    /// Binds the addresses the configuration names.
    pub async fn bind(config: &ServeConfig) -> Result<Listeners, ServeError> {
        config.validate()?;
        let bind = |what: &'static str, hint: &'static str, addr: std::net::SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Bind {
                    what,
                    hint,
                    addr,
                    source,
                })
        };
        let grpc = bind("gRPC", "", config.listen).await?;
        let http = bind("metrics", "", config.metrics_listen).await?;
        let console_hint = " (choose another --console-listen address, or --console-listen off)";
        let console = match config.console_listen.0 {
            Some(addr) => Some(bind("the console", console_hint, addr).await?),
            None => None,
        };
        Ok(Listeners {
            grpc,
            http,
            console,
        })
    }
}

/// Runs the service on the given listeners until `shutdown` completes, then drains: readiness off,
/// no new streams, open streams get `--shutdown-grace` to finish, every shard is flushed, every
/// acknowledgement resolved, the pool closed.
pub async fn run(
    config: ServeConfig,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let Listeners {
        grpc: grpc_listener,
        http: http_listener,
        console: console_listener,
    } = listeners;
    config.validate()?;
    let tls = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => Some(crate::tls::server_config(
            cert,
            key,
            config.tls_client_ca.as_deref(),
        )?),
        _ => None,
    };
    let keys = Arc::new(KeyStore::load(
        KeySources::from_config(&config),
        OpenAccess::from_config(&config),
    )?);
    let metrics_handle = metrics::handle();
    let shards = config.shard_count();
    let pool = PoolOptions {
        max_connections: if config.db_max_connections > 0 {
            config.db_max_connections
        } else {
            shards as u32 + 2
        },
        // A writer must give up within --store-retry-timeout even while it waits for a connection
        // to a store that refuses them.
        acquire_timeout: POOL_ACQUIRE_TIMEOUT.min(config.store_retry_timeout.0),
    };
    let store = Store::connect(&config.database_url, pool).await?;
    store.migrate().await?;
    tracing::info!(backend = store.backend(), url = %redact_url(&config.database_url), "store ready");
    log_access(&keys);
    let retention = RetentionConfig::from_config(&config);
    // Not fatal: replicas starting together may race on the same CREATE (one of them errors), and
    // until a partition exists its rows go to the default partition. The first retention run,
    // right after start-up and under the advisory lock, creates whatever is still missing.
    match crate::retention::prepare(&store, &retention).await {
        Ok(0) => {}
        Ok(partitions) => tracing::info!(partitions, "created daily partitions ahead"),
        Err(err) => {
            tracing::warn!(error = %err, "could not create partitions ahead; the retention task retries")
        }
    }
    let reader = store
        .reader(config.read_max_connections, config.query_timeout.0)
        .await?;

    let readiness = Arc::new(Readiness::default());
    let pipeline = Pipeline::start(
        PipelineConfig {
            shards,
            queue_capacity: config.queue_capacity,
            limits: BatchLimits {
                max_rows: config.batch_max_rows,
                max_bytes: config.batch_max_bytes.as_usize(),
                linger: config.batch_linger.0,
            },
            enqueue_timeout: config.enqueue_timeout.0,
            max_buffered_bytes: config.max_buffered_bytes.as_usize(),
            store_retry_timeout: config.store_retry_timeout.0,
        },
        store.clone(),
        Arc::clone(&readiness),
    );

    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, ServingStatus::Serving).await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(LOGHAUL_DESCRIPTORS)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_file_descriptor_set(otlp::file_descriptor_set())
        .build_v1()?;

    let limits = Limits {
        max_message_bytes: config.max_message_bytes.as_usize(),
        max_age: retention.keep,
    };
    let ingest = IngestService::new(pipeline.ingress(), limits, config.max_request_bytes.0)
        .with_idle_timeout(Some(config.stream_idle_timeout.0).filter(|idle| !idle.is_zero()));
    let otlp_logs = otlp::logs_server(pipeline.ingress(), limits, config.max_request_bytes.0);

    let draining = CancellationToken::new();
    let reads = Reads::from_config(reader.clone(), &config, draining.clone());
    let query = query_server(reads.clone(), &config);

    let stopping = CancellationToken::new();
    let reload = tokio::spawn(crate::auth::store::reload_keys(
        Arc::clone(&keys),
        config.api_keys_reload_interval.0,
        stopping.clone(),
    ));
    let retention_task = tokio::spawn(crate::retention::run(
        store.clone(),
        retention,
        stopping.clone(),
    ));
    let probe = tokio::spawn(probe_store(
        reader.clone(),
        Arc::clone(&readiness),
        health.clone(),
        stopping.clone(),
    ));
    let http_addr = http_listener.local_addr()?;
    let console = match console_listener {
        Some(listener) => {
            let addr = listener.local_addr()?;
            let state = ConsoleState::new(
                Arc::clone(&keys),
                reads.clone(),
                HealthSource {
                    metrics: metrics_handle.clone(),
                    readiness: Arc::clone(&readiness),
                    ingress: pipeline.ingress(),
                    backend: store.backend(),
                },
            );
            // Stops with the drain, or with the rest when the gRPC server failed without one.
            let (drain, stop) = (draining.clone(), stopping.clone());
            let shutdown = async move {
                tokio::select! {
                    () = drain.cancelled() => {}
                    () = stop.cancelled() => {}
                }
            };
            let task = tokio::spawn(crate::console::serve(
                listener,
                state,
                HttpLimits::from_config(&config),
                shutdown,
            ));
            Some((addr, task))
        }
        None => None,
    };
    let console_addr = console
        .as_ref()
        .map_or_else(|| "off".to_owned(), |(addr, _)| addr.to_string());
    let http_task = tokio::spawn(http::serve(
        http_listener,
        metrics_handle,
        Arc::clone(&readiness),
        {
            let ingress = pipeline.ingress();
            Arc::new(move || ingress.sample_gauges())
        },
        store.backend(),
        HttpLimits::from_config(&config),
        stopping.clone().cancelled_owned(),
    ));
    let grpc_addr = grpc_listener.local_addr()?;
    let transport = match (&tls, config.tls_client_ca.is_some()) {
        (None, _) => "plaintext",
        (Some(_), false) => "tls",
        (Some(_), true) => "tls+client-certificates",
    };
    tracing::info!(grpc = %grpc_addr, http = %http_addr, console = %console_addr, shards, transport, "loghaul is serving");

    let drain_signal = {
        let draining = draining.clone();
        let readiness = Arc::clone(&readiness);
        let health = health.clone();
        async move {
            shutdown.await;
            tracing::info!("shutdown requested: draining open streams");
            readiness.start_draining();
            set_health(&health, ServingStatus::NotServing).await;
            draining.cancel();
        }
    };
    let mut builder = Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls)?;
    }
    if !config.max_connection_age.0.is_zero() {
        builder = builder
            .max_connection_age(config.max_connection_age.0)
            .max_connection_age_grace(config.max_connection_age_grace.0);
    }
    let grpc = builder
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .tcp_nodelay(true)
        // Every service below is authenticated here (health and reflection exempt by path).
        .layer(AuthLayer::new(Arc::clone(&keys)))
        .add_service(health_service)
        .add_service(reflection)
        .add_service(ingest)
        .add_service(otlp_logs)
        .add_service(query)
        .serve_with_incoming_shutdown(TcpListenerStream::new(grpc_listener), drain_signal);
    let grace = config.shutdown_grace.0;
    let served = tokio::select! {
        served = grpc => served,
        () = async { draining.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace = ?grace, "streams still open after the shutdown grace; flushing what they queued");
            Ok(())
        }
    };

    // Whatever happened to the listener, what was queued is flushed and acknowledged.
    pipeline.shutdown().await;
    stopping.cancel();
    let _ = retention_task.await;
    let _ = reload.await;
    // The probe reads through the reader: it ends before the pool closes under it.
    let _ = probe.await;
    reader.close().await;
    store.close().await;
    if let Some((_, mut task)) = console {
        // Its tails ended with the drain; a browser holding a connection open must not hold up
        // the exit.
        match tokio::time::timeout(Duration::from_secs(5), &mut task).await {
            Ok(Ok(Err(err))) => tracing::warn!(error = %err, "console listener failed"),
            Ok(Err(err)) => tracing::warn!(error = %err, "console listener panicked"),
            Ok(Ok(Ok(()))) => {}
            Err(_) => task.abort(),
        }
    }
    match http_task.await {
        Ok(Err(err)) => tracing::warn!(error = %err, "metrics listener failed"),
        Err(err) => tracing::warn!(error = %err, "metrics listener panicked"),
        Ok(Ok(())) => {}
    }
    tracing::info!("loghaul stopped");
    served.map_err(ServeError::from)
}

/// Says at start-up whom the service serves, loudly when it is without keys.
fn log_access(keys: &KeyStore) {
    match (keys.is_open(), keys.open_access()) {
        (true, OpenAccess::LoopbackOnly) => tracing::warn!(
            mode = "loopback-only",
            "no API keys are configured: only clients on this machine (loopback) are served, as tenant \"default\"; configure keys with --api-keys or --api-keys-file, or pass --allow-unauthenticated to serve clients elsewhere"
        ),
        (true, OpenAccess::Anyone) => tracing::warn!(
            mode = "open",
            "no API keys are configured and --allow-unauthenticated is set: the service is open to anyone who can reach it, and every record is stored as tenant \"default\""
        ),
        (false, access) => {
            let ring = keys.ring();
            tracing::info!(
                mode = "api-keys",
                keys = ring.key_count(),
                tenants = ring.tenant_names().len(),
                "API keys loaded"
            );
            if access == OpenAccess::Anyone {
                tracing::warn!("--allow-unauthenticated has no effect: API keys are configured, and every call needs one");
            }
        }
    }
}

/// Probes the store so readiness reflects it even when no writes are flowing. Through the read
/// pool, never the writers' connections: a probe that waits behind a long write (SQLite has one
/// writer) would take a healthy replica out of its Service.
async fn probe_store(
    reader: Reader,
    readiness: Arc<Readiness>,
    health: tonic_health::server::HealthReporter,
    stopping: CancellationToken,
) {
    let mut every = tokio::time::interval(STORE_PROBE_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stopping.cancelled() => return,
            _ = every.tick() => {}
        }
        let up = matches!(
            tokio::time::timeout(STORE_PROBE_INTERVAL, reader.ping()).await,
            Ok(Ok(()))
        );
        readiness.set_store_up(up);
        if readiness.draining() {
            continue;
        }
        let status = if up {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        set_health(&health, status).await;
    }
}

/// Sets the gRPC health status of every service the port serves; all of them need the store.
async fn set_health(health: &tonic_health::server::HealthReporter, status: ServingStatus) {
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

/// The `LogQuery` server for `loghaul serve`, with the same compression and size limit as ingest,
/// and a request tonic cannot decode answered as the client's fault (INVALID_ARGUMENT).
fn query_server(
    reads: crate::query::Reads,
    config: &ServeConfig,
) -> ExplainRefusal<LogQueryServer<QueryService>> {
    let server = LogQueryServer::new(QueryService::new(reads))
        .max_decoding_message_size(config.max_request_bytes.as_usize())
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd)
        .send_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Zstd);
    ExplainRefusal::new(server, config.max_request_bytes.0, "loghaul_queries_total")
}
