//! Loki's query API on the HTTP listener, what Grafana's Loki data source, `logcli` and scripts
//! call: `query_range`, `query`, `labels`, `label/{name}/values`, `series`, `index/volume`,
//! `index/volume_range`, `index/stats`, `detected_labels`, `detected_fields`,
//! `detected_field/{name}/values`, `format_query`, `tail`, `status/buildinfo` and `/ready`; and
//! `patterns`, which answers 404. Each request is authenticated as a push
//! is (`x-api-key`, `Bearer`, or Basic with the key as password), read in the caller's tenant by
//! [`crate::loki::read`], and answered in Loki's JSON; errors as Loki sends them, a line of text
//! with 400 (the parse error and where, or a read too large for `--max-query-bytes`), 401, 429,
//! 503 (the reads together at `--max-read-bytes`) or 504.
//!
//! - [`params`]: the query string as Loki reads it.
//! - [`answer`]: Loki's JSON shapes.
//! - [`charged`]: an answer written piece by piece, charged to its read's memory until sent.
//! - [`detected`]: the detected labels, fields and field values Grafana's pickers ask for.
//! - [`metrics`]: the API's series: requests, their time, and what answered metric queries.

pub(crate) mod answer;
pub(crate) mod charged;
mod detected;
pub(crate) mod metrics;
pub(crate) mod params;
mod tail;

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Response, StatusCode};
use axum::routing::get;
use axum::Router;
use chrono::Utc;
use serde_json::{json, Value as Json};

use self::metrics::LokiMetrics;
use crate::error::HttpError;
use crate::loki::logql::ast::{LogQuery, Query};
use crate::loki::logql::eval::{Steps, Value};
use crate::loki::logql::plan::Placement;
use crate::loki::read::{nanos, VolumeAsk};
use crate::observability::readiness::Readiness;
use crate::query::Reads;
use crate::wire::http::auth::HttpAuth;
use crate::wire::http::reply;
use charged::Answer;
use params::Params;

/// What the query endpoints share.
#[derive(Clone, Debug)]
pub(crate) struct LokiApi {
    reads: Reads,
    auth: Arc<HttpAuth>,
    readiness: Arc<Readiness>,
    metrics: Arc<LokiMetrics>,
}

impl LokiApi {
    /// The endpoints reading through `reads`, authenticating as pushes are (`auth`), counted in
    /// `metrics`; `/ready` answers what `readiness` says.
    pub(crate) fn new(
        reads: Reads,
        auth: Arc<HttpAuth>,
        readiness: Arc<Readiness>,
        metrics: Arc<LokiMetrics>,
    ) -> Self {
        LokiApi {
            reads,
            auth,
            readiness,
            metrics,
        }
    }
}

/// The routes, for the HTTP listener's router.
pub(crate) fn routes(api: LokiApi) -> Router {
    Router::new()
        .route(
            "/loki/api/v1/query_range",
            get(query_range).post(|FormCall(call): FormCall| query_range(call)),
        )
        .route(
            "/loki/api/v1/query",
            get(query).post(|FormCall(call): FormCall| query(call)),
        )
        .route("/loki/api/v1/labels", get(labels))
        .route("/loki/api/v1/label", get(labels))
        .route("/loki/api/v1/label/{name}/values", get(label_values))
        .route("/loki/api/v1/series", get(series))
        .route("/loki/api/v1/index/volume", get(volume))
        .route("/loki/api/v1/index/volume_range", get(volume_range))
        .route("/loki/api/v1/index/stats", get(index_stats))
        .route("/loki/api/v1/detected_labels", get(detected::labels))
        .route("/loki/api/v1/detected_fields", get(detected::fields))
        .route(
            "/loki/api/v1/detected_field/{name}/values",
            get(detected::values),
        )
        .route("/loki/api/v1/patterns", get(patterns))
        .route("/loki/api/v1/tail", get(tail::tail))
        .route(
            "/loki/api/v1/format_query",
            get(format_query).post(|FormCall(call): FormCall| format_query(call)),
        )
        .route("/loki/api/v1/status/buildinfo", get(buildinfo))
        .route("/ready", get(ready))
        .with_state(api)
}

/// One request as every endpoint takes it: the reads, the tenant its key gives (or why it gives
/// none), and its query string.
struct Call {
    reads: Reads,
    metrics: Arc<LokiMetrics>,
    tenant: Result<Arc<str>, HttpError>,
    params: Params,
    /// Where a metric query may count a line: at its minute's end for Grafana's volume
    /// histogram, which says so in `X-Query-Tags`.
    placement: Placement,
}

