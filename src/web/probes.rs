//! The HTTP listener beside gRPC: `/metrics` (Prometheus text), `/healthz` (the process is alive)
//! and `/readyz` (the store answers and the service is not draining).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use super::listener::{serve_http, HttpLimits};
use super::metrics::ListenerMetrics;
use crate::observability::metrics::Registry;
use crate::observability::readiness::Readiness;

/// What the port answers from.
#[derive(Clone)]
pub(crate) struct Probes {
    /// The server's series, which `/metrics` renders.
    pub registry: Registry,
    /// What `/readyz` answers.
    pub readiness: Arc<Readiness>,
    /// Sets the gauges sampled at scrape time.
    pub sample: GaugeSampler,
    /// `sqlite` or `postgres`, named when the store is down.
    pub backend: &'static str,
}

/// Sets the gauges whose values live elsewhere (queue depths, buffered bytes) just before a
/// scrape, so that the hot path never touches a gauge.
pub(crate) type GaugeSampler = Arc<dyn Fn() + Send + Sync>;

/// Serves the probes and metrics until `shutdown` completes; the port's own connections are
/// counted in `listeners`.
pub(crate) async fn serve(
    listener: TcpListener,
    probes: Probes,
    limits: HttpLimits,
    listeners: Arc<ListenerMetrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Histograms and summaries are kept in buckets that the exporter rolls over in upkeep; with our
    // own route nobody else runs it.
    let upkeep = tokio::spawn({
        let metrics = probes.registry.handle();
        async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                metrics.run_upkeep();
            }
        }
    });
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(probes);
    let served = serve_http(listener, app, limits, None, "metrics", listeners, shutdown).await;
    upkeep.abort();
    served
}

async fn render_metrics(State(probes): State<Probes>) -> String {
    (probes.sample)();
    probes.readiness.publish();
    probes.registry.render()
}

async fn ready(State(probes): State<Probes>) -> (StatusCode, String) {
    let readiness = &probes.readiness;
    if readiness.draining() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "draining: shutting down\n".into(),
        );
    }
    if !readiness.store_up() {
        let body = format!("not ready: the {} store is unreachable\n", probes.backend);
        return (StatusCode::SERVICE_UNAVAILABLE, body);
    }
    (
        StatusCode::OK,
        format!("ready: {} store answers\n", probes.backend),
    )
}
