//! Limits on reads end to end, so that one tenant's reads cannot starve or exhaust the others':
//! answers bounded in bytes, reads stopped at their deadline (in the database too), searches
//! without `from` bounded in time, a tenant's concurrent reads capped without touching the
//! other tenants', and open tails capped per tenant and overall.

use std::collections::HashSet;
use std::str::FromStr;
use std::time::Duration;

use crate::common::http::get;
use crate::common::slow_read::{wait_for_waiting_reads, SlowRead};
use crate::common::{
    config, push, push_as, record, record_at, wait_until, with_key, Backend, TestDb, TestServer,
    DEADLINE,
};
use loghaul::proto::v1::{Filter, QueryRequest, TailRequest};
use prost::Message;
use sqlx::{ConnectOptions, Row};
use tonic::Code;

/// The default `--max-page-bytes`.
const DEFAULT_PAGE_BYTES: usize = 2 << 20;

/// `count` records of about `bytes` each, `big-000` the newest, one second apart.
fn big_records(count: u64, bytes: usize) -> Vec<Vec<loghaul::proto::v1::LogRecord>> {
    let padding = "x".repeat(bytes);
    let records: Vec<_> = (0..count)
        .map(|n| record_at(format!("big-{n:03} {padding}"), Duration::from_secs(n + 1)))
        .collect();
    // Chunks well under --max-request-bytes.
    records.chunks(30).map(<[_]>::to_vec).collect()
}

fn tag(message: &str) -> &str {
    message.split(' ').next().unwrap_or_default()
}

async fn pages_stop_at_their_byte_bound_and_continue_from_the_cursor(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let mut ingest = server.client().await;
    // 6 MB of records: one page of them would be three times the bound, and past the 4 MiB a
    // gRPC client accepts.
    push(&mut ingest, big_records(100, 60_000)).await.unwrap();
    let mut query = server.query_client().await;
    let mut seen = Vec::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let page = query
            .query(QueryRequest {
                filter: None,
                page_size: 1000,
                cursor,
            })
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        assert!(
            page.encoded_len() <= DEFAULT_PAGE_BYTES,
            "page {pages}: {} bytes",
            page.encoded_len()
        );
        assert!(
            !page.records.is_empty(),
            "a page with a cursor before it has records"
        );
        seen.extend(page.records.iter().map(|r| tag(&r.message).to_owned()));
        if page.next_cursor.is_empty() {
            break;
        }
        cursor = page.next_cursor;
    }
    let expected: Vec<String> = (0..100).map(|n| format!("big-{n:03}")).collect();
    assert_eq!(seen, expected, "every record once, newest first");
    assert!(pages >= 3, "{pages} pages");

    // The console pages the same way.
    let answer = get(server.console, "/api/v1/logs?page_size=1000", "", &[]).await;
    assert_eq!(
        answer.status,
        200,
        "{}",
        &answer.body[..200.min(answer.body.len())]
    );
    let body = answer.json();
    let records = body["records"].as_array().unwrap();
    assert!(
        records.len() < 100,
        "{} records in one console page",
        records.len()
    );
    assert!(!body["next_cursor"].as_str().unwrap().is_empty());
    server.stop().await;
}
on_both_backends!(
    page_bytes,
    pages_stop_at_their_byte_bound_and_continue_from_the_cursor
);

async fn tail_messages_are_bounded_in_bytes(db: &TestDb) {
    let mut settings = config(db);
    settings.query.tail_poll_interval = "20ms".parse().unwrap();
    let server = TestServer::start(settings).await;
    let mut tail = server.tail_everything().await;
    let mut ingest = server.client().await;
    // Committed in one stream, so one poll finds them all.
    push(&mut ingest, big_records(100, 60_000)).await.unwrap();
    let mut seen = HashSet::new();
    let mut messages = 0;
    while seen.len() < 100 {
        let message = tokio::time::timeout(Duration::from_secs(20), tail.message())
            .await
            .expect("the tail delivers within 20 s")
            .unwrap()
            .expect("the tail goes on");
        messages += 1;
        assert!(
            message.encoded_len() <= DEFAULT_PAGE_BYTES,
            "message {messages}: {} bytes",
            message.encoded_len()
        );
        for record in &message.records {
            assert!(
                seen.insert(tag(&record.message).to_owned()),
                "{} twice",
                tag(&record.message)
            );
        }
    }
    assert!(messages >= 3, "{messages} messages");
    server.stop().await;
}
on_both_backends!(tail_bytes, tail_messages_are_bounded_in_bytes);

