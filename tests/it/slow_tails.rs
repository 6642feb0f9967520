//! Tail subscribers that do not read, on the real binary: gRPC `Tail`, the console's live tail
//! (Server-Sent Events) and Loki's tail (a WebSocket), each fed far more matching lines than its
//! queue holds. Each costs the server a bounded number of bytes, is dropped soon after its queue
//! fills, and finds why once it reads again; a tail that reads gets every line meanwhile.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use loghaul::proto::v1::log_ingest_client::LogIngestClient;
use loghaul::proto::v1::log_query_client::LogQueryClient;
use loghaul::proto::v1::{Filter, TailRequest, TailResponse};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tonic::{Code, Streaming};

use crate::common::http::EventStream;
use crate::common::process::Process;
use crate::common::{
    http_get, metric, push, read_tail_to_status, record, wait_until, TestDb, DEADLINE,
};
use crate::loki_tail::connect;

const MIB: u64 = 1 << 20;
/// Non-reading tails of each kind.
const SLOW_PER_KIND: usize = 8;
/// What is pushed: 6,000 records of 4 KB, 24 MB, twice what a non-reading tail can hold in its
/// queue, its transport's buffers and its socket together.
const STREAMS: usize = 6;
const CHUNKS_PER_STREAM: usize = 4;
const RECORDS_PER_CHUNK: usize = 250;
const TOTAL: usize = STREAMS * CHUNKS_PER_STREAM * RECORDS_PER_CHUNK;
const MESSAGE_BYTES: usize = 4000;
/// `--tail-queue-bytes` at its default, and the largest tail message it allows (a quarter of it,
/// within `--max-page-bytes`).
const QUEUE_BYTES: u64 = 4 * MIB;
const TAIL_MESSAGE: u64 = QUEUE_BYTES / 4;
/// What a subscriber's connection holds besides what its queue counts: the message its transport
/// has taken and not yet written (hyper's HTTP/2 stream keeps one written and one waiting), the
/// next one's JSON or protobuf form, and the transport's own buffer (hyper's 400 KiB).
const TRANSPORT_BYTES: u64 = 2 * TAIL_MESSAGE + MIB;
/// Ingest's share of the growth, and the reading tail's: SQLite's page cache (64 MiB) filling
/// with what is written, the 16 MiB budget, the batches being written.
const INGEST_BYTES: u64 = 96 * MIB;
/// How soon after the last push is committed every slow tail must be dropped: the stall grace
/// (5 s) once its queue is full, on a busy debug build.
const DROP_WITHIN: Duration = Duration::from_secs(15);

/// A gRPC tail of the pushed service.
async fn grpc_tail(endpoint: &str) -> Streaming<TailResponse> {
    LogQueryClient::connect(endpoint.to_owned())
        .await
        .unwrap()
        .tail(TailRequest {
            filter: Some(Filter {
                services: vec!["checkout".into()],
                ..Filter::default()
            }),
            ..TailRequest::default()
        })
        .await
        .unwrap()
        .into_inner()
}

