//! The ingest path end to end: a real server on ephemeral ports, real gRPC, a real database, the
//! same suite on SQLite and PostgreSQL.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common;
use crate::common::held_lock::HeldLock;
use crate::common::{
    chunk, config, http_get, open_push, push, record, wait_until, TestDb, TestServer, DEADLINE,
};
use loghaul::proto::v1::{LogRecord, PushRequest};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

async fn many_concurrent_streams_store_exactly_their_records(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    const STREAMS: usize = 16;
    const CHUNKS: usize = 5;
    const PER_CHUNK: usize = 200;
    let mut streams = Vec::new();
    for stream in 0..STREAMS {
        let mut client = server.client().await;
        streams.push(tokio::spawn(async move {
            let chunks = (0..CHUNKS)
                .map(|chunk| {
                    (0..PER_CHUNK)
                        .map(|n| record(format!("s{stream:02}-c{chunk}-r{n:03}")))
                        .collect()
                })
                .collect();
            push(&mut client, chunks).await.unwrap()
        }));
    }
    for stream in streams {
        let response = stream.await.unwrap();
        assert_eq!(response.accepted, (CHUNKS * PER_CHUNK) as u64);
        assert_eq!(response.rejected, 0);
    }
    // The responses came after the commit, so every record is visible now.
    let stored = db.stored().await;
    let messages: BTreeSet<String> = stored.iter().map(|row| row.message.clone()).collect();
    let expected: BTreeSet<String> = (0..STREAMS)
        .flat_map(|stream| {
            (0..CHUNKS).flat_map(move |chunk| {
                (0..PER_CHUNK).map(move |n| format!("s{stream:02}-c{chunk}-r{n:03}"))
            })
        })
        .collect();
    assert_eq!(stored.len(), STREAMS * CHUNKS * PER_CHUNK, "no duplicates");
    assert_eq!(messages, expected, "exactly the records sent");

    let sample = &stored[0];
    let sent = record("x");
    assert_eq!(sample.tenant, "default");
    assert_eq!(sample.severity, 9);
    assert_eq!(sample.service, "checkout");
    assert_eq!(
        sample.attributes,
        serde_json::json!({"region": "eu-west-1"})
    );
    assert_eq!(sample.trace_id.as_deref(), Some(sent.trace_id.as_str()));
    assert_eq!(sample.span_id.as_deref(), Some(sent.span_id.as_str()));
    server.stop().await;
}
on_both_backends!(
    concurrent_streams,
    many_concurrent_streams_store_exactly_their_records
);

async fn the_response_waits_for_the_commit(db: &TestDb) {
    let mut settings = config(db);
    settings.pipeline.store_retry_timeout = "60s".parse().unwrap();
    let server = TestServer::start(settings).await;
    let lock = HeldLock::take(db).await;
    let mut client = server.client().await;
    let mut pushed = tokio::spawn(async move {
        push(
            &mut client,
            vec![(0..50).map(|n| record(format!("held-{n}"))).collect()],
        )
        .await
    });
    let early = tokio::time::timeout(Duration::from_millis(1500), &mut pushed).await;
    assert!(
        early.is_err(),
        "no response may arrive while the commit is blocked"
    );
    assert_eq!(
        db.count().await,
        0,
        "nothing is committed while the lock is held"
    );

    lock.release().await;
    let response = tokio::time::timeout(Duration::from_secs(20), pushed)
        .await
        .expect("the response arrives once the lock is released")
        .unwrap()
        .unwrap();
    assert_eq!(response.accepted, 50);
    assert_eq!(db.count().await, 50);
    server.stop().await;
}
on_both_backends!(ack_waits_for_commit, the_response_waits_for_the_commit);

