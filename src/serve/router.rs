//! The HTTP ingest listener's router (`--http-listen`, 4318 by default): OTLP/HTTP at
//! `POST /v1/logs` and the Loki push API at `POST /loki/api/v1/push`, for the shippers that speak
//! HTTP rather than gRPC. A request goes through the same steps as a gRPC call, in order:
//!
//! 1. [`auth`]: the tenant, from the key in any header an exporter can set (and, without keys,
//!    what a web page cannot do);
//! 2. [`body`]: the body, read under the size limit and the memory budget, then inflated;
//! 3. the protocol's decoder ([`crate::ingest::otlp::http`], [`crate::ingest::loki`]), which
//!    validates each record and queues the valid ones through the shared pipeline;
//! 4. [`reply`]: the answer, sent once the records are committed, in the protocol's own form.
//!
//! Steps 1 and 2 are the [`Reception`], in [`crate::wire::http`]. [`cors`] lets listed browser
//! origins send. The same listener serves Loki's query API ([`crate::loki::api`]), so one URL is
//! both where shippers push and where Grafana reads.
//!
//! [`auth`]: crate::wire::http::auth
//! [`body`]: crate::wire::http::body
//! [`reply`]: crate::wire::http::reply
//! [`cors`]: crate::wire::http::cors

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode};
use axum::routing::post;
use axum::Router;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::metrics::Metrics;
use crate::auth::KeyStore;
use crate::config::ServeConfig;
use crate::ingest::loki::Pusher;
use crate::ingest::metrics::IngestMetrics;
use crate::ingest::otlp::export::Exporter;
use crate::ingest::validate::Limits;
use crate::loki::api::LokiApi;
use crate::observability::readiness::Readiness;
use crate::pipeline::Ingress;
use crate::query::Reads;
use crate::web::listener::{serve_http, HttpLimits};
use crate::web::metrics::ListenerMetrics;
use crate::wire::body_rate::BodyPace;
use crate::wire::http::auth::HttpAuth;
use crate::wire::http::body::BodyLimits;
use crate::wire::http::cors::{self, Cors};
use crate::wire::http::{reply, Reception};

/// OTLP/HTTP's path for logs.
pub(crate) const OTLP_LOGS_PATH: &str = "/v1/logs";
/// The Loki push API's path.
pub(crate) const LOKI_PUSH_PATH: &str = "/loki/api/v1/push";

/// What the listener's handlers share.
#[derive(Clone, Debug)]
pub(crate) struct HttpIngest {
    reception: Reception,
    exporter: Exporter,
    pusher: Pusher,
    cors: Arc<Cors>,
    loki_api: LokiApi,
    metrics: Arc<IngestMetrics>,
    listeners: Arc<ListenerMetrics>,
}

impl HttpIngest {
    /// The handlers of `loghaul serve`, feeding `ingress`, reading through `reads`, telling
    /// Loki's readiness probe what `readiness` says, and counted in the server's `metrics`.
    pub(crate) fn new(
        ingress: Ingress,
        reads: Reads,
        limits: Limits,
        keys: Arc<KeyStore>,
        readiness: Arc<Readiness>,
        metrics: &Metrics,
        config: &ServeConfig,
    ) -> Self {
        let cors = Arc::new(Cors::new(config.listeners.http_cors_origins.clone()));
        let auth = Arc::new(HttpAuth::new(
            keys,
            Arc::clone(&cors),
            config.auth.allow_org_id_tenants,
        ));
        HttpIngest {
            loki_api: LokiApi::new(
                reads,
                Arc::clone(&auth),
                readiness,
                Arc::clone(&metrics.loki),
            ),
            reception: Reception::new(
                ingress.clone(),
                auth,
                BodyLimits {
                    max_bytes: config.ingest.max_request_bytes.as_usize(),
                    pace: BodyPace::from(&config.ingest),
                },
            ),
            exporter: Exporter::new(ingress.clone(), limits, Arc::clone(&metrics.ingest)),
            pusher: Pusher::new(ingress, limits, Arc::clone(&metrics.ingest)),
            cors,
            metrics: Arc::clone(&metrics.ingest),
            listeners: Arc::clone(&metrics.listeners),
        }
    }
}

/// Serves the listener (over `tls` when the service has a certificate) until `shutdown`
/// completes; requests in flight are answered first.
pub(crate) async fn serve(
    listener: TcpListener,
    ingest: HttpIngest,
    limits: HttpLimits,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let reads = crate::loki::api::routes(ingest.loki_api.clone());
    let listeners = Arc::clone(&ingest.listeners);
    let app = Router::new()
        .route(OTLP_LOGS_PATH, post(otlp_logs).options(preflight))
        .route(LOKI_PUSH_PATH, post(loki_push).options(preflight))
        .fallback(unknown_path)
        .with_state(ingest)
        .merge(reads);
    serve_http(listener, app, limits, tls, "ingest", listeners, shutdown).await
}

async fn otlp_logs(
    State(ingest): State<HttpIngest>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response<Body> {
    let origin = ingest.cors.allowed(request.headers());
    let answer =
        crate::ingest::otlp::http::export(&ingest.reception, &ingest.exporter, request, peer.ip())
            .await;
    finish(&ingest, "otlp_http", origin, answer)
}

async fn loki_push(
    State(ingest): State<HttpIngest>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response<Body> {
    let origin = ingest.cors.allowed(request.headers());
    let answer =
        crate::ingest::loki::push(&ingest.reception, &ingest.pusher, request, peer.ip()).await;
    finish(&ingest, "loki", origin, answer)
}

/// Counts a protocol's answer by its outcome and lets an allowed browser origin read it.
fn finish(
    ingest: &HttpIngest,
    protocol: &'static str,
    origin: Option<HeaderValue>,
    (mut response, outcome): (Response<Body>, &'static str),
) -> Response<Body> {
    ingest.count(protocol, outcome);
    cors::allow(&mut response, origin);
    response
}

async fn preflight(State(ingest): State<HttpIngest>, headers: HeaderMap) -> Response<Body> {
    let response = ingest.cors.preflight(&headers);
    let outcome = if response.status().is_success() {
        "ok"
    } else {
        "forbidden"
    };
    ingest.count("cors_preflight", outcome);
    response
}

async fn unknown_path(State(ingest): State<HttpIngest>) -> Response<Body> {
    ingest.count("other", "not_found");
    let text = format!(
        "no such endpoint; this port takes POST {OTLP_LOGS_PATH} (OTLP/HTTP), POST {LOKI_PUSH_PATH} (Loki push) and GET /loki/api/v1/query_range, /query, /labels, /label/NAME/values, /series, /index/volume, /index/volume_range, /index/stats, /detected_labels, /detected_fields, /detected_field/NAME/values and the /tail WebSocket (Loki's query API)\n"
    );
    reply::response(
        StatusCode::NOT_FOUND,
        "text/plain; charset=utf-8",
        text.into_bytes(),
    )
}

impl HttpIngest {
    /// Counts an answer in `loghaul_http_ingest_requests_total{protocol,outcome}`.
    fn count(&self, protocol: &'static str, outcome: &'static str) {
        self.metrics
            .http_ingest_requests
            .increment_static([protocol, outcome], 1);
    }
}
