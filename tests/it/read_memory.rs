//! Reads bounded in memory across tenants, measured in a child process (its VmHWM): a LogQL
//! metric query over many series and many steps is charged for what it builds (series ×
//! points, their labels, its rendered answer) against `--max-query-bytes`, and the reads of every
//! tenant together against `--max-read-bytes`. Past either it is stopped and refused with a line
//! naming the option, however many tenants ask at once.

use std::net::SocketAddr;

use futures::future::join_all;
use loghaul::proto::v1::log_query_client::LogQueryClient;
use loghaul::proto::v1::QueryRequest;
use serde_json::{json, Value as Json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::process::Process;
use crate::common::{
    http_request, metric, metric_sum, wait_until, with_key, HttpAnswer, TestDb, DEADLINE,
};
use crate::http_ingest::{post, JSON, LOKI};

const NANOS: i64 = 1_000_000_000;
const DAY: i64 = 86_400;
const MIB: u64 = 1 << 20;
/// Tenants asking at once.
const TENANTS: usize = 8;
/// Lines per tenant, each with labels of its own: a series each.
const LINES: usize = 500;
/// The defaults of `--max-read-bytes` and `--max-query-bytes`.
const DEFAULT_READ_BYTES: u64 = 256 * MIB;
const DEFAULT_QUERY_BYTES: u64 = 64 * MIB;
/// What the process may take besides what reads are charged for: buffers the reads do not
/// count (the database's rows as they come, hyper's write buffer), and the allocator's slack,
/// which is largest when reads refused at their bound free what they made and try again in
/// halves.
const UNCOUNTED: u64 = 128 * MIB;

fn key(tenant: usize) -> String {
    format!("key-{tenant}")
}

fn keys() -> String {
    (0..TENANTS)
        .map(|n| format!("{}=memory-{n}", key(n)))
        .collect::<Vec<_>>()
        .join(",")
}

/// Pushes [`LINES`] lines for `tenant`, each in a stream of its own (a `line` label of its own),
/// spread over the 29 days before now.
async fn push_distinct(addr: SocketAddr, tenant: usize) {
    let now = chrono::Utc::now().timestamp();
    let spread = 29 * DAY - 3600;
    let streams: Vec<Json> = (0..LINES)
        .map(|n| {
            let seconds = now - 29 * DAY + n as i64 * spread / LINES as i64;
            let ts = seconds * NANOS + 123_000;
            json!({
                "stream": {"service_name": "x", "line": format!("l{n}")},
                "values": [[ts.to_string(), format!("line {n} of tenant {tenant}")]],
            })
        })
        .collect();
    let body = json!({ "streams": streams }).to_string();
    let key = key(tenant);
    let answer = post(addr, LOKI, &[JSON, ("x-api-key", &key)], body.as_bytes()).await;
    assert_eq!(answer.status, 204, "{}", answer.text());
}

/// A server with `extra` options whose first `tenants` tenants have pushed their lines. A
/// retention of 30 days lets the lines span the range; a debug build on two shared cores takes
/// seconds to write each answer, and time is not what is measured here, hence the longer timeout.
async fn serve_lines(db: &TestDb, tenants: usize, extra: &[&str]) -> Process {
    let keys = keys();
    let mut options = vec![
        "--api-keys",
        &keys,
        "--retention",
        "30d",
        "--query-timeout",
        "60s",
    ];
    options.extend_from_slice(extra);
    let server = Process::serve(&db.url, &options);
    for tenant in 0..tenants {
        push_distinct(server.http_ingest, tenant).await;
    }
    let all = (tenants * LINES) as i64;
    wait_until("every line stored", DEADLINE, async || {
        db.count().await >= all
    })
    .await;
    server
}

/// The path and query string of `count_over_time({service_name="x"}[30d])` over the 30 days
/// before now at `step` seconds.
fn over_30_days(step: u64) -> String {
    let now = chrono::Utc::now().timestamp();
    let query: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("query", r#"count_over_time({service_name="x"}[30d])"#),
            ("start", &(now - 30 * DAY).to_string()),
            ("end", &now.to_string()),
            ("step", &step.to_string()),
        ])
        .finish();
    format!("/loki/api/v1/query_range?{query}")
}

