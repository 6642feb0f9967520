//! Overload must be boring: a blocked database makes streams wait, then back off with a retry
//! delay; memory stays within the budget whatever the number of streams; nothing acknowledged is
//! lost; throughput comes back when the database does.

use std::time::{Duration, Instant};

use crate::common::held_lock::HeldLock;
use crate::common::process::Process;
use crate::common::{
    chunk, config, http_get, metric, metric_sum, open_push, wait_until, Backend, TestDb,
    TestServer, DEADLINE,
};
use loghaul::proto::v1::log_ingest_client::LogIngestClient;
use loghaul::proto::v1::PushRequest;
use tonic::Code;

async fn a_full_pipeline_answers_resource_exhausted_with_retry_info_and_recovers(db: &TestDb) {
    // A process of its own, so that the queue depth below is this server's.
    let mut server = Process::serve(
        &db.url,
        &[
            "--shards",
            "1",
            "--queue-capacity",
            "1",
            "--batch-max-rows",
            "100",
            "--enqueue-timeout",
            "1s",
            "--store-retry-timeout",
            "120s",
        ],
    );
    let endpoint = format!("http://{}", server.grpc);
    let lock = HeldLock::take(db).await;

    let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
    for stream in 0..4 {
        let mut client = LogIngestClient::connect(endpoint.clone()).await.unwrap();
        let chunks: Vec<PushRequest> = (0..20)
            .map(|n| chunk(&format!("{stream}-{n}"), 100))
            .collect();
        let done = done.clone();
        tokio::spawn(async move {
            let _ = done.send(client.push(tokio_stream::iter(chunks)).await);
        });
    }
    drop(done);
    // One chunk fits in the queue and one in the batch being written: the streams that queued
    // them wait for their commit (after the lock) to answer; the others are refused meanwhile.
    let told_to_back_off = |outcome: Result<_, tonic::Status>| {
        let status = outcome.expect_err("nothing can commit while the table is locked");
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        let details = tonic_types::StatusExt::get_error_details(&status);
        let delay = details.retry_info().and_then(|info| info.retry_delay);
        assert_eq!(
            delay,
            Some(Duration::from_secs(1)),
            "RetryInfo tells the client when to come back"
        );
    };
    for _ in 0..2 {
        let outcome = tokio::time::timeout(Duration::from_secs(30), finished.recv())
            .await
            .expect("streams that queued nothing are refused at once")
            .unwrap();
        told_to_back_off(outcome);
    }

    let metrics = server.metrics().await;
    assert!(
        metrics.contains("loghaul_backpressure_timeouts_total{resource="),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "loghaul_queue_depth{shard=\"0\"}"),
        1.0,
        "the queue is full: {metrics}"
    );
    if db.backend == Backend::Postgres {
        // Full is not down: a blocked table is not a reason to take the replica out of rotation.
        let (status, body) = http_get(server.http, "/readyz").await.unwrap();
        assert_eq!(status, 200, "{body}");
    }

    // The streams that queued a chunk wait for its commit, and for room for their next: once
    // all four have waited the enqueue timeout, none can get its next chunk in after the release.
    wait_until(
        "every stream to time out waiting for room",
        DEADLINE,
        async || {
            metric_sum(
                &server.metrics().await,
                "loghaul_backpressure_timeouts_total",
            ) == 4.0
        },
    )
    .await;
    lock.release().await;
    while let Some(outcome) = finished.recv().await {
        told_to_back_off(outcome);
    }
    let mut client = LogIngestClient::connect(endpoint).await.unwrap();
    let mut accepted = 0;
    wait_until(
        "throughput to recover",
        Duration::from_secs(20),
        async || match client
            .push(tokio_stream::iter(vec![chunk("after", 50)]))
            .await
        {
            Ok(response) => {
                accepted = response.into_inner().accepted;
                true
            }
            Err(status) if status.code() == Code::ResourceExhausted => false,
            Err(status) => panic!("{status:?}"),
        },
    )
    .await;
    assert_eq!(accepted, 50);
    let stored = db
        .query_scalar("SELECT count(*) FROM logs WHERE message LIKE 'after-%'")
        .await;
    assert_eq!(stored, 50, "every acknowledged record is in the table");
    server.signal("TERM");
    assert!(server.wait(Duration::from_secs(30)).success());
}
on_both_backends!(
    backpressure,
    a_full_pipeline_answers_resource_exhausted_with_retry_info_and_recovers
);

