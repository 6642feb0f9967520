//! JSON bodies whose entries are nearly all malformed: two million `0`s in a Loki push's `values`
//! or in an OTLP/JSON `logRecords` list, 4 MB inflated and about 4 KB gzipped, with a few valid
//! entries among them. Each is answered with the exact count of the refused entries, the first
//! few named with reasons of bounded length, the valid entries are stored, and the server's
//! memory stays within what the inflated body legitimately costs: one text per refused entry
//! would be hundreds of MB.

use std::net::SocketAddr;

use std::time::{Duration, Instant};

use super::{gzip, now_nanos, JSON, LOKI, OTLP};
use crate::common::process::Process;
use crate::common::{http_request, HttpAnswer, TestDb};

const MIB: u64 = 1 << 20;
/// The budget of the process under test.
const BUDGET: u64 = 16 * MIB;
/// Malformed entries between two valid ones; a request holds two such runs.
const RUN: usize = 1_000_000;
/// Refused entries in a request: one with a long reason, the two runs of `0`s and one trailing
/// `0`.
const REFUSED: u64 = 1 + 2 * RUN as u64 + 1;
/// Entries in a request: the refused ones and three valid ones.
const ENTRIES: u64 = REFUSED + 3;
/// Rejections a reply names one by one (`RequestTally::summary`); the count covers the rest.
const LISTED: u64 = 10;
/// Longest a named reason may be in a reply.
const REASON_CHARS: usize = 200;
/// Concurrent requests in the second round.
const CONCURRENT: usize = 8;

/// The entries of a request, as JSON array items: `first`, one refused with a reason of several
/// thousand characters (`long`), a run of `0`s, `middle`, another run, `last`, and one trailing
/// `0`, so that refused entries come before, between and after the valid ones.
fn entries(valid: impl Fn(&str) -> String, long: &str) -> String {
    let zeros = vec!["0"; RUN].join(",");
    [
        valid("first"),
        long.to_owned(),
        zeros.clone(),
        valid("middle"),
        zeros,
        valid("last"),
        "0".to_owned(),
    ]
    .join(",")
}