/// [`over_30_days`] asked as `tenant`; asked again when the database did not answer in time,
/// which a loaded test machine's PostgreSQL (every test's connections) can make it do.
async fn count_over_30_days(addr: SocketAddr, tenant: usize, step: u64) -> HttpAnswer {
    let target = over_30_days(step);
    let key = key(tenant);
    let mut tries = 0;
    loop {
        let answer = tokio::time::timeout(
            DEADLINE * 4,
            http_request(addr, "GET", &target, &[("x-api-key", &key)], b""),
        )
        .await
        .expect("the query is answered")
        .expect("the server answers");
        tries += 1;
        let store_down = answer.status == 503 && answer.text().contains("the database");
        if !store_down || tries == 5 {
            return answer;
        }
    }
}

/// What each answer was: its status, its size, and for a refusal its text.
fn summary(answers: &[HttpAnswer]) -> Vec<String> {
    answers
        .iter()
        .map(|answer| match answer.status {
            200 => format!("200, {} bytes", answer.body.len()),
            status => format!("{status}: {}", answer.text().trim()),
        })
        .collect()
}

/// A refusal for memory: 400 naming `--max-query-bytes`, or 503 naming `--max-read-bytes` with
/// `Retry-After`; one line of text either way.
fn assert_refused_for_memory(answer: &HttpAnswer) {
    let text = answer.text();
    assert!(text.len() < 1000, "a refusal is one line: {text}");
    assert_eq!(text.trim().lines().count(), 1, "{text}");
    match answer.status {
        400 => assert!(text.contains("(--max-query-bytes)"), "{text}"),
        503 => {
            assert!(text.contains("(--max-read-bytes)"), "{text}");
            assert_eq!(answer.header("retry-after"), Some("1"), "{text}");
        }
        status => panic!("{status} is not a refusal for memory: {text}"),
    }
}

/// The finding's query: 500 series (one per line, each with labels of its own) over 30 days at
/// a step of 236 s, 10,984 points per series. Once, then by eight tenants at once, then a query
/// of a quarter of the steps that fits one read's bound, by eight tenants at once: the first is
/// refused as too large for one read, and the server's peak memory stays within the reads' bound.
async fn many_series_over_many_steps_stay_within_the_read_bounds(db: &TestDb) {
    // The memory options at their defaults. Each tenant's read has a read connection of its own:
    // a debug build on two shared cores takes seconds to write each answer, during which the
    // other reads wait for a core, and time is not what is measured here.
    let server = serve_lines(db, TENANTS, &["--read-max-connections", "8"]).await;
    let (baseline, _) = server.rss();

    let started = std::time::Instant::now();
    let one = count_over_30_days(server.http_ingest, 0, 236).await;
    let one_took = started.elapsed();
    let (_, peak_one) = server.rss();
    eprintln!(
        "one query, step 236s: {:?} in {one_took:?}; RSS {} MiB before, peak {} MiB",
        summary(std::slice::from_ref(&one)),
        baseline >> 20,
        peak_one >> 20
    );

    let started = std::time::Instant::now();
    let eight =
        join_all((0..TENANTS).map(|t| count_over_30_days(server.http_ingest, t, 236))).await;
    let (_, peak_eight) = server.rss();
    eprintln!(
        "{TENANTS} tenants at once, step 236s: {:?} in {:?}; peak RSS {} MiB",
        summary(&eight),
        started.elapsed(),
        peak_eight >> 20
    );

    // A quarter of the steps: 22 MB of points and an 11 MB answer, within one read's bound.
    let started = std::time::Instant::now();
    let fitting =
        join_all((0..TENANTS).map(|t| count_over_30_days(server.http_ingest, t, 944))).await;
    let (_, peak_fitting) = server.rss();
    eprintln!(
        "{TENANTS} tenants at once, step 944s: {:?} in {:?}; peak RSS {} MiB",
        summary(&fitting),
        started.elapsed(),
        peak_fitting >> 20
    );
    let text = server.metrics().await;

    assert_eq!(
        one.status,
        400,
        "{}",
        one.text().chars().take(200).collect::<String>()
    );
    assert_refused_for_memory(&one);
    for answer in &eight {
        assert_refused_for_memory(answer);
    }
    let mut answered = 0;
    for answer in &fitting {
        if answer.status != 200 {
            assert_refused_for_memory(answer);
            continue;
        }
        answered += 1;
        let body: Json = serde_json::from_slice(&answer.body).unwrap();
        let series = body["data"]["result"].as_array().unwrap();
        assert_eq!(series.len(), LINES, "one series per line");
    }
    assert!(answered >= 1, "{:?}", summary(&fitting));
    let refused = fitting.len() - answered + eight.len() + 1;
    let counted = metric_sum(&text, "loghaul_read_memory_refusals_total");
    assert_eq!(counted as usize, refused, "every refusal is counted");
    let bound = baseline + DEFAULT_READ_BYTES + UNCOUNTED;
    assert!(
        peak_one < baseline + DEFAULT_QUERY_BYTES + UNCOUNTED,
        "one read: peak RSS {} MiB, over {} MiB",
        peak_one >> 20,
        (baseline + DEFAULT_QUERY_BYTES + UNCOUNTED) >> 20
    );
    assert!(
        peak_fitting < bound,
        "peak RSS {} MiB, over {} MiB",
        peak_fitting >> 20,
        bound >> 20
    );
}
on_both_backends!(
    read_memory_many_series,
    many_series_over_many_steps_stay_within_the_read_bounds
);

