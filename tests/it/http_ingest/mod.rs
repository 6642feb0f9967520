//! HTTP ingest end to end: OTLP/HTTP and the Loki push API on a real server's HTTP listener, over
//! real sockets, into a real database, on SQLite and PostgreSQL where storage matters.
//!
//! - [`otlp`]: OTLP/HTTP bodies (protobuf, the specification's JSON), stored field by field;
//! - [`loki`]: Loki pushes, their labels and tenants;
//! - [`auth`]: keys in every header an exporter sets, and what a missing or wrong one gets;
//! - [`browser`]: what a web page can make a keyless service do (nothing);
//! - [`hostile`]: bodies that are broken, oversized or bombs, each a clear 4xx, and memory;
//! - [`overload`]: the retryable answers (429, 503) and their `Retry-After`;
//! - [`refused_entries`]: JSON bodies of millions of malformed entries, counted within memory;
//! - here: the metrics of a process of the test's own, and answers across a SIGTERM.

mod auth;
mod browser;
mod hostile;
mod loki;
mod otlp;
mod overload;
mod refused_entries;

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use crate::common::held_lock::HeldLock;
use crate::common::process::Process;
use crate::common::{
    config, http_request, metric, wait_until, Backend, HttpAnswer, TestDb, TestServer, DEADLINE,
};
use loghaul::ingest::loki::proto::{EntryAdapter, PushRequest, StreamAdapter};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// OTLP/HTTP's path for logs.
pub const OTLP: &str = "/v1/logs";
/// The Loki push API's path.
pub const LOKI: &str = "/loki/api/v1/push";
/// `Content-Type` of protobuf bodies.
pub const PROTOBUF: (&str, &str) = ("content-type", "application/x-protobuf");
/// `Content-Type` of JSON bodies.
pub const JSON: (&str, &str) = ("content-type", "application/json");

/// A string `AnyValue`.
pub fn text(value: &str) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(Value::StringValue(value.into())),
    })
}

/// Now, on a whole microsecond (what the stores keep), in nanoseconds.
pub fn now_nanos() -> u64 {
    chrono::Utc::now().timestamp_micros() as u64 * 1000
}

/// `nanos` as a protobuf timestamp.
pub fn timestamp(nanos: u64) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp {
        seconds: (nanos / 1_000_000_000) as i64,
        nanos: (nanos % 1_000_000_000) as i32,
    })
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

/// Snappy's block format, as Loki clients compress their protobuf bodies.
pub fn snappy(data: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new().compress_vec(data).unwrap()
}

/// One request on a fresh connection; the test fails when the server does not answer at all.
pub async fn post(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpAnswer {
    tokio::time::timeout(DEADLINE, http_request(addr, "POST", path, headers, body))
        .await
        .unwrap_or_else(|_| panic!("POST {path} answered within {DEADLINE:?}"))
        .unwrap_or_else(|err| panic!("POST {path}: {err}"))
}

/// An OTLP export of one record per message, now, from `service`.
pub fn otlp_request(service: &str, messages: &[&str]) -> ExportLogsServiceRequest {
    let at = now_nanos();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: text(service),
                    ..KeyValue::default()
                }],
                ..Resource::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: messages
                    .iter()
                    .map(|message| LogRecord {
                        time_unix_nano: at,
                        severity_number: 9,
                        body: text(message),
                        ..LogRecord::default()
                    })
                    .collect(),
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
}

/// A Loki push of streams (labels, lines), every entry now.
pub fn loki_push(streams: &[(&str, &[&str])]) -> PushRequest {
    let at = now_nanos();
    PushRequest {
        streams: streams
            .iter()
            .map(|(labels, lines)| StreamAdapter {
                labels: (*labels).into(),
                entries: lines
                    .iter()
                    .map(|line| EntryAdapter {
                        timestamp: timestamp(at),
                        line: (*line).into(),
                        ..EntryAdapter::default()
                    })
                    .collect(),
                hash: 0,
            })
            .collect(),
        format: String::new(),
    }
}

/// Sends an OTLP/protobuf export of `messages`; returns the answer.
pub async fn send_otlp(
    addr: SocketAddr,
    headers: &[(&str, &str)],
    messages: &[&str],
) -> HttpAnswer {
    let mut all = vec![PROTOBUF];
    all.extend_from_slice(headers);
    let body = otlp_request("checkout", messages).encode_to_vec();
    post(addr, OTLP, &all, &body).await
}

/// Sends a snappy-compressed Loki push of one stream of `lines`; returns the answer.
pub async fn send_loki(
    addr: SocketAddr,
    headers: &[(&str, &str)],
    labels: &str,
    lines: &[&str],
) -> HttpAnswer {
    let mut all = vec![PROTOBUF];
    all.extend_from_slice(headers);
    let body = snappy(&loki_push(&[(labels, lines)]).encode_to_vec());
    post(addr, LOKI, &all, &body).await
}

