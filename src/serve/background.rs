//! The second step of `serve`: the tasks beside the gRPC port (key reloads, retention, the store
//! probe) and the three HTTP listeners (metrics and probes, the console, HTTP ingest).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use super::build::Core;
use super::health::set_health;
use super::router::HttpIngest;
use super::ServeError;
use crate::config::ServeConfig;
use crate::console::health::HealthSource;
use crate::console::ConsoleState;
use crate::observability::readiness::Readiness;
use crate::storage::Reader;
use crate::web::listener::HttpLimits;
use crate::web::probes::{self, Probes};

/// How often the store is probed for readiness.
const STORE_PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// How long the exit waits for a console or ingest connection a client holds open.
const HTTP_EXIT_WAIT: Duration = Duration::from_secs(5);

type Listener = JoinHandle<Result<(), std::io::Error>>;

/// The running background tasks and HTTP listeners.
pub(super) struct Background {
    reload: JoinHandle<()>,
    retention: JoinHandle<()>,
    sealing: JoinHandle<()>,
    probe: JoinHandle<()>,
    http: Listener,
    /// The metrics listener's address.
    pub http_addr: SocketAddr,
    console: Option<(SocketAddr, Listener)>,
    http_ingest: Option<(SocketAddr, Listener)>,
    /// Cancelled once the HTTP ingest listener has answered its last request (at once when
    /// there is none), so the drain can give those requests the shutdown grace.
    http_ingest_done: CancellationToken,
}

impl Background {
    /// Starts every task; they stop when `core.stopping` is cancelled (the console already with the
    /// drain).
    pub(super) fn start(
        core: &Core,
        config: &ServeConfig,
        http_listener: TcpListener,
        console_listener: Option<TcpListener>,
        ingest_listener: Option<TcpListener>,
    ) -> Result<Background, ServeError> {
        let stopping = &core.stopping;
        let reload = tokio::spawn(crate::auth::store::reload_keys(
            Arc::clone(&core.keys),
            config.auth.api_keys_reload_interval.0,
            stopping.clone(),
        ));
        let retention = tokio::spawn(crate::retention::run(
            core.store.clone(),
            core.retention.clone(),
            Arc::clone(&core.metrics.retention),
            stopping.clone(),
        ));
        let sealing = tokio::spawn(crate::sealing::run(
            core.store.clone(),
            core.sealing.clone(),
            Arc::clone(&core.metrics.sealing),
            stopping.clone(),
        ));
        let probe = tokio::spawn(probe_store(
            core.reader.clone(),
            Arc::clone(&core.readiness),
            core.health.clone(),
            stopping.clone(),
        ));
        let console = match console_listener {
            Some(listener) => Some((
                local_addr(&listener, "console")?,
                serve_console(core, config, listener),
            )),
            None => None,
        };
        let http_ingest_done = CancellationToken::new();
        let http_ingest = match ingest_listener {
            Some(listener) => Some((
                local_addr(&listener, "HTTP ingest")?,
                serve_http_ingest(core, config, listener, http_ingest_done.clone()),
            )),
            None => {
                http_ingest_done.cancel();
                None
            }
        };
        let http_addr = local_addr(&http_listener, "metrics")?;
        let ingress = core.pipeline.ingress();
        let http = tokio::spawn(probes::serve(
            http_listener,
            Probes {
                registry: core.metrics.registry.clone(),
                readiness: Arc::clone(&core.readiness),
                sample: Arc::new(move || ingress.sample_gauges()),
                backend: core.store.backend(),
            },
            HttpLimits::from(&config.listeners),
            Arc::clone(&core.metrics.listeners),
            stopping.clone().cancelled_owned(),
        ));
        Ok(Background {
            reload,
            retention,
            sealing,
            probe,
            http,
            http_addr,
            console,
            http_ingest,
            http_ingest_done,
        })
    }

    /// Cancelled once the HTTP ingest listener has stopped and answered every request it took.
    pub(super) fn http_ingest_done(&self) -> CancellationToken {
        self.http_ingest_done.clone()
    }

    /// The console's address, or `off`.
    pub(super) fn console_addr(&self) -> String {
        self.console
            .as_ref()
            .map_or_else(|| "off".to_owned(), |(addr, _)| addr.to_string())
    }

