//! The JSON API behind the console, mirroring `LogQuery`:
//!
//! - `GET /api/v1/session`: the caller's tenant (the console's login check).
//! - `GET /api/v1/logs`: one page, newest first; same filters, page size and cursor as `Query`,
//!   and `default_from` when the server bounded a search that had no `from`.
//! - `GET /api/v1/tail`: Server-Sent Events, oldest first; same filters and cursor as `Tail`.
//! - `GET /api/v1/volume`: a search's records per time bucket and level, from the per-minute
//!   volume rollup ([`crate::console::histogram`]); same filters as `/logs`.
//! - `GET /api/v1/health`: the pipeline's metrics, readiness and storage backend.
//!
//! Every call needs a key and sees only its key's tenant, as on gRPC. The key is read from the
//! headers the HTTP ingest port reads it from (`x-api-key`, `Authorization: Bearer`, or Basic
//! with the key as password), and from headers only, for the tail too: a key in a URL ends up in
//! proxy logs and browser history, and the one client that cannot set headers, `EventSource`, is
//! not needed — the console reads the event stream through `fetch`, which can (see
//! `assets/app.js`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use chrono::{DateTime, SecondsFormat, Utc};
use futures::StreamExt;
use serde_json::{json, Value};

use super::error::{json_response, ApiError};
use super::params::{Endpoint, Params};
use super::ConsoleState;
use crate::auth::http::{check_host, presented_key};
use crate::auth::Tenant;
use crate::console::histogram::Histogram;
use crate::error::HttpError;
use crate::proto::v1::StoredRecord;
use crate::query;

/// How often an idle tail sends a comment, so proxies keep the connection and a vanished browser
/// is noticed.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The caller's address, which the listener puts into every request.
type Peer = Option<Extension<ConnectInfo<SocketAddr>>>;

impl ConsoleState {
    /// The caller's tenant, from its key wherever the HTTP ingest port reads one
    /// ([`crate::auth::http::presented_key`]). Without configured keys the service is open as on
    /// gRPC (to loopback callers only, unless `--allow-unauthenticated`), and then only requests
    /// addressed to a loopback name or an IP address are served, under either mode: the console's
    /// only clients are browsers, which is what a web page elsewhere uses to point a name of its
    /// own at the console (DNS rebinding) and read the logs. With keys, a page elsewhere has no
    /// key to send.
    fn authenticate(&self, headers: &HeaderMap, peer: Peer) -> Result<Tenant, ApiError> {
        let presented = presented_key(headers);
        let peer = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
        let tenant = self.keys.authenticate(presented.as_deref(), peer)?;
        if self.keys.is_open() {
            check_host(headers, self.keys.metrics())?;
        }
        Ok(tenant)
    }
}

/// `GET /api/v1/session`: who the key belongs to.
pub(crate) async fn session(
    State(state): State<ConsoleState>,
    peer: Peer,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tenant = state.authenticate(&headers, peer)?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"tenant": tenant.name().as_ref(), "open": state.keys.is_open()}),
    ))
}

/// `GET /api/v1/logs`: one page of the tenant's records, newest first.
pub(crate) async fn logs(
    State(state): State<ConsoleState>,
    peer: Peer,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let tenant = state.authenticate(&headers, peer)?;
    let params = Params::parse(raw.as_deref(), Endpoint::Logs).map_err(HttpError::BadRequest)?;
    let page = query::search(&state.reads, tenant.name(), params.query_request()).await?;
    let records: Vec<Value> = page.records.iter().map(record_json).collect();
    let mut body = json!({"records": records, "next_cursor": page.next_cursor});
    if let Some(from) = &page.default_from {
        body["default_from"] = json!(crate::query::render::time(Some(from)));
    }
    Ok(json_response(StatusCode::OK, &body))
}

