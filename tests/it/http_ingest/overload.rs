//! The answers a client retries: 429 when its tenant is over its rate limit, 503 when the
//! pipeline is full or the database is down, each with `Retry-After` (whole seconds, at least 1)
//! and, for OTLP, a google.rpc.Status saying why, with a RetryInfo detail.

use std::time::Duration;

use prost::Message;

use super::{
    chunks_enqueued, otlp_request, post, send_loki, send_otlp, status_json, JSON, OTLP, PROTOBUF,
};
use crate::common::held_lock::HeldLock;
use crate::common::process::Process;
use crate::common::{
    config, http_request, wait_until, Backend, HttpAnswer, TestDb, TestServer, DEADLINE,
};

const RESOURCE_EXHAUSTED: i64 = 8;
const UNAVAILABLE: i64 = 14;

/// An OTLP/JSON export of `messages`.
async fn send_otlp_json(addr: std::net::SocketAddr, messages: &[&str]) -> HttpAnswer {
    let body = serde_json::to_vec(&otlp_request("checkout", messages)).unwrap();
    post(addr, OTLP, &[JSON], &body).await
}

/// `Retry-After` in seconds; fails the test when it is missing or below 1.
fn retry_after(answer: &HttpAnswer) -> u64 {
    let seconds: u64 = answer
        .header("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After: {answer:?}"))
        .parse()
        .unwrap();
    assert!(seconds >= 1, "{answer:?}");
    seconds
}

/// The retry delay of a google.rpc.Status in JSON, from its RetryInfo detail.
fn retry_info(status: &serde_json::Value) -> Duration {
    let detail = status["details"]
        .as_array()
        .and_then(|details| {
            details
                .iter()
                .find(|detail| detail["@type"] == "type.googleapis.com/google.rpc.RetryInfo")
        })
        .unwrap_or_else(|| panic!("no RetryInfo: {status}"));
    let delay = detail["retryDelay"].as_str().unwrap();
    Duration::from_secs_f64(delay.trim_end_matches('s').parse().unwrap())
}

/// A tenant allowed 0.1 records a second with a 10 s burst holds one record: the first export
/// takes it, the next is refused with 429 for about 10 s, on OTLP and on Loki.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_over_its_rate_limit_gets_429_with_retry_after() {
    let db = TestDb::create(Backend::Sqlite, "http_rate_limit")
        .await
        .unwrap();
    let mut settings = config(&db);
    settings.auth.tenant_records_per_second = 0.1;
    settings.auth.tenant_burst = "10s".parse().unwrap();
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    let first = send_otlp(addr, &[], &["within the limit"]).await;
    assert_eq!(first.status, 200, "{}", first.text());

    let limited = send_otlp_json(addr, &["over the limit"]).await;
    assert_eq!(limited.status, 429, "{}", limited.text());
    let seconds = retry_after(&limited);
    assert!(seconds <= 10, "{seconds}");
    let status = status_json(&limited);
    assert_eq!(status["code"], RESOURCE_EXHAUSTED, "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("tenant default is over its ingest rate limit"),
        "{message}"
    );
    let delay = retry_info(&status);
    assert!(
        delay > Duration::ZERO && delay.as_secs_f64().ceil() as u64 == seconds,
        "{delay:?} vs Retry-After {seconds}"
    );

    let limited = send_loki(addr, &[], r#"{job="x"}"#, &["over the limit (loki)"]).await;
    assert_eq!(limited.status, 429, "{}", limited.text());
    retry_after(&limited);
    assert!(limited.text().contains("rate limit"), "{}", limited.text());
    let messages: Vec<String> = db
        .stored()
        .await
        .into_iter()
        .map(|row| row.message)
        .collect();
    assert_eq!(messages, ["within the limit"]);
    server.stop().await;
}

