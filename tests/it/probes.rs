//! What operators and tools see: /metrics, /healthz, /readyz, gRPC health and reflection.

use std::time::{Duration, Instant};

use crate::common;
use crate::common::held_lock::HeldLock;
use crate::common::http::{get, kept_alive, read_until_closed, EventStream};
use crate::common::process::Process;
use crate::common::{
    config, http_get, push, record, wait_until, Backend, TestDb, TestServer, DEADLINE,
};
use loghaul::proto::v1::log_ingest_client::LogIngestClient;
use tokio::io::AsyncWriteExt;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

async fn channel(server: &TestServer) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// The binary's own /metrics, end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_queues_batches_and_records() {
    let db = TestDb::create(Backend::Sqlite, "metrics").await.unwrap();
    let server = Process::serve(&db.url, &["--shards", "3"]);
    let mut client = LogIngestClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    let mut bad = record("bad");
    bad.severity = 99;
    push(&mut client, vec![vec![record("a"), record("b"), bad]])
        .await
        .unwrap();

    let (status, body) = http_get(server.http, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    for series in [
        "loghaul_queue_depth{shard=\"0\"}",
        "loghaul_queue_depth{shard=\"2\"}",
        "loghaul_queue_capacity{shard=\"2\"} 64",
        "loghaul_records_received_total",
        "loghaul_records_committed_total",
        "loghaul_records_rejected_total{reason=\"invalid_severity\",tenant=\"default\"}",
        "loghaul_batch_rows_bucket",
        "loghaul_flush_duration_seconds_bucket",
        "loghaul_backpressure_wait_seconds_bucket",
        "loghaul_buffered_bytes_limit",
        "loghaul_active_streams",
        "loghaul_ready 1",
    ] {
        assert!(body.contains(series), "/metrics lacks {series}:\n{body}");
    }
    assert_eq!(http_get(server.http, "/healthz").await.unwrap().0, 200);
    let (status, body) = http_get(server.http, "/readyz").await.unwrap();
    assert_eq!((status, body.trim()), (200, "ready: sqlite store answers"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_and_reflection_answer() {
    let db = TestDb::create(Backend::Sqlite, "health").await.unwrap();
    let server = TestServer::start(config(&db)).await;
    let mut health = HealthClient::new(channel(&server).await);
    let status = health
        .check(HealthCheckRequest {
            service: "loghaul.v1.LogIngest".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);

    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    let mut reflection = ServerReflectionClient::new(channel(&server).await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("unexpected reflection answer {answer:?}");
    };
    let names: Vec<String> = list
        .service
        .into_iter()
        .map(|service| service.name)
        .collect();
    assert!(
        names.contains(&"loghaul.v1.LogIngest".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"grpc.health.v1.Health".to_string()),
        "{names:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_turns_off_while_draining() {
    let db = TestDb::create(Backend::Sqlite, "draining").await.unwrap();
    let mut server = TestServer::start(config(&db)).await;
    // An open stream keeps the server draining rather than stopped.
    let mut client = server.client().await;
    let (chunks, outgoing) = tokio::sync::mpsc::channel(1);
    let open = tokio::spawn(async move {
        client
            .push(tokio_stream::wrappers::ReceiverStream::new(outgoing))
            .await
    });
    chunks
        .send(loghaul::proto::v1::PushRequest {
            records: vec![record("open")],
            ..Default::default()
        })
        .await
        .unwrap();
    // Its record is committed: the stream is open on the server.
    wait_until("the record to be stored", DEADLINE, async || {
        db.count().await == 1
    })
    .await;
    server.request_shutdown();
    // Readiness goes off as soon as shutdown starts (2 s: the original bound of this test).
    wait_until("/readyz to say draining", Duration::from_secs(2), async || {
        matches!(http_get(server.http, "/readyz").await, Ok((503, body)) if body.contains("draining"))
    })
    .await;
    drop(chunks);
    assert_eq!(open.await.unwrap().unwrap().into_inner().accepted, 1);
    server.stop().await;
}

/// A client that connects and never finishes its request line is closed after the header-read
/// timeout, on the metrics port and on the console; complete requests are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_listeners_close_connections_that_never_finish_their_headers() {
    let db = TestDb::create(Backend::Sqlite, "header_timeout")
        .await
        .unwrap();
    let mut settings = config(&db);
    settings.listeners.http_header_read_timeout = "300ms".parse().unwrap();
    let server = TestServer::start(settings).await;
    for (listener, addr) in [("metrics", server.http), ("console", server.console)] {
        let mut stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
        stalled
            .write_all(b"GET / HTTP/1.1\r\nHost: lo")
            .await
            .unwrap();
        let started = Instant::now();
        read_until_closed(&mut stalled, Duration::from_secs(10)).await;
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "{listener}: closed before the timeout, after {:?}",
            started.elapsed()
        );
    }
    let (status, body) = http_get(server.http, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    for listener in ["metrics", "console"] {
        let series = format!("loghaul_http_header_timeouts_total{{listener=\"{listener}\"}}");
        assert!(body.contains(&series), "/metrics lacks {series}:\n{body}");
    }
    assert_eq!(get(server.console, "/", "", &[]).await.status, 200);
    server.stop().await;
}

/// Past --http-max-connections, when every connection is busy (here: console tails, which hold
/// theirs for as long as they follow), a new connection is closed unanswered; once the held ones
/// go, requests are served again and the refusal is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_are_closed_and_the_listener_recovers() {
    let db = TestDb::create(Backend::Sqlite, "connection_limit")
        .await
        .unwrap();
    let mut settings = config(&db);
    settings.listeners.http_max_connections = 2;
    settings.listeners.http_header_read_timeout = "60s".parse().unwrap();
    let server = TestServer::start(settings).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(EventStream::open(server.console, "/api/v1/tail", "").await);
    }
    let mut third = tokio::net::TcpStream::connect(server.console)
        .await
        .unwrap();
    let _ = third
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await;
    let answer = read_until_closed(&mut third, Duration::from_secs(10)).await;
    assert!(
        answer.is_empty(),
        "the third connection is closed unanswered: {:?}",
        String::from_utf8_lossy(&answer)
    );

    drop(held);
    wait_until(
        "requests to be served again once the held connections closed",
        DEADLINE,
        async || {
            http_get(server.console, "/")
                .await
                .is_ok_and(|(status, _)| status == 200)
        },
    )
    .await;
    let (_, metrics) = http_get(server.http, "/metrics").await.unwrap();
    assert!(
        metrics.contains("loghaul_http_connections_refused_total{listener=\"console\"}"),
        "{metrics}"
    );
    server.stop().await;
}

/// The metrics port is bound to every interface by default, and anyone who reaches it can open
/// connections and send nothing. A kubelet's probe must still get through: at the cap, the
/// connection idle longest is closed to make room for the new one, so 256 idle connections
/// (the default cap) cost a probe nothing. Measured on a process of the test's own, whose
/// counter of closed connections is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_get_through_while_idle_connections_hold_every_slot() {
    let db = TestDb::create(Backend::Sqlite, "probe_slots")
        .await
        .unwrap();
    let server = Process::serve(&db.url, &[]);
    // One kept alive after a scrape, as Prometheus keeps its own, then 255 that never send.
    let mut idle = vec![kept_alive(server.http, "/healthz").await.unwrap()];
    for _ in 1..256 {
        idle.push(tokio::net::TcpStream::connect(server.http).await.unwrap());
    }
    // The listener accepts in the order the connections arrived: the probes come after them all.
    for path in ["/readyz", "/healthz"] {
        let started = Instant::now();
        // A kubelet gives a probe 1 s by default.
        let answer = tokio::time::timeout(Duration::from_secs(1), http_get(server.http, path))
            .await
            .unwrap_or_else(|_| panic!("{path} answered within 1 s"));
        let (status, body) = answer.unwrap();
        assert_eq!(
            status, 200,
            "{path} with 256 idle connections open: {body:?}"
        );
        println!("{path}: 200 after {:?}", started.elapsed());
    }
    let closed = read_until_closed(&mut idle[0], DEADLINE).await;
    assert!(
        closed.is_empty(),
        "the oldest idle connection was closed unanswered"
    );
    let (_, metrics) = http_get(server.http, "/metrics").await.unwrap();
    // The first probe made room. Whether the next request finds the place it left free depends
    // on whether the server has closed it yet: each makes room at most once.
    let evicted = common::metric(
        &metrics,
        "loghaul_http_connections_evicted_total{listener=\"metrics\"}",
    );
    assert!((1.0..=3.0).contains(&evicted), "{evicted}: {metrics}");
    drop(idle);
}

/// SQLite writes through one connection. While a write waits on the database's write lock that
/// connection is taken, and readiness must not wait for it: the store answers reads all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_stays_on_while_the_sqlite_writer_is_busy() {
    let db = TestDb::create(Backend::Sqlite, "busy_writer")
        .await
        .unwrap();
    let mut settings = config(&db);
    settings.pipeline.store_retry_timeout = "60s".parse().unwrap();
    let server = TestServer::start(settings).await;
    let lock = HeldLock::take(&db).await;
    let mut client = server.client().await;
    let pushed = tokio::spawn(async move { push(&mut client, vec![vec![record("held")]]).await });
    // The writer now holds its connection while SQLite waits up to its 5 s busy timeout for the
    // lock. The store is probed every 2 s with a 2 s timeout, so a probe through that connection
    // fails within 4 s; the window ends before the writer's own attempt would give up.
    let window = Instant::now() + Duration::from_millis(4400);
    let mut samples = 0;
    while Instant::now() < window {
        let (status, body) = http_get(server.http, "/readyz").await.unwrap();
        assert_eq!(status, 200, "after {samples} samples: {body}");
        samples += 1;
        // Readiness is sampled throughout the window: that it stays on is what is tested.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(db.count().await, 0, "the write was held all along");
    lock.release().await;
    let response = tokio::time::timeout(Duration::from_secs(20), pushed)
        .await
        .expect("the push is answered once the lock is released")
        .unwrap()
        .unwrap();
    assert_eq!(response.accepted, 1);
    server.stop().await;
}
