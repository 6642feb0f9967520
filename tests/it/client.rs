//! The Rust client against real servers: exactly once across a server restart, RetryInfo waited
//! out, a full buffer that drops without blocking, the tracing layer's example application, and
//! the server's deduplication of chunks named by producer id and sequence.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::held_lock::HeldLock;
use crate::common::process::{assert_success, Process};
use crate::common::{free_address, record, wait_until, Backend, TestDb, TestServer, DEADLINE};
use loghaul::client::{Client, FullPolicy, Shipper, ShipperConfig};
use loghaul::error::IngestError;
use loghaul::proto::v1::log_ingest_client::LogIngestClient;
use loghaul::proto::v1::log_ingest_server::{LogIngest, LogIngestServer};
use loghaul::proto::v1::{LogRecord, PushRequest, PushResponse};
use loghaul::retention::{run_once, RetentionConfig};
use loghaul::storage::{PoolOptions, Store};
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status, Streaming};

/// Quick rotation and retries, so tests see several streams and reconnect soon.
fn brisk() -> ShipperConfig {
    ShipperConfig {
        chunk_records: 200,
        linger: Duration::from_millis(20),
        rotate_chunks: 5,
        rotate_after: Duration::from_millis(200),
        first_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(500),
        ..ShipperConfig::default()
    }
}

fn shipper_to(addr: SocketAddr, config: ShipperConfig) -> Shipper {
    Client::builder(format!("http://{addr}"))
        .build()
        .unwrap()
        .shipper(config)
        .unwrap()
}

async fn restart_keeps_exactly_once(db: &TestDb) {
    const TOTAL: usize = 30_000;
    let addr = free_address();
    let listen = addr.to_string();
    let mut server = Process::serve_at(&listen, &db.url, &[]);
    // Long streams: the server commits each chunk as it arrives but answers only at the end of
    // the stream, so a kill leaves chunks stored and unacknowledged, which the shipper resends.
    let shipper = shipper_to(
        addr,
        ShipperConfig {
            when_full: FullPolicy::Block(Duration::MAX),
            rotate_chunks: 1_000,
            rotate_after: Duration::from_secs(3),
            ..brisk()
        },
    );
    let pusher = common::push_paced(&shipper, TOTAL);
    // Kill the server once at least ten chunks are committed but not acknowledged, then start
    // it again on the same port.
    wait_until(
        "2,000 records committed and not acknowledged",
        Duration::from_secs(60),
        async || db.count().await >= shipper.stats().acknowledged as i64 + 2_000,
    )
    .await;
    server.signal("KILL");
    server.wait(Duration::from_secs(10));
    let killed_at = shipper.stats();
    // The outage under test: for half a second the shipper's reconnects are refused.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _restarted = Process::serve_at(&listen, &db.url, &[]);

    tokio::task::spawn_blocking(move || pusher.join().unwrap())
        .await
        .unwrap();
    let stats = shipper.close_async(Duration::from_secs(120)).await;
    eprintln!(
        "{:?}: killed at {killed_at:?}, finally {stats:?}",
        db.backend
    );
    assert!(
        killed_at.acknowledged < TOTAL as u64,
        "the kill happened mid-run: {killed_at:?}"
    );
    assert_eq!(stats.failed, 0, "{stats:?} {:?}", shipper.last_error());
    assert_eq!(stats.acknowledged, TOTAL as u64, "{stats:?}");
    assert!(stats.retries > 0, "chunks were sent again: {stats:?}");
    assert!(
        stats.duplicates >= 2_000,
        "the resent chunks the server had stored were recognised: {stats:?}"
    );
    assert_eq!(db.count().await, TOTAL as i64, "{stats:?}");
    assert_eq!(
        db.query_scalar("SELECT count(DISTINCT message) FROM logs")
            .await,
        TOTAL as i64
    );
}

on_both_backends!(
    a_server_restart_loses_and_repeats_nothing,
    restart_keeps_exactly_once
);