async fn invalid_records_are_reported_by_index_and_the_rest_is_stored(db: &TestDb) {
    let mut settings = config(db);
    settings.ingest.max_message_bytes = "1KiB".parse().unwrap();
    let server = TestServer::start(settings).await;
    let mut client = server.client().await;
    let far_future = chrono::Utc::now() + chrono::TimeDelta::hours(1);
    let bad = |kind: &str| -> LogRecord {
        let mut wire = record(format!("bad-{kind}"));
        match kind {
            "big" => wire.message = "x".repeat(2000),
            "nul" => wire.message = "nul\0here".into(),
            "attrs" => wire.attributes = (0..129).map(|i| (format!("k{i}"), "v".into())).collect(),
            "key" => wire.attributes = [("k".repeat(300), "v".into())].into(),
            "value" => wire.attributes = [("k".into(), "v".repeat(17 * 1024))].into(),
            "future" => {
                wire.timestamp = Some(prost_types::Timestamp {
                    seconds: far_future.timestamp(),
                    nanos: 0,
                })
            }
            _ => unreachable!(),
        }
        wire
    };
    // Stream indexes count across chunks: chunk 0 holds 0..4, chunk 1 holds 4..10, chunk 2 10..12.
    let chunks = vec![
        vec![record("ok-0"), bad("big"), record("ok-2"), bad("nul")],
        vec![
            bad("attrs"),
            record("ok-5"),
            bad("key"),
            bad("value"),
            record("ok-8"),
            bad("future"),
        ],
        vec![record("ok-10"), {
            let mut unnamed = record("ok-11");
            unnamed.service.clear();
            unnamed.timestamp = None;
            unnamed
        }],
    ];
    let response = push(&mut client, chunks).await.unwrap();
    assert_eq!(response.accepted, 6);
    assert_eq!(response.rejected, 6);
    let reasons: Vec<(u64, String)> = response
        .rejections
        .iter()
        .map(|rejection| {
            let code = rejection.reason.split(':').next().unwrap().to_owned();
            (rejection.index, code)
        })
        .collect();
    let expected = [
        (1, "message_too_large"),
        (3, "nul_character"),
        (4, "too_many_attributes"),
        (6, "attribute_key_too_large"),
        (7, "attribute_value_too_large"),
        (9, "timestamp_in_future"),
    ];
    let expected: Vec<(u64, String)> = expected
        .iter()
        .map(|(index, code)| (*index, code.to_string()))
        .collect();
    assert_eq!(reasons, expected);
    assert!(
        response.rejections[0].reason.contains("2000 bytes"),
        "{:?}",
        response.rejections[0]
    );

    let stored = db.stored().await;
    let messages: Vec<&str> = stored.iter().map(|row| row.message.as_str()).collect();
    assert_eq!(messages, ["ok-0", "ok-10", "ok-11", "ok-2", "ok-5", "ok-8"]);
    let defaulted = stored.iter().find(|row| row.message == "ok-11").unwrap();
    assert_eq!(defaulted.service, "unknown_service");
    let age = chrono::Utc::now().timestamp_micros() - defaulted.ts_micros;
    assert!(
        (0..60_000_000).contains(&age),
        "a missing timestamp means now; age {age}µs"
    );
    server.stop().await;
}
on_both_backends!(
    mixed_records,
    invalid_records_are_reported_by_index_and_the_rest_is_stored
);

async fn a_commit_that_fails_for_good_ends_the_stream_unavailable(db: &TestDb) {
    let mut settings = config(db);
    settings.pipeline.store_retry_timeout = "1s".parse().unwrap();
    let server = TestServer::start(settings).await;
    // Take the table away so every insert fails the way a broken database does.
    db.execute("ALTER TABLE logs RENAME TO logs_elsewhere")
        .await;
    let mut client = server.client().await;
    let status = push(&mut client, vec![vec![record("lost")]])
        .await
        .expect_err("a stream whose records were not stored never gets a success response");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("database is unavailable"),
        "{}",
        status.message()
    );
    let details = tonic_types::StatusExt::get_error_details(&status);
    assert!(
        details.retry_info().is_some(),
        "clients are told when to retry"
    );
    server.stop().await;
}
on_both_backends!(
    commit_failure,
    a_commit_that_fails_for_good_ends_the_stream_unavailable
);

async fn an_oversized_message_gets_resource_exhausted(db: &TestDb) {
    let mut settings = config(db);
    settings.ingest.max_request_bytes = "64KiB".parse().unwrap();
    let server = TestServer::start(settings).await;
    let mut client = server.client().await;
    let huge: Vec<LogRecord> = (0..100)
        .map(|n| record(format!("{n}-{}", "y".repeat(1000))))
        .collect();
    let status = push(&mut client, vec![huge]).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("--max-request-bytes"),
        "{}",
        status.message()
    );
    // The server is unharmed.
    let response = push(&mut client, vec![vec![record("small")]])
        .await
        .unwrap();
    assert_eq!(response.accepted, 1);
    server.stop().await;
}
on_both_backends!(
    oversized_request,
    an_oversized_message_gets_resource_exhausted
);