/// SQLite: a `TRUNCATE` checkpoint, waiting at most a second for readers; true if one kept it
/// from completing.
async fn checkpoint_blocked(db: &TestDb) -> bool {
    let mut conn = sqlx::sqlite::SqliteConnectOptions::from_str(&db.url)
        .unwrap()
        .busy_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let row = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    row.get::<i64, _>(0) != 0
}

async fn a_read_past_its_deadline_is_stopped_in_the_database_and_says_what_to_do(db: &TestDb) {
    let mut settings = config(db);
    settings.query.query_timeout = "300ms".parse().unwrap();
    // One connection: a read still running on it would hold up every other.
    settings.query.read_max_connections = 1;
    let server = TestServer::start(settings).await;
    let mut ingest = server.client().await;
    push(&mut ingest, vec![vec![record("quick")]])
        .await
        .unwrap();
    let slow = SlowRead::start(db, "default").await;
    let mut query = server.query_client().await;
    let status = query
        .query(QueryRequest {
            filter: Some(slow.filter()),
            ..QueryRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    for advice in ["300ms (--query-timeout)", "narrow the time range"] {
        assert!(status.message().contains(advice), "{status:?}");
    }
    let answer = get(
        server.console,
        &format!("/api/v1/logs?{}", slow.query_string()),
        "",
        &[],
    )
    .await;
    assert_eq!(answer.status, 504, "{}", answer.body);
    assert_eq!(answer.json()["error"], status.message());

    // The database stopped the abandoned reads too, not only the service.
    match db.backend {
        Backend::Postgres => wait_for_waiting_reads(db, 0, Duration::from_secs(10)).await,
        Backend::Sqlite => {
            // A write moves the WAL past the abandoned reads' snapshot; only readers still
            // running could keep it from being checkpointed and truncated.
            push(&mut ingest, vec![vec![record("later")]])
                .await
                .unwrap();
            // An interrupted statement lets go of its snapshot when SQLite next checks for the
            // interrupt, which on a loaded machine can take a moment.
            wait_until(
                "the stopped reads to let go of the WAL",
                Duration::from_secs(10),
                async || !checkpoint_blocked(db).await,
            )
            .await;
        }
    }
    slow.release().await;
    // The only read connection is free again. A busy machine may make even this read miss its
    // 300 ms, so it may be tried again, for less time than the abandoned reads would have held
    // the connection.
    let quick = Filter {
        contains: "quick".into(),
        ..Filter::default()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let page = loop {
        let answer = query
            .query(QueryRequest {
                filter: Some(quick.clone()),
                ..QueryRequest::default()
            })
            .await;
        match answer {
            Ok(page) => break page.into_inner(),
            Err(status)
                if status.code() == Code::DeadlineExceeded
                    && std::time::Instant::now() < deadline => {}
            Err(status) => panic!("{status:?}"),
        }
    };
    assert_eq!(page.records.len(), 1);
    server.stop().await;
}
on_both_backends!(
    deadline,
    a_read_past_its_deadline_is_stopped_in_the_database_and_says_what_to_do
);

fn hours_ago(hours: i64) -> prost_types::Timestamp {
    let at = chrono::Utc::now() - chrono::TimeDelta::hours(hours);
    prost_types::Timestamp {
        seconds: at.timestamp(),
        nanos: 0,
    }
}

async fn a_search_without_from_reads_the_default_range_and_says_so(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let mut ingest = server.client().await;
    let hour = Duration::from_secs(3600);
    let records = [1, 23, 25, 48]
        .map(|hours| record_at(format!("{hours}h"), hour * hours))
        .to_vec();
    push(&mut ingest, vec![records]).await.unwrap();
    let query = server.query_client().await;
    let messages = |page: &loghaul::proto::v1::QueryResponse| -> Vec<String> {
        page.records.iter().map(|r| r.message.clone()).collect()
    };
    let search = |filter: Filter| {
        let mut query = query.clone();
        async move {
            query
                .query(QueryRequest {
                    filter: Some(filter),
                    ..QueryRequest::default()
                })
                .await
                .unwrap()
                .into_inner()
        }
    };

    // No range: the last 24 hours, and the answer says from when.
    let page = search(Filter::default()).await;
    assert_eq!(messages(&page), ["1h", "23h"]);
    let from = page.default_from.expect("the default range is reported");
    let expected = hours_ago(24).seconds;
    assert!((from.seconds - expected).abs() <= 5, "{from:?}");

    // Only `to`: the 24 hours before it.
    let page = search(Filter {
        to: Some(hours_ago(20)),
        ..Filter::default()
    })
    .await;
    assert_eq!(messages(&page), ["23h", "25h"]);
    assert!(page.default_from.is_some());

    // An explicit `from` reaches as far back as it says, and nothing is reported.
    let page = search(Filter {
        from: Some(hours_ago(72)),
        ..Filter::default()
    })
    .await;
    assert_eq!(messages(&page), ["1h", "23h", "25h", "48h"]);
    assert!(page.default_from.is_none());

    // The console the same.
    let answer = get(server.console, "/api/v1/logs", "", &[]).await;
    let body = answer.json();
    assert_eq!(body["records"].as_array().unwrap().len(), 2, "{body}");
    assert!(
        body["default_from"].as_str().unwrap().ends_with('Z'),
        "{body}"
    );
    let answer = get(server.console, "/api/v1/logs?since=72h", "", &[]).await;
    let body = answer.json();
    assert_eq!(body["records"].as_array().unwrap().len(), 4, "{body}");
    assert!(body.get("default_from").is_none(), "{body}");
    server.stop().await;
}
on_both_backends!(
    default_range,
    a_search_without_from_reads_the_default_range_and_says_so
);

const KEYS: &str = "key-a=team-a,key-b=team-b";

async fn a_tenants_reads_past_its_limit_are_refused_and_the_others_go_on(db: &TestDb) {
    let mut settings = config(db);
    settings.auth.api_keys = Some(KEYS.parse().unwrap());
    settings.query.max_concurrent_reads_per_tenant = 1;
    let server = TestServer::start(settings).await;
    let mut ingest = server.client().await;
    push_as(&mut ingest, "key-a", vec![vec![record("a-quick")]])
        .await
        .unwrap();
    push_as(&mut ingest, "key-b", vec![vec![record("b-quick")]])
        .await
        .unwrap();
    let slow = SlowRead::start(db, "team-a").await;
    let query = server.query_client().await;
    let read = |key: &'static str, filter: Filter| {
        let mut query = query.clone();
        tokio::spawn(async move {
            query
                .query(with_key(
                    key,
                    QueryRequest {
                        filter: Some(filter),
                        ..QueryRequest::default()
                    },
                ))
                .await
                .map(tonic::Response::into_inner)
        })
    };
    let quick = |text: &str| Filter {
        contains: text.into(),
        ..Filter::default()
    };

    // Two slow reads of team-a at once: one takes its only slot, the other waits its turn briefly
    // and is refused while the first still runs.
    let mut first = read("key-a", slow.filter());
    let mut second = read("key-a", slow.filter());
    let (refused, holder) = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::select! {
            answer = &mut first => (answer, second),
            answer = &mut second => (answer, first),
        }
    })
    .await
    .expect("one of the two is answered within 20 s");
    let status = refused.unwrap().unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    for words in [
        "team-a",
        "1 reads running (--max-concurrent-reads-per-tenant)",
    ] {
        assert!(status.message().contains(words), "{status:?}");
    }
    let answer = get(server.console, "/api/v1/logs", "key-a", &[]).await;
    assert_eq!(answer.status, 429, "{}", answer.body);
    assert_eq!(answer.json()["error"], status.message());
    assert_eq!(answer.header("retry-after"), Some("1"), "{answer:?}");
    // Loki's query API refuses it too, with the same delay to come back after.
    let loki = get(
        server.http_ingest,
        "/loki/api/v1/query_range?query=%7Bservice_name%3D%22a%22%7D",
        "key-a",
        &[],
    )
    .await;
    assert_eq!(loki.status, 429, "{}", loki.body);
    assert_eq!(loki.body.trim(), status.message());
    assert_eq!(loki.header("retry-after"), Some("1"), "{loki:?}");
    assert!(!holder.is_finished(), "the first read still runs");

    // team-b reads meanwhile, unaffected by team-a's limit.
    let other = read("key-b", quick("b-quick"));
    if db.backend == Backend::Postgres {
        // Admitted: it waits for the lock, as team-a's first read does.
        wait_for_waiting_reads(db, 2, Duration::from_secs(10)).await;
    }
    let theirs = tokio::time::timeout(Duration::from_secs(20), async {
        if db.backend == Backend::Postgres {
            slow.release().await;
        }
        other.await.unwrap().unwrap()
    })
    .await
    .expect("team-b's read is answered");
    assert_eq!(theirs.records.len(), 1);
    assert!(holder.await.unwrap().is_ok(), "the slot's holder finishes");

    // The slot is free again.
    let page = read("key-a", quick("a-quick")).await.unwrap().unwrap();
    assert_eq!(page.records.len(), 1);
    let metrics = server.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("loghaul_reads_refused_total")
                && line.contains("reason=\"tenant_reads\"")
                && line.contains("tenant=\"team-a\"")),
        "{metrics}"
    );
    server.stop().await;
}
on_both_backends!(
    tenant_reads,
    a_tenants_reads_past_its_limit_are_refused_and_the_others_go_on
);

