//! OTLP logs end to end: a real server on ephemeral ports, the tonic client that
//! opentelemetry-proto generates, a real database, the same suite on SQLite and PostgreSQL.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::held_lock::HeldLock;
use crate::common::process::Process;
use crate::common::{
    config, http_get, metric, push, record, wait_until, Backend, StoredRow, TestDb, TestServer,
    DEADLINE,
};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use serde_json::json;
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;
use tonic::Code;

const LOGS_SERVICE: &str = "opentelemetry.proto.collector.logs.v1.LogsService";

async fn otlp_client(grpc: std::net::SocketAddr) -> LogsServiceClient<Channel> {
    LogsServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap()
}

fn any(value: Value) -> Option<AnyValue> {
    Some(AnyValue { value: Some(value) })
}

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: any(value),
        ..KeyValue::default()
    }
}

fn text(value: &str) -> Value {
    Value::StringValue(value.into())
}

fn array(values: Vec<Value>) -> Value {
    Value::ArrayValue(ArrayValue {
        values: values
            .into_iter()
            .map(|value| AnyValue { value: Some(value) })
            .collect(),
    })
}

fn kvlist(values: Vec<KeyValue>) -> Value {
    Value::KvlistValue(KeyValueList { values })
}

/// Nanoseconds since the epoch, `ago` in the past, on a whole microsecond (what the stores keep).
fn nanos_ago(ago: Duration) -> u64 {
    let micros = (chrono::Utc::now() - ago).timestamp_micros();
    micros as u64 * 1000
}

const TRACE_ID: [u8; 16] = [
    0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36,
];
const SPAN_ID: [u8; 8] = [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7];

/// A plain, valid record whose body is `body`.
fn log(body: &str) -> LogRecord {
    LogRecord {
        time_unix_nano: nanos_ago(Duration::from_secs(1)),
        severity_number: 9,
        severity_text: "INFO".into(),
        body: any(text(body)),
        trace_id: TRACE_ID.to_vec(),
        span_id: SPAN_ID.to_vec(),
        ..LogRecord::default()
    }
}

fn scope_logs(scope: Option<InstrumentationScope>, log_records: Vec<LogRecord>) -> ScopeLogs {
    ScopeLogs {
        scope,
        log_records,
        ..ScopeLogs::default()
    }
}

fn resource_logs(resource: Option<Resource>, scopes: Vec<ScopeLogs>) -> ResourceLogs {
    ResourceLogs {
        resource,
        scope_logs: scopes,
        ..ResourceLogs::default()
    }
}

fn resource(attributes: Vec<KeyValue>) -> Option<Resource> {
    Some(Resource {
        attributes,
        ..Resource::default()
    })
}

fn request(resource_logs: Vec<ResourceLogs>) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest { resource_logs }
}

/// One resource named `service`, one unnamed scope.
fn simple_request(service: &str, records: Vec<LogRecord>) -> ExportLogsServiceRequest {
    request(vec![resource_logs(
        resource(vec![kv("service.name", text(service))]),
        vec![scope_logs(None, records)],
    )])
}

fn by_message(rows: Vec<StoredRow>) -> HashMap<String, StoredRow> {
    rows.into_iter()
        .map(|row| (row.message.clone(), row))
        .collect()
}