/// The `google.rpc.Status` of an OTLP/HTTP answer in JSON.
pub fn status_json(answer: &HttpAnswer) -> serde_json::Value {
    assert_eq!(
        answer.header("content-type"),
        Some("application/json"),
        "{answer:?}"
    );
    serde_json::from_slice(&answer.body).unwrap_or_else(|err| panic!("{err}: {}", answer.text()))
}

/// The `google.rpc.Status` of an OTLP/HTTP answer in protobuf.
pub fn status_protobuf(answer: &HttpAnswer) -> tonic_types::pb::Status {
    assert_eq!(
        answer.header("content-type"),
        Some("application/x-protobuf"),
        "{answer:?}"
    );
    tonic_types::pb::Status::decode(&answer.body[..]).unwrap()
}

/// What a hostile request must leave behind: a server that still stores a valid OTLP export and a
/// valid Loki push.
pub async fn assert_still_serving(addr: SocketAddr, after: &str) {
    let otlp = send_otlp(addr, &[], &[&format!("after {after} (otlp)")]).await;
    assert_eq!(otlp.status, 200, "after {after}: {}", otlp.text());
    let loki = send_loki(
        addr,
        &[],
        r#"{job="follow-up"}"#,
        &[&format!("after {after} (loki)")],
    )
    .await;
    assert_eq!(loki.status, 204, "after {after}: {}", loki.text());
}

/// What a browser's exporter needs: a preflight answered for a listed origin only.
#[tokio::test]
async fn cors_is_off_unless_the_origin_is_listed() {
    let Some(db) = TestDb::create(Backend::Sqlite, "http_cors").await else {
        return;
    };
    let mut config = config(&db);
    config.listeners.http_cors_origins = "https://app.example".parse().unwrap();
    let server = TestServer::start(config).await;
    let preflight = |origin: &'static str| {
        let addr = server.http_ingest;
        async move {
            http_request(
                addr,
                "OPTIONS",
                "/v1/logs",
                &[
                    ("origin", origin),
                    ("access-control-request-method", "POST"),
                    ("access-control-request-headers", "content-type,x-api-key"),
                ],
                b"",
            )
            .await
            .unwrap()
        }
    };
    let listed = preflight("https://app.example").await;
    assert_eq!(listed.status, 204);
    assert_eq!(
        listed.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let other = preflight("https://evil.example").await;
    assert_eq!(other.status, 403);
    assert_eq!(other.header("access-control-allow-origin"), None);
    server.stop().await;
}

/// The listener's own counters, read from a process of this test's own so the numbers are exact:
/// one answer of each kind is counted once under its outcome, and every record received (stored
/// or rejected) once under its protocol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_answer_is_counted_once_by_protocol_and_outcome() {
    let db = TestDb::create(Backend::Sqlite, "http_metrics")
        .await
        .unwrap();
    let server = Process::serve(&db.url, &[]);
    let addr = server.http_ingest;

    let ok = send_otlp(addr, &[], &["m-ok-1", "m-ok-2"]).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    let mut partial = otlp_request(
        "checkout",
        &["m-partial-ok", "m-partial-bad", "m-partial-ok-2"],
    );
    partial.resource_logs[0].scope_logs[0].log_records[1].severity_number = 99;
    let answer = post(addr, OTLP, &[PROTOBUF], &partial.encode_to_vec()).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let unsupported = post(addr, OTLP, &[("content-type", "text/plain")], b"hello").await;
    assert_eq!(unsupported.status, 415, "{}", unsupported.text());
    let loki = send_loki(
        addr,
        &[],
        r#"{job="api"}"#,
        &["m-loki-1", "m-loki-2", "m-loki-3"],
    )
    .await;
    assert_eq!(loki.status, 204, "{}", loki.text());

    let text = server.metrics().await;
    let requests = |protocol: &str, outcome: &str| {
        metric(
            &text,
            &format!(
                "loghaul_http_ingest_requests_total{{protocol=\"{protocol}\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    assert_eq!(requests("otlp_http", "ok"), 1.0, "{text}");
    assert_eq!(requests("otlp_http", "partial"), 1.0, "{text}");
    assert_eq!(
        requests("otlp_http", "unsupported_media_type"),
        1.0,
        "{text}"
    );
    assert_eq!(requests("loki", "ok"), 1.0, "{text}");
    assert_eq!(requests("loki", "partial"), 0.0, "{text}");
    let records = |protocol: &str| {
        metric(
            &text,
            &format!("loghaul_ingest_records_total{{protocol=\"{protocol}\"}}"),
        )
    };
    // 2 + 3 records, the invalid one included; the refused body had none.
    assert_eq!(records("otlp_http"), 5.0, "{text}");
    assert_eq!(records("loki"), 3.0, "{text}");
    assert_eq!(records("otlp_grpc"), 0.0, "{text}");
    assert_eq!(records("push"), 0.0, "{text}");
    assert_eq!(db.count().await, 2 + 2 + 3);
}

/// Writes the head of a POST with `Content-Length: length`, and `first` of its body, on a fresh
/// connection; the caller sends the rest.
async fn start_request(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    length: usize,
    first: &[u8],
) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {length}\r\n"
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(first).await.unwrap();
    stream
}

/// The status line's code of what the server wrote on `stream`, read to the end.
async fn read_status(mut stream: tokio::net::TcpStream) -> (u16, String) {
    let mut response = Vec::new();
    tokio::time::timeout(DEADLINE, stream.read_to_end(&mut response))
        .await
        .expect("an answer")
        .unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, response)
}

