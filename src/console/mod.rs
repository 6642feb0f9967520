//! The log console: a small single-page app and the JSON API behind it, on an HTTP listener of
//! its own (`--console-listen`, never the metrics port, whose probes and `/metrics` stay open for
//! Kubernetes and Prometheus while everything here needs an API key).
//!
//! - [`api`]: `/api/v1/{session,logs,tail,volume,health}`, authenticated with the gRPC API keys
//!   and scoped to the key's tenant, reading through the same code as `LogQuery`
//!   ([`crate::query::search`], [`crate::query::tail::start`]) and, for the volume histogram, as
//!   Loki's volume endpoints ([`histogram`]).
//! - [`histogram`]: the volume histogram of a search, from the per-minute rollup Loki's volume
//!   endpoints read too ([`crate::loki::read`]).
//! - [`params`]: the query string → the wire `Filter`, `QueryRequest` and `TailRequest`.
//! - [`health`]: the snapshot the Health view samples, from the service's own metrics.
//! - [`error`]: JSON error answers.
//! - [`metrics`]: the console's answers, counted.
//! - [`assets`]: the page, script and style sheet, embedded in the binary.

pub(crate) mod api;
pub(crate) mod assets;
pub(crate) mod error;
pub(crate) mod health;
pub(crate) mod histogram;
pub(crate) mod metrics;
pub(crate) mod params;

use std::future::Future;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use self::metrics::ConsoleMetrics;
use crate::auth::KeyStore;
use crate::query::Reads;
use crate::web::listener::{serve_http, HttpLimits};
use crate::web::metrics::ListenerMetrics;
use health::HealthSource;

/// What the console's handlers share.
#[derive(Clone)]
pub(crate) struct ConsoleState {
    keys: Arc<KeyStore>,
    reads: Reads,
    health: HealthSource,
    metrics: Arc<ConsoleMetrics>,
}

impl ConsoleState {
    /// The console's view of a running service, reading through the same `reads` as gRPC, its
    /// answers counted in `metrics`.
    pub(crate) fn new(
        keys: Arc<KeyStore>,
        reads: Reads,
        health: HealthSource,
        metrics: Arc<ConsoleMetrics>,
    ) -> Self {
        ConsoleState {
            keys,
            reads,
            health,
            metrics,
        }
    }
}

/// The console's routes.
pub(crate) fn router(state: ConsoleState) -> Router {
    let api = Router::new()
        .route("/session", get(api::session))
        .route("/logs", get(api::logs))
        .route("/tail", get(api::tail))
        .route("/volume", get(api::volume))
        .route("/health", get(api::health))
        .fallback(api::not_found);
    Router::new()
        .route("/", get(assets::index))
        .route("/app.js", get(assets::script))
        .route("/app.css", get(assets::style))
        .route("/favicon.svg", get(assets::favicon))
        .nest("/api/v1", api)
        .fallback(assets::not_found)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state.metrics),
            count,
        ))
        .with_state(state)
}

/// Counts every answer in `loghaul_console_requests_total{endpoint,status}`, so refused requests
/// (400, 401, 403) show up in metrics as they do on gRPC. Both labels are bounded: the endpoint by
/// this list, the status by what the handlers answer.
async fn count(
    State(metrics): State<Arc<ConsoleMetrics>>,
    request: Request,
    next: Next,
) -> Response {
    let endpoint = match request.uri().path() {
        "/api/v1/logs" => "logs",
        "/api/v1/tail" => "tail",
        "/api/v1/volume" => "volume",
        "/api/v1/health" => "health",
        "/api/v1/session" => "session",
        path if path.starts_with("/api") => "other_api",
        _ => "page",
    };
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics.requests.increment([endpoint, &status], 1);
    response
}

/// Serves the console until `shutdown` completes (open tails end on their own when the service
/// drains, so the graceful shutdown does not wait on them).
pub(crate) async fn serve(
    listener: TcpListener,
    state: ConsoleState,
    limits: HttpLimits,
    listeners: Arc<ListenerMetrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(state);
    serve_http(listener, app, limits, None, "console", listeners, shutdown).await
}