impl FromRequestParts<LokiApi> for Call {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, api: &LokiApi) -> Result<Self, Infallible> {
        // The listener gives every request its peer; without one, it is not on loopback.
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |info| info.0.ip());
        Ok(Call {
            reads: api.reads.clone(),
            metrics: Arc::clone(&api.metrics),
            tenant: api
                .auth
                .tenant(&parts.headers, peer)
                .map(|t| t.name().clone()),
            params: Params::parse(parts.uri.query()),
            placement: placement(&parts.headers),
        })
    }
}

/// Most bytes of a form body: a query and its parameters, with room to spare.
const MAX_FORM_BYTES: usize = 64 << 10;

/// A call whose parameters may also come as a form body (`application/x-www-form-urlencoded`),
/// as Loki takes `query` and `query_range` by POST; a body parameter wins over the same one in
/// the query string, as in Loki.
struct FormCall(Call);

impl FromRequest<LokiApi> for FormCall {
    type Rejection = Response<Body>;

    async fn from_request(request: Request, api: &LokiApi) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = request.into_parts();
        let Ok(mut call) = Call::from_request_parts(&mut parts, api).await;
        let form = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .is_some_and(|essence| {
                essence
                    .trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            });
        if form {
            let refused = |reason: String| reply::text_error(&HttpError::BadRequest(reason));
            let bytes = axum::body::to_bytes(body, MAX_FORM_BYTES)
                .await
                .map_err(|_| refused(format!("the form body is over {MAX_FORM_BYTES} bytes")))?;
            let text = std::str::from_utf8(&bytes)
                .map_err(|_| refused("the form body is not UTF-8".into()))?;
            call.params.extend(Params::parse(Some(text)));
        }
        Ok(FormCall(call))
    }
}

/// The placement a request asks for: [`Placement::Minute`] when `X-Query-Tags` has
/// `Source=logvolhist`, which Grafana sends with the queries of its log-volume histogram.
fn placement(headers: &axum::http::HeaderMap) -> Placement {
    let histogram = headers
        .get_all("x-query-tags")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|tags| tags.split(','))
        .filter_map(|tag| tag.split_once('='))
        .any(|(key, value)| {
            key.trim().eq_ignore_ascii_case("source")
                && value.trim().eq_ignore_ascii_case(HISTOGRAM_SOURCE)
        });
    if histogram {
        Placement::Minute
    } else {
        Placement::Exact
    }
}

/// The `Source` tag of Grafana's log-volume histogram queries.
const HISTOGRAM_SOURCE: &str = "logvolhist";

