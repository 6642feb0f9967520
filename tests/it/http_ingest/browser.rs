//! What a web page in someone's browser can make a keyless service do through the HTTP ingest
//! port: nothing. A page cannot send the service's keys, so without keys the service itself must
//! tell a browser's request from a shipper's:
//!
//! - a name that is not loopback in `Host` is what a DNS-rebinding page sends: refused (403);
//! - an `Origin` (a page's request, WebSocket handshakes included, which CORS does not cover)
//!   that `--http-cors-origins` does not list: refused (403);
//! - a push without a `Content-Type` (what a cross-site "simple" request can send): 415;
//! - `X-Scope-OrgID` names no tenant but `default` unless `--allow-org-id-tenants`.
//!
//! With keys, or with `--allow-unauthenticated`, the names a deployment is reached by keep
//! working.

use std::net::SocketAddr;

use futures::StreamExt;
use prost::Message as _;
use serde_json::Value as Json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::{loki_push, otlp_request, post, send_loki, snappy, JSON, LOKI, OTLP, PROTOBUF};
use crate::common::process::Process;
use crate::common::{config, http_request, metric, Backend, HttpAnswer, TestDb, TestServer};
use crate::common::{wait_until, DEADLINE};

const TAIL: &str = "/loki/api/v1/tail";
const RANGE: &str = "/loki/api/v1/query_range";
const SELECTOR: &str = r#"{service_name="private"}"#;

/// The query string of a tail or query of the private stream over the last hour.
fn target(path: &str) -> String {
    let start = (chrono::Utc::now() - chrono::TimeDelta::hours(1))
        .timestamp_nanos_opt()
        .unwrap()
        .to_string();
    let query: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs([("query", SELECTOR), ("start", start.as_str())])
        .finish();
    format!("{path}?{query}")
}

