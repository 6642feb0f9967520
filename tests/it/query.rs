//! Reading back end to end: filters, newest-first keyset pages that stay exact while inserts go
//! on, invalid requests, and Tail (including a record committed by another server process).

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::process::Process;
use crate::common::{
    config, metric, push, query_all, record, record_at, wait_until, with_key, Backend, TestDb,
    TestServer, DEADLINE,
};
use loghaul::proto::v1::log_ingest_client::LogIngestClient;
use loghaul::proto::v1::log_query_client::LogQueryClient;
use loghaul::proto::v1::{Filter, QueryRequest, StoredRecord, TailRequest};
use tonic::Code;

fn ts(age: Duration) -> prost_types::Timestamp {
    let at = chrono::Utc::now() - chrono::TimeDelta::from_std(age).unwrap();
    prost_types::Timestamp {
        seconds: at.timestamp(),
        nanos: 0,
    }
}

fn messages(records: &[StoredRecord]) -> Vec<&str> {
    records.iter().map(|r| r.message.as_str()).collect()
}

async fn filters_select_and_pages_come_newest_first(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let mut ingest = server.client().await;
    let mut records = Vec::new();
    for n in 0..20u64 {
        // m00 is the newest (1 min ago), m19 the oldest (20 min ago).
        let mut r = record_at(format!("m{n:02}"), Duration::from_secs(60 * (n + 1)));
        r.service = if n % 2 == 0 { "api" } else { "db" }.into();
        r.severity = [9, 13, 17, 5][n as usize % 4];
        r.attributes = BTreeMap::from([("region".to_string(), format!("r{}", n % 3))])
            .into_iter()
            .collect();
        if n == 7 {
            r.message = "m07 card declined".into();
        }
        records.push(r);
    }
    push(&mut ingest, vec![records]).await.unwrap();
    let mut query = server.query_client().await;

    let all = query_all(&mut query, "", Filter::default(), 6)
        .await
        .unwrap();
    let expected: Vec<String> = (0..20)
        .map(|n| {
            if n == 7 {
                "m07 card declined".into()
            } else {
                format!("m{n:02}")
            }
        })
        .collect();
    assert_eq!(messages(&all), expected, "newest first, across pages of 6");
    let sample = all.iter().find(|r| r.message == "m04").unwrap();
    assert_eq!(sample.service, "api");
    assert_eq!(sample.attributes["region"], "r1");
    assert_eq!(sample.trace_id, record("x").trace_id);
    assert_eq!(sample.span_id, record("x").span_id);
    assert!(sample.received_at.is_some());

    let only = |filter: Filter| {
        let mut query = query.clone();
        async move { query_all(&mut query, "", filter, 100).await.unwrap() }
    };
    let db_warn = only(Filter {
        services: vec!["db".into()],
        min_severity: 13,
        ..Filter::default()
    })
    .await;
    // Odd n are "db"; severities by n % 4: 1 → 13, 3 → 5. So n = 1, 5, 9, 13, 17.
    assert_eq!(messages(&db_warn), ["m01", "m05", "m09", "m13", "m17"]);
    let range = only(Filter {
        from: Some(ts(Duration::from_secs(60 * 5 + 30))),
        to: Some(ts(Duration::from_secs(60 * 2 + 30))),
        ..Filter::default()
    })
    .await;
    assert_eq!(messages(&range), ["m02", "m03", "m04"]);
    let text = only(Filter {
        contains: "card decl".into(),
        ..Filter::default()
    })
    .await;
    assert_eq!(messages(&text), ["m07 card declined"]);
    let attr = only(Filter {
        attributes: [("region".to_string(), "r2".to_string())].into(),
        services: vec!["api".into()],
        ..Filter::default()
    })
    .await;
    // region r2: n % 3 == 2 → 2, 5, 8, 11, 14, 17; of those "api" (even): 2, 8, 14.
    assert_eq!(messages(&attr), ["m02", "m08", "m14"]);

    // The default page is 100 records and the last page has no cursor.
    let page = query
        .query(QueryRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.records.len(), 20);
    assert!(page.next_cursor.is_empty());
    server.stop().await;
}
on_both_backends!(
    filters_and_order,
    filters_select_and_pages_come_newest_first
);