async fn tails_past_the_caps_are_refused_and_a_closed_one_frees_its_place(db: &TestDb) {
    let mut settings = config(db);
    settings.auth.api_keys = Some(KEYS.parse().unwrap());
    settings.query.max_tails = 3;
    settings.query.max_tails_per_tenant = 2;
    let server = TestServer::start(settings).await;
    let query = server.query_client().await;
    let open = |key: &'static str| {
        let mut query = query.clone();
        async move {
            query
                .tail(with_key(key, TailRequest::default()))
                .await
                .map(tonic::Response::into_inner)
        }
    };
    let first = open("key-a").await.unwrap();
    let _second = open("key-a").await.unwrap();
    let status = open("key-a").await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains("tenant team-a already has 2 open tails (--max-tails-per-tenant)"),
        "{status:?}"
    );
    let _theirs = open("key-b").await.unwrap();
    let status = open("key-b").await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains("this server already has 3 open tails (--max-tails)"),
        "{status:?}"
    );
    let answer = get(server.console, "/api/v1/tail", "key-b", &[]).await;
    assert_eq!(answer.status, 429, "{}", answer.body);
    assert_eq!(answer.json()["error"], status.message());

    // Closing a tail gives its place back, once the server has seen the client go.
    drop(first);
    let mut again = None;
    wait_until("the closed tail's place to be free", DEADLINE, async || {
        match open("key-a").await {
            Ok(tail) => again = Some(tail),
            Err(status) if status.code() == Code::ResourceExhausted => {}
            Err(status) => panic!("{status:?}"),
        }
        again.is_some()
    })
    .await;
    server.stop().await;
}
on_both_backends!(
    tail_caps,
    tails_past_the_caps_are_refused_and_a_closed_one_frees_its_place
);

