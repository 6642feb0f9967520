//! The HTTP ingest listener (`--http-listen`, 4318 by default): OTLP/HTTP at `POST /v1/logs` and
//! the Loki push API at `POST /loki/api/v1/push`, for the shippers that speak HTTP rather than
//! gRPC. A request goes through the same steps as a gRPC call, in order:
//!
//! 1. [`auth`]: the tenant, from the key in any header an exporter can set (and, without keys,
//!    what a web page cannot do);
//! 2. [`body`]: the body, read under the size limit and the memory budget, then inflated;
//! 3. the protocol's decoder ([`crate::server::otlp::http`], [`crate::server::loki`]), which
//!    validates each record and queues the valid ones through the shared pipeline;
//! 4. [`reply`]: the answer, sent once the records are committed, in the protocol's own form.
//!
//! [`cors`] lets listed browser origins send. The same listener serves Loki's query API
//! ([`crate::server::loki::query`]), so one URL is both where shippers push and where Grafana reads.

pub(crate) mod auth;
pub(crate) mod body;
pub(crate) mod cors;
pub(crate) mod reply;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::auth::{KeyStore, Tenant};
use crate::config::ServeConfig;
use crate::observability::metrics::metrics;
use crate::observability::readiness::Readiness;
use crate::pipeline::{Ingress, Meter};
use crate::query::Reads;
use crate::server::body_rate::BodyPace;
use crate::server::inflate::Compression;
use crate::server::loki::query::LokiApi;
use crate::server::loki::Pusher;
use crate::server::otlp::export::Exporter;
use crate::server::validate::Limits;
use crate::web::listener::{serve_http, HttpLimits};
use auth::HttpAuth;
use body::BodyLimits;
use cors::Cors;
use reply::HttpError;

/// OTLP/HTTP's path for logs.
pub const OTLP_LOGS_PATH: &str = "/v1/logs";
/// The Loki push API's path.
pub const LOKI_PUSH_PATH: &str = "/loki/api/v1/push";

/// What the listener's handlers share.
#[derive(Clone, Debug)]
pub struct HttpIngest {
    reception: Reception,
    exporter: Exporter,
    pusher: Pusher,
    cors: Arc<Cors>,
    loki_api: LokiApi,
}

impl HttpIngest {
    /// The handlers of `loghaul serve`, feeding `ingress`, reading through `reads` and telling
    /// Loki's readiness probe what `readiness` says.
    pub fn new(
        ingress: Ingress,
        reads: Reads,
        limits: Limits,
        keys: Arc<KeyStore>,
        readiness: Arc<Readiness>,
        config: &ServeConfig,
    ) -> Self {
        let cors = Arc::new(Cors::new(config.http_cors_origins.clone()));
        let auth = Arc::new(HttpAuth::new(
            keys,
            Arc::clone(&cors),
            config.allow_org_id_tenants,
        ));
        HttpIngest {
            loki_api: LokiApi::new(reads, Arc::clone(&auth), readiness),
            reception: Reception {
                ingress: ingress.clone(),
                auth,
                body: BodyLimits {
                    max_bytes: config.max_request_bytes.as_usize(),
                    pace: BodyPace::from_config(config),
                },
            },
            exporter: Exporter::new(ingress.clone(), limits),
            pusher: Pusher::new(ingress, limits),
            cors,
        }
    }
}

/// Serves the listener (over `tls` when the service has a certificate) until `shutdown`
/// completes; requests in flight are answered first.
pub async fn serve(
    listener: TcpListener,
    ingest: HttpIngest,
    limits: HttpLimits,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let reads = crate::server::loki::query::routes(ingest.loki_api.clone());
    let app = Router::new()
        .route(OTLP_LOGS_PATH, post(otlp_logs).options(preflight))
        .route(LOKI_PUSH_PATH, post(loki_push).options(preflight))
        .fallback(unknown_path)
        .with_state(ingest)
        .merge(reads);
    serve_http(listener, app, limits, tls, "ingest", shutdown).await
}

async fn otlp_logs(
    State(ingest): State<HttpIngest>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response<Body> {
    let origin = ingest.cors.allowed(request.headers());
    let answer =
        crate::server::otlp::http::export(&ingest.reception, &ingest.exporter, request, peer.ip())
            .await;
    finish("otlp_http", origin, answer)
}

async fn loki_push(
    State(ingest): State<HttpIngest>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response<Body> {
    let origin = ingest.cors.allowed(request.headers());
    let answer =
        crate::server::loki::push(&ingest.reception, &ingest.pusher, request, peer.ip()).await;
    finish("loki", origin, answer)
}

/// Counts a protocol's answer by its outcome and lets an allowed browser origin read it.
fn finish(
    protocol: &'static str,
    origin: Option<HeaderValue>,
    (mut response, outcome): (Response<Body>, &'static str),
) -> Response<Body> {
    count(protocol, outcome);
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
    count("cors_preflight", outcome);
    response
}

async fn unknown_path() -> Response<Body> {
    count("other", "not_found");
    let text = format!(
        "no such endpoint; this port takes POST {OTLP_LOGS_PATH} (OTLP/HTTP), POST {LOKI_PUSH_PATH} (Loki push) and GET /loki/api/v1/query_range, /query, /labels, /label/NAME/values, /series, /index/volume, /index/volume_range and the /tail WebSocket (Loki's query API)\n"
    );
    reply::response(
        StatusCode::NOT_FOUND,
        "text/plain; charset=utf-8",
        text.into_bytes(),
    )
}

fn count(protocol: &'static str, outcome: &'static str) {
    metrics()
        .http_ingest_requests
        .increment_static([protocol, outcome], 1);
}

/// The steps every HTTP ingest request takes before its protocol's decoder: who it is from, and
/// its body under the limits and the budget.
#[derive(Clone, Debug)]
pub struct Reception {
    ingress: Ingress,
    auth: Arc<HttpAuth>,
    body: BodyLimits,
}

impl Reception {
    /// The request's tenant.
    pub fn authenticate(&self, headers: &HeaderMap, peer: IpAddr) -> Result<Tenant, HttpError> {
        self.auth.tenant(headers, peer)
    }

    /// The most a body may be, as sent and once inflated.
    pub fn max_body_bytes(&self) -> usize {
        self.body.max_bytes
    }

    /// `tenant`'s body, inflated per `compression`, and the meter that holds it.
    pub async fn read(
        &self,
        tenant: &Tenant,
        headers: &HeaderMap,
        body: Body,
        compression: Option<Compression>,
    ) -> Result<(Bytes, Meter<'_>), HttpError> {
        let mut meter = self.ingress.meter(tenant.name());
        let body = body::read(body, headers, compression, self.body, &mut meter).await?;
        Ok((body, meter))
    }
}