async fn backpressure_then_recovery(db: &TestDb) {
    const TOTAL: usize = 4_000;
    let mut settings = common::config(db);
    settings.pipeline.shards = 1;
    settings.pipeline.queue_capacity = 1;
    settings.pipeline.batch_max_rows = 100;
    settings.pipeline.enqueue_timeout = "300ms".parse().unwrap();
    settings.pipeline.store_retry_timeout = "120s".parse().unwrap();
    let server = TestServer::start(settings).await;
    // Nothing commits while the table is locked: queues fill, streams are refused with
    // RESOURCE_EXHAUSTED and RetryInfo once what they queued before the refusal is written, after
    // the lock goes; their trailers name the chunks to send again, and only those are.
    let lock = HeldLock::take(db).await;
    let shipper = shipper_to(
        server.grpc,
        ShipperConfig {
            chunk_records: 100,
            ..brisk()
        },
    );
    for n in 0..TOTAL {
        shipper.push(record(format!("bp-{n:05}"))).unwrap();
    }
    wait_until("a refusal", Duration::from_secs(60), async || {
        shipper.stats().retries > 0
    })
    .await;
    let refused = shipper.last_error().unwrap_or_default();
    // The chunks sent again are refused again while the table stays locked.
    let first = shipper.stats().retries;
    wait_until(
        "chunks refused and sent again once more",
        DEADLINE,
        async || shipper.stats().retries > first,
    )
    .await;
    lock.release().await;
    let stats = shipper.close_async(Duration::from_secs(120)).await;
    assert!(refused.starts_with("ResourceExhausted"), "{refused}");
    assert_eq!(
        stats.duplicates, 0,
        "chunks queued before a refusal were acknowledged from its trailers, not sent again: {stats:?}"
    );
    assert_eq!(
        (stats.acknowledged, stats.failed),
        (TOTAL as u64, 0),
        "{stats:?}"
    );
    assert_eq!(db.count().await, TOTAL as i64, "{stats:?}");
    assert_eq!(
        db.query_scalar("SELECT count(DISTINCT message) FROM logs")
            .await,
        TOTAL as i64
    );
    server.stop().await;
}

on_both_backends!(
    backpressure_refusals_are_retried_and_stored_once,
    backpressure_then_recovery
);