/// A LogQL read is fetched by a task of its own beside the query that consumes it: past the
/// deadline, both stop, and the statement with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loki_query_past_its_deadline_is_stopped_in_the_database() {
    let Some(db) = TestDb::create(Backend::Postgres, "loki_deadline").await else {
        return;
    };
    let mut settings = config(&db);
    settings.query.query_timeout = "300ms".parse().unwrap();
    settings.query.read_max_connections = 1;
    let server = TestServer::start(settings).await;
    let mut ingest = server.client().await;
    push(&mut ingest, vec![vec![record("quick")]])
        .await
        .unwrap();
    let slow = SlowRead::start(&db, "default").await;
    // A pipeline the database cannot count: its lines are read and parsed.
    let scan = "/loki/api/v1/query_range?query=sum%28count_over_time%28%7Bservice_name%3D~%22.%2B%22%7D%20%7C%20json%20%5B5m%5D%29%29&since=10m";
    let answer = get(server.http_ingest, scan, "", &[]).await;
    assert_eq!(answer.status, 504, "{}", answer.body);
    assert!(answer.body.contains("--query-timeout"), "{}", answer.body);
    wait_for_waiting_reads(&db, 0, Duration::from_secs(10)).await;
    slow.release().await;
    // The only read connection serves the next query.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let answer = get(server.http_ingest, scan, "", &[]).await;
        if answer.status == 200 {
            assert!(answer.body.contains("\"result\""), "{}", answer.body);
            break;
        }
        assert!(
            answer.status == 504 && std::time::Instant::now() < deadline,
            "{answer:?}"
        );
    }
    server.stop().await;
}