/// A full pipeline: one shard whose one-chunk queue is full while its batch cannot be written
/// (the table is locked). The next request waits --enqueue-timeout for room and gets 503 with
/// Retry-After; the held ones are answered 200 once the lock goes, and the server serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pipeline_gets_503_with_retry_after() {
    let db = TestDb::create(Backend::Sqlite, "http_backpressure")
        .await
        .unwrap();
    // A process of its own, whose count of queued chunks is its own.
    let server = Process::serve(
        &db.url,
        &[
            "--shards",
            "1",
            "--queue-capacity",
            "1",
            // A chunk of one record fills a batch, which is written at once: the batcher holds
            // the first chunk alone and never takes the second into the same batch.
            "--batch-max-rows",
            "1",
            "--enqueue-timeout",
            "1s",
            "--store-retry-timeout",
            "120s",
        ],
    );
    let addr = server.http_ingest;
    let lock = HeldLock::take(&db).await;
    let mut held = Vec::new();
    for (n, name) in ["held-batch", "held-queue"].into_iter().enumerate() {
        held.push(tokio::spawn(async move {
            let body = otlp_request("checkout", &[name]).encode_to_vec();
            // Held until the lock is released, so guarded by the store's retry timeout rather
            // than the usual deadline.
            let answer = http_request(addr, "POST", OTLP, &[PROTOBUF], &body);
            tokio::time::timeout(Duration::from_secs(120), answer)
                .await
                .expect("an answer once the lock is released")
                .unwrap()
        }));
        // One chunk in the batch being written, then one in the queue.
        wait_until("the chunk to be queued", DEADLINE, async || {
            chunks_enqueued(&server).await == (n + 1) as f64
        })
        .await;
    }

    let refused = send_otlp_json(addr, &["refused"]).await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(retry_after(&refused), 1);
    let status = status_json(&refused);
    assert_eq!(status["code"], RESOURCE_EXHAUSTED, "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("overloaded") && message.contains("shard queue"),
        "{message}"
    );
    assert_eq!(retry_info(&status), Duration::from_secs(1));
    let refused = send_loki(addr, &[], r#"{job="x"}"#, &["refused (loki)"]).await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(retry_after(&refused), 1);
    assert!(refused.text().contains("overloaded"), "{}", refused.text());

    lock.release().await;
    for waiting in held {
        let answer = waiting.await.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    super::assert_still_serving(addr, "a full pipeline").await;
    let mut messages: Vec<String> = db
        .stored()
        .await
        .into_iter()
        .map(|row| row.message)
        .collect();
    messages.retain(|message| !message.starts_with("after "));
    assert_eq!(messages, ["held-batch", "held-queue"]);
}

/// The database cannot take the records (the table is gone) for longer than
/// --store-retry-timeout: 503 with Retry-After, the cause named without the database's own text;
/// once the table is back, the server stores again without a restart.
async fn a_store_that_cannot_commit_gets_503_with_retry_after(db: &TestDb) {
    let mut settings = config(db);
    settings.pipeline.store_retry_timeout = "1s".parse().unwrap();
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    db.execute("ALTER TABLE logs RENAME TO logs_elsewhere")
        .await;

    let refused = send_otlp_json(addr, &["not stored"]).await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    let seconds = retry_after(&refused);
    let status = status_json(&refused);
    assert_eq!(status["code"], UNAVAILABLE, "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(message.contains("database is unavailable"), "{message}");
    assert!(
        !message.contains("logs"),
        "no SQL reaches the client: {message}"
    );
    assert_eq!(retry_info(&status).as_secs(), seconds);
    let refused = send_loki(addr, &[], r#"{job="x"}"#, &["not stored (loki)"]).await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    retry_after(&refused);
    assert!(
        refused.text().contains("database is unavailable"),
        "{}",
        refused.text()
    );

    db.execute("ALTER TABLE logs_elsewhere RENAME TO logs")
        .await;
    super::assert_still_serving(addr, "the store came back").await;
    assert_eq!(db.count().await, 2, "only the follow-ups are stored");
    server.stop().await;
}
on_both_backends!(
    http_store_down,
    a_store_that_cannot_commit_gets_503_with_retry_after
);