/// Pushes one private line as a shipper on this machine does (no browser headers).
async fn push_private(addr: SocketAddr, headers: &[(&str, &str)], line: &str) {
    let answer = send_loki(addr, headers, r#"{service_name="private"}"#, &[line]).await;
    assert_eq!(answer.status, 204, "{}", answer.text());
}

/// Opens the tail of the private stream with `headers` (an `Origin`, a key); the upgrade's
/// status, and the first line it streams when it opened.
async fn tail(addr: SocketAddr, headers: &[(&str, &str)]) -> (u16, Option<String>) {
    let mut request = format!("ws://{addr}{}", target(TAIL))
        .into_client_request()
        .unwrap();
    for (name, value) in headers {
        let name: http::HeaderName = name.parse().unwrap();
        request.headers_mut().insert(name, value.parse().unwrap());
    }
    let connected = tokio::time::timeout(DEADLINE, tokio_tungstenite::connect_async(request))
        .await
        .expect("the tail answers");
    let (mut socket, response) = match connected {
        Ok(opened) => opened,
        Err(WsError::Http(response)) => return (response.status().as_u16(), None),
        Err(err) => panic!("the tail neither opened nor answered: {err}"),
    };
    let first = loop {
        let message = tokio::time::timeout(DEADLINE, socket.next())
            .await
            .expect("a message within the deadline")
            .expect("the tail is still open")
            .expect("a readable message");
        if let Message::Text(text) = message {
            let json: Json = serde_json::from_str(&text).unwrap();
            break json["streams"][0]["values"][0][1]
                .as_str()
                .map(str::to_owned);
        }
    };
    (response.status().as_u16(), first)
}

/// A GET of the private stream's `query_range` with `headers`.
async fn query_range(addr: SocketAddr, headers: &[(&str, &str)]) -> HttpAnswer {
    http_request(addr, "GET", &target(RANGE), headers, b"")
        .await
        .unwrap()
}

/// The lines of a `query_range` answer.
fn lines(answer: &HttpAnswer) -> Vec<String> {
    assert_eq!(answer.status, 200, "{}", answer.text());
    let body: Json = serde_json::from_slice(&answer.body).unwrap();
    body["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|stream| stream["values"].as_array().unwrap().clone())
        .map(|value| value[1].as_str().unwrap().to_owned())
        .collect()
}

/// CORS does not apply to WebSockets: a page anywhere can open one to `127.0.0.1`, and its
/// browser sends the page's `Origin`. A keyless service refuses it before the upgrade; `logcli`
/// and Grafana's server send no `Origin`, and a listed origin is a page the operator trusts.
async fn a_cross_site_websocket_cannot_tail_a_keyless_service(db: &TestDb) {
    let mut settings = config(db);
    settings.listeners.http_cors_origins = "https://app.example".parse().unwrap();
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    push_private(addr, &[], "private line").await;

    let (status, streamed) = tail(addr, &[("origin", "http://evil.example")]).await;
    assert_eq!(
        (status, streamed),
        (403, None),
        "a page of another site tails the private lines"
    );
    let own_name = format!("http://{addr}");
    let (status, streamed) = tail(addr, &[("origin", own_name.as_str())]).await;
    assert_eq!(
        (status, streamed),
        (403, None),
        "this port serves no page, so a page claiming its origin was rebound to it"
    );
    for headers in [vec![], vec![("origin", "https://app.example")]] {
        let (status, streamed) = tail(addr, &headers).await;
        assert_eq!(status, 101, "{headers:?}");
        assert_eq!(streamed.as_deref(), Some("private line"), "{headers:?}");
    }
    server.stop().await;
}
on_both_backends!(
    cross_site_tail,
    a_cross_site_websocket_cannot_tail_a_keyless_service
);

/// A DNS-rebinding page points a name of its own at 127.0.0.1; its browser then sends that
/// name in `Host`. A keyless service answers only loopback names and IP addresses, so the page
/// reads and writes nothing.
async fn a_rebound_name_reads_and_writes_nothing_on_a_keyless_service(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    push_private(addr, &[], "private line").await;

    let rebound = query_range(addr, &[("host", "evil.example:4318")]).await;
    assert_eq!(rebound.status, 403, "{}", rebound.text());
    for hint in ["Host", "--api-keys"] {
        assert!(rebound.text().contains(hint), "{}", rebound.text());
    }
    let pushed = send_loki(
        addr,
        &[("host", "evil.example:4318")],
        r#"{service_name="private"}"#,
        &["rebound push"],
    )
    .await;
    assert_eq!(pushed.status, 403, "{}", pushed.text());
    let exported = post(
        addr,
        OTLP,
        &[PROTOBUF, ("host", "evil.example")],
        &otlp_request("private", &["rebound export"]).encode_to_vec(),
    )
    .await;
    assert_eq!(exported.status, 403, "{}", exported.text());

    let port = addr.port();
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "localhost".to_owned(),
    ] {
        let answer = query_range(addr, &[("host", host.as_str())]).await;
        assert_eq!(lines(&answer), ["private line"], "{host}");
    }
    assert_eq!(db.count().await, 1, "the rebound pushes stored nothing");
    server.stop().await;
}
on_both_backends!(
    rebound_host,
    a_rebound_name_reads_and_writes_nothing_on_a_keyless_service
);

/// Behind a Service name or an ingress the key is the protection: names and origins are not
/// checked. `--allow-unauthenticated` serves remote shippers by name, so names are not checked
/// there either, while a page's `Origin` still is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_keep_working_with_keys_or_allow_unauthenticated() {
    let db = TestDb::create(Backend::Sqlite, "browser_names")
        .await
        .unwrap();
    let service = ("host", "loghaul.logging.svc.cluster.local:4318");
    let mut settings = config(&db);
    settings.auth.api_keys = Some("key-a=team-a".parse().unwrap());
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    let key = ("x-api-key", "key-a");
    push_private(addr, &[key, service], "keyed line").await;
    let answer = query_range(addr, &[key, service]).await;
    assert_eq!(lines(&answer), ["keyed line"]);
    let (status, streamed) = tail(addr, &[key, ("origin", "https://grafana.example")]).await;
    assert_eq!(
        (status, streamed.as_deref()),
        (101, Some("keyed line")),
        "with keys a page's origin is not what protects the tail"
    );
    server.stop().await;

    let mut settings = config(&db);
    settings.auth.allow_unauthenticated = true;
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    push_private(addr, &[service], "open line").await;
    let answer = query_range(addr, &[service]).await;
    assert_eq!(
        lines(&answer),
        ["open line"],
        "team-a's line is not default's"
    );
    let (status, _) = tail(addr, &[("origin", "http://evil.example")]).await;
    assert_eq!(
        status, 403,
        "an open service still refuses a page of another site"
    );
    server.stop().await;
}

