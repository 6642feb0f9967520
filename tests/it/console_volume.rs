//! The console's volume histogram (`/api/v1/volume`) end to end: records pushed over gRPC at
//! known minutes, counted back per bucket and level from the rollup, with the filters, tenancy,
//! bucket sizes and refusals of the other console endpoints.

use chrono::{DateTime, DurationRound, SecondsFormat, TimeDelta, Utc};
use serde_json::{json, Value};

use crate::common::http::get;
use crate::common::{push_as, record, TestDb};
use crate::console::{server_with_keys, KEY_A, KEY_B};
use loghaul::proto::v1::LogRecord;

fn at(message: &str, ts: DateTime<Utc>, service: &str, severity: i32) -> LogRecord {
    let mut record = record(message);
    record.timestamp = Some(prost_types::Timestamp {
        seconds: ts.timestamp(),
        nanos: ts.timestamp_subsec_nanos() as i32,
    });
    record.service = service.into();
    record.severity = severity;
    record
}

fn rfc3339(ts: DateTime<Utc>) -> String {
    ts.to_rfc3339_opts(SecondsFormat::Secs, true)
}

async fn volume(server: &crate::common::TestServer, key: &str, query: &str) -> Value {
    let answer = get(server.console, &format!("/api/v1/volume?{query}"), key, &[]).await;
    assert_eq!(answer.status, 200, "{query}: {}", answer.body);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    answer.json()
}

/// The buckets with records, as (index, counts by level).
fn filled(histogram: &Value) -> Vec<(usize, Value)> {
    let buckets = histogram["buckets"].as_array().unwrap();
    for bucket in buckets {
        let sum: u64 = bucket["counts"]
            .as_object()
            .unwrap()
            .values()
            .map(|count| count.as_u64().unwrap())
            .sum();
        assert_eq!(bucket["total"], sum, "{bucket}");
    }
    buckets
        .iter()
        .enumerate()
        .filter(|(_, bucket)| bucket["total"].as_u64().unwrap() > 0)
        .map(|(index, bucket)| (index, bucket["counts"].clone()))
        .collect()
}