async fn slow_tails_are_dropped_with_a_reason_and_cost_bounded_memory(db: &TestDb) {
    let server = Process::serve(
        &db.url,
        &[
            "--tail-poll-interval",
            "50ms",
            // Ingest's own memory stays small beside the tails'.
            "--max-buffered-bytes",
            "16MiB",
            // Every tail polls at once instead of queueing for the tenant's read slots.
            "--read-max-connections",
            "8",
            "--max-concurrent-reads-per-tenant",
            "6",
        ],
    );
    let endpoint = format!("http://{}", server.grpc);

    // The one tail that reads, counting what it gets.
    let mut reader = grpc_tail(&endpoint).await;
    let reading = tokio::spawn(async move {
        let mut seen = HashSet::new();
        while seen.len() < TOTAL {
            match reader.message().await {
                Ok(Some(message)) => {
                    for record in message.records {
                        assert!(seen.insert(record.message), "a record came twice");
                    }
                }
                other => panic!("the reading tail ended: {other:?}"),
            }
        }
        (Instant::now(), reader)
    });
    // The ones that do not read: they only hold their connection.
    let mut grpc = Vec::new();
    let mut console = Vec::new();
    let mut websockets = Vec::new();
    for _ in 0..SLOW_PER_KIND {
        grpc.push(grpc_tail(&endpoint).await);
        console.push(EventStream::open(server.console, "/api/v1/tail?service=checkout", "").await);
        websockets.push(
            connect(
                server.http_ingest,
                "",
                &[("query", r#"{service_name="checkout"}"#)],
            )
            .await,
        );
    }
    let slow = 3 * SLOW_PER_KIND;
    wait_until("every tail polling", DEADLINE, async || {
        metric(&server.metrics().await, "loghaul_tail_subscribers") == (slow + 1) as f64
    })
    .await;
    let (baseline, _) = server.rss();

    // The most queued for tails at any time, sampled until the end of the drops.
    let queued_peak = Arc::new(AtomicU64::new(0));
    let sampling = {
        let metrics = server.http;
        let most = Arc::clone(&queued_peak);
        tokio::spawn(async move {
            loop {
                if let Ok((_, text)) = http_get(metrics, "/metrics").await {
                    let queued = metric(&text, "loghaul_tail_queued_bytes") as u64;
                    most.fetch_max(queued, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let mut ingest = LogIngestClient::connect(endpoint.clone()).await.unwrap();
    let padding = "x".repeat(MESSAGE_BYTES);
    let started = Instant::now();
    for stream in 0..STREAMS {
        let chunks = (0..CHUNKS_PER_STREAM)
            .map(|chunk| {
                (0..RECORDS_PER_CHUNK)
                    .map(|n| record(format!("{stream}-{chunk}-{n} {padding}")))
                    .collect()
            })
            .collect();
        let answer = push(&mut ingest, chunks).await.unwrap();
        assert_eq!(
            answer.accepted as usize,
            CHUNKS_PER_STREAM * RECORDS_PER_CHUNK
        );
    }
    let pushed = Instant::now();

    // Every slow tail is dropped as too slow, soon. Polled here rather than by `wait_until`, so
    // that the figures are printed before they are checked, a failing run's too.
    let mut dropped = 0.0;
    let all_dropped = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let text = server.metrics().await;
            dropped = metric(&text, "loghaul_tails_ended_total{reason=\"too_slow\"}");
            if dropped >= slow as f64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .is_ok();
    let dropped_after = pushed.elapsed();
    sampling.abort();
    let queued_peak = queued_peak.load(Ordering::Relaxed) as f64;
    let (after_drop, peak) = server.rss();
    let queued_after = metric(&server.metrics().await, "loghaul_tail_queued_bytes");
    // A subscriber holds its queue and what its transport holds.
    let bound = slow as u64 * (QUEUE_BYTES + TRANSPORT_BYTES) + INGEST_BYTES;
    eprintln!(
        "{slow} slow tails: pushed {TOTAL} records in {:.1?}, {dropped} dropped {dropped_after:.1?} after the last push; \
         RSS baseline {} MiB, peak {} MiB (+{} MiB, bound +{} MiB), {} MiB after the drops; \
         tail queues at most {:.1} MiB, {:.1} MiB after the drops",
        pushed - started,
        baseline / MIB,
        peak / MIB,
        peak.saturating_sub(baseline) / MIB,
        bound / MIB,
        after_drop / MIB,
        queued_peak / MIB as f64,
        queued_after / MIB as f64,
    );
    assert!(
        all_dropped && dropped_after <= DROP_WITHIN,
        "{dropped} of {slow} slow tails dropped {dropped_after:?} after the last push"
    );
    assert!(
        peak - baseline <= bound,
        "peak RSS {} MiB above the baseline: over the bound of {} MiB",
        (peak - baseline) / MIB,
        bound / MIB
    );
    // A dropped subscriber's queue is released at once, before its client reads anything: what
    // stays counted is the message each transport has taken (the reading tail's included). The
    // allocator keeps the freed pages for reuse, so RSS is not where this shows.
    assert!(
        queued_after <= ((slow + 1) as u64 * TAIL_MESSAGE) as f64,
        "{} MiB still queued",
        queued_after / MIB as f64
    );

    // The reading tail got every record meanwhile, as it was committed.
    let (complete, reader) = tokio::time::timeout(DEADLINE, reading)
        .await
        .expect("the reading tail gets every record")
        .unwrap();
    let late = complete.saturating_duration_since(pushed);
    eprintln!("the reading tail had every record {late:.1?} after the last push");
    assert!(late <= Duration::from_secs(5), "{late:?}");

    // Each slow client, reading at last, finds why it was dropped after what was in flight.
    for mut tail in grpc {
        let (_, status) = read_tail_to_status(&mut tail).await;
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(
            status.message().contains("subscriber too slow"),
            "{status:?}"
        );
    }
    for mut socket in websockets {
        let frame = loop {
            match tokio::time::timeout(DEADLINE, socket.next())
                .await
                .expect("the dropped tail closes")
            {
                Some(Ok(Message::Close(frame))) => break frame,
                Some(Ok(_)) => continue,
                other => panic!("expected a close frame, got {other:?}"),
            }
        };
        let frame = frame.expect("the close says why");
        assert_eq!(frame.code, CloseCode::Policy, "{frame:?}");
        assert!(frame.reason.contains("subscriber too slow"), "{frame:?}");
    }
    for mut events in console {
        events.read_to_end(DEADLINE).await;
        let errors = events.events("error");
        assert_eq!(errors.len(), 1, "one error event at the end");
        let error = errors[0]["error"].as_str().unwrap();
        assert!(error.contains("subscriber too slow"), "{error}");
    }
    wait_until("only the reading tail open", DEADLINE, async || {
        metric(&server.metrics().await, "loghaul_tail_subscribers") == 1.0
    })
    .await;
    drop(reader);
}
on_both_backends!(
    slow_tails,
    slow_tails_are_dropped_with_a_reason_and_cost_bounded_memory
);