/// A page can POST across sites without a preflight only with no `Content-Type` or a form's or
/// text's: none is a push. Real Loki clients always say what they send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_without_a_content_type_is_refused() {
    let db = TestDb::create(Backend::Sqlite, "browser_content_type")
        .await
        .unwrap();
    let server = TestServer::start(config(&db)).await;
    let addr = server.http_ingest;
    let body = snappy(&loki_push(&[(r#"{job="x"}"#, &["untyped"])]).encode_to_vec());
    for headers in [vec![], vec![("content-type", "")]] {
        let answer = post(addr, LOKI, &headers, &body).await;
        assert_eq!(answer.status, 415, "{headers:?}: {}", answer.text());
        assert!(answer.text().contains("Content-Type"), "{}", answer.text());
    }
    let export = otlp_request("x", &["untyped"]).encode_to_vec();
    assert_eq!(post(addr, OTLP, &[], &export).await.status, 415);
    // The same push from a page of another site, as fetch(…, {mode: "no-cors"}) sends it.
    let answer = post(addr, LOKI, &[("origin", "http://evil.example")], &body).await;
    assert_eq!(answer.status, 403, "{}", answer.text());
    assert_eq!(db.count().await, 0);

    let typed = post(addr, LOKI, &[PROTOBUF], &body).await;
    assert_eq!(typed.status, 204, "{}", typed.text());
    let json = br#"{"streams":[{"stream":{"job":"x"},"values":[["1","typed json"]]}]}"#;
    let typed = post(addr, LOKI, &[JSON], json).await;
    assert_eq!(
        typed.status,
        400,
        "an entry at 1 ns is refused alone: {}",
        typed.text()
    );
    server.stop().await;
}

/// Each refusal above is counted where it happens, in a process of the test's own: the auth
/// failures by reason, and the answers of each endpoint by outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_browser_refusal_is_counted() {
    let db = TestDb::create(Backend::Sqlite, "browser_metrics")
        .await
        .unwrap();
    let server = Process::serve(&db.url, &[]);
    let addr = server.http_ingest;
    let rebound = query_range(addr, &[("host", "evil.example")]).await;
    assert_eq!(rebound.status, 403, "{}", rebound.text());
    let (status, _) = tail(addr, &[("origin", "http://evil.example")]).await;
    assert_eq!(status, 403);
    let body = snappy(&loki_push(&[(r#"{job="x"}"#, &["untyped"])]).encode_to_vec());
    assert_eq!(post(addr, LOKI, &[], &body).await.status, 415);
    let org = send_loki(addr, &[("x-scope-orgid", "team-x")], r#"{job="x"}"#, &["x"]).await;
    assert_eq!(org.status, 403, "{}", org.text());

    let mut text = String::new();
    wait_until("the refusals to be counted", DEADLINE, async || {
        text = server.metrics().await;
        metric(
            &text,
            "loghaul_auth_failures_total{reason=\"org_id_without_keys\"}",
        ) == 1.0
    })
    .await;
    let failures = |reason: &str| {
        metric(
            &text,
            &format!("loghaul_auth_failures_total{{reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(failures("foreign_host"), 1.0, "{text}");
    assert_eq!(failures("foreign_origin"), 1.0, "{text}");
    let queries = |endpoint: &str| {
        metric(
            &text,
            &format!("loghaul_loki_queries_total{{endpoint=\"{endpoint}\",outcome=\"forbidden\"}}"),
        )
    };
    assert_eq!(queries("query_range"), 1.0, "{text}");
    assert_eq!(queries("tail"), 1.0, "{text}");
    let pushes = |outcome: &str| {
        metric(
            &text,
            &format!(
                "loghaul_http_ingest_requests_total{{protocol=\"loki\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    assert_eq!(pushes("unsupported_media_type"), 1.0, "{text}");
    assert_eq!(pushes("forbidden"), 1.0, "{text}");
}