/// A request whose answer is not read: the connection after the answer's head, and the status.
async fn unread(addr: SocketAddr, target: &str, key: &str) -> (TcpStream, u16, Vec<u8>) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET {target} HTTP/1.1\r\nHost: loghaul\r\nx-api-key: {key}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let end = loop {
        if let Some(at) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let read = tokio::time::timeout(DEADLINE * 4, stream.read(&mut buffer))
            .await
            .expect("the answer's head comes")
            .unwrap();
        assert!(read > 0, "the server closed before its answer's head");
        received.extend_from_slice(&buffer[..read]);
    };
    let head = String::from_utf8_lossy(&received[..end]).into_owned();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(
        head.to_ascii_lowercase().contains("content-length:"),
        "{head}"
    );
    (stream, status, received[end..].to_vec())
}

/// An answer waiting for its client still holds its memory: one tenant's answer of 45 MB left
/// unread keeps the reads near `--max-read-bytes` (100 MiB here), so another tenant's query of
/// 88 MB of points is refused with 503 and Retry-After, and a gRPC Query page (which reserves
/// twice `--max-page-bytes`) with RESOURCE_EXHAUSTED and a retry delay, both naming the option.
/// Once the first client has read its answer, whole, the memory is given back and the same query
/// is answered.
async fn an_answer_holds_its_memory_until_its_client_takes_it(db: &TestDb) {
    let bounds = [
        "--max-read-bytes",
        "100MiB",
        "--max-query-bytes",
        "100MiB",
        "--max-page-bytes",
        "40MiB",
    ];
    let server = serve_lines(db, 2, &bounds).await;

    let (mut waiting, status, mut body) =
        unread(server.http_ingest, &over_30_days(236), &key(0)).await;
    assert_eq!(status, 200);
    let held = metric(&server.metrics().await, "loghaul_read_memory_bytes");
    eprintln!("an unread answer holds {} MiB", held as u64 >> 20);
    assert!(held > 40e6, "the unread answer holds its bytes: {held}");

    let refused = count_over_30_days(server.http_ingest, 1, 236).await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_refused_for_memory(&refused);
    let mut client = LogQueryClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    let page = client
        .query(with_key(&key(1), QueryRequest::default()))
        .await
        .unwrap_err();
    assert_eq!(page.code(), tonic::Code::ResourceExhausted, "{page:?}");
    assert!(page.message().contains("(--max-read-bytes)"), "{page:?}");
    let details = tonic_types::StatusExt::get_error_details(&page);
    assert!(details.retry_info().is_some(), "{page:?}");

    tokio::time::timeout(DEADLINE * 4, waiting.read_to_end(&mut body))
        .await
        .expect("the rest of the answer comes")
        .unwrap();
    let answer: Json = serde_json::from_slice(&body).expect("the whole answer, as JSON");
    assert_eq!(answer["data"]["result"].as_array().unwrap().len(), LINES);
    wait_until("the answer's memory given back", DEADLINE, async || {
        metric(&server.metrics().await, "loghaul_read_memory_bytes") == 0.0
    })
    .await;
    let answered = count_over_30_days(server.http_ingest, 1, 236).await;
    assert_eq!(answered.status, 200, "{}", answered.text());
    let page = client
        .query(with_key(&key(1), QueryRequest::default()))
        .await;
    assert!(page.is_ok(), "{page:?}");
    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            "loghaul_read_memory_refusals_total{limit=\"all_reads\",tenant=\"memory-1\"}"
        ),
        2.0,
        "{text}"
    );
}
on_both_backends!(
    read_memory_unread_answer,
    an_answer_holds_its_memory_until_its_client_takes_it
);