impl Call {
    /// The endpoint's answer or refusal, counted and timed. `work` writes the answer into the
    /// [`Answer`] it is given, charged to the read's memory, which its body holds until sent.
    async fn answer<F, Fut>(self, endpoint: &'static str, work: F) -> Response<Body>
    where
        F: FnOnce(Reads, Arc<str>, Params, Answer) -> Fut,
        Fut: std::future::Future<Output = Result<Answer, HttpError>>,
    {
        let started = Instant::now();
        let outcome = match self.tenant {
            Ok(tenant) => {
                let answer = Answer::new(self.reads.charge(&tenant));
                work(self.reads, tenant, self.params, answer).await
            }
            Err(refused) => Err(refused),
        };
        let metrics = self.metrics;
        metrics
            .query_duration
            .record(started.elapsed().as_secs_f64());
        match outcome {
            Ok(answer) => {
                metrics.queries.increment_static([endpoint, "ok"], 1);
                let mut response = Response::new(answer.into_body());
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                response
            }
            Err(refusal) => {
                metrics
                    .queries
                    .increment_static([endpoint, refusal.kind()], 1);
                if refusal.status().is_server_error() {
                    tracing::warn!(endpoint, error = %refusal, "Loki query API request failed");
                }
                crate::error::with_retry_after(
                    reply::response(
                        refusal.status(),
                        "text/plain; charset=utf-8",
                        format!("{refusal}\n").into_bytes(),
                    ),
                    refusal.retry_after(),
                )
            }
        }
    }
}

/// The `query=` parameter, which every endpoint that has one needs. Without it the query is
/// empty, and refused as Loki refuses it: `syntax error: unexpected $end`.
fn query_text(params: &Params) -> Result<&str, HttpError> {
    Ok(params.get("query").unwrap_or(""))
}

/// The query of `query=`, parsed.
fn logql(params: &Params) -> Result<Query, HttpError> {
    Ok(crate::loki::logql::parse(query_text(params)?)?)
}

/// A selector parameter (`query=` of the label and volume endpoints, `match[]=` of series).
fn selector(text: &str) -> Result<LogQuery, HttpError> {
    match crate::loki::logql::parse(text)? {
        Query::Log(query) => Ok(query),
        Query::Metric(_) => Err(HttpError::BadRequest(format!(
            "{text:?} is a metric query; this parameter takes a stream selector such as {{service_name=\"api\"}}"
        ))),
    }
}

/// A log query's streams over `range`, with the request's `limit` and `direction`.
async fn log_answer(
    reads: &Reads,
    tenant: &Arc<str>,
    query: &LogQuery,
    range: crate::loki::read::TimeRange,
    params: &Params,
    mut answer: Answer,
) -> Result<Answer, HttpError> {
    let (limit, order) = (params.limit()?, params.direction()?);
    let (streams, stats) = reads
        .loki_logs(tenant, query, range, limit, order, answer.charge())
        .await?;
    answer::streams(streams, &stats, &mut answer)?;
    Ok(answer)
}

async fn query_range(call: Call) -> Response<Body> {
    let placement = call.placement;
    let metrics = Arc::clone(&call.metrics);
    call.answer(
        "query_range",
        |reads, tenant, params, mut answer| async move {
            let range = params.range(Utc::now())?;
            if range.from == range.to {
                return Err(HttpError::BadRequest(
                    "end timestamp must not be before or equal to start time".into(),
                ));
            }
            // Loki reads the step of any range query, a log query's too, before its query.
            let step = params.step(range)?;
            match logql(&params)? {
                Query::Log(query) => {
                    log_answer(&reads, &tenant, &query, range, &params, answer).await
                }
                Query::Metric(expr) => {
                    let steps = Steps::aligned(nanos(range.from), nanos(range.to), step)?;
                    let (value, stats) = reads
                        .loki_metric(
                            &tenant,
                            &expr,
                            steps,
                            placement,
                            answer.charge(),
                            &metrics.metric_sources,
                        )
                        .await?;
                    answer::matrix(value, steps, &stats, &mut answer)?;
                    Ok(answer)
                }
            }
        },
    )
    .await
}

async fn query(call: Call) -> Response<Body> {
    let placement = call.placement;
    let metrics = Arc::clone(&call.metrics);
    call.answer("query", |reads, tenant, params, mut answer| async move {
        let time = params.time("time", Utc::now())?;
        match logql(&params)? {
            // Loki 3 refuses it too, in these words; Grafana and logcli ask `query_range`.
            Query::Log(_) => Err(HttpError::BadRequest(
                "log queries are not supported as an instant query type, please change your query to a range query type".into(),
            )),
            Query::Metric(expr) => {
                let at = nanos(time);
                let steps = Steps::new(at, at, 1)?;
                let (value, stats) = reads
                    .loki_metric(
                        &tenant,
                        &expr,
                        steps,
                        placement,
                        answer.charge(),
                        &metrics.metric_sources,
                    )
                    .await?;
                answer::instant(value, at, &stats, &mut answer)?;
                Ok(answer)
            }
        }
    })
    .await
}

/// The query written back as Loki writes it, for Grafana's query editor: parsed, not run.
async fn format_query(call: Call) -> Response<Body> {
    let response = call
        .answer("format_query", |_, _, params, mut answer| async move {
            let query = logql(&params)?;
            answer::success(json!(crate::loki::logql::pretty(&query)), &mut answer)?;
            Ok(answer)
        })
        .await;
    if response.status() != StatusCode::BAD_REQUEST {
        return response;
    }
    // Loki says why a query does not parse in JSON here, unlike its other endpoints.
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .unwrap_or_default();
    let error = String::from_utf8_lossy(&text).trim_end().to_owned();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    // In Loki's order, with its newline.
    let body = format!(
        "{{\"status\":\"invalid-query\",\"error\":{}}}\n",
        Json::String(error)
    );
    Response::from_parts(parts, Body::from(body))
}

async fn labels(call: Call) -> Response<Body> {
    call.answer("labels", |reads, tenant, params, mut answer| async move {
        let range = params.range(Utc::now())?;
        let query = params.get("query").map(selector).transpose()?;
        let names = reads
            .loki_label_names(&tenant, range, query.as_ref())
            .await?;
        answer::success(json!(names), &mut answer)?;
        Ok(answer)
    })
    .await
}

async fn label_values(Path(name): Path<String>, call: Call) -> Response<Body> {
    call.answer(
        "label_values",
        |reads, tenant, params, mut answer| async move {
            let range = params.range(Utc::now())?;
            let query = params.get("query").map(selector).transpose()?;
            let values = reads
                .loki_label_values(&tenant, &name, range, query.as_ref())
                .await?;
            answer::success(json!(values), &mut answer)?;
            Ok(answer)
        },
    )
    .await
}

async fn series(call: Call) -> Response<Body> {
    call.answer("series", |reads, tenant, params, mut answer| async move {
        let range = params.range(Utc::now())?;
        let mut texts = params.all("match[]");
        texts.extend(params.all("match"));
        if texts.is_empty() {
            return Err(HttpError::BadRequest(
                "series needs at least one match[] selector".into(),
            ));
        }
        let selectors = texts
            .into_iter()
            .map(selector)
            .collect::<Result<Vec<_>, _>>()?;
        let series = reads.loki_series(&tenant, &selectors, range).await?;
        answer::success(json!(series), &mut answer)?;
        Ok(answer)
    })
    .await
}

/// The volume endpoints' common parameters: the selector, and the labels to sum by and the
/// limit (one sum over the range: `/index/volume_range` sets its steps).
fn volume_params(params: &Params) -> Result<(LogQuery, VolumeAsk), HttpError> {
    let query = selector(query_text(params)?)?;
    let targets = params
        .get("targetLabels")
        .map(|list| {
            list.split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let by_label_names = match params.get("aggregateBy").unwrap_or("series") {
        "series" => false,
        "labels" => true,
        // Loki's words.
        _ => return Err(HttpError::BadRequest("invalid aggregation option".into())),
    };
    let ask = VolumeAsk {
        targets,
        steps: None,
        limit: params.limit()?,
        by_label_names,
    };
    Ok((query, ask))
}

async fn volume(call: Call) -> Response<Body> {
    call.answer("volume", |reads, tenant, params, mut answer| async move {
        let range = params.range(Utc::now())?;
        let (query, ask) = volume_params(&params)?;
        let (series, stats) = reads
            .loki_volume(&tenant, &query, range, ask, answer.charge())
            .await?;
        answer::volume(series, nanos(range.to), &stats, &mut answer)?;
        Ok(answer)
    })
    .await
}

async fn index_stats(call: Call) -> Response<Body> {
    call.answer(
        "index_stats",
        |reads, tenant, params, mut answer| async move {
            let range = params.range(Utc::now())?;
            let query = selector(query_text(&params)?)?;
            let (index, _) = reads.loki_index_stats(&tenant, &query, range).await?;
            answer.json(true, &index)?;
            Ok(answer)
        },
    )
    .await
}

async fn volume_range(call: Call) -> Response<Body> {
    call.answer(
        "volume_range",
        |reads, tenant, params, mut answer| async move {
            let range = params.range(Utc::now())?;
            let (query, mut ask) = volume_params(&params)?;
            let steps = Steps::new(nanos(range.from), nanos(range.to), params.step(range)?)?;
            ask.steps = Some(steps);
            let (series, stats) = reads
                .loki_volume(&tenant, &query, range, ask, answer.charge())
                .await?;
            answer::matrix(Value::Matrix(series), steps, &stats, &mut answer)?;
            Ok(answer)
        },
    )
    .await
}

/// Loki answers `patterns` only from its pattern ingester, which mines the lines as they arrive,
/// and 404 while that is off. loghaul mines none: 404 as such a Loki does, which Grafana reads as
/// "patterns are not available", rather than an empty list, which would say the logs have none.
async fn patterns() -> Response<Body> {
    reply::response(
        StatusCode::NOT_FOUND,
        "text/plain; charset=utf-8",
        b"patterns are not available: loghaul does not mine log patterns\n".to_vec(),
    )
}

/// Loki's build information, which Grafana reads to learn what the server supports.
async fn buildinfo() -> Response<Body> {
    let body = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "revision": "",
        "branch": "",
        "buildUser": "loghaul",
        "buildDate": "",
        "goVersion": "",
    });
    reply::response(
        StatusCode::OK,
        "application/json",
        body.to_string().into_bytes(),
    )
}

/// Loki's readiness probe, as the service's own `/readyz` decides: ready while the store answers
/// and the service is not shutting down, else 503 saying which.
async fn ready(State(api): State<LokiApi>) -> Response<Body> {
    let (status, text): (_, &[u8]) = if api.readiness.draining() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            b"not ready: shutting down\n",
        )
    } else if !api.readiness.store_up() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            b"not ready: the database does not answer\n",
        )
    } else {
        (StatusCode::OK, b"ready\n")
    };
    reply::response(status, "text/plain; charset=utf-8", text.to_vec())
}