    /// The HTTP ingest listener's address, or `off`.
    pub(super) fn http_ingest_addr(&self) -> String {
        self.http_ingest
            .as_ref()
            .map_or_else(|| "off".to_owned(), |(addr, _)| addr.to_string())
    }

    /// Waits for the tasks that use the pools, once `stopping` is cancelled.
    pub(super) async fn join_tasks(&mut self) {
        let _ = (&mut self.retention).await;
        let _ = (&mut self.sealing).await;
        let _ = (&mut self.reload).await;
        let _ = (&mut self.probe).await;
    }

    /// Waits for the HTTP listeners to close.
    pub(super) async fn join_listeners(self) {
        // The console's tails ended with the drain, and ingest requests were answered when the
        // pipeline was flushed; a client holding a connection open must not hold up the exit.
        for (name, listener) in [("console", self.console), ("HTTP ingest", self.http_ingest)] {
            let Some((_, mut task)) = listener else {
                continue;
            };
            match tokio::time::timeout(HTTP_EXIT_WAIT, &mut task).await {
                Ok(Ok(Err(err))) => tracing::warn!(error = %err, "{name} listener failed"),
                Ok(Err(err)) => tracing::warn!(error = %err, "{name} listener panicked"),
                Ok(Ok(Ok(()))) => {}
                Err(_) => task.abort(),
            }
        }
        match self.http.await {
            Ok(Err(err)) => tracing::warn!(error = %err, "metrics listener failed"),
            Err(err) => tracing::warn!(error = %err, "metrics listener panicked"),
            Ok(Ok(())) => {}
        }
    }
}

/// The address `listener` is bound to.
pub(super) fn local_addr(
    listener: &TcpListener,
    what: &'static str,
) -> Result<SocketAddr, ServeError> {
    listener
        .local_addr()
        .map_err(|source| ServeError::Listener { what, source })
}

/// Serves the console until the drain starts, or until the rest stops when the gRPC server failed
/// without one.
fn serve_console(core: &Core, config: &ServeConfig, listener: TcpListener) -> Listener {
    let state = ConsoleState::new(
        Arc::clone(&core.keys),
        core.reads.clone(),
        HealthSource {
            readiness: Arc::clone(&core.readiness),
            ingress: core.pipeline.ingress(),
            backend: core.store.backend(),
            ingest: Arc::clone(&core.metrics.ingest),
            query: Arc::clone(&core.metrics.query),
            sealing: Arc::clone(&core.metrics.sealing),
        },
        Arc::clone(&core.metrics.console),
    );
    let (drain, stop) = (core.draining.clone(), core.stopping.clone());
    let shutdown = async move {
        tokio::select! {
            () = drain.cancelled() => {}
            () = stop.cancelled() => {}
        }
    };
    tokio::spawn(crate::console::serve(
        listener,
        state,
        HttpLimits::from(&config.listeners),
        Arc::clone(&core.metrics.listeners),
        shutdown,
    ))
}

/// Serves OTLP/HTTP and the Loki push API until the drain starts, or until the rest stops when the
/// gRPC server failed; requests in flight are then let finish (the drain waits for them up to the
/// shutdown grace, as for gRPC streams), and `done` is cancelled once they are answered.
fn serve_http_ingest(
    core: &Core,
    config: &ServeConfig,
    listener: TcpListener,
    done: CancellationToken,
) -> Listener {
    let ingest = HttpIngest::new(
        core.pipeline.ingress(),
        core.reads.clone(),
        core.limits,
        Arc::clone(&core.keys),
        Arc::clone(&core.readiness),
        &core.metrics,
        config,
    );
    let (drain, stop) = (core.draining.clone(), core.stopping.clone());
    let shutdown = async move {
        tokio::select! {
            () = drain.cancelled() => {}
            () = stop.cancelled() => {}
        }
    };
    let limits = HttpLimits {
        max_connections: config.listeners.http_ingest_max_connections,
        ..HttpLimits::from(&config.listeners)
    };
    let tls = core.http_tls.clone();
    tokio::spawn(async move {
        let served = super::router::serve(listener, ingest, limits, tls, shutdown).await;
        done.cancel();
        served
    })
}

/// Probes the store so readiness reflects it even when no writes are flowing. Through the read
/// pool, never the writers' connections: a probe that waits behind a long write (SQLite has one
/// writer) would take a healthy replica out of its Service.
async fn probe_store(
    reader: Reader,
    readiness: Arc<Readiness>,
    health: HealthReporter,
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