/// 256 streams push as fast as they can into a table that cannot be written. The server must stop
/// reading once its buffer budget is full, so its memory stays near the budget, not near what the
/// clients want to send; when the table is released every stream completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_bounded_with_256_streams_into_a_blocked_database() {
    let Some(db) = TestDb::create(Backend::Postgres, "memory_bound").await else {
        return;
    };
    // The default budget, which the bound in docs/security.md is stated for.
    const BUDGET: u64 = 64 << 20;
    let mut server = Process::serve(
        &db.url,
        &[
            "--max-buffered-bytes",
            "64MiB",
            "--enqueue-timeout",
            "120s",
            "--store-retry-timeout",
            "120s",
        ],
    );
    let (baseline, _) = server.rss();
    let lock = HeldLock::take(&db).await;

    let endpoint = format!("http://{}", server.grpc);
    let mut feeders = Vec::new();
    let mut streams = Vec::new();
    for stream in 0..256 {
        let client = LogIngestClient::connect(endpoint.clone()).await.unwrap();
        let (chunks, answer) = open_push(client, 1);
        streams.push(answer);
        feeders.push(tokio::spawn(async move {
            let mut sent = 0u64;
            // Together the streams offer about five times the budget: 256 × 6 × 500 records.
            for n in 0..6 {
                let Ok(permit) = chunks.reserve().await else {
                    break;
                };
                permit.send(chunk(&format!("{stream}-{n}"), 500));
                sent += 500;
            }
            sent
        }));
    }
    // Every stream is open and the budget is what fills up: the server has stopped reading.
    let mut buffered = 0.0;
    wait_until("256 streams and a full budget", DEADLINE, async || {
        let text = server.metrics().await;
        buffered = metric(&text, "loghaul_buffered_bytes");
        metric(&text, "loghaul_active_streams") == 256.0 && buffered > (BUDGET / 2) as f64
    })
    .await;
    let (during, peak) = server.rss();
    assert!(buffered <= BUDGET as f64, "{buffered}");
    let (ready, _) = http_get(server.http, "/readyz").await.unwrap();
    assert_eq!(ready, 200, "a full service is still a healthy one");
    // Beyond the budget each stream may hold its HTTP/2 window (64 KiB) and its decode buffer
    // (about one message); 3 × the budget leaves room for that and the allocator's slack.
    let limit = baseline + 3 * BUDGET;
    eprintln!(
        "RSS baseline {} MiB, under load {} MiB, peak {} MiB, limit {} MiB",
        baseline >> 20,
        during >> 20,
        peak >> 20,
        limit >> 20
    );
    assert!(
        peak < limit,
        "peak RSS {} MiB over the {} MiB bound",
        peak >> 20,
        limit >> 20
    );

    // Release the table: everything offered is committed and acknowledged.
    lock.release().await;
    let released = Instant::now();
    let mut offered = 0;
    for feeder in feeders {
        offered += feeder.await.unwrap();
    }
    let mut acknowledged = 0;
    for stream in streams {
        let response = stream
            .await
            .unwrap()
            .expect("every stream completes once the table is free");
        acknowledged += response.accepted;
    }
    eprintln!(
        "{acknowledged} records committed {:?} after the release",
        released.elapsed()
    );
    assert_eq!(acknowledged, offered);
    assert_eq!(db.count().await, acknowledged as i64);
    server.signal("TERM");
    assert!(server.wait(Duration::from_secs(30)).success());
}