async fn every_otlp_shape_is_stored_as_documented(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let mut client = otlp_client(server.grpc).await;
    let event_time = nanos_ago(Duration::from_secs(30));
    let observed_time = nanos_ago(Duration::from_secs(20));

    let mut nested = log("");
    nested.body = any(kvlist(vec![
        kv(
            "user",
            kvlist(vec![
                kv("id", Value::IntValue(7)),
                kv("roles", array(vec![text("admin"), Value::BoolValue(true)])),
            ]),
        ),
        kv("ok", Value::BoolValue(false)),
    ]));
    nested.time_unix_nano = event_time;
    nested.severity_number = 13;
    nested.severity_text = "WARNING".into();
    nested.attributes = vec![
        kv("retries", Value::IntValue(2)),
        kv("ratio", Value::DoubleValue(0.5)),
        kv("cached", Value::BoolValue(true)),
        kv("tags", array(vec![text("x"), Value::IntValue(1)])),
        kv("raw", Value::BytesValue(vec![0, 1, 2])),
        kv("empty", Value::StringValue(String::new())),
    ];

    let mut bytes_body = log("");
    bytes_body.body = any(Value::BytesValue(b"\x00\xffbinary".to_vec()));
    let mut array_body = log("");
    array_body.body = any(array(vec![
        Value::IntValue(1),
        text("two"),
        Value::DoubleValue(3.5),
    ]));
    let mut observed_only = log("observed-only");
    observed_only.time_unix_nano = 0;
    observed_only.observed_time_unix_nano = observed_time;
    let mut no_time = log("no-time");
    no_time.time_unix_nano = 0;
    no_time.observed_time_unix_nano = 0;
    let mut severity_zero = log("severity-zero");
    severity_zero.severity_number = 0;
    severity_zero.severity_text.clear();
    let mut no_ids = log("zero-ids");
    no_ids.trace_id = vec![0; 16];
    no_ids.span_id.clear();

    let full_scope = InstrumentationScope {
        name: "app.payments".into(),
        version: "1.2.0".into(),
        attributes: vec![kv("team", text("billing"))],
        ..InstrumentationScope::default()
    };
    let export = request(vec![
        resource_logs(
            resource(vec![
                kv("service.name", text("checkout")),
                kv("host.name", text("web-1")),
                kv("k8s.pod.restarts", Value::IntValue(3)),
                kv("cloud.zones", array(vec![text("a"), text("b")])),
            ]),
            vec![
                scope_logs(Some(full_scope), vec![nested, bytes_body, array_body]),
                scope_logs(None, vec![observed_only, no_time, severity_zero, no_ids]),
            ],
        ),
        resource_logs(None, vec![scope_logs(None, vec![log("no-resource")])]),
        resource_logs(
            resource(vec![kv("host.name", text("web-2"))]),
            vec![scope_logs(None, vec![log("unnamed-resource")])],
        ),
    ]);
    let answer = client.export(export).await.unwrap().into_inner();
    assert_eq!(answer.partial_success, None, "everything was stored");

    // The answer came after the commit, so every row is readable now.
    let rows = by_message(db.stored().await);
    assert_eq!(rows.len(), 9, "{:?}", rows.keys());
    let resource_and_scope = json!({
        "resource.host.name": "web-1",
        "resource.k8s.pod.restarts": "3",
        "resource.cloud.zones": r#"["a","b"]"#,
        "scope.name": "app.payments",
        "scope.version": "1.2.0",
        "scope.team": "billing",
    });

    let nested = &rows[r#"{"ok":false,"user":{"id":7,"roles":["admin",true]}}"#];
    assert_eq!(nested.tenant, "default");
    assert_eq!(nested.service, "checkout");
    assert_eq!(nested.severity, 13);
    assert_eq!(nested.ts_micros, (event_time / 1000) as i64);
    assert_eq!(
        nested.trace_id.as_deref(),
        Some("4bf92f3577b34da6a3ce929d0e0e4736")
    );
    assert_eq!(nested.span_id.as_deref(), Some("00f067aa0ba902b7"));
    let mut expected = resource_and_scope.clone();
    expected.as_object_mut().unwrap().extend(
        json!({
            "retries": "2",
            "ratio": "0.5",
            "cached": "true",
            "tags": r#"["x",1]"#,
            "raw": "AAEC",
            "empty": "",
            "severity_text": "WARNING",
        })
        .as_object()
        .unwrap()
        .clone(),
    );
    assert_eq!(nested.attributes, expected);

    let bytes_body = &rows["AP9iaW5hcnk="];
    assert_eq!(
        bytes_body.attributes, resource_and_scope,
        "INFO for 9 is redundant"
    );
    assert!(rows.contains_key(r#"[1,"two",3.5]"#), "{:?}", rows.keys());

    let unscoped = json!({
        "resource.host.name": "web-1",
        "resource.k8s.pod.restarts": "3",
        "resource.cloud.zones": r#"["a","b"]"#,
    });
    let observed_only = &rows["observed-only"];
    assert_eq!(observed_only.ts_micros, (observed_time / 1000) as i64);
    assert_eq!(observed_only.attributes, unscoped);
    let age = chrono::Utc::now().timestamp_micros() - rows["no-time"].ts_micros;
    assert!(
        (0..60_000_000).contains(&age),
        "no timestamp at all means now; age {age}µs"
    );
    let severity_zero = &rows["severity-zero"];
    assert_eq!(severity_zero.severity, 0);
    assert_eq!(severity_zero.attributes, unscoped);
    let zero_ids = &rows["zero-ids"];
    assert_eq!((&zero_ids.trace_id, &zero_ids.span_id), (&None, &None));

    let no_resource = &rows["no-resource"];
    assert_eq!(no_resource.service, "unknown_service");
    assert_eq!(no_resource.attributes, json!({}));
    let unnamed = &rows["unnamed-resource"];
    assert_eq!(unnamed.service, "unknown_service");
    assert_eq!(unnamed.attributes, json!({"resource.host.name": "web-2"}));
    server.stop().await;
}
on_both_backends!(mapping, every_otlp_shape_is_stored_as_documented);

async fn bad_records_are_a_partial_success_and_the_rest_is_stored(db: &TestDb) {
    let mut settings = config(db);
    settings.ingest.max_message_bytes = "1KiB".parse().unwrap();
    let server = TestServer::start(settings).await;
    let mut client = otlp_client(server.grpc).await;

    let mut short_trace = log("bad-trace");
    short_trace.trace_id = vec![1; 5];
    let mut long_span = log("bad-span");
    long_span.span_id = vec![1; 16];
    let mut severity = log("bad-severity");
    severity.severity_number = 30;
    let big = log(&"x".repeat(2000));
    let mut nul = log("bad-nul");
    nul.attributes = vec![kv("k", text("a\0b"))];
    let mut future = log("bad-future");
    future.time_unix_nano = nanos_ago(Duration::ZERO) + 3_600_000_000_000;
    // Indexes count records in request order across resources and scopes.
    let export = request(vec![
        resource_logs(
            resource(vec![kv("service.name", text("mixed"))]),
            vec![
                scope_logs(None, vec![log("ok-0"), short_trace, log("ok-2")]),
                scope_logs(None, vec![long_span, severity]),
            ],
        ),
        resource_logs(
            None,
            vec![scope_logs(
                None,
                vec![big, log("ok-6"), nul, future, log("ok-9")],
            )],
        ),
    ]);
    let answer = client.export(export).await.unwrap().into_inner();
    let partial = answer
        .partial_success
        .expect("rejections are a partial success");
    assert_eq!(partial.rejected_log_records, 6);
    let message = &partial.error_message;
    assert!(
        message.starts_with("6 of 10 log records rejected"),
        "{message}"
    );
    for expected in [
        "#1 invalid_trace_id: trace_id is 5 bytes",
        "#3 invalid_span_id: span_id is 16 bytes",
        "#4 invalid_severity",
        "#5 message_too_large: message is 2000 bytes",
        "#7 nul_character",
        "#8 timestamp_in_future",
    ] {
        assert!(message.contains(expected), "{expected:?} not in {message}");
    }
    let stored: Vec<String> = db
        .stored()
        .await
        .into_iter()
        .map(|row| row.message)
        .collect();
    assert_eq!(stored, ["ok-0", "ok-2", "ok-6", "ok-9"]);

    // A request of nothing but bad records stores nothing and still answers normally.
    let mut bad = log("bad");
    bad.severity_number = -1;
    let answer = client
        .export(simple_request("mixed", vec![bad.clone(), bad]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.partial_success.unwrap().rejected_log_records, 2);
    // An empty request is a full success.
    let answer = client.export(request(vec![])).await.unwrap().into_inner();
    assert_eq!(answer.partial_success, None);
    assert_eq!(db.count().await, 4);

    let (_, metrics) = http_get(server.http, "/metrics").await.unwrap();
    for series in [
        "loghaul_records_rejected_total{reason=\"invalid_trace_id\",tenant=\"default\"}",
        "loghaul_records_rejected_total{reason=\"invalid_span_id\",tenant=\"default\"}",
        "loghaul_otlp_exports_total{outcome=\"ok\"}",
        "loghaul_records_received_total",
    ] {
        assert!(metrics.contains(series), "/metrics lacks {series}");
    }
    server.stop().await;
}
on_both_backends!(
    partial_success,
    bad_records_are_a_partial_success_and_the_rest_is_stored
);

async fn compressed_requests_are_accepted(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    for (encoding, name) in [
        (CompressionEncoding::Gzip, "gzip"),
        (CompressionEncoding::Zstd, "zstd"),
    ] {
        let mut client = otlp_client(server.grpc)
            .await
            .send_compressed(encoding)
            .accept_compressed(encoding);
        let records = (0..200)
            .map(|n| log(&format!("{name}-{n:03} {}", "compressible ".repeat(20))))
            .collect();
        let answer = client
            .export(simple_request("compressed", records))
            .await
            .unwrap();
        // Answers are a few bytes and go back uncompressed, which every gRPC client accepts.
        assert_eq!(answer.metadata().get("grpc-encoding"), None);
        assert_eq!(answer.into_inner().partial_success, None);

        // LogIngest takes the same encodings.
        let mut ingest = server
            .client()
            .await
            .send_compressed(encoding)
            .accept_compressed(encoding);
        let pushed = push(&mut ingest, vec![vec![record(format!("ingest-{name}"))]])
            .await
            .unwrap();
        assert_eq!(pushed.accepted, 1);
    }
    assert_eq!(db.count().await, 402);
    let rows = db.stored().await;
    assert!(rows
        .iter()
        .any(|row| row.message.starts_with("zstd-199 compressible")));
    server.stop().await;
}
on_both_backends!(compression, compressed_requests_are_accepted);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_requests_get_resource_exhausted_before_and_after_decompression() {
    let db = TestDb::create(Backend::Sqlite, "otlp_oversize")
        .await
        .unwrap();
    let mut settings = config(&db);
    settings.ingest.max_request_bytes = "64KiB".parse().unwrap();
    let server = TestServer::start(settings).await;
    let big = || {
        let records = (0..100)
            .map(|n| log(&format!("{n}-{}", "y".repeat(1000))))
            .collect();
        simple_request("big", records)
    };
    let assert_explained = |status: tonic::Status| {
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(
            status.message().contains("--max-request-bytes") && status.message().contains("65536"),
            "{}",
            status.message()
        );
        assert!(
            tonic_types::StatusExt::get_error_details(&status)
                .retry_info()
                .is_none(),
            "the same request would fail again: no RetryInfo"
        );
    };

    let mut plain = otlp_client(server.grpc).await;
    assert_explained(plain.export(big()).await.unwrap_err());
    // Gzip shrinks it far below the limit on the wire; the limit applies once it is inflated.
    let mut gzip = otlp_client(server.grpc)
        .await
        .send_compressed(CompressionEncoding::Gzip);
    assert_explained(gzip.export(big()).await.unwrap_err());
    // LogIngest says the same for a zstd stream that inflates past the limit.
    let mut ingest = server
        .client()
        .await
        .send_compressed(CompressionEncoding::Zstd);
    let huge: Vec<_> = (0..100)
        .map(|n| record(format!("{n}-{}", "y".repeat(1000))))
        .collect();
    assert_explained(push(&mut ingest, vec![huge]).await.unwrap_err());

    // The server is unharmed.
    let answer = gzip
        .export(simple_request("small", vec![log("small")]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.partial_success, None);
    assert_eq!(db.count().await, 1);
    let (_, metrics) = http_get(server.http, "/metrics").await.unwrap();
    assert!(
        metrics.contains("loghaul_otlp_exports_total{outcome=\"request_too_large\"}"),
        "oversized exports are counted"
    );
    server.stop().await;
}

async fn the_export_answer_waits_for_the_commit(db: &TestDb) {
    let mut settings = config(db);
    settings.pipeline.store_retry_timeout = "60s".parse().unwrap();
    let server = TestServer::start(settings).await;
    let lock = HeldLock::take(db).await;
    let mut client = otlp_client(server.grpc).await;
    let records = (0..50).map(|n| log(&format!("held-{n}"))).collect();
    let mut exported =
        tokio::spawn(async move { client.export(simple_request("held", records)).await });
    let early = tokio::time::timeout(Duration::from_millis(1500), &mut exported).await;
    assert!(
        early.is_err(),
        "no answer may arrive while the commit is blocked"
    );
    assert_eq!(db.count().await, 0);

    lock.release().await;
    let answer = tokio::time::timeout(Duration::from_secs(20), exported)
        .await
        .expect("the answer arrives once the lock is released")
        .unwrap()
        .unwrap()
        .into_inner();
    assert_eq!(answer.partial_success, None);
    assert_eq!(db.count().await, 50);
    server.stop().await;
}
on_both_backends!(ack_waits_for_commit, the_export_answer_waits_for_the_commit);

async fn a_full_pipeline_answers_resource_exhausted_with_retry_info(db: &TestDb) {
    // A process of its own, whose queue depth shows when the pipeline is full.
    let mut server = Process::serve(
        &db.url,
        &[
            "--shards",
            "1",
            "--queue-capacity",
            "1",
            "--max-request-bytes",
            "16KiB",
            "--max-buffered-bytes",
            "16KiB",
            "--enqueue-timeout",
            "300ms",
            "--store-retry-timeout",
            "60s",
        ],
    );
    let lock = HeldLock::take(db).await;

    // Five resource attributes are sent once but stored on each of the 10 rows: about 6 KB
    // buffered from a 1 KB request. Two such exports hold most of the 16 KiB budget and the
    // one-chunk queue until their commit, which the lock blocks.
    let attributes: Vec<KeyValue> = (0..5)
        .map(|n| kv(&format!("attribute.{n:02}"), text(&"v".repeat(50))))
        .collect();
    let mut with_attributes = attributes.clone();
    with_attributes.push(kv("service.name", text("heavy")));
    let heavy = |name: &str| {
        request(vec![resource_logs(
            resource(with_attributes.clone()),
            vec![scope_logs(
                None,
                (0..10).map(|n| log(&format!("{name}-{n}"))).collect(),
            )],
        )])
    };
    let mut held = Vec::new();
    for name in ["heavy-a", "heavy-b"] {
        let mut client = otlp_client(server.grpc).await;
        let export = heavy(name);
        let mut waiting = tokio::spawn(async move { client.export(export).await });
        assert!(
            tokio::time::timeout(Duration::from_millis(500), &mut waiting)
                .await
                .is_err(),
            "{name} waits for its commit"
        );
        held.push(waiting);
    }
    // The first is in the batch being written, the second in the queue.
    wait_until("the queue to be full", DEADLINE, async || {
        metric(&server.metrics().await, "loghaul_queue_depth{shard=\"0\"}") == 1.0
    })
    .await;
    let mut second = otlp_client(server.grpc).await;
    let started = std::time::Instant::now();
    let status = second
        .export(simple_request("refused", vec![log("refused")]))
        .await
        .expect_err("no room in the pipeline");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("overloaded"),
        "{}",
        status.message()
    );
    let details = tonic_types::StatusExt::get_error_details(&status);
    let retry = details
        .retry_info()
        .expect("OTLP clients retry RESOURCE_EXHAUSTED only with RetryInfo");
    assert_eq!(retry.retry_delay, Some(Duration::from_secs(1)));
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "refused only after --enqueue-timeout"
    );

    lock.release().await;
    for waiting in held {
        let answer = tokio::time::timeout(Duration::from_secs(20), waiting)
            .await
            .expect("a held export completes once the lock is released")
            .unwrap()
            .unwrap()
            .into_inner();
        assert_eq!(answer.partial_success, None);
    }
    let stored = db.stored().await;
    assert_eq!(stored.len(), 20, "the refused record was not stored");
    assert!(stored.iter().all(|row| row.service == "heavy"));
    server.signal("TERM");
    assert!(server.wait(Duration::from_secs(30)).success());
}
on_both_backends!(
    backpressure,
    a_full_pipeline_answers_resource_exhausted_with_retry_info
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_know_the_logs_service() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    let db = TestDb::create(Backend::Sqlite, "otlp_reflection")
        .await
        .unwrap();
    let server = TestServer::start(config(&db)).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let status = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: LOGS_SERVICE.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);

    let ask = |request: MessageRequest| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let mut answers = ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::iter([
            ask(MessageRequest::ListServices(String::new())),
            ask(MessageRequest::FileContainingSymbol(LOGS_SERVICE.into())),
        ]))
        .await
        .unwrap()
        .into_inner();
    let listed = answers.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = listed.message_response else {
        panic!("unexpected reflection answer {listed:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(names.contains(&LOGS_SERVICE.to_owned()), "{names:?}");
    assert!(
        names.contains(&"loghaul.v1.LogIngest".to_owned()),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|name| name.contains("TraceService")),
        "only services that are served are listed: {names:?}"
    );
    let described = answers.message().await.unwrap().unwrap();
    let Some(MessageResponse::FileDescriptorResponse(files)) = described.message_response else {
        panic!("the service's descriptors resolve: {described:?}");
    };
    assert!(!files.file_descriptor_proto.is_empty());
    server.stop().await;
}
