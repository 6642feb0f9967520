//! A metric query's scan of a few streams among many counts every line once: SQLite steps such
//! a read in two halves of its range side by side, and a line on the second where they meet
//! belongs to exactly one of them.

use serde_json::{json, Value as Json};

use crate::common::{config, wait_until, TestDb, TestServer, DEADLINE};
use crate::loki_query::{base_minute, ok, push_json, INSTANT, KEYS, NANOS, RANGE};

/// Lines of the few: one on every whole second of five minutes.
const RARE_SECONDS: i64 = 300;
/// Lines of the many in each of those seconds: the few are under a twentieth of the tenant's.
const BULK_PER_SECOND: i64 = 20;

async fn a_scan_of_a_few_streams_among_many_counts_each_line_once(db: &TestDb) {
    let mut settings = config(db);
    settings.auth.api_keys = Some(KEYS.parse().unwrap());
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    let key = [("x-api-key", "key-a")];
    let first = base_minute() - 30 * 60;
    let rare: Vec<Json> = (0..RARE_SECONDS)
        .map(|n| {
            json!([
                ((first + n) * NANOS).to_string(),
                json!({ "n": n }).to_string()
            ])
        })
        .collect();
    let bulk: Vec<Json> = (0..RARE_SECONDS * BULK_PER_SECOND)
        .map(|n| {
            let at = (first + n / BULK_PER_SECOND) * NANOS + (n % BULK_PER_SECOND) * 1_000;
            json!([at.to_string(), format!("bulk {n}")])
        })
        .collect();
    push_json(
        addr,
        &key,
        json!({"streams": [
            {"stream": {"service_name": "rare"}, "values": rare},
            {"stream": {"service_name": "bulk"}, "values": bulk},
        ]}),
    )
    .await;
    let total = RARE_SECONDS * (1 + BULK_PER_SECOND);
    wait_until("the lines to be stored", DEADLINE, async || {
        db.count().await == total
    })
    .await;

    // `| json` keeps the count off the rollup and out of SQL: the rows are read and parsed.
    // The hour's range is open at its start: it ends half an hour past the first line.
    let time = ((first + 1800) * NANOS).to_string();
    let answer: Json = ok(
        addr,
        INSTANT,
        &[
            (
                "query",
                r#"sum by (n) (count_over_time({service_name="rare"} | json [1h]))"#,
            ),
            ("time", &time),
        ],
        &key,
    )
    .await;
    let series = answer["data"]["result"].as_array().unwrap();
    let mut counted: Vec<(i64, String)> = series
        .iter()
        .map(|one| {
            let n = one["metric"]["n"].as_str().unwrap().parse().unwrap();
            (n, one["value"][1].as_str().unwrap().to_owned())
        })
        .collect();
    counted.sort();
    let expected: Vec<(i64, String)> = (0..RARE_SECONDS).map(|n| (n, "1".into())).collect();
    assert_eq!(counted, expected, "each line counted once");

    // With a line filter and no parser the database counts the lines itself (the rollup does
    // not know the lines' text), in windows of the step; the halves may share a window, each
    // counting its part of it.
    let start = ((first - 60) * NANOS).to_string();
    let end = ((first + 1800) * NANOS).to_string();
    let answer: Json = ok(
        addr,
        RANGE,
        &[
            (
                "query",
                r#"sum(count_over_time({service_name="rare"} |= "n" [1m]))"#,
            ),
            ("start", &start),
            ("end", &end),
            ("step", "60"),
        ],
        &key,
    )
    .await;
    let points = answer["data"]["result"][0]["values"].as_array().unwrap();
    let per_minute: Vec<i64> = points
        .iter()
        .map(|point| point[1].as_str().unwrap().parse().unwrap())
        .collect();
    // Ranges `(t − 1m, t]`: the first line alone at the step on it, then a minute each.
    assert_eq!(per_minute, [1, 60, 60, 60, 60, 59], "{answer}");
}

on_both_backends!(
    a_scan_of_a_few_streams_among_many,
    a_scan_of_a_few_streams_among_many_counts_each_line_once
);