/// Streams that stop part-way (here: no room for their next message within the enqueue timeout)
/// must say exactly what they stored: `accepted` in the trailers equals the rows stored from that
/// stream, and the messages named as not stored are exactly the ones with no rows.
async fn a_stream_that_fails_part_way_reports_exactly_what_was_committed(db: &TestDb) {
    const STREAMS: usize = 16;
    const MESSAGES: usize = 8;
    const PER_MESSAGE: usize = 50;
    let mut settings = config(db);
    settings.pipeline.queue_capacity = 4;
    settings.pipeline.batch_max_rows = PER_MESSAGE;
    settings.pipeline.enqueue_timeout = "1s".parse().unwrap();
    settings.pipeline.store_retry_timeout = "120s".parse().unwrap();
    let server = TestServer::start(settings).await;
    let lock = HeldLock::take(db).await;

    let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
    for stream in 0..STREAMS {
        let mut client = server.client().await;
        let chunks: Vec<PushRequest> = (0..MESSAGES)
            .map(|message| chunk(&format!("s{stream}-m{message}"), PER_MESSAGE))
            .collect();
        let done = done.clone();
        tokio::spawn(async move {
            let outcome = client.push(tokio_stream::iter(chunks)).await;
            let _ = done.send((stream, outcome.map(tonic::Response::into_inner)));
        });
    }
    drop(done);
    // The streams that found no room end at once; the others wait for their queued messages,
    // which commit only once the lock is gone.
    let mut outcomes = Vec::new();
    let released_by = Instant::now() + Duration::from_secs(30);
    while outcomes.len() < STREAMS / 2 && Instant::now() < released_by {
        if let Ok(Some(outcome)) =
            tokio::time::timeout(Duration::from_millis(200), finished.recv()).await
        {
            outcomes.push(outcome);
        }
    }
    lock.release().await;
    while let Some(outcome) = finished.recv().await {
        outcomes.push(outcome);
    }
    assert_eq!(outcomes.len(), STREAMS);

    let mut partial = 0;
    for (stream, outcome) in outcomes {
        let (accepted, not_stored) = match outcome {
            Ok(response) => (response.accepted, String::new()),
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                let trailer = |name| {
                    let value = status.metadata().get(name);
                    value
                        .unwrap_or_else(|| panic!("{name} missing: {status:?}"))
                        .to_str()
                        .unwrap()
                        .to_owned()
                };
                let not_stored = trailer("loghaul-unstored-messages");
                assert!(
                    status.message().contains("not stored: message"),
                    "{}",
                    status.message()
                );
                (trailer("loghaul-accepted").parse().unwrap(), not_stored)
            }
        };
        let stored = db
            .query_scalar(&format!(
                "SELECT count(*) FROM logs WHERE message LIKE 's{stream}-%'"
            ))
            .await;
        assert_eq!(
            accepted, stored as u64,
            "stream {stream}: not stored {not_stored:?}"
        );
        let not_stored = loghaul::proto::trailers::NotStored::from_header(&not_stored).unwrap();
        for message in 0..MESSAGES {
            let rows = db
                .query_scalar(&format!(
                    "SELECT count(*) FROM logs WHERE message LIKE 's{stream}-m{message}-%'"
                ))
                .await;
            let expected = if not_stored.contains(message as u64) {
                0
            } else {
                PER_MESSAGE as i64
            };
            assert_eq!(rows, expected, "stream {stream} message {message}");
        }
        if stored > 0 && !not_stored.is_empty() {
            partial += 1;
        }
    }
    assert!(partial > 0, "some stream stored part of what it sent");
    server.stop().await;
}
on_both_backends!(
    partial_failure_accounting,
    a_stream_that_fails_part_way_reports_exactly_what_was_committed
);