async fn invalid_requests_say_why(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let mut query = server.query_client().await;
    let cases = [
        (
            QueryRequest {
                filter: Some(Filter {
                    from: Some(ts(Duration::from_secs(10))),
                    to: Some(ts(Duration::from_secs(20))),
                    ..Filter::default()
                }),
                ..QueryRequest::default()
            },
            "bad time range",
        ),
        (
            QueryRequest {
                cursor: "garbage".into(),
                ..QueryRequest::default()
            },
            "invalid cursor",
        ),
        (
            QueryRequest {
                page_size: 1001,
                ..QueryRequest::default()
            },
            "too large",
        ),
        (
            QueryRequest {
                filter: Some(Filter {
                    min_severity: 30,
                    ..Filter::default()
                }),
                ..QueryRequest::default()
            },
            "min_severity",
        ),
    ];
    for (request, reason) in cases {
        let status = query.query(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(reason), "{status:?}");
    }
    let status = query
        .tail(TailRequest {
            cursor: "garbage".into(),
            ..TailRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    server.stop().await;
}
on_both_backends!(invalid_requests, invalid_requests_say_why);

async fn pages_return_every_record_exactly_once_while_inserts_continue(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let mut ingest = server.client().await;
    // 1,200 records over the last hour, in groups of 4 sharing one timestamp, so the id breaks ties.
    let mut before = Vec::new();
    for n in 0..1200u64 {
        let mut r = record(format!("before-{n:04}"));
        r.timestamp = Some(ts(Duration::from_secs(1 + (n / 4) * 12)));
        before.push(r);
    }
    push(&mut ingest, before.chunks(300).map(<[_]>::to_vec).collect())
        .await
        .unwrap();

    // While the pages are read, other streams keep inserting: new records (newer than any page)
    // and late ones (timestamps inside the range being paged).
    let stop = tokio_util::sync::CancellationToken::new();
    let writer = {
        let stop = stop.clone();
        let mut client = server.client().await;
        tokio::spawn(async move {
            let mut sent = 0u64;
            while !stop.is_cancelled() {
                let chunk = (0..50)
                    .map(|n| {
                        let age = Duration::from_secs(if n % 2 == 0 { 0 } else { 60 * (n % 50) });
                        record_at(format!("during-{sent}-{n}"), age)
                    })
                    .collect();
                push(&mut client, vec![chunk]).await.unwrap();
                sent += 1;
            }
            sent
        })
    };
    wait_until(
        "the writer's first records to be stored",
        DEADLINE,
        async || db.count().await > 1200,
    )
    .await;
    let mut query = server.query_client().await;
    let mut seen = HashSet::new();
    let mut cursors = HashSet::new();
    let mut before_seen = Vec::new();
    let mut cursor = String::new();
    let mut previous: Option<(i64, i32)> = None;
    loop {
        let page = query
            .query(QueryRequest {
                filter: None,
                page_size: 37,
                cursor,
            })
            .await
            .unwrap()
            .into_inner();
        for r in &page.records {
            assert!(cursors.insert(r.cursor.clone()), "a record came twice");
            assert!(seen.insert(r.message.clone()), "{} came twice", r.message);
            let at = r.timestamp.unwrap();
            let key = (at.seconds, at.nanos);
            if let Some(previous) = previous {
                assert!(key <= previous, "newest first");
            }
            previous = Some(key);
            if r.message.starts_with("before-") {
                before_seen.push(r.message.clone());
            }
        }
        // Paced: pages are read slowly enough for the writer to interleave.
        tokio::time::sleep(Duration::from_millis(5)).await;
        if page.next_cursor.is_empty() {
            break;
        }
        cursor = page.next_cursor;
    }
    stop.cancel();
    let sent = writer.await.unwrap();
    assert!(sent > 0, "inserts went on during the paging");
    assert_eq!(before_seen.len(), 1200, "every earlier record exactly once");
    before_seen.sort();
    before_seen.dedup();
    assert_eq!(before_seen.len(), 1200);
    server.stop().await;
}
on_both_backends!(
    pagination_under_inserts,
    pages_return_every_record_exactly_once_while_inserts_continue
);

async fn a_tail_that_does_not_read_is_dropped_as_too_slow(db: &TestDb) {
    // A process of its own, whose metrics say when its tail was dropped.
    let server = Process::serve(&db.url, &["--tail-poll-interval", "20ms"]);
    let endpoint = format!("http://{}", server.grpc);
    let mut tail = LogQueryClient::connect(endpoint.clone())
        .await
        .unwrap()
        .tail(TailRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut ingest = LogIngestClient::connect(endpoint).await.unwrap();
    // Large messages, so the transport's buffers fill well before the subscriber's does.
    let big = "x".repeat(2000);
    for round in 0..30 {
        let chunk = (0..500)
            .map(|n| record(format!("{round}-{n} {big}")))
            .collect();
        push(&mut ingest, vec![chunk]).await.unwrap();
    }
    // The poller runs into the full buffer before anything is read.
    wait_until("the tail to be dropped as too slow", DEADLINE, async || {
        let text = server.metrics().await;
        metric(&text, "loghaul_tails_ended_total{reason=\"too_slow\"}") == 1.0
    })
    .await;
    let (received, status) = common::read_tail_to_status(&mut tail).await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("subscriber too slow"),
        "{status:?}"
    );
    assert!(received < 15_000, "dropped before the end: {received}");
    // Ingest was not slowed: everything was committed.
    assert_eq!(db.count().await, 15_000);
}
on_both_backends!(slow_tail, a_tail_that_does_not_read_is_dropped_as_too_slow);

async fn a_tail_resumes_after_a_cursor(db: &TestDb) {
    let mut settings = config(db);
    settings.query.tail_poll_interval = "20ms".parse().unwrap();
    let server = TestServer::start(settings).await;
    let mut ingest = server.client().await;
    push(&mut ingest, vec![vec![record("first")]])
        .await
        .unwrap();
    let mut query = server.query_client().await;
    let first = query_all(&mut query, "", Filter::default(), 10)
        .await
        .unwrap();
    push(&mut ingest, vec![vec![record("second"), record("third")]])
        .await
        .unwrap();
    let mut tail = query
        .tail(TailRequest {
            filter: None,
            cursor: first[0].cursor.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut got = Vec::new();
    while got.len() < 2 {
        let message = tokio::time::timeout(Duration::from_secs(5), tail.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        got.extend(message.records.into_iter().map(|r| r.message));
    }
    got.sort();
    assert_eq!(got, ["second", "third"], "only what came after the cursor");
    server.stop().await;
}
on_both_backends!(tail_from_cursor, a_tail_resumes_after_a_cursor);

/// Two servers on one PostgreSQL database, as replicas: a record committed through the second
/// shows up in a tail opened on the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tail_sees_records_committed_by_another_replica() {
    let Some(db) = TestDb::create(Backend::Postgres, "tail_replicas").await else {
        return;
    };
    let mut settings = config(&db);
    settings.auth.api_keys = Some("key-a=team-a".parse().unwrap());
    settings.query.tail_poll_interval = "100ms".parse().unwrap();
    let first = TestServer::start(settings.clone()).await;
    let second = TestServer::start(settings).await;
    let mut query = first.query_client().await;
    let mut tail = query
        .tail(with_key(
            "key-a",
            TailRequest {
                filter: Some(Filter {
                    services: vec!["checkout".into()],
                    ..Filter::default()
                }),
                cursor: String::new(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let mut ingest = second.client().await;
    let started = Instant::now();
    let mut other = record("elsewhere");
    other.service = "other".into();
    common::push_as(
        &mut ingest,
        "key-a",
        vec![vec![record("via-replica-2"), other]],
    )
    .await
    .unwrap();
    let message = tokio::time::timeout(Duration::from_secs(5), tail.message())
        .await
        .expect("delivered within 5 s")
        .unwrap()
        .unwrap();
    assert_eq!(messages(&message.records), ["via-replica-2"]);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    first.stop().await;
    second.stop().await;
}