/// A real gRPC peer that refuses the first streams with RESOURCE_EXHAUSTED and a RetryInfo
/// delay, the way loghaul's own backpressure does, then accepts.
#[derive(Clone)]
struct Refusing {
    refusals_left: Arc<AtomicUsize>,
    retry_after: Duration,
    attempts: Arc<Mutex<Vec<Instant>>>,
    stored: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl LogIngest for Refusing {
    async fn push(
        &self,
        request: Request<Streaming<PushRequest>>,
    ) -> Result<Response<PushResponse>, Status> {
        self.attempts.lock().unwrap().push(Instant::now());
        let refuse = self
            .refusals_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            })
            .is_ok();
        if refuse {
            return Err(Status::from(IngestError::Backpressure {
                resource: "shard queue",
                waited: Duration::from_millis(10),
                retry_after: self.retry_after,
            }));
        }
        let mut stream = request.into_inner();
        let mut accepted = 0;
        while let Some(chunk) = stream.message().await? {
            accepted += chunk.records.len();
        }
        self.stored.fetch_add(accepted, Ordering::SeqCst);
        Ok(Response::new(PushResponse {
            accepted: accepted as u64,
            ..PushResponse::default()
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_exhausted_with_retry_info_is_waited_out() {
    let peer = Refusing {
        refusals_left: Arc::new(AtomicUsize::new(2)),
        retry_after: Duration::from_millis(1500),
        attempts: Arc::default(),
        stored: Arc::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(LogIngestServer::new(peer.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    // A backoff far shorter than the delay asked for: only RetryInfo explains a long wait.
    let shipper = shipper_to(
        addr,
        ShipperConfig {
            first_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(20),
            ..brisk()
        },
    );
    for n in 0..50 {
        shipper.push(record(format!("r{n}"))).unwrap();
    }
    let stats = shipper.close_async(Duration::from_secs(60)).await;
    serving.abort();
    assert_eq!(stats.acknowledged, 50, "{stats:?}");
    assert_eq!(peer.stored.load(Ordering::SeqCst), 50);
    let attempts = peer.attempts.lock().unwrap().clone();
    assert_eq!(
        attempts.len(),
        3,
        "two refusals, then the stream that is stored"
    );
    for pair in attempts.windows(2) {
        let waited = pair[1] - pair[0];
        assert!(
            waited >= Duration::from_millis(1500),
            "the shipper came back after {waited:?}, before the 1.5 s it was told"
        );
    }
    assert!(stats.retries >= 2, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_buffer_drops_the_newest_without_blocking_and_counts_exactly() {
    let db = TestDb::create(Backend::Sqlite, "client_drop")
        .await
        .unwrap();
    // Nobody listens yet: everything pushed stays buffered.
    let addr = free_address();
    let shipper = shipper_to(
        addr,
        ShipperConfig {
            buffer_records: 1_000,
            when_full: FullPolicy::DropNewest,
            ..brisk()
        },
    );
    let mut slowest = Duration::ZERO;
    let started = Instant::now();
    let mut refused = 0;
    for n in 0..10_000 {
        let before = Instant::now();
        if shipper.push(record(format!("d{n}"))).is_err() {
            refused += 1;
        }
        slowest = slowest.max(before.elapsed());
    }
    let total = started.elapsed();
    assert!(
        slowest < Duration::from_millis(100) && total < Duration::from_secs(5),
        "push never waits: slowest {slowest:?}, all {total:?}"
    );
    let stats = shipper.stats();
    assert_eq!(refused, 9_000);
    assert_eq!(
        (stats.pushed, stats.dropped, stats.buffered),
        (1_000, 9_000, 1_000)
    );

    // The server comes up: exactly the records that were kept are stored.
    let _server = Process::serve_at(&addr.to_string(), &db.url, &[]);
    let flushed = {
        let shipper = shipper.clone();
        tokio::task::spawn_blocking(move || shipper.flush(Duration::from_secs(60)))
            .await
            .unwrap()
    };
    assert!(flushed, "{:?} {:?}", shipper.stats(), shipper.last_error());
    let stats = shipper.close_async(Duration::from_secs(10)).await;
    assert_eq!((stats.acknowledged, stats.dropped), (1_000, 9_000));
    assert_eq!(db.count().await, 1_000);
}

/// The example binary, built by `cargo test` (or `cargo build --examples`).
fn example(name: &str) -> std::path::PathBuf {
    let deps = std::env::current_exe().unwrap();
    let path = deps
        .parent()
        .and_then(|dir| dir.parent())
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build --examples` (plain `cargo test` does)",
        path.display()
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tracing_example_ships_its_events() {
    let db = TestDb::create(Backend::Sqlite, "client_tracing")
        .await
        .unwrap();
    let server = Process::serve(&db.url, &["--api-keys", "app-key=team-a"]);
    let output = tokio::task::spawn_blocking({
        let binary = example("tracing_app");
        let endpoint = format!("http://{}", server.grpc);
        move || {
            std::process::Command::new(binary)
                .args([endpoint.as_str(), "25"])
                .env("LOGHAUL_API_KEY", "app-key")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert_success(&output);
    let rows = db.stored().await;
    assert_eq!(rows.len(), 26);
    let paid: Vec<_> = rows
        .iter()
        .filter(|row| row.message.starts_with("order "))
        .collect();
    assert_eq!(paid.len(), 25);
    for row in &paid {
        assert_eq!(row.tenant, "team-a");
        assert_eq!(row.service, "tracing-app");
        assert_eq!(row.severity, 9);
        assert_eq!(row.attributes["target"], "tracing_app");
        assert_eq!(row.attributes["customer"], "ada");
        assert_eq!(row.attributes["span"], "request");
        assert_eq!(
            row.trace_id.as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(row.span_id.as_deref(), Some("00f067aa0ba902b7"));
    }
    let orders: std::collections::BTreeSet<String> = paid
        .iter()
        .map(|row| row.attributes["order"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(orders.len(), 25);
    let warning = rows
        .iter()
        .find(|row| row.message == "disk almost full")
        .unwrap();
    assert_eq!(warning.severity, 13);
    assert_eq!(warning.attributes["disk"], "sda");
    assert_eq!(warning.trace_id, None, "outside the span: no trace context");
}

// --- The server's side: chunks named by producer id and sequence are stored once. ---

fn keyed(producer: &[u8], sequence: u64, records: Vec<LogRecord>) -> PushRequest {
    PushRequest {
        records,
        producer_id: Some(producer.to_vec()),
        sequence: Some(sequence),
    }
}

async fn push_requests(
    client: &mut LogIngestClient<Channel>,
    requests: Vec<PushRequest>,
) -> Result<PushResponse, Status> {
    client
        .push(tokio_stream::iter(requests))
        .await
        .map(Response::into_inner)
}

fn records(tag: &str, count: usize) -> Vec<LogRecord> {
    (0..count).map(|n| record(format!("{tag}-{n}"))).collect()
}

async fn a_retried_chunk_is_stored_once(db: &TestDb) {
    let server = TestServer::start(common::config(db)).await;
    let mut client = server.client().await;
    let producer = [7u8; 16];
    let first = push_requests(&mut client, vec![keyed(&producer, 0, records("a", 30))])
        .await
        .unwrap();
    assert_eq!((first.accepted, first.duplicate_records), (30, 0));
    // The same chunk again, on a new stream, next to a new one; and once more in one stream.
    let again = push_requests(
        &mut client,
        vec![
            keyed(&producer, 0, records("a", 30)),
            keyed(&producer, 1, records("b", 20)),
            keyed(&producer, 1, records("b", 20)),
        ],
    )
    .await
    .unwrap();
    assert_eq!((again.accepted, again.rejected), (70, 0));
    assert_eq!(again.duplicate_records, 50);
    // Another producer's sequence 0 is another chunk; a chunk without key is stored every time.
    let other = push_requests(
        &mut client,
        vec![
            keyed(&[8u8; 16], 0, records("c", 5)),
            PushRequest {
                records: records("d", 5),
                ..PushRequest::default()
            },
            PushRequest {
                records: records("d", 5),
                ..PushRequest::default()
            },
        ],
    )
    .await
    .unwrap();
    assert_eq!((other.accepted, other.duplicate_records), (15, 0));
    assert_eq!(db.count().await, 30 + 20 + 5 + 10);
    assert_eq!(
        db.query_scalar("SELECT count(*) FROM producer_chunks")
            .await,
        3
    );
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("loghaul_duplicate_chunks_total"),
        "{metrics}"
    );
    server.stop().await;
}

on_both_backends!(
    a_retried_chunk_is_stored_once_everywhere,
    a_retried_chunk_is_stored_once
);

async fn beyond_the_window(db: &TestDb) {
    let server = TestServer::start(common::config(db)).await;
    let mut client = server.client().await;
    let store = Store::connect(
        &db.url,
        PoolOptions {
            max_connections: 1,
            acquire_timeout: Duration::from_secs(5),
        },
    )
    .await
    .unwrap();
    let retention = |window: Duration| RetentionConfig {
        keep: None,
        interval: Duration::from_secs(60),
        dedup_window: window,
    };
    let chunk = || vec![keyed(b"window", 1, records("w", 10))];
    push_requests(&mut client, chunk()).await.unwrap();

    // Within the window the key stays and a retry is recognised.
    let report = run_once(&store, &retention(Duration::from_secs(3600)))
        .await
        .unwrap();
    assert_eq!(report.chunk_keys_pruned, 0);
    let retry = push_requests(&mut client, chunk()).await.unwrap();
    assert_eq!(retry.duplicate_records, 10);
    assert_eq!(db.count().await, 10);

    // Once the key has left the window it is pruned, and the same chunk is stored again. The
    // window is 10 ms: the key leaves it by growing older.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let report = run_once(&store, &retention(Duration::from_millis(10)))
        .await
        .unwrap();
    assert_eq!(report.chunk_keys_pruned, 1);
    let late = push_requests(&mut client, chunk()).await.unwrap();
    assert_eq!((late.accepted, late.duplicate_records), (10, 0));
    assert_eq!(db.count().await, 20);
    store.close().await;
    server.stop().await;
}

on_both_backends!(
    a_retry_beyond_the_dedup_window_is_stored_again,
    beyond_the_window
);

async fn malformed_keys_are_refused(db: &TestDb) {
    let server = TestServer::start(common::config(db)).await;
    let mut client = server.client().await;
    let cases = [
        (None, Some(1)),
        (Some(Vec::new()), Some(1)),
        (Some(vec![1u8; 65]), Some(1)),
    ];
    for (producer_id, sequence) in cases {
        let request = PushRequest {
            records: records("bad", 1),
            producer_id,
            sequence,
        };
        let status = push_requests(&mut client, vec![request]).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    }
    assert_eq!(db.count().await, 0);
    server.stop().await;
}

on_both_backends!(
    malformed_producer_keys_are_invalid_arguments,
    malformed_keys_are_refused
);

async fn refused_rows_of_a_keyed_chunk(db: &TestDb) {
    let server = TestServer::start(common::config(db)).await;
    match db.backend {
        Backend::Postgres => {
            db.execute("ALTER TABLE logs ADD CONSTRAINT no_poison CHECK (message <> 'poison')")
                .await
        }
        Backend::Sqlite => {
            db.execute(
                "CREATE TRIGGER no_poison BEFORE INSERT ON logs WHEN NEW.message = 'poison' \
                 BEGIN SELECT RAISE(ABORT, 'poison refused'); END",
            )
            .await
        }
    }
    let mut client = server.client().await;
    let chunk = || {
        let mut chunk = records("ok", 4);
        chunk[2] = record("poison");
        chunk
    };
    // A keyed chunk with a row the database refuses, batched with an unkeyed one.
    let first = push_requests(
        &mut client,
        vec![
            keyed(b"producer", 9, chunk()),
            PushRequest {
                records: records("plain", 3),
                ..PushRequest::default()
            },
        ],
    )
    .await
    .unwrap();
    assert_eq!((first.accepted, first.rejected), (6, 1), "{first:?}");
    assert_eq!(first.rejections[0].index, 2);
    assert_eq!(db.count().await, 6);
    let retry = push_requests(&mut client, vec![keyed(b"producer", 9, chunk())])
        .await
        .unwrap();
    assert_eq!(
        (retry.rejected, retry.duplicate_records),
        (0, 4),
        "{retry:?}"
    );
    assert_eq!(db.count().await, 6, "the retry stored nothing");
    server.stop().await;
}

on_both_backends!(
    a_keyed_chunk_with_a_refused_row_is_claimed_with_its_other_rows,
    refused_rows_of_a_keyed_chunk
);

async fn concurrent_duplicates(db: &TestDb) {
    let mut config = common::config(db);
    config.pipeline.shards = 4;
    let server = TestServer::start(config).await;
    let producer = [3u8; 16];
    let chunks = || -> Vec<PushRequest> {
        (0..10)
            .map(|sequence| keyed(&producer, sequence, records(&format!("s{sequence}"), 50)))
            .collect()
    };
    // Eight streams on eight connections send the same ten chunks at once: whichever shard's
    // transaction claims a key first stores its chunk, the others wait on the key and skip it.
    let mut streams = Vec::new();
    for _ in 0..8 {
        let mut client = server.client().await;
        let requests = chunks();
        streams.push(tokio::spawn(async move {
            push_requests(&mut client, requests).await
        }));
    }
    let mut duplicates = 0;
    for stream in streams {
        let response = stream.await.unwrap().unwrap();
        assert_eq!((response.accepted, response.rejected), (500, 0));
        duplicates += response.duplicate_records;
    }
    assert_eq!(duplicates, 7 * 500);
    assert_eq!(db.count().await, 500);
    assert_eq!(
        db.query_scalar("SELECT count(DISTINCT message) FROM logs")
            .await,
        500
    );
    server.stop().await;
}

on_both_backends!(concurrent_duplicates_are_stored_once, concurrent_duplicates);