/// Lines of one stream each with a trace id of its own as structured metadata: a series each.
const TRACED_LINES: i64 = 3_000;

/// A server with `--max-query-bytes 2MiB` (and room for 100,000 series in an answer) where
/// `lines` lines of one stream, each with a trace id of its own, span the hour before the
/// minute `end` (seconds) and the ten minutes before it, a few every second, off the whole
/// second. Gives the server, `end` and the lines' times (nanoseconds).
async fn serve_traced(db: &TestDb, lines: i64) -> (Process, i64, Vec<i64>) {
    let server = Process::serve(
        &db.url,
        &[
            "--api-keys",
            "key-0=memory-0",
            "--max-query-bytes",
            "2MiB",
            "--max-page-bytes",
            "1MiB",
            "--max-query-series",
            "100000",
        ],
    );
    let end = chrono::Utc::now().timestamp() / 60 * 60;
    let start = end - 3600;
    let stamps: Vec<i64> = (0..lines)
        .map(|n| (start - 600) * NANOS + n * 4200 * NANOS / lines + 7_000)
        .collect();
    let values: Vec<Json> = stamps
        .iter()
        .enumerate()
        .map(|(n, ts)| json!([ts.to_string(), format!("line {n}"), {"trace_id": format!("t{n}")}]))
        .collect();
    let body = json!({"streams": [{"stream": {"service_name": "traced"}, "values": values}]});
    let answer = post(
        server.http_ingest,
        LOKI,
        &[JSON, ("x-api-key", "key-0")],
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(answer.status, 204, "{}", answer.text());
    wait_until("every line stored", DEADLINE, async || {
        db.count().await >= lines
    })
    .await;
    (server, end, stamps)
}

/// `query` over the hour before `end` at a step of a minute, as tenant `key-0`.
async fn over_the_hour(server: &Process, end: i64, query: &str) -> HttpAnswer {
    let target: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("query", query),
            ("start", &(end - 3600).to_string()),
            ("end", &end.to_string()),
            ("step", "60"),
        ])
        .finish();
    http_request(
        server.http_ingest,
        "GET",
        &format!("/loki/api/v1/query_range?{target}"),
        &[("x-api-key", "key-0")],
        b"",
    )
    .await
    .expect("the server answers")
}

