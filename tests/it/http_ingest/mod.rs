//! HTTP ingest end to end: OTLP/HTTP and the Loki push API on a real server's HTTP listener, over
//! real sockets, into a real database, on SQLite and PostgreSQL.

use std::io::Write;

use crate::common::{config, http_request, TestDb, TestServer};
use loghaul::server::loki::proto::{EntryAdapter, LabelPairAdapter, PushRequest, StreamAdapter};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use serde_json::json;

fn text(value: &str) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(Value::StringValue(value.into())),
    })
}

/// Now, on a whole microsecond (what the stores keep), in nanoseconds.
fn now_nanos() -> u64 {
    chrono::Utc::now().timestamp_micros() as u64 * 1000
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

async fn otlp_http_protobuf_is_stored_after_commit(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let at = now_nanos();
    let request = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: text("checkout"),
                    ..KeyValue::default()
                }],
                ..Resource::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: vec![
                    LogRecord {
                        time_unix_nano: at,
                        severity_number: 17,
                        body: text("payment failed"),
                        trace_id: vec![0xab; 16],
                        span_id: vec![0xcd; 8],
                        ..LogRecord::default()
                    },
                    LogRecord {
                        severity_number: 99,
                        body: text("bad severity"),
                        ..LogRecord::default()
                    },
                ],
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    };
    let answer = http_request(
        server.http_ingest,
        "POST",
        "/v1/logs",
        &[
            ("content-type", "application/x-protobuf"),
            ("content-encoding", "gzip"),
        ],
        &gzip(&request.encode_to_vec()),
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(
        answer.header("content-type"),
        Some("application/x-protobuf")
    );
    let response = ExportLogsServiceResponse::decode(&answer.body[..]).unwrap();
    let partial = response.partial_success.unwrap();
    assert_eq!(partial.rejected_log_records, 1);
    assert!(partial.error_message.contains("#1 invalid_severity"));
    // The answer came after the commit: the row is there at once.
    let rows = db.stored().await;
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(
        (row.service.as_str(), row.message.as_str(), row.severity),
        ("checkout", "payment failed", 17)
    );
    assert_eq!(row.ts_micros, (at / 1000) as i64);
    assert_eq!(row.trace_id.as_deref(), Some("ab".repeat(16).as_str()));
    assert_eq!(row.span_id.as_deref(), Some("cd".repeat(8).as_str()));
    server.stop().await;
}

on_both_backends!(otlp_protobuf, otlp_http_protobuf_is_stored_after_commit);

async fn loki_snappy_protobuf_is_stored_after_commit(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let at = now_nanos();
    let timestamp = Some(prost_types::Timestamp {
        seconds: (at / 1_000_000_000) as i64,
        nanos: (at % 1_000_000_000) as i32,
    });
    let push = PushRequest {
        streams: vec![StreamAdapter {
            labels: r#"{job="varlogs", level="warn", filename="/var/log/app.log"}"#.into(),
            entries: vec![
                EntryAdapter {
                    timestamp,
                    line: "disk almost full".into(),
                    structured_metadata: vec![LabelPairAdapter {
                        name: "host".into(),
                        value: "node-1".into(),
                    }],
                    parsed: Vec::new(),
                },
                EntryAdapter {
                    timestamp: Some(prost_types::Timestamp {
                        seconds: (at / 1_000_000_000) as i64 + 3600,
                        nanos: 0,
                    }),
                    line: "from the future".into(),
                    ..EntryAdapter::default()
                },
            ],
            hash: 0,
        }],
        format: String::new(),
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&push.encode_to_vec())
        .unwrap();
    let answer = http_request(
        server.http_ingest,
        "POST",
        "/loki/api/v1/push",
        &[("content-type", "application/x-protobuf")],
        &body,
    )
    .await
    .unwrap();
    assert_eq!(
        answer.status,
        400,
        "one entry is refused: {}",
        answer.text()
    );
    assert!(
        answer.text().contains("#1 timestamp_in_future"),
        "{}",
        answer.text()
    );
    let rows = db.stored().await;
    assert_eq!(rows.len(), 1, "the valid entry is stored");
    let row = &rows[0];
    assert_eq!(
        (row.service.as_str(), row.message.as_str(), row.severity),
        ("varlogs", "disk almost full", 13)
    );
    assert_eq!(
        row.attributes,
        json!({"filename": "/var/log/app.log", "host": "node-1"})
    );
    assert_eq!(row.ts_micros, (at / 1000) as i64);

    let clean = PushRequest {
        streams: vec![StreamAdapter {
            labels: r#"{service_name="api"}"#.into(),
            entries: vec![EntryAdapter {
                timestamp,
                line: "ok".into(),
                ..EntryAdapter::default()
            }],
            hash: 0,
        }],
        format: String::new(),
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&clean.encode_to_vec())
        .unwrap();
    let answer = http_request(
        server.http_ingest,
        "POST",
        "/loki/api/v1/push",
        &[("content-type", "application/x-protobuf")],
        &body,
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 204, "{}", answer.text());
    assert_eq!(db.count().await, 2);
    server.stop().await;
}

on_both_backends!(loki_protobuf, loki_snappy_protobuf_is_stored_after_commit);

/// What a browser's exporter needs: a preflight answered for a listed origin only.
#[tokio::test]
async fn cors_is_off_unless_the_origin_is_listed() {
    let Some(db) = TestDb::create(crate::common::Backend::Sqlite, "http_cors").await else {
        return;
    };
    let mut config = config(&db);
    config.http_cors_origins = "https://app.example".parse().unwrap();
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