async fn a_client_that_vanishes_mid_stream_leaves_nothing_hanging(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let mut client = server.client().await;
    let (chunks, outgoing) = mpsc::channel(4);
    let abandoned = tokio::spawn(async move { client.push(ReceiverStream::new(outgoing)).await });
    chunks
        .send(PushRequest {
            records: vec![record("before-vanishing")],
            ..Default::default()
        })
        .await
        .unwrap();
    // Its record is committed: the server is in the middle of the stream.
    wait_until("the first record to be stored", DEADLINE, async || {
        db.count().await == 1
    })
    .await;
    abandoned.abort();
    drop(chunks);
    let mut other = server.client().await;
    let response = push(&mut other, vec![vec![record("after")]]).await.unwrap();
    assert_eq!(response.accepted, 1);
    // The abandoned handler ended: shutdown does not wait out the 5 s grace for it.
    let started = std::time::Instant::now();
    server.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "took {:?}",
        started.elapsed()
    );
}
on_both_backends!(
    vanishing_client,
    a_client_that_vanishes_mid_stream_leaves_nothing_hanging
);

async fn shutdown_lets_open_streams_finish_and_loses_nothing_acknowledged(db: &TestDb) {
    let mut server = TestServer::start(config(db)).await;
    let mut senders = Vec::new();
    let mut responses = Vec::new();
    for stream in 0..8 {
        let (chunks, answer) = open_push(server.client().await, 8);
        for n in 0..3 {
            chunks
                .send(chunk(&format!("{stream}-{n}"), 100))
                .await
                .unwrap();
        }
        senders.push((stream, chunks));
        responses.push(answer);
    }
    // Every stream is open on the server: their first chunks are committed.
    wait_until(
        "the first 2,400 records to be stored",
        DEADLINE,
        async || db.count().await == 8 * 3 * 100,
    )
    .await;
    server.request_shutdown();
    wait_until("the server to drain", DEADLINE, async || {
        matches!(http_get(server.http, "/readyz").await, Ok((503, body)) if body.contains("draining"))
    })
    .await;
    // Open streams keep going during the grace period.
    for (stream, chunks) in senders {
        for n in 3..5 {
            chunks
                .send(chunk(&format!("{stream}-{n}"), 100))
                .await
                .unwrap();
        }
    }
    let mut acknowledged = 0;
    for response in responses {
        let response = response
            .await
            .unwrap()
            .expect("streams open at SIGTERM finish");
        assert_eq!(response.accepted, 500);
        acknowledged += response.accepted as i64;
    }
    server.stop().await;
    assert_eq!(db.count().await, acknowledged);
}
on_both_backends!(
    graceful_shutdown,
    shutdown_lets_open_streams_finish_and_loses_nothing_acknowledged
);

/// The writer's sessions commit synchronously and ask PostgreSQL to write their evicted pages out
/// as they go, so that a checkpoint's sync has little left to flush.
#[tokio::test]
async fn postgres_writer_sessions_commit_synchronously_and_ask_for_early_writeback() {
    let Some(db) = TestDb::create(common::Backend::Postgres, "writer_session").await else {
        return;
    };
    // An acknowledgement means the records survive a crash of the database server, so writer
    // sessions commit synchronously even where the database's default says otherwise.
    let (_, name) = db.url.rsplit_once('/').unwrap();
    let admin = sqlx::PgPool::connect(&db.url).await.unwrap();
    sqlx::query(&format!(
        "ALTER DATABASE \"{name}\" SET synchronous_commit = off"
    ))
    .execute(&admin)
    .await
    .unwrap();
    admin.close().await;
    let store = loghaul::storage::Store::connect(
        &db.url,
        loghaul::storage::PoolOptions {
            max_connections: 2,
            acquire_timeout: Duration::from_secs(5),
        },
    )
    .await
    .unwrap();
    let loghaul::storage::Store::Postgres(postgres) = &store else {
        panic!("a postgres:// URL opens a PostgreSQL store");
    };
    for (setting, expected) in [("synchronous_commit", "on"), ("backend_flush_after", "2MB")] {
        let value: String = sqlx::query_scalar(&format!("SHOW {setting}"))
            .fetch_one(postgres.pool())
            .await
            .unwrap();
        assert_eq!(value, expected, "{setting}");
    }
    store.close().await;
}
