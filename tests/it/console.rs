//! The console's JSON API end to end: a real server, records pushed over gRPC, read back over
//! HTTP with the same tenancy, filters, cursors and errors as `LogQuery`.

use std::collections::HashSet;
use std::time::Duration;

use crate::common;
use crate::common::http::{get, EventStream};
use crate::common::process::Process;
use crate::common::{config, push_as, record, Backend, TestDb, TestServer};
use loghaul::proto::v1::log_ingest_client::LogIngestClient;

pub const KEY_A: &str = "console-key-alpha";
pub const KEY_B: &str = "console-key-beta";

/// A server with two tenants' keys, alpha's `KEY_A` and beta's `KEY_B`.
pub async fn server_with_keys(db: &TestDb) -> TestServer {
    let mut settings = config(db);
    settings.auth.api_keys = Some(format!("{KEY_A}=alpha,{KEY_B}=beta").parse().unwrap());
    settings.query.tail_poll_interval = "100ms".parse().unwrap();
    TestServer::start(settings).await
}

/// Every record of the key's tenant through `/api/v1/logs`, following cursors.
async fn read_all(
    server: &TestServer,
    key: &str,
    filter: &str,
    page: usize,
) -> Vec<serde_json::Value> {
    let mut records = Vec::new();
    let mut cursor = String::new();
    loop {
        let mut path = format!("/api/v1/logs?page_size={page}&{filter}");
        if !cursor.is_empty() {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let answer = get(server.console, &path, key, &[]).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let body = answer.json();
        let batch = body["records"].as_array().unwrap().clone();
        assert!(batch.len() <= page);
        records.extend(batch);
        cursor = body["next_cursor"].as_str().unwrap().to_owned();
        if cursor.is_empty() {
            return records;
        }
    }
}

fn messages(records: &[serde_json::Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| r["message"].as_str().unwrap().to_owned())
        .collect()
}

async fn search_pages_through_cursors_within_the_tenant(db: &TestDb) {
    let server = server_with_keys(db).await;
    let mut ingest = server.client().await;
    let alpha: Vec<_> = (0..25)
        .map(|n| {
            let mut r = common::record_at(format!("alpha-{n:02}"), Duration::from_secs(100 - n));
            r.severity = if n % 5 == 0 { 17 } else { 9 };
            r.service = if n % 2 == 0 { "checkout" } else { "api" }.into();
            r
        })
        .collect();
    push_as(&mut ingest, KEY_A, vec![alpha]).await.unwrap();
    let beta: Vec<_> = (0..5).map(|n| record(format!("beta-{n}"))).collect();
    push_as(&mut ingest, KEY_B, vec![beta]).await.unwrap();

    // Pages of 10: 25 records, newest first, none twice, all alpha's.
    let records = read_all(&server, KEY_A, "", 10).await;
    let expected: Vec<String> = (0..25).rev().map(|n| format!("alpha-{n:02}")).collect();
    assert_eq!(messages(&records), expected);
    let cursors: HashSet<_> = records
        .iter()
        .map(|r| r["cursor"].as_str().unwrap())
        .collect();
    assert_eq!(cursors.len(), 25);
    let first = &records[0];
    assert_eq!(first["attributes"]["region"], "eu-west-1");
    assert_eq!(first["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(first["span_id"], "00f067aa0ba902b7");
    assert!(first["received_at"].as_str().unwrap().ends_with('Z'));

    // The other tenant sees only its own, whatever it asks for.
    let theirs = read_all(&server, KEY_B, "", 100).await;
    assert_eq!(messages(&theirs).len(), 5);
    assert!(messages(&theirs).iter().all(|m| m.starts_with("beta-")));
    assert!(read_all(&server, KEY_B, "contains=alpha", 100)
        .await
        .is_empty());

    // The filters of LogQuery, by name.
    let errors = read_all(&server, KEY_A, "min_severity=error&service=checkout", 100).await;
    assert_eq!(messages(&errors), ["alpha-20", "alpha-10", "alpha-00"]);
    let found = read_all(
        &server,
        KEY_A,
        "contains=alpha-1&attr=region%3Deu-west-1",
        100,
    )
    .await;
    assert_eq!(found.len(), 10);
    assert!(read_all(&server, KEY_A, "attr=region%3Dus", 100)
        .await
        .is_empty());
    let recent = read_all(&server, KEY_A, "since=88s", 100).await;
    assert!(recent.len() < 25 && !recent.is_empty(), "{}", recent.len());
    server.stop().await;
}
on_both_backends!(search, search_pages_through_cursors_within_the_tenant);

/// The console takes the key wherever the HTTP ingest port does (`x-api-key`, `Authorization:
/// Bearer`, Basic with the key as password), by the same code: each header gets the same verdict
/// on both, and the same tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_takes_the_key_in_every_header_the_ingest_port_takes() {
    use base64::Engine;
    let db = TestDb::create(Backend::Sqlite, "console_key_headers")
        .await
        .unwrap();
    let server = server_with_keys(&db).await;
    let basic = |user: &str, password: &str| {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {encoded}")
    };
    let cases = [
        (("x-api-key", KEY_A.to_owned()), Some("alpha")),
        (("authorization", format!("Bearer {KEY_A}")), Some("alpha")),
        (("authorization", format!("bearer {KEY_B}")), Some("beta")),
        (("authorization", basic("grafana", KEY_B)), Some("beta")),
        (("authorization", "Bearer wrong-key".to_owned()), None),
        (("authorization", basic(KEY_A, "")), None),
        (("authorization", format!("Digest {KEY_A}")), None),
    ];
    for ((name, value), tenant) in cases {
        let headers = [(name, value.as_str())];
        let console = get(server.console, "/api/v1/session", "", &headers).await;
        let ingest = common::http_request(
            server.http_ingest,
            "GET",
            "/loki/api/v1/labels",
            &headers,
            b"",
        )
        .await
        .unwrap();
        match tenant {
            Some(tenant) => {
                assert_eq!(console.status, 200, "{name}: {value}: {}", console.body);
                assert_eq!(console.json()["tenant"], tenant, "{name}: {value}");
                assert_eq!(ingest.status, 200, "{name}: {value}: {}", ingest.text());
            }
            None => {
                assert_eq!(console.status, 401, "{name}: {value}: {}", console.body);
                assert_eq!(ingest.status, 401, "{name}: {value}: {}", ingest.text());
            }
        }
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_400_and_bad_keys_401_with_a_json_reason() {
    let db = TestDb::create(Backend::Sqlite, "console_errors")
        .await
        .unwrap();
    let server = server_with_keys(&db).await;
    let refused = [
        ("/api/v1/logs", "", 401, "missing API key"),
        ("/api/v1/logs", "wrong-key", 401, "unknown API key"),
        ("/api/v1/tail", "wrong-key", 401, "unknown API key"),
        ("/api/v1/health", "", 401, "missing API key"),
        ("/api/v1/session", "wrong-key", 401, "unknown API key"),
        (
            "/api/v1/logs?from=2026-11-29T11:00:00Z&to=2026-11-29T10:00:00Z",
            KEY_A,
            400,
            "bad time range",
        ),
        (
            "/api/v1/logs?min_severity=99",
            KEY_A,
            400,
            "outside OpenTelemetry's 0..=24",
        ),
        (
            "/api/v1/logs?min_severity=loud",
            KEY_A,
            400,
            "min_severity \"loud\"",
        ),
        ("/api/v1/logs?page_size=5000", KEY_A, 400, "too large"),
        (
            "/api/v1/logs?page_size=-1",
            KEY_A,
            400,
            "not a whole number",
        ),
        ("/api/v1/logs?cursor=garbage", KEY_A, 400, "invalid cursor"),
        ("/api/v1/logs?from=yesterday", KEY_A, 400, "write it like"),
        ("/api/v1/logs?attr=region", KEY_A, 400, "key=value"),
        ("/api/v1/logs?colour=red", KEY_A, 400, "unknown parameter"),
        ("/api/v1/logs?contains=%00", KEY_A, 400, "NUL"),
        (
            "/api/v1/logs?since=1h&from=2026-11-29T10:00:00Z",
            KEY_A,
            400,
            "not both",
        ),
        (
            "/api/v1/tail?min_severity=99",
            KEY_A,
            400,
            "outside OpenTelemetry's 0..=24",
        ),
        ("/api/v1/tail?cursor=garbage", KEY_A, 400, "invalid cursor"),
        ("/api/v1/tail?page_size=10", KEY_A, 400, "unknown parameter"),
        ("/api/v1/nothing", KEY_A, 404, "no such API endpoint"),
    ];
    for (path, key, status, reason) in refused {
        let answer = get(server.console, path, key, &[]).await;
        assert_eq!(answer.status, status, "{path}: {}", answer.body);
        assert_eq!(
            answer.header("content-type"),
            Some("application/json"),
            "{path}"
        );
        let error = answer.json()["error"].as_str().unwrap().to_owned();
        assert!(error.contains(reason), "{path}: {error}");
        assert!(
            !error.contains("wrong-key"),
            "keys are never echoed: {error}"
        );
    }
    let metrics = server.metrics().await;
    for counted in [
        "loghaul_console_requests_total{endpoint=\"logs\",status=\"400\"}",
        "loghaul_console_requests_total{endpoint=\"tail\",status=\"401\"}",
        "loghaul_console_requests_total{endpoint=\"other_api\",status=\"404\"}",
    ] {
        assert!(metrics.contains(counted), "{counted} in {metrics}");
    }
    assert!(
        metrics.contains("loghaul_auth_failures_total{reason=\"unknown_key\"}"),
        "console auth failures are counted like gRPC ones"
    );
    assert!(metrics.contains("loghaul_queries_total{outcome=\"invalid_argument\"}"));
    let session = get(server.console, "/api/v1/session", KEY_B, &[]).await;
    assert_eq!(session.status, 200);
    assert_eq!(session.json()["tenant"], "beta");
    assert_eq!(session.json()["open"], false);
    server.stop().await;
}

async fn the_tail_streams_records_pushed_over_grpc(db: &TestDb) {
    let server = server_with_keys(db).await;
    let mut events =
        EventStream::open(server.console, "/api/v1/tail?service=checkout", KEY_A).await;
    events
        .wait_for("event: open", Duration::from_secs(30))
        .await;
    assert!(events.text.contains("text/event-stream"), "{}", events.text);
    let mut ingest = server.client().await;
    let mut other_service = record("tail-other-service");
    other_service.service = "api".into();
    push_as(&mut ingest, KEY_B, vec![vec![record("tail-beta")]])
        .await
        .unwrap();
    push_as(
        &mut ingest,
        KEY_A,
        vec![vec![
            record("tail-alpha-1"),
            other_service,
            record("tail-alpha-2"),
        ]],
    )
    .await
    .unwrap();
    events
        .wait_for("tail-alpha-2", Duration::from_secs(30))
        .await;
    // Anything else would have come in the same poll or the next few.
    events.read_for(Duration::from_millis(600)).await;
    let delivered: Vec<serde_json::Value> = events
        .events("records")
        .into_iter()
        .flat_map(|batch| batch.as_array().unwrap().clone())
        .collect();
    assert_eq!(messages(&delivered), ["tail-alpha-1", "tail-alpha-2"]);
    // The event id is the last record's cursor: a reconnect with Last-Event-ID resumes after it.
    let last_cursor = delivered[1]["cursor"].as_str().unwrap();
    assert!(
        events.text.contains(&format!("id: {last_cursor}")),
        "{}",
        events.text
    );
    drop(events);

    let mut resumed = EventStream::open(
        server.console,
        &format!(
            "/api/v1/tail?cursor={}",
            delivered[0]["cursor"].as_str().unwrap()
        ),
        KEY_A,
    )
    .await;
    resumed
        .wait_for("tail-alpha-2", Duration::from_secs(30))
        .await;
    let again: Vec<serde_json::Value> = resumed
        .events("records")
        .into_iter()
        .flat_map(|batch| batch.as_array().unwrap().clone())
        .collect();
    assert_eq!(messages(&again), ["tail-other-service", "tail-alpha-2"]);

    // A tail open at shutdown is told why it ends, and does not hold the server up.
    let mut server = server;
    server.request_shutdown();
    resumed
        .wait_for("event: error", Duration::from_secs(30))
        .await;
    let ended = resumed.events("error");
    assert!(
        ended[0]["error"]
            .as_str()
            .unwrap()
            .contains("shutting down"),
        "{ended:?}"
    );
    server.stop().await;
}
on_both_backends!(tail, the_tail_streams_records_pushed_over_grpc);

async fn health_shows_the_pipeline_readiness_and_backend(db: &TestDb) {
    // The health snapshot is read from the server's own metric handles: the numbers below are
    // exact.
    let server = Process::serve(
        &db.url,
        &["--api-keys", "health-key-p=pusher,health-key-v=viewer"],
    );
    let mut ingest = LogIngestClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    let records: Vec<_> = (0..50).map(|n| record(format!("health-{n}"))).collect();
    push_as(&mut ingest, "health-key-p", vec![records])
        .await
        .unwrap();
    let answer = get(server.console, "/api/v1/health", "health-key-p", &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let own = answer.json();
    assert_eq!(own["counters"]["committed"], 50.0, "{own}");
    assert_eq!(own["counters"]["received"], 50.0, "{own}");

    // Another tenant sees the shared pipeline, not the first one's traffic.
    let answer = get(server.console, "/api/v1/health", "health-key-v", &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let health = answer.json();
    assert_eq!(health["counters"]["committed"], 0.0, "{health}");
    assert_eq!(health["counters"]["received"], 0.0, "{health}");
    assert!(
        health["counters"].get("auth_failures").is_none(),
        "{health}"
    );
    assert_eq!(health["ready"], true);
    assert_eq!(health["store_up"], true);
    let backend = match db.backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    assert_eq!(health["backend"], backend);
    assert!(
        health["histograms"]["batch_rows"]["count"]
            .as_f64()
            .unwrap()
            >= 1.0
    );
    assert!(!health["histograms"]["flush_seconds"]["buckets"]
        .as_array()
        .unwrap()
        .is_empty());
    let shards = health["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 2, "{health}");
    assert!(shards
        .iter()
        .all(|s| s["capacity"].as_f64().unwrap() >= 64.0));
    assert!(health["gauges"]["buffered_bytes_limit"].as_f64().unwrap() > 0.0);
    if db.backend == Backend::Sqlite {
        assert_eq!(
            health["sealing"]["enabled"], false,
            "SQLite keeps rows as written"
        );
    }
}
on_both_backends!(health, health_shows_the_pipeline_readiness_and_backend);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_embedded_and_an_open_service_answers_only_local_names() {
    let db = TestDb::create(Backend::Sqlite, "console_page")
        .await
        .unwrap();
    let server = TestServer::start(config(&db)).await;
    let page = get(server.console, "/", "", &[]).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<title>loghaul console</title>"));
    assert!(page
        .header("content-security-policy")
        .unwrap()
        .contains("script-src 'self'"));
    for (path, kind) in [
        ("/app.js", "text/javascript"),
        ("/app.css", "text/css"),
        ("/favicon.svg", "image/svg+xml"),
    ] {
        let asset = get(server.console, path, "", &[]).await;
        assert_eq!(asset.status, 200, "{path}");
        assert!(
            asset.header("content-type").unwrap().starts_with(kind),
            "{path}"
        );
        assert!(!asset.body.is_empty());
    }
    assert_eq!(get(server.console, "/nope", "", &[]).await.status, 404);

    // No keys: open as tenant default, like gRPC, but only under a loopback name or an IP.
    let local = get(
        server.console,
        "/api/v1/session",
        "",
        &[("Host", "localhost:8080")],
    )
    .await;
    assert_eq!(local.status, 200);
    assert_eq!(local.json()["tenant"], "default");
    assert_eq!(local.json()["open"], true);
    let rebound = get(
        server.console,
        "/api/v1/logs",
        "",
        &[("Host", "logs.attacker.example")],
    )
    .await;
    assert_eq!(rebound.status, 403);
    assert!(rebound.json()["error"]
        .as_str()
        .unwrap()
        .contains("configure API keys"));
    server.stop().await;
}

#[test]
fn a_console_address_in_use_is_a_clear_error_at_start_up() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("logs.db").display());
    let output = common::process::serve_command_at(common::process::EPHEMERAL, &addr)
        .args(["--database-url", &url])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot listen for the console on {addr}")),
        "{stderr}"
    );
    assert!(stderr.contains("--console-listen off"), "{stderr}");
}