/// A Loki JSON push from `service`, gzipped.
fn loki_body(service: &str) -> Vec<u8> {
    let at = now_nanos().to_string();
    let valid = |line: &str| format!(r#"["{at}","{service} {line}"]"#);
    // A timestamp of 5,000 digits is quoted in its reason.
    let long = format!(r#"["{}","x"]"#, "9".repeat(5000));
    let body = format!(
        r#"{{"streams":[{{"stream":{{"service_name":"{service}"}},"values":[{}]}}]}}"#,
        entries(valid, &long)
    );
    gzipped_under_the_limit(body)
}

/// An OTLP/JSON export from `service`, gzipped.
fn otlp_body(service: &str) -> Vec<u8> {
    let at = now_nanos().to_string();
    let valid = |line: &str| {
        format!(r#"{{"timeUnixNano":"{at}","body":{{"stringValue":"{service} {line}"}}}}"#)
    };
    // A body that is a string rather than an AnyValue is quoted in its reason.
    let long = format!(r#"{{"body":"{}"}}"#, "y".repeat(5000));
    let body = format!(
        r#"{{"resourceLogs":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"{service}"}}}}]}},"scopeLogs":[{{"logRecords":[{}]}}]}}]}}"#,
        entries(valid, &long)
    );
    gzipped_under_the_limit(body)
}

fn gzipped_under_the_limit(body: String) -> Vec<u8> {
    assert!(
        body.len() > 4_000_000 && body.len() < 4 * MIB as usize,
        "{} bytes: inflated, the body fills but does not pass --max-request-bytes",
        body.len()
    );
    let gzipped = gzip(body.as_bytes());
    assert!(gzipped.len() < 64 * 1024, "{} bytes gzipped", gzipped.len());
    gzipped
}

/// How long a request may take: two million entries are parsed one by one, eight requests at
/// once on two cores in a debug build.
const ANSWERED_WITHIN: Duration = Duration::from_secs(300);

/// Sends a gzipped JSON body to `path`; the answer, or why there was none.
async fn send(addr: SocketAddr, path: &str, body: &[u8]) -> Result<HttpAnswer, String> {
    let headers = [JSON, ("content-encoding", "gzip")];
    let started = Instant::now();
    let answer = tokio::time::timeout(
        ANSWERED_WITHIN,
        http_request(addr, "POST", path, &headers, body),
    )
    .await
    .map_err(|_| format!("POST {path} not answered within {ANSWERED_WITHIN:?}"))?
    .map_err(|err| format!("POST {path}: {err}"))?;
    eprintln!("POST {path}: {} in {:?}", answer.status, started.elapsed());
    Ok(answer)
}

/// The rejection summary of a reply names the first `LISTED` refused entries in order, the long
/// reason cut, and counts the rest: "N of M … rejected (…): #1 …; #2 …; … and K more".
fn assert_summary(message: &str, records: &str, long_reason: &str, zero_reason: &str) {
    let (head, list) = message
        .split_once("): #")
        .unwrap_or_else(|| panic!("a list of rejections: {message:.500}"));
    let expected = format!("{REFUSED} of {ENTRIES} {records} rejected (");
    assert!(head.starts_with(&expected), "{head}");
    let (list, more) = list
        .trim_end()
        .rsplit_once("; and ")
        .unwrap_or_else(|| panic!("the unlisted counted: {message:.500}"));
    assert_eq!(more, format!("{} more", REFUSED - LISTED));
    let listed: Vec<&str> = list.split("; #").collect();
    assert_eq!(listed.len() as u64, LISTED, "{message:.3000}");
    let first = listed[0].strip_prefix("1 ").unwrap_or(listed[0]);
    assert!(first.starts_with(long_reason), "{first:.300}");
    assert!(
        first.chars().count() <= REASON_CHARS,
        "{} chars",
        first.len()
    );
    for (n, named) in listed.iter().enumerate().skip(1) {
        let expected = format!("{} {zero_reason}", n + 1);
        assert!(named.starts_with(&expected), "{named}");
    }
    assert!(
        message.len() < 600 + LISTED as usize * (REASON_CHARS + 16),
        "{} bytes",
        message.len()
    );
}

/// What one request may add to the server's peak RSS: its body (4 MB inflated), the inflate
/// buffer's copy as it doubles, the protobuf of its valid entries and one bit per refused one
/// (a quarter of a MiB for two million), ten reasons of 200 characters; and 32 MiB for the
/// allocator and the thread the transcoder runs on. A reason per refused entry took 300 MiB.
const ONE_REQUEST_GROWTH: u64 = 48 * MIB;

/// What concurrent requests may add to it. Every byte a request holds is charged to the budget
/// first, so requests hold at most `BUDGET` at once; up to as much again is uncharged slack or
/// copies (the inflate buffer doubles as it fills) and 64 MiB are the allocator's. A reason per
/// refused entry took 600 to 800 MiB for eight requests.
const GROWTH: u64 = 2 * BUDGET + 64 * MIB;

/// Sends one request made by `body`, then `CONCURRENT` at once, checking each answer with
/// `check`; asserts the stored rows and the memory bound after each round.
async fn one_then_many(
    db: &TestDb,
    path: &str,
    body: fn(&str) -> Vec<u8>,
    check: fn(&HttpAnswer),
    label: &str,
) {
    let server = Process::serve(&db.url, &["--max-buffered-bytes", "16MiB"]);
    let addr = server.http_ingest;
    let (baseline, _) = server.rss();

    let first = send(addr, path, &body("svc-0")).await;
    let (_, one) = server.rss();
    let calls: Vec<_> = (1..=CONCURRENT)
        .map(|n| {
            let body = body(&format!("svc-{n}"));
            let path = path.to_owned();
            tokio::spawn(async move { send(addr, &path, &body).await })
        })
        .collect();
    let mut answers = vec![first];
    for call in calls {
        answers.push(call.await.unwrap());
    }
    let (_, many) = server.rss();
    eprintln!(
        "{label}: RSS baseline {} MiB, peak after one request {} MiB, after {CONCURRENT} at once {} MiB",
        baseline >> 20,
        one >> 20,
        many >> 20
    );
    // Each waits its turn for the budget, holding nothing meanwhile: every one is answered in full.
    let mut stored = Vec::new();
    for (n, answer) in answers.into_iter().enumerate() {
        let answer = answer.unwrap_or_else(|err| panic!("{label}: {err}"));
        check(&answer);
        stored.push(n);
    }
    let rows = db.stored().await;
    assert_eq!(rows.len(), 3 * stored.len(), "{rows:?}");
    for n in stored {
        let service = format!("svc-{n}");
        let mut lines: Vec<&str> = rows
            .iter()
            .filter(|row| row.service == service)
            .map(|row| row.message.as_str())
            .collect();
        lines.sort_unstable();
        let expected = ["first", "last", "middle"].map(|line| format!("{service} {line}"));
        assert_eq!(lines, expected, "{service}");
    }
    for (round, peak, growth) in [
        ("one request", one, ONE_REQUEST_GROWTH),
        ("eight at once", many, GROWTH),
    ] {
        assert!(
            peak < baseline + growth,
            "{label}, {round}: peak RSS {} MiB over the bound of {} MiB",
            peak >> 20,
            (baseline + growth) >> 20
        );
    }
}

fn check_loki(answer: &HttpAnswer) {
    assert_eq!(answer.status, 400, "{:.500}", answer.text());
    assert_summary(
        &answer.text(),
        "entries",
        "invalid_timestamp: timestamp \"99999",
        "malformed_record: an entry is",
    );
}

fn check_otlp(answer: &HttpAnswer) {
    assert_eq!(answer.status, 200, "{:.500}", answer.text());
    let response: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    let partial = &response["partialSuccess"];
    assert_eq!(
        partial["rejectedLogRecords"].as_u64(),
        Some(REFUSED),
        "{partial:.500}"
    );
    assert_summary(
        partial["errorMessage"].as_str().unwrap(),
        "log records",
        "malformed_record: not a valid OTLP/JSON log record: invalid type: string \"yyy",
        "malformed_record: not a valid OTLP/JSON log record: invalid type: integer",
    );
}

async fn a_loki_push_of_two_million_malformed_entries_is_counted_not_spelled_out(db: &TestDb) {
    one_then_many(db, LOKI, loki_body, check_loki, "Loki JSON").await;
}
on_both_backends!(
    loki_two_million_malformed,
    a_loki_push_of_two_million_malformed_entries_is_counted_not_spelled_out
);

async fn an_otlp_export_of_two_million_malformed_records_is_counted_not_spelled_out(db: &TestDb) {
    one_then_many(db, OTLP, otlp_body, check_otlp, "OTLP/JSON").await;
}
on_both_backends!(
    otlp_two_million_malformed,
    an_otlp_export_of_two_million_malformed_records_is_counted_not_spelled_out
);

/// One entry of two million items (a Loki entry is two or three; an OTLP record's attributes are
/// objects, not `0`s), after a valid one, in each protocol: the entry is refused alone, reading
/// no further into it than the first item that does not fit, and the valid one is stored. Read
/// as a tree of JSON values first, such an entry took 150 to 200 MiB.
async fn one_entry_of_two_million_items_is_refused_without_a_tree_of_it(db: &TestDb) {
    let server = Process::serve(&db.url, &["--max-buffered-bytes", "16MiB"]);
    let addr = server.http_ingest;
    let (baseline, _) = server.rss();
    let zeros = vec!["0"; 2_000_000].join(",");
    let at = now_nanos().to_string();

    let otlp = format!(
        r#"{{"resourceLogs":[{{"scopeLogs":[{{"logRecords":[{{"timeUnixNano":"{at}","body":{{"stringValue":"otlp ok"}}}},{{"attributes":[{zeros}]}}]}}]}}]}}"#
    );
    let answer = send(addr, OTLP, &gzip(otlp.as_bytes())).await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    let response: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    let partial = &response["partialSuccess"];
    assert_eq!(partial["rejectedLogRecords"], 1, "{partial}");
    let message = partial["errorMessage"].as_str().unwrap();
    assert!(
        message.ends_with("#1 malformed_record: not a valid OTLP/JSON log record: invalid type: integer `0`, expected struct KeyValue"),
        "{message}"
    );
    let (_, after_otlp) = server.rss();

    let loki = format!(
        r#"{{"streams":[{{"stream":{{"service_name":"loki"}},"values":[["{at}","loki ok"],["{at}","x",{{}},{zeros}]]}}]}}"#
    );
    let answer = send(addr, LOKI, &gzip(loki.as_bytes())).await.unwrap();
    assert_eq!(answer.status, 400, "{}", answer.text());
    assert!(
        answer.text().trim_end().ends_with(r#"#1 malformed_record: an entry is ["<unix epoch in nanoseconds>", "<line>"] or ["<ns>", "<line>", {structured metadata}]"#),
        "{}",
        answer.text()
    );
    let (_, after_loki) = server.rss();
    eprintln!(
        "one entry of two million items: RSS baseline {} MiB, peak after OTLP/JSON {} MiB, after Loki JSON {} MiB",
        baseline >> 20,
        after_otlp >> 20,
        after_loki >> 20
    );
    let mut stored: Vec<String> = db
        .stored()
        .await
        .into_iter()
        .map(|row| row.message)
        .collect();
    stored.sort_unstable();
    assert_eq!(stored, ["loki ok", "otlp ok"]);
    assert!(
        after_loki < baseline + ONE_REQUEST_GROWTH,
        "peak RSS {} MiB over the bound of {} MiB",
        after_loki >> 20,
        (baseline + ONE_REQUEST_GROWTH) >> 20
    );
}
on_both_backends!(
    one_entry_of_two_million_items,
    one_entry_of_two_million_items_is_refused_without_a_tree_of_it
);