/// The one series of a `count(count_over_time(…[10m]))` answer over the hour before `end`, and
/// what it must be: at each step t, the lines of `stamps` in (t − 10m, t].
fn counts_and_expected(answer: &HttpAnswer, end: i64, stamps: &[i64]) -> [Vec<(i64, String)>; 2] {
    assert_eq!(answer.status, 200, "{}", answer.text());
    let body: Json = serde_json::from_slice(&answer.body).unwrap();
    let series = body["data"]["result"].as_array().unwrap();
    assert_eq!(series.len(), 1, "{body}");
    let got: Vec<(i64, String)> = series[0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|point| {
            (
                point[0].as_i64().unwrap(),
                point[1].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let start = end - 3600;
    let expected: Vec<(i64, String)> = (0..=60)
        .map(|k| {
            let t = (start + k * 60) * NANOS;
            let lines = stamps
                .iter()
                .filter(|ts| **ts > t - 600 * NANOS && **ts <= t)
                .count();
            (start + k * 60, lines.to_string())
        })
        .collect();
    [got, expected]
}

/// `count(count_over_time(…[10m]))` over an hour at a step of a minute, where every line is a
/// series of its own: the 3,000 series at 61 steps do not fit a read of 2 MiB together, the
/// series alive within a few steps do, and the answer is one series. Answered (as Loki answers
/// it) a run of steps at a time, every step's count exact, and nothing counted as refused; an
/// answer that itself cannot fit is still refused.
async fn series_too_many_for_every_step_at_once_are_answered_a_run_of_steps_at_a_time(db: &TestDb) {
    let (server, end, stamps) = serve_traced(db, TRACED_LINES).await;
    let ask = async |query: &str| over_the_hour(&server, end, query).await;
    let answer = ask(r#"count(count_over_time({service_name="traced"}[10m]))"#).await;
    let [got, expected] = counts_and_expected(&answer, end, &stamps);
    assert_eq!(got, expected);
    let text = server.metrics().await;
    assert_eq!(
        metric_sum(&text, "loghaul_read_memory_refusals_total"),
        0.0,
        "a query answered in runs was not refused: {text}"
    );

    // Every series in the answer: 3,000 series at 61 steps do not fit, however they are read.
    let answer = ask(r#"count_over_time({service_name="traced"}[10m])"#).await;
    assert_eq!(answer.status, 400, "{}", answer.text());
    assert_refused_for_memory(&answer);
    let text = server.metrics().await;
    assert_eq!(
        metric_sum(&text, "loghaul_read_memory_refusals_total"),
        1.0,
        "{text}"
    );
}
on_both_backends!(
    read_memory_runs_of_steps,
    series_too_many_for_every_step_at_once_are_answered_a_run_of_steps_at_a_time
);

/// The same query where the series fit a read of 2 MiB once but not twice (1,000 series at
/// 61 steps, about 1.4 MiB): the count, which makes one series of them, holds its input once,
/// so the hour is read once and answered whole, not in runs.
async fn an_aggregation_holds_its_input_once(db: &TestDb) {
    let (server, end, stamps) = serve_traced(db, 1_000).await;
    let reads = async || metric_sum(&server.metrics().await, "loghaul_loki_metric_sources_total");
    let before = reads().await;
    let query = r#"count(count_over_time({service_name="traced"}[10m]))"#;
    let answer = over_the_hour(&server, end, query).await;
    let [got, expected] = counts_and_expected(&answer, end, &stamps);
    assert_eq!(got, expected);
    assert_eq!(reads().await - before, 1.0, "the hour read once");
}
on_both_backends!(
    read_memory_aggregation_input_once,
    an_aggregation_holds_its_input_once
);

/// Two sides of a binary operation that each fit a read of 2 MiB but not both at once: 3,000
/// lines of a series each, counted at one instant over 70 minutes. Read together they are
/// refused, so the query reads them again one after the other, each side's count giving back
/// its input before the next read. An instant query has one step and cannot be answered in runs
/// of steps: without reading its sides one at a time it would be refused. Answered exactly, and
/// nothing counted as refused.
async fn sides_that_fit_only_one_at_a_time_are_read_one_after_the_other(db: &TestDb) {
    let (server, end, stamps) = serve_traced(db, TRACED_LINES).await;
    let side = r#"count(count_over_time({service_name="traced"}[70m]))"#;
    let target: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("query", format!("{side} + {side}")),
            ("time", end.to_string()),
        ])
        .finish();
    let answer = http_request(
        server.http_ingest,
        "GET",
        &format!("/loki/api/v1/query?{target}"),
        &[("x-api-key", "key-0")],
        b"",
    )
    .await
    .expect("the server answers");
    assert_eq!(answer.status, 200, "{}", answer.text());
    let body: Json = serde_json::from_slice(&answer.body).unwrap();
    let lines = stamps
        .iter()
        .filter(|ts| **ts > (end - 4200) * NANOS && **ts <= end * NANOS)
        .count();
    assert_eq!(
        body["data"]["result"][0]["value"][1],
        json!((2 * lines).to_string()),
        "{body}"
    );
    let text = server.metrics().await;
    assert_eq!(
        metric_sum(&text, "loghaul_read_memory_refusals_total"),
        0.0,
        "{text}"
    );
}
on_both_backends!(
    read_memory_sides_one_at_a_time,
    sides_that_fit_only_one_at_a_time_are_read_one_after_the_other
);
