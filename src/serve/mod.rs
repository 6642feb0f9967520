//! Starting and stopping the service: wires the store, the pipeline, the gRPC services and the HTTP
//! listeners together, and shuts them down in the order that loses nothing. [`run`] reads as its
//! steps: `build` what every listener shares, start the `background` tasks and HTTP listeners
//! (probes, console, the ingest listener's [`router`]), serve the `grpc` port until shutdown, then
//! drain; `health` keeps the gRPC health statuses, and `metrics` is the server's series, built
//! with its core.

mod background;
mod build;
mod grpc;
mod health;
mod metrics;
pub(crate) mod router;

use std::future::Future;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::auth::keys::KeysError;
use crate::config::{ConfigError, ServeConfig};
use crate::storage::StoreError;
use background::Background;
use build::Core;

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
    /// A bound listener's socket failed.
    #[error("the {what} listener failed: {source}")]
    Listener {
        /// Which listener.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
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
    /// HTTP ingest: OTLP/HTTP and the Loki push API; `None` when `--http-listen off`.
    pub http_ingest: Option<TcpListener>,
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
        let grpc = bind("gRPC", "", config.listeners.listen).await?;
        let http = bind("metrics", "", config.listeners.metrics_listen).await?;
        let console_hint = " (choose another --console-listen address, or --console-listen off)";
        let console = match config.listeners.console_listen.0 {
            Some(addr) => Some(bind("the console", console_hint, addr).await?),
            None => None,
        };
        let ingest_hint = " (choose another --http-listen address, or --http-listen off)";
        let http_ingest = match config.listeners.http_listen.0 {
            Some(addr) => Some(bind("HTTP ingest", ingest_hint, addr).await?),
            None => None,
        };
        Ok(Listeners {
            grpc,
            http,
            console,
            http_ingest,
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
    config.validate()?;
    let core = Core::build(&config).await?;
    let Listeners {
        grpc: grpc_port,
        http,
        console,
        http_ingest,
    } = listeners;
    let background = Background::start(&core, &config, http, console, http_ingest)?;
    let served = grpc::serve(&core, &config, grpc_port, &background, shutdown).await;
    drain(core, background).await;
    tracing::info!("loghaul stopped");
    served
}

/// Whatever happened to the gRPC port: flushes and acknowledges what was queued, stops the
/// background tasks, closes both pools, and waits for the HTTP listeners.
async fn drain(core: Core, mut background: Background) {
    let Core {
        pipeline,
        stopping,
        reader,
        store,
        ..
    } = core;
    pipeline.shutdown().await;
    stopping.cancel();
    background.join_tasks().await;
    // The probe reads through the reader: it ends before the pool closes under it.
    reader.close().await;
    store.close().await;
    background.join_listeners().await;
}