/// `GET /api/v1/tail`: the tenant's records as they are committed, as Server-Sent Events: `open`
/// once the tail is in place (records committed from then on are delivered), `records` with a
/// JSON array (the event id is the last record's cursor, so `Last-Event-ID` resumes after it),
/// and `error` with `{"error": …}` before the stream ends.
pub(crate) async fn tail(
    State(state): State<ConsoleState>,
    peer: Peer,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let tenant = state.authenticate(&headers, peer)?;
    let mut params =
        Params::parse(raw.as_deref(), Endpoint::Tail).map_err(HttpError::BadRequest)?;
    if params.cursor.is_empty() {
        if let Some(last) = headers.get("last-event-id") {
            params.cursor = last.to_str().unwrap_or_default().to_owned();
        }
    }
    let follow = query::tail::start(&state.reads, tenant.name(), params.tail_request()).await?;
    let opened = Event::default()
        .event("open")
        .data(json!({"tenant": tenant.name().as_ref()}).to_string());
    let events = follow.map(|message| {
        let event = match message {
            Ok(batch) => {
                let records: Vec<Value> = batch.records.iter().map(record_json).collect();
                let event = Event::default()
                    .event("records")
                    .data(Value::from(records).to_string());
                match batch.records.last() {
                    Some(last) => event.id(last.cursor.clone()),
                    None => event,
                }
            }
            Err(status) => Event::default()
                .event("error")
                .data(json!({"error": status.message()}).to_string()),
        };
        Ok::<_, Infallible>(event)
    });
    let stream = futures::stream::once(async move { Ok(opened) }).chain(events);
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        "no-store".parse().expect("a valid header"),
    );
    // Reverse proxies (nginx) would otherwise buffer the stream and deliver it late.
    headers.insert("x-accel-buffering", "no".parse().expect("a valid header"));
    Ok(response)
}

/// `GET /api/v1/volume`: the histogram above the search results, read under the same admission
/// and timeout as a page.
pub(crate) async fn volume(
    State(state): State<ConsoleState>,
    peer: Peer,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let tenant = state.authenticate(&headers, peer)?;
    let params = Params::parse(raw.as_deref(), Endpoint::Volume).map_err(HttpError::BadRequest)?;
    let histogram = state.reads.histogram(tenant.name(), params.filter).await?;
    Ok(json_response(StatusCode::OK, &histogram_json(&histogram)))
}

/// `GET /api/v1/health`: the snapshot the Health view charts.
pub(crate) async fn health(
    State(state): State<ConsoleState>,
    peer: Peer,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tenant = state.authenticate(&headers, peer)?;
    Ok(json_response(
        StatusCode::OK,
        &state.health.snapshot(&tenant),
    ))
}

/// Any other `/api/` path.
pub(crate) async fn not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        &json!({"error": "no such API endpoint; see /api/v1/logs, /api/v1/tail, /api/v1/volume, /api/v1/health, /api/v1/session"}),
    )
}

/// A record as the console shows it: the fields of `loghaul query --json`, plus when it arrived.
fn record_json(record: &StoredRecord) -> Value {
    let mut value = crate::query::render::json_value(record);
    value["received_at"] = json!(crate::query::render::time(record.received_at.as_ref()));
    value
}

/// A histogram as the console draws it: every bucket with its bounds, total and counts by level
/// name (levels without records left out).
fn histogram_json(histogram: &Histogram) -> Value {
    let time = |ts: DateTime<Utc>| ts.to_rfc3339_opts(SecondsFormat::Secs, true);
    let size = histogram.bucket;
    let buckets: Vec<Value> = histogram
        .buckets
        .iter()
        .map(|bucket| {
            let counts: serde_json::Map<String, Value> = bucket
                .levels()
                .map(|(level, count)| (level.to_owned(), json!(count)))
                .collect();
            json!({
                "start": time(bucket.start),
                "end": time(bucket.start.checked_add_signed(size).unwrap_or(DateTime::<Utc>::MAX_UTC)),
                "total": bucket.total(),
                "counts": counts,
            })
        })
        .collect();
    let mut body = json!({
        "from": time(histogram.from),
        "to": time(histogram.to),
        "bucket": duration_name(size),
        "bucket_seconds": size.num_seconds(),
        "total": histogram.total(),
        "buckets": buckets,
        "not_applied": histogram.not_applied,
    });
    if let Some(from) = histogram.default_from {
        body["default_from"] = json!(time(from));
    }
    body
}

/// Whole minutes as `5m`, `2h` or `3d`, in the largest unit that divides them.
fn duration_name(duration: chrono::TimeDelta) -> String {
    let minutes = duration.num_minutes();
    match minutes {
        m if m > 0 && m % 1440 == 0 => format!("{}d", m / 1440),
        m if m > 0 && m % 60 == 0 => format!("{}h", m / 60),
        m => format!("{m}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_sizes_are_named_in_their_largest_unit() {
        for (minutes, name) in [
            (1, "1m"),
            (15, "15m"),
            (90, "90m"),
            (120, "2h"),
            (2880, "2d"),
        ] {
            assert_eq!(duration_name(chrono::TimeDelta::minutes(minutes)), name);
        }
    }
}