async fn the_histogram_counts_each_bucket_and_level_from_the_rollup(db: &TestDb) {
    let server = server_with_keys(db).await;
    let mut ingest = server.client().await;
    // An hour entirely in the past, starting on the hour.
    let base = (Utc::now() - TimeDelta::hours(3))
        .duration_trunc(TimeDelta::hours(1))
        .unwrap();
    let minute = |m: i64, s: i64| base + TimeDelta::minutes(m) + TimeDelta::milliseconds(s);
    let mut alpha = Vec::new();
    for n in 0..3 {
        alpha.push(at(
            &format!("a0-info-{n}"),
            minute(0, 1_000 * n),
            "checkout",
            9,
        ));
    }
    alpha.push(at("a0-error", minute(0, 59_999), "checkout", 17));
    alpha.push(at("a1-warn-0", minute(1, 0), "api", 13));
    alpha.push(at("a1-warn-1", minute(1, 30_000), "api", 13));
    alpha.push(at("a7-fatal", minute(7, 12_000), "ledger", 21));
    for n in 0..4 {
        alpha.push(at(
            &format!("a7-debug-{n}"),
            minute(7, 500 * n),
            "checkout",
            5,
        ));
    }
    alpha.push(at("a59-warn14", minute(59, 59_500), "checkout", 14));
    // Just outside the hour on either side.
    alpha.push(at("before", minute(-1, 30_000), "checkout", 9));
    alpha.push(at("after", minute(60, 0), "checkout", 9));
    push_as(&mut ingest, KEY_A, vec![alpha]).await.unwrap();
    let beta: Vec<_> = (0..5)
        .map(|n| at(&format!("beta-{n}"), minute(0, 100 * n), "checkout", 9))
        .collect();
    push_as(&mut ingest, KEY_B, vec![beta]).await.unwrap();
    // Every count below comes from the rollup: the rows themselves are gone.
    db.execute("DELETE FROM logs").await;

    let hour = format!(
        "from={}&to={}",
        rfc3339(base),
        rfc3339(base + TimeDelta::hours(1))
    );
    let histogram = volume(&server, KEY_A, &hour).await;
    assert_eq!(histogram["bucket"], "1m");
    assert_eq!(histogram["bucket_seconds"], 60);
    assert_eq!(histogram["from"], rfc3339(base));
    assert_eq!(histogram["to"], rfc3339(base + TimeDelta::hours(1)));
    assert_eq!(histogram["buckets"].as_array().unwrap().len(), 60);
    assert_eq!(histogram["buckets"][7]["start"], rfc3339(minute(7, 0)));
    assert_eq!(histogram["buckets"][7]["end"], rfc3339(minute(8, 0)));
    assert_eq!(histogram["total"], 12);
    assert_eq!(histogram["not_applied"], json!([]));
    assert!(histogram.get("default_from").is_none());
    // A bucket counts the records after its start up to its end, `(start, end]`, as Loki's steps
    // do: a record on a minute is the minute before's, so "a0-info-0" is the hour before's and
    // "after" is the hour's last.
    assert_eq!(
        filled(&histogram),
        [
            (0, json!({"info": 2, "error": 1, "warn": 1})),
            (1, json!({"warn": 1})),
            (6, json!({"debug": 1})),
            (7, json!({"fatal": 1, "debug": 3})),
            (59, json!({"warn": 1, "info": 1})),
        ]
    );

    // Services (any of them) and the minimum severity, to the number: 14 leaves out warn's 13.
    let some = volume(
        &server,
        KEY_A,
        &format!("{hour}&service=checkout&service=ledger&min_severity=warn"),
    )
    .await;
    assert_eq!(
        filled(&some),
        [
            (0, json!({"error": 1})),
            (7, json!({"fatal": 1})),
            (59, json!({"warn": 1})),
        ]
    );
    let fourteen = volume(&server, KEY_A, &format!("{hour}&min_severity=14")).await;
    assert_eq!(fourteen["total"], 3);
    assert_eq!(
        volume(&server, KEY_A, &format!("{hour}&service=nobody")).await["total"],
        0
    );

    // What the rollup cannot filter on is named, and the counts are the rest of the filter's.
    let unfiltered = volume(
        &server,
        KEY_A,
        &format!("{hour}&service=api&contains=warn-0&attr=region%3Dus"),
    )
    .await;
    assert_eq!(unfiltered["not_applied"], json!(["contains", "attr"]));
    assert_eq!(
        filled(&unfiltered),
        [(0, json!({"warn": 1})), (1, json!({"warn": 1}))]
    );

    // Six hours: 5-minute buckets on multiples of five minutes, the hour's neighbours counted.
    let six = volume(
        &server,
        KEY_A,
        &format!(
            "from={}&to={}",
            rfc3339(base - TimeDelta::hours(4)),
            rfc3339(base + TimeDelta::hours(2))
        ),
    )
    .await;
    assert_eq!(six["bucket"], "5m");
    assert_eq!(six["buckets"].as_array().unwrap().len(), 72);
    assert_eq!(
        filled(&six),
        [
            (47, json!({"info": 2})),
            (48, json!({"info": 2, "error": 1, "warn": 2})),
            (49, json!({"fatal": 1, "debug": 4})),
            (59, json!({"warn": 1, "info": 1})),
        ]
    );

    // A range inside minutes counts those minutes whole, and says so by its bounds.
    let inside = volume(
        &server,
        KEY_A,
        &format!(
            "from={}&to={}",
            rfc3339(minute(0, 30_000)),
            rfc3339(minute(1, 10_000))
        ),
    )
    .await;
    assert_eq!(inside["from"], rfc3339(base));
    assert_eq!(inside["to"], rfc3339(minute(2, 0)));
    assert_eq!(
        filled(&inside),
        [
            (0, json!({"info": 2, "error": 1, "warn": 1})),
            (1, json!({"warn": 1}))
        ]
    );

    // Without a start, the search's default range (24 hours) in 15-minute buckets.
    let day = volume(&server, KEY_A, "").await;
    assert_eq!(day["bucket"], "15m");
    assert!(day["default_from"].as_str().is_some(), "{day}");
    assert_eq!(day["total"], 14);
    let since = volume(&server, KEY_A, "since=7h").await;
    assert_eq!(since["bucket"], "5m");
    assert_eq!(since["total"], 14);

    // The other tenant sees its own records only, whatever it asks for.
    let theirs = volume(&server, KEY_B, &hour).await;
    assert_eq!(
        theirs["total"], 4,
        "beta-0 is on the hour, the hour before's"
    );
    assert_eq!(filled(&theirs), [(0, json!({"info": 4}))]);
    let theirs = volume(
        &server,
        KEY_B,
        &format!("{hour}&service=api&service=ledger"),
    )
    .await;
    assert_eq!(theirs["total"], 0);

    // Refused as the other endpoints refuse.
    let refused = [
        ("", 401, "missing API key"),
        ("wrong-key", 401, "unknown API key"),
    ];
    for (key, status, reason) in refused {
        let answer = get(server.console, &format!("/api/v1/volume?{hour}"), key, &[]).await;
        assert_eq!(answer.status, status, "{}", answer.body);
        assert!(answer.json()["error"].as_str().unwrap().contains(reason));
    }
    let bad = [
        (
            "from=2026-11-29T11:00:00Z&to=2026-11-29T10:00:00Z",
            "bad time range",
        ),
        ("min_severity=99", "outside OpenTelemetry's 0..=24"),
        ("min_severity=loud", "min_severity \"loud\""),
        ("from=yesterday", "write it like"),
        ("page_size=10", "unknown parameter \"page_size\""),
        ("cursor=abc", "unknown parameter \"cursor\""),
        ("since=1h&from=2026-11-29T10:00:00Z", "not both"),
    ];
    for (query, reason) in bad {
        let answer = get(
            server.console,
            &format!("/api/v1/volume?{query}"),
            KEY_A,
            &[],
        )
        .await;
        assert_eq!(answer.status, 400, "{query}: {}", answer.body);
        let error = answer.json()["error"].as_str().unwrap().to_owned();
        assert!(error.contains(reason), "{query}: {error}");
    }
    let metrics = server.metrics().await;
    for counted in [
        "loghaul_console_requests_total{endpoint=\"volume\",status=\"200\"}",
        "loghaul_console_requests_total{endpoint=\"volume\",status=\"400\"}",
        "loghaul_console_requests_total{endpoint=\"volume\",status=\"401\"}",
    ] {
        assert!(metrics.contains(counted), "{counted}");
    }
    server.stop().await;
}
on_both_backends!(
    volume,
    the_histogram_counts_each_bucket_and_level_from_the_rollup
);