/// Chunks queued by the process so far (each records its wait for room once it is in).
async fn chunks_enqueued(server: &Process) -> f64 {
    metric(
        &server.metrics().await,
        "loghaul_backpressure_wait_seconds_count",
    )
}

/// SIGTERM while an export waits for its commit (the table is locked), on a process of the
/// test's own: the answer is a 200 once the records are committed, which the drain waits for, and
/// the process exits cleanly.
async fn an_export_waiting_for_its_commit_at_sigterm_is_answered_after_it(db: &TestDb) {
    let mut server = Process::serve(
        &db.url,
        &["--shutdown-grace", "10s", "--store-retry-timeout", "60s"],
    );
    let addr = server.http_ingest;
    let lock = HeldLock::take(db).await;
    // The answer, or why there was none, and when: the test thread reports it with the logs.
    let body = otlp_request("checkout", &["drain-1", "drain-2"]).encode_to_vec();
    let exported = tokio::spawn(async move {
        let sent = std::time::Instant::now();
        let answer = tokio::time::timeout(
            DEADLINE,
            http_request(addr, "POST", OTLP, &[PROTOBUF], &body),
        )
        .await;
        (answer, sent.elapsed())
    });
    wait_until("the export to be queued", DEADLINE, async || {
        chunks_enqueued(&server).await == 1.0
    })
    .await;
    server.signal("TERM");
    server.wait_for_log("shutdown requested: draining open streams");
    assert!(!exported.is_finished(), "no answer before the commit");
    lock.release().await;

    let exported = match exported.await.unwrap() {
        (Ok(Ok(answer)), _) => answer,
        (failed, after) => panic!(
            "no answer to the export after {after:?}: {failed:?}\n{:#?}",
            server.logs()
        ),
    };
    assert_eq!(exported.status, 200, "{}", exported.text());
    let status = server.wait(Duration::from_secs(30));
    assert!(status.success(), "{status:?}: {:#?}", server.logs());
    let messages: Vec<String> = db
        .stored()
        .await
        .into_iter()
        .map(|row| row.message)
        .collect();
    assert_eq!(messages, ["drain-1", "drain-2"]);
}
on_both_backends!(
    sigterm_commit_in_flight,
    an_export_waiting_for_its_commit_at_sigterm_is_answered_after_it
);

/// SIGTERM while a Loki push is still sending its body: the push is let finish, answered 204
/// once committed, and its rows are stored, as a gRPC stream open at SIGTERM is let finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_half_sent_at_sigterm_is_finished_stored_and_answered() {
    let db = TestDb::create(Backend::Sqlite, "http_sigterm_body")
        .await
        .unwrap();
    let mut server = Process::serve(&db.url, &["--shutdown-grace", "10s"]);
    // Lines that do not compress, so that the body's claim stands out in the budget.
    let lines: Vec<String> = (0..10)
        .map(|n| format!("line {n} {}", fastrand_text(10_000)))
        .collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let body = snappy(&loki_push(&[(r#"{job="drain"}"#, &lines)]).encode_to_vec());
    let (first, rest) = body.split_at(body.len() / 2);
    let mut pushing = start_request(server.http_ingest, LOKI, &[PROTOBUF], body.len(), first).await;
    // The handler has claimed budget for the announced body: it is reading it.
    wait_until("the push to be reading its body", DEADLINE, async || {
        metric(&server.metrics().await, "loghaul_buffer_claimed_bytes") >= body.len() as f64
    })
    .await;
    server.signal("TERM");
    server.wait_for_log("shutdown requested: draining open streams");
    // The gRPC port is closed: its side of the drain is done, and the pipeline would be flushed
    // and closed now but for the request in flight.
    let grpc = server.grpc;
    wait_until("the gRPC port to close", DEADLINE, async || {
        tokio::net::TcpStream::connect(grpc).await.is_err()
    })
    .await;
    pushing.write_all(rest).await.unwrap();

    let (status, response) = read_status(pushing).await;
    assert_eq!(status, 204, "{response}");
    let exit = server.wait(Duration::from_secs(30));
    assert!(exit.success(), "{exit:?}: {:#?}", server.logs());
    assert_eq!(db.count().await, 10);
}

/// `len` random alphanumeric characters.
fn fastrand_text(len: usize) -> String {
    (0..len).map(|_| fastrand::alphanumeric()).collect()
}
