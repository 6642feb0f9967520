//! Loki's query API end to end, on SQLite and PostgreSQL: a known set of records pushed with the
//! Loki push API a few minutes in the past (never on a minute's boundary), then read back through
//! `query_range`, `query`, the label, series and volume endpoints, as Grafana and `logcli` ask.
//!
//! - log queries: each selector and line-filter operator, `| json`, `| logfmt`, label filters,
//!   `| line_format`, `| drop`, `| keep`, `limit` and `direction`, and tenants kept apart;
//! - metric queries: counts, rates and bytes checked against the known set, the rollup and a scan
//!   agreeing (on a process of the test's own, whose source counters move only for it);
//! - hostile queries refused with 400 and a clear message while the server keeps serving;
//! - API keys in each header Grafana can send them in;
//! - Grafana Explore's requests, in its order and with its parameters.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use base64::Engine;
use serde_json::{json, Value as Json};

use crate::common::process::Process;
use crate::common::{
    config, http_request, metric, wait_until, HttpAnswer, TestDb, TestServer, DEADLINE,
};
use crate::http_ingest::{post, JSON, LOKI};

/// Nanoseconds in a second: Loki's timestamps.
pub(crate) const NANOS: i64 = 1_000_000_000;
/// Loki's range query endpoint.
pub(crate) const RANGE: &str = "/loki/api/v1/query_range";
/// Loki's instant query endpoint.
pub(crate) const INSTANT: &str = "/loki/api/v1/query";

/// One record of the known set.
struct Known {
    service: &'static str,
    level: &'static str,
    /// Stream labels other than service_name and level (stored as attributes).
    labels: &'static [(&'static str, &'static str)],
    /// Structured metadata (attributes too), with a dotted key.
    metadata: &'static [(&'static str, &'static str)],
    /// Milliseconds after the base minute.
    offset_ms: i64,
    line: &'static str,
}

const KNOWN: [Known; 8] = [
    Known {
        service: "api",
        level: "info",
        labels: &[("env", "prod")],
        metadata: &[("http.method", "GET")],
        offset_ms: 7_123,
        line: r#"{"status":200,"duration":"120ms","path":"/users","msg":"GET users"}"#,
    },
    Known {
        service: "api",
        level: "error",
        labels: &[("env", "prod")],
        metadata: &[("http.method", "POST")],
        offset_ms: 27_123,
        line: r#"{"status":503,"duration":"2.5s","path":"/orders","msg":"upstream timeout"}"#,
    },
    Known {
        service: "api",
        level: "warn",
        labels: &[("env", "prod")],
        metadata: &[("http.method", "GET")],
        offset_ms: 72_123,
        line: r#"{"status":404,"duration":"15ms","path":"/missing","msg":"Not Found"}"#,
    },
    Known {
        service: "api",
        level: "info",
        labels: &[("env", "staging")],
        metadata: &[("http.method", "POST")],
        offset_ms: 77_123,
        line: r#"{"status":500,"duration":"900ms","path":"/pay","msg":"ERROR charging card"}"#,
    },
    Known {
        service: "worker",
        level: "info",
        labels: &[("env", "prod")],
        metadata: &[],
        offset_ms: 132_123,
        line: r#"level=info job=resize took=1.5s msg="resized image""#,
    },
    Known {
        service: "worker",
        level: "error",
        labels: &[("env", "prod")],
        metadata: &[],
        offset_ms: 137_123,
        line: r#"level=error job=email took=30ms msg="smtp refused""#,
    },
    Known {
        service: "worker",
        level: "debug",
        labels: &[("env", "staging")],
        metadata: &[],
        offset_ms: 197_123,
        line: r#"level=debug job=resize took=5ms msg="cache hit""#,
    },
    Known {
        service: "billing",
        level: "warn",
        labels: &[("region", "eu")],
        metadata: &[],
        offset_ms: 207_123,
        line: "invoice 42 overdue",
    },
];

/// The base minute: a whole minute 8 to 9 minutes ago, in seconds. Every known record lies in
/// the four minutes after it, the last more than four minutes before now.
pub(crate) fn base_minute() -> i64 {
    let now = chrono::Utc::now().timestamp();
    (now - 8 * 60).div_euclid(60) * 60
}

fn now_ns() -> i64 {
    chrono::Utc::now().timestamp_micros() * 1000
}

/// The timestamp of a known record, in nanoseconds (a whole microsecond, as the stores keep).
fn at(base: i64, known: &Known) -> i64 {
    base * NANOS + known.offset_ms * 1_000_000
}

/// Pushes the known set (as JSON, one stream per record) with `headers`, and waits until the
/// database holds `expect_rows` rows.
async fn push_known(
    addr: SocketAddr,
    db: &TestDb,
    headers: &[(&str, &str)],
    base: i64,
    expect_rows: i64,
) {
    let streams: Vec<Json> = KNOWN
        .iter()
        .map(|known| {
            let mut stream = serde_json::Map::new();
            stream.insert("service_name".into(), json!(known.service));
            stream.insert("level".into(), json!(known.level));
            for (name, value) in known.labels {
                stream.insert((*name).into(), json!(value));
            }
            let metadata: serde_json::Map<String, Json> = known
                .metadata
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect();
            let value = if metadata.is_empty() {
                json!([at(base, known).to_string(), known.line])
            } else {
                json!([at(base, known).to_string(), known.line, metadata])
            };
            json!({"stream": stream, "values": [value]})
        })
        .collect();
    push_json(addr, headers, json!({ "streams": streams })).await;
    wait_until("the known set to be stored", DEADLINE, async || {
        db.count().await >= expect_rows
    })
    .await;
    assert_eq!(db.count().await, expect_rows);
}

/// Pushes `body` as Loki's JSON push with `headers`; the push must be accepted.
pub(crate) async fn push_json(addr: SocketAddr, headers: &[(&str, &str)], body: Json) {
    let mut all = vec![JSON];
    all.extend_from_slice(headers);
    let answer = post(addr, LOKI, &all, body.to_string().as_bytes()).await;
    assert_eq!(answer.status, 204, "{}", answer.text());
}

/// A GET of `path` with `params` (URL-encoded) and `headers`; the test fails when the server
/// does not answer at all.
async fn get(
    addr: SocketAddr,
    path: &str,
    params: &[(&str, &str)],
    headers: &[(&str, &str)],
) -> HttpAnswer {
    let query: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    let target = if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{query}")
    };
    tokio::time::timeout(DEADLINE, http_request(addr, "GET", &target, headers, b""))
        .await
        .unwrap_or_else(|_| panic!("GET {path} answered within {DEADLINE:?}"))
        .unwrap_or_else(|err| panic!("GET {path}: {err}"))
}

/// The JSON of a 200 answer.
pub(crate) async fn ok(
    addr: SocketAddr,
    path: &str,
    params: &[(&str, &str)],
    headers: &[(&str, &str)],
) -> Json {
    let answer = get(addr, path, params, headers).await;
    assert_eq!(answer.status, 200, "{path} {params:?}: {}", answer.text());
    assert_eq!(
        answer.header("content-type"),
        Some("application/json"),
        "{path}"
    );
    let body: Json = serde_json::from_slice(&answer.body)
        .unwrap_or_else(|err| panic!("{path}: {err}: {}", answer.text()));
    assert_eq!(body["status"], "success", "{body}");
    body
}

/// A 400 whose text/plain body contains `says`.
async fn refused(addr: SocketAddr, path: &str, params: &[(&str, &str)], says: &str) {
    let answer = get(addr, path, params, &[]).await;
    let shown: Vec<(&str, String)> = params
        .iter()
        .map(|(k, v)| (*k, v.chars().take(120).collect()))
        .collect();
    assert_eq!(answer.status, 400, "{path} {shown:?}: {}", answer.text());
    assert!(
        answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/plain")),
        "{path} {shown:?}: {:?}",
        answer.headers
    );
    let text = answer.text();
    assert!(
        text.contains(says),
        "{path} {shown:?}: expected {says:?} in {text:?}"
    );
    assert!(
        text.len() < 2000,
        "a refusal is short: {} bytes",
        text.len()
    );
}

/// Every (timestamp, line) of a streams answer, in the order they were sent (stream by stream).
fn entries(answer: &Json) -> Vec<(i64, String)> {
    assert_eq!(answer["data"]["resultType"], "streams", "{answer}");
    answer["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|stream| stream["values"].as_array().unwrap().iter())
        .map(|value| {
            (
                value[0].as_str().unwrap().parse::<i64>().unwrap(),
                value[1].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The lines of a streams answer, oldest first.
/// An `/index/volume` answer's series as (labels, bytes), sorted.
fn volume_pairs(answer: &Json) -> Vec<(BTreeMap<String, String>, String)> {
    let mut pairs: Vec<_> = answer["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let metric = s["metric"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect();
            (metric, s["value"][1].as_str().unwrap().to_owned())
        })
        .collect();
    pairs.sort();
    pairs
}

/// The lines of a log query's answer, oldest first.
pub(crate) fn lines(answer: &Json) -> Vec<String> {
    let mut all = entries(answer);
    all.sort();
    all.into_iter().map(|(_, line)| line).collect()
}

/// The lines of the known set matching `keep`, oldest first.
fn known_lines(keep: impl Fn(&Known) -> bool) -> Vec<String> {
    KNOWN
        .iter()
        .filter(|k| keep(k))
        .map(|k| k.line.to_owned())
        .collect()
}

/// The series of a matrix answer: (the value of `label`) → [(seconds, value)].
fn matrix(answer: &Json, label: &str) -> BTreeMap<String, Vec<(i64, f64)>> {
    assert_eq!(answer["data"]["resultType"], "matrix", "{answer}");
    let mut out = BTreeMap::new();
    for series in answer["data"]["result"].as_array().unwrap() {
        let name = series["metric"][label].as_str().unwrap_or("").to_owned();
        let points = series["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|point| {
                let secs = point[0].as_f64().expect("a point's time is a number");
                assert_eq!(secs.fract(), 0.0, "whole-second steps: {point}");
                (
                    secs as i64,
                    point[1].as_str().unwrap().parse::<f64>().unwrap(),
                )
            })
            .collect();
        assert!(
            out.insert(name, points).is_none(),
            "one series per {label}: {answer}"
        );
    }
    out
}

/// What count_over_time (or bytes_over_time, with `bytes`) over `[range_s]` summed by `by` gives at
/// each step from `start` to `end` (seconds), for the known records matching `keep`; steps
/// without records have no point, as in Loki.
#[allow(clippy::too_many_arguments)]
fn expected(
    base: i64,
    start: i64,
    end: i64,
    step: i64,
    range_s: i64,
    by: impl Fn(&Known) -> String,
    keep: impl Fn(&Known) -> bool,
    bytes: bool,
) -> BTreeMap<String, Vec<(i64, f64)>> {
    let mut out: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    let mut t = start;
    while t <= end {
        let mut sums: BTreeMap<String, f64> = BTreeMap::new();
        for known in KNOWN.iter().filter(|k| keep(k)) {
            let ts = at(base, known);
            if ts > (t - range_s) * NANOS && ts <= t * NANOS {
                *sums.entry(by(known)).or_default() +=
                    if bytes { known.line.len() as f64 } else { 1.0 };
            }
        }
        for (name, value) in sums {
            out.entry(name).or_default().push((t, value));
        }
        t += step;
    }
    out
}

/// The points of a matrix summed by level: level → [(seconds, value)], times as sent.
fn level_points(answer: &Json) -> BTreeMap<String, Vec<(f64, String)>> {
    answer["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["metric"]["level"].as_str().unwrap().to_owned(),
                s["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| (p[0].as_f64().unwrap(), p[1].as_str().unwrap().to_owned()))
                    .collect(),
            )
        })
        .collect()
}

/// What the rollup gives a histogram of one-minute steps from `start` (nanoseconds, on no
/// particular second) for the known records matching `keep`: per level, each record counted at
/// the first step at or after its minute's end.
/// Where a metric range query with a one-minute step starts: Loki's frontend, and loghaul as it,
/// round the start down to a whole step.
fn first_minute_step(start: i64) -> i64 {
    start - start.rem_euclid(60 * NANOS)
}

fn by_minute_end(
    base: i64,
    start: i64,
    keep: impl Fn(&Known) -> bool,
) -> BTreeMap<String, Vec<(f64, String)>> {
    let step = 60 * NANOS;
    let mut counts: BTreeMap<String, BTreeMap<i64, u64>> = BTreeMap::new();
    for known in KNOWN.iter().filter(|k| keep(k)) {
        // The end of the minute `(m, m + 1m]` that holds the record.
        let minute_end = (at(base, known) - 1).div_euclid(60 * NANOS) * 60 * NANOS + 60 * NANOS;
        let t = start + (minute_end - start + step - 1) / step * step;
        *counts
            .entry(known.level.to_owned())
            .or_default()
            .entry(t)
            .or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(level, at)| {
            let points = at
                .into_iter()
                .map(|(t, n)| (t as f64 / 1e9, n.to_string()))
                .collect();
            (level, points)
        })
        .collect()
}

fn basic(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

/// API keys of two tenants.
pub(crate) const KEYS: &str = "key-a=team-a,key-b=team-b";

// ---------------------------------------------------------------------------------------------
// 1. Log queries.

async fn log_queries_select_filter_parse_and_order_the_known_set(db: &TestDb) {
    let mut settings = config(db);
    settings.auth.api_keys = Some(KEYS.parse().unwrap());
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    let a = [("x-api-key", "key-a")];
    let b = [("x-api-key", "key-b")];
    let base = base_minute();
    push_known(addr, db, &a, base, KNOWN.len() as i64).await;
    // Tenant B's own line, in the same minutes, of a service tenant A also has.
    push_json(
        addr,
        &b,
        json!({"streams": [{"stream": {"service_name": "api", "level": "error", "env": "prod"},
                            "values": [[(base * NANOS + 30_000_000_000i64).to_string(), "team-b secret status=503"]]}]}),
    )
    .await;
    wait_until("tenant B's line", DEADLINE, async || {
        db.count().await == KNOWN.len() as i64 + 1
    })
    .await;

    let start = ((base - 60) * NANOS).to_string();
    let end = now_ns().to_string();
    let query = async |q: &str| -> Json {
        ok(
            addr,
            RANGE,
            &[
                ("query", q),
                ("start", &start),
                ("end", &end),
                ("limit", "100"),
            ],
            &a,
        )
        .await
    };

    // Selectors: each operator, on indexed labels and on attributes (a dotted key among them).
    let cases: Vec<(&str, Vec<String>)> = vec![
        (
            r#"{service_name="api"}"#,
            known_lines(|k| k.service == "api"),
        ),
        (
            r#"{service_name=~".+", service_name!="api"}"#,
            known_lines(|k| k.service != "api"),
        ),
        (
            r#"{service_name=~"work.*|bill.*"}"#,
            known_lines(|k| k.service != "api"),
        ),
        (
            r#"{service_name="api", env!~"prod"}"#,
            known_lines(|k| k.service == "api" && k.labels.contains(&("env", "staging"))),
        ),
        (r#"{level="error"}"#, known_lines(|k| k.level == "error")),
        // Metadata is no stream label: a selector does not see it, a label filter does.
        (r#"{detected_level=~"warn|debug"}"#, Vec::new()),
        (
            r#"{service_name=~".+"} | detected_level=~"warn|debug""#,
            known_lines(|k| k.level == "warn" || k.level == "debug"),
        ),
        (r#"{http_method="POST"}"#, Vec::new()),
        (
            r#"{service_name=~".+"} | http_method="POST""#,
            known_lines(|k| k.metadata.contains(&("http.method", "POST"))),
        ),
        (
            r#"{service_name=~".+", env="staging"}"#,
            known_lines(|k| k.labels.contains(&("env", "staging"))),
        ),
        // Line filters: each operator, case-sensitive unless (?i).
        (
            r#"{service_name="api"} |= "timeout""#,
            known_lines(|k| k.line.contains("timeout")),
        ),
        (
            r#"{service_name="api"} != "users""#,
            known_lines(|k| k.service == "api" && !k.line.contains("users")),
        ),
        (
            r#"{service_name="api"} |~ "Not (Found|Here)""#,
            known_lines(|k| k.line.contains("Not Found")),
        ),
        (
            r#"{service_name="api"} !~ "status.:5""#,
            known_lines(|k| k.service == "api" && !k.line.contains("\"status\":5")),
        ),
        (r#"{service_name="api"} |= "error charging""#, vec![]),
        (
            r#"{service_name="api"} |~ "(?i)error charging""#,
            known_lines(|k| k.line.contains("ERROR charging")),
        ),
        (
            r#"{service_name=~".+"} |= "status" != "Found" |~ "5[0-9][0-9]""#,
            known_lines(|k| k.offset_ms == 27_123 || k.offset_ms == 77_123),
        ),
        // | json with numeric and duration label filters, and/or.
        (
            r#"{service_name="api"} | json | status >= 500"#,
            known_lines(|k| k.line.contains("\"status\":50")),
        ),
        (
            r#"{service_name="api"} | json | duration > 1s"#,
            known_lines(|k| k.line.contains("2.5s")),
        ),
        (
            r#"{service_name="api"} | json | status >= 500 and duration < 1s"#,
            known_lines(|k| k.line.contains("900ms")),
        ),
        (
            r#"{service_name="api"} | json | status == 404 or path="/users""#,
            known_lines(|k| k.line.contains("404") || k.line.contains("/users")),
        ),
        (
            r#"{service_name="worker"} | logfmt | job="resize" | took > 1s"#,
            known_lines(|k| k.line.contains("took=1.5s")),
        ),
    ];
    for (q, want) in &cases {
        let answer = query(q).await;
        assert_eq!(&lines(&answer), want, "{q}: {answer}");
    }

    // A stream's labels: service_name, level, detected_level and every attribute, the dotted key
    // with '_'; | json adds the fields it extracted.
    let answer = query(r#"{service_name="api"} |= "timeout" | json"#).await;
    let stream = &answer["data"]["result"][0]["stream"];
    for (name, value) in [
        ("service_name", "api"),
        ("level", "error"),
        ("detected_level", "error"),
        ("env", "prod"),
        ("http_method", "POST"),
        ("status", "503"),
        ("path", "/orders"),
        ("msg", "upstream timeout"),
    ] {
        assert_eq!(stream[name], value, "{name}: {answer}");
    }
    let value = &answer["data"]["result"][0]["values"][0];
    assert_eq!(
        value[0],
        at(base, &KNOWN[1]).to_string(),
        "nanoseconds as a string"
    );

    // | logfmt and | line_format.
    let answer =
        query(r#"{service_name="worker"} | logfmt | line_format "{{.job}}: {{.msg}}""#).await;
    assert_eq!(
        lines(&answer),
        [
            "resize: resized image",
            "email: smtp refused",
            "resize: cache hit"
        ],
        "{answer}"
    );

    // | keep and | drop decide a stream's labels, and so how lines group into streams.
    let answer = query(r#"{service_name="billing"} | keep service_name"#).await;
    assert_eq!(
        answer["data"]["result"][0]["stream"],
        json!({"service_name": "billing"}),
        "{answer}"
    );
    let answer = query(r#"{service_name="billing"} | drop region, detected_level"#).await;
    assert_eq!(
        answer["data"]["result"][0]["stream"],
        json!({"service_name": "billing", "level": "warn"}),
        "{answer}"
    );
    let answer = query(r#"{service_name="worker"} | logfmt | keep job"#).await;
    let mut grouped: Vec<(String, usize)> = answer["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            assert_eq!(s["stream"].as_object().unwrap().len(), 1, "{s}");
            (
                s["stream"]["job"].as_str().unwrap().to_owned(),
                s["values"].as_array().unwrap().len(),
            )
        })
        .collect();
    grouped.sort();
    assert_eq!(
        grouped,
        [("email".to_owned(), 1), ("resize".to_owned(), 2)],
        "{answer}"
    );

    // limit and direction: forward gives the oldest, backward the newest; each stream's entries
    // in the direction asked.
    for (direction, want) in [
        (
            "forward",
            known_lines(|k| k.offset_ms < 80_000)[..3].to_vec(),
        ),
        (
            "backward",
            known_lines(|k| k.offset_ms > 130_000)[1..].to_vec(),
        ),
    ] {
        let answer = ok(
            addr,
            RANGE,
            &[
                ("query", r#"{service_name=~".+"}"#),
                ("start", &start),
                ("end", &end),
                ("limit", "3"),
                ("direction", direction),
            ],
            &a,
        )
        .await;
        assert_eq!(lines(&answer), want, "{direction}: {answer}");
        for stream in answer["data"]["result"].as_array().unwrap() {
            let stamps: Vec<i64> = stream["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v[0].as_str().unwrap().parse().unwrap())
                .collect();
            let mut sorted = stamps.clone();
            sorted.sort();
            if direction == "backward" {
                sorted.reverse();
            }
            assert_eq!(stamps, sorted, "{direction}: {answer}");
        }
    }
    // The default direction is backward, as Loki's.
    let answer = ok(
        addr,
        RANGE,
        &[
            ("query", r#"{service_name="api"}"#),
            ("start", &start),
            ("end", &end),
            ("limit", "1"),
        ],
        &a,
    )
    .await;
    assert_eq!(lines(&answer), [KNOWN[3].line], "{answer}");

    // Tenants: A never sees B's line, B sees only its own, whatever the query.
    for q in [
        r#"{service_name=~".+"} |= "secret""#,
        r#"{service_name="api", level="error"} |= "team-b""#,
    ] {
        assert_eq!(lines(&query(q).await), Vec::<String>::new(), "{q}");
    }
    let answer = ok(
        addr,
        RANGE,
        &[
            ("query", r#"{service_name=~".+"}"#),
            ("start", &start),
            ("end", &end),
        ],
        &b,
    )
    .await;
    assert_eq!(lines(&answer), ["team-b secret status=503"], "{answer}");
    let values = ok(
        addr,
        "/loki/api/v1/label/service_name/values",
        &[("start", &start), ("end", &end)],
        &b,
    )
    .await;
    assert_eq!(values["data"], json!(["api"]), "{values}");
    let count = ok(
        addr,
        INSTANT,
        &[
            (
                "query",
                r#"sum(count_over_time({service_name=~".+"}[10m]))"#,
            ),
            ("time", &end),
        ],
        &b,
    )
    .await;
    assert_eq!(count["data"]["result"][0]["value"][1], "1", "{count}");
    server.stop().await;
}
on_both_backends!(
    loki_query_log_queries,
    log_queries_select_filter_parse_and_order_the_known_set
);

// ---------------------------------------------------------------------------------------------
// 2. Metric queries, on a process of the test's own so that its source counters are its alone.

async fn metric_queries_count_the_known_set_alike_from_the_rollup_and_a_scan(db: &TestDb) {
    let server = Process::serve(&db.url, &[]);
    let addr = server.http_ingest;
    let base = base_minute();
    push_known(addr, db, &[], base, KNOWN.len() as i64).await;
    let (start, end) = (base + 60, base + 240);
    let (start_s, end_s) = (start.to_string(), end.to_string());
    let range = async |q: &str| -> Json {
        ok(
            addr,
            RANGE,
            &[
                ("query", q),
                ("start", &start_s),
                ("end", &end_s),
                ("step", "60"),
            ],
            &[],
        )
        .await
    };
    let sources = async || {
        let text = server.metrics().await;
        (
            metric(
                &text,
                r#"loghaul_loki_metric_sources_total{source="rollup"}"#,
            ),
            metric(
                &text,
                r#"loghaul_loki_metric_sources_total{source="count"}"#,
            ),
            metric(&text, r#"loghaul_loki_metric_sources_total{source="scan"}"#),
        )
    };
    let all = |_: &Known| true;
    let level = |k: &Known| k.level.to_owned();

    // count_over_time by level: from the rollup, then from a scan, both the known counts.
    let want = expected(base, start, end, 60, 60, level, all, false);
    assert_eq!(
        want["info"],
        [(base + 60, 1.0), (base + 120, 1.0), (base + 180, 1.0)]
    );
    let before = sources().await;
    let rollup =
        range(r#"sum by (level) (count_over_time({service_name=~"api|worker|billing"}[1m]))"#)
            .await;
    let after_rollup = sources().await;
    assert_eq!(matrix(&rollup, "level"), want, "rollup: {rollup}");
    assert_eq!(
        after_rollup,
        (before.0 + 1.0, before.1, before.2),
        "the rollup answered, no scan"
    );
    assert!(
        rollup["data"]["stats"]["volume"]["rollupRowsRead"]
            .as_u64()
            .unwrap()
            > 0,
        "{rollup}"
    );
    // A line filter: the database counts the lines; a label filter: the engine reads them.
    let counted = range(
        r#"sum by (level) (count_over_time({service_name=~"api|worker|billing"} |~ ".*" [1m]))"#,
    )
    .await;
    let after_count = sources().await;
    assert_eq!(matrix(&counted, "level"), want, "count: {counted}");
    assert_eq!(
        after_count,
        (after_rollup.0, after_rollup.1 + 1.0, after_rollup.2),
        "the database counted"
    );
    let scan = range(
        r#"sum by (level) (count_over_time({service_name=~"api|worker|billing"} | __error__="" [1m]))"#,
    )
    .await;
    let after_scan = sources().await;
    assert_eq!(matrix(&scan, "level"), want, "scan: {scan}");
    assert_eq!(
        after_scan,
        (after_count.0, after_count.1, after_count.2 + 1.0),
        "a scan answered"
    );
    // A sum of everything counts every line whatever `| json` makes of it (some of the known
    // lines are not JSON), so the rollup or the database counts them, without parsing any.
    let mut total: BTreeMap<i64, f64> = BTreeMap::new();
    for points in want.values() {
        for (at, count) in points {
            *total.entry(*at).or_default() += count;
        }
    }
    let total: Vec<(i64, f64)> = total.into_iter().collect();
    let before = sources().await;
    let parsed =
        range(r#"sum(count_over_time({service_name=~"api|worker|billing"} | json | drop a [1m]))"#)
            .await;
    let filtered =
        range(r#"sum(count_over_time({service_name=~"api|worker|billing"} | json |~ ".*" [1m]))"#)
            .await;
    for answer in [&parsed, &filtered] {
        assert_eq!(matrix(answer, "level")[""], total, "{answer}");
    }
    assert_eq!(
        sources().await,
        (before.0 + 1.0, before.1 + 1.0, before.2),
        "the rollup and the database counted"
    );
    for answer in [&counted, &scan] {
        assert!(
            answer["data"]["stats"]["summary"]["totalLinesProcessed"]
                .as_u64()
                .unwrap()
                >= 8,
            "{answer}"
        );
    }

    // Over two minutes, by detected_level, the selector of level only.
    let want = expected(
        base,
        start,
        end,
        60,
        120,
        |k| k.level.to_owned(),
        |k| k.level != "debug",
        false,
    );
    for q in [
        r#"sum by (detected_level) (count_over_time({level=~".+", level!="debug"}[2m]))"#,
        r#"sum by (detected_level) (count_over_time({level=~".+", level!="debug"} |= "" [2m]))"#,
    ] {
        assert_eq!(matrix(&range(q).await, "detected_level"), want, "{q}");
    }

    // rate is the count over the range's seconds.
    let counts = expected(
        base,
        start,
        end,
        60,
        60,
        level,
        |k| k.service == "api",
        false,
    );
    for q in [
        r#"sum by (level) (rate({service_name="api"}[1m]))"#,
        r#"sum by (level) (rate({service_name="api"} |~ ".*" [1m]))"#,
    ] {
        let got = matrix(&range(q).await, "level");
        let rates: BTreeMap<String, Vec<(i64, f64)>> = counts
            .iter()
            .map(|(k, v)| (k.clone(), v.iter().map(|(t, c)| (*t, c / 60.0)).collect()))
            .collect();
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            rates.keys().collect::<Vec<_>>(),
            "{q}"
        );
        for (name, points) in &rates {
            assert_eq!(got[name].len(), points.len(), "{q} {name}");
            for ((t, r), (wt, wr)) in got[name].iter().zip(points) {
                assert_eq!(t, wt, "{q}");
                assert!((r - wr).abs() < 1e-9, "{q} {name}: {r} vs {wr}");
            }
        }
    }

    // bytes_over_time counts the lines' bytes, by service.
    let want = expected(
        base,
        start,
        end,
        60,
        60,
        |k| k.service.to_owned(),
        all,
        true,
    );
    for q in [
        r#"sum by (service_name) (bytes_over_time({service_name=~".+"}[1m]))"#,
        r#"sum by (service_name) (bytes_over_time({service_name=~".+"} != "no such text" [1m]))"#,
    ] {
        assert_eq!(matrix(&range(q).await, "service_name"), want, "{q}");
    }

    // By an attribute: not in the rollup, so counted by the database.
    let before = sources().await;
    let by_env = range(r#"sum by (env) (count_over_time({service_name="api"}[2m]))"#).await;
    let after = sources().await;
    assert_eq!(after.0, before.0, "an attribute is not in the rollup");
    assert!(after.1 > before.1);
    let env = |k: &Known| {
        k.labels
            .iter()
            .find(|(n, _)| *n == "env")
            .map_or(String::new(), |(_, v)| (*v).to_owned())
    };
    assert_eq!(
        matrix(&by_env, "env"),
        expected(
            base,
            start,
            end,
            60,
            120,
            env,
            |k| k.service == "api",
            false
        ),
        "{by_env}"
    );

    // Aggregations over series: count, max, and arithmetic.
    let q = r#"count(sum by (service_name) (count_over_time({service_name=~".+"}[5m])))"#;
    let answer = ok(addr, INSTANT, &[("query", q), ("time", &end_s)], &[]).await;
    assert_eq!(answer["data"]["resultType"], "vector", "{answer}");
    assert_eq!(
        answer["data"]["result"][0]["value"],
        json!([end, "3"]),
        "{answer}"
    );
    let q = r#"sum(count_over_time({service_name="api"}[5m])) * 2 + 1"#;
    let answer = ok(addr, INSTANT, &[("query", q), ("time", &end_s)], &[]).await;
    assert_eq!(answer["data"]["result"][0]["value"][1], "9", "{answer}");

    // topk keeps the largest series.
    let q = r#"topk(1, sum by (service_name) (count_over_time({service_name=~".+"}[5m])))"#;
    let answer = ok(addr, INSTANT, &[("query", q), ("time", &end_s)], &[]).await;
    assert_eq!(answer["data"]["resultType"], "vector", "{answer}");
    let result = answer["data"]["result"].as_array().unwrap();
    assert_eq!(result.len(), 1, "{answer}");
    assert_eq!(
        result[0]["metric"],
        json!({"service_name": "api"}),
        "{answer}"
    );
    assert_eq!(result[0]["value"], json!([end, "4"]), "{answer}");
    let q = r#"topk(2, sum by (service_name) (count_over_time({service_name=~".+"} |= "" [5m])))"#;
    let answer = ok(addr, INSTANT, &[("query", q), ("time", &end_s)], &[]).await;
    let mut top: Vec<String> = answer["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{}={}",
                s["metric"]["service_name"].as_str().unwrap(),
                s["value"][1].as_str().unwrap()
            )
        })
        .collect();
    top.sort();
    assert_eq!(top, ["api=4", "worker=3"], "{answer}");

    // Grafana's health check.
    let answer = ok(
        addr,
        INSTANT,
        &[("query", "vector(1)+vector(1)"), ("time", &end_s)],
        &[],
    )
    .await;
    assert_eq!(answer["data"]["resultType"], "vector", "{answer}");
    assert_eq!(
        answer["data"]["result"][0]["value"],
        json!([end, "2"]),
        "{answer}"
    );
    drop(server);
}
on_both_backends!(
    loki_query_metric_queries,
    metric_queries_count_the_known_set_alike_from_the_rollup_and_a_scan
);

// ---------------------------------------------------------------------------------------------
// 3. Labels, series, volume, buildinfo, ready.

async fn label_series_and_volume_endpoints_answer_in_lokis_shapes(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let base = base_minute();
    push_known(addr, db, &[], base, KNOWN.len() as i64).await;
    let start = ((base - 60) * NANOS).to_string();
    let end = now_ns().to_string();
    let span = [("start", start.as_str()), ("end", end.as_str())];

    let names = ok(addr, "/loki/api/v1/labels", &span, &[]).await;
    let names: Vec<&str> = names["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    for name in ["service_name", "level", "env", "region"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    for metadata in ["detected_level", "http_method"] {
        assert!(!names.contains(&metadata), "{metadata} in {names:?}");
    }
    // With a selector, the labels of its streams only.
    let mut narrowed = span.to_vec();
    narrowed.push(("query", r#"{service_name="billing"}"#));
    let billing = ok(addr, "/loki/api/v1/labels", &narrowed, &[]).await;
    let billing: Vec<&str> = billing["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(billing.contains(&"region"), "{billing:?}");
    assert!(!billing.contains(&"env"), "env is api's: {billing:?}");
    assert!(!names.contains(&"http.method"), "{names:?}");
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(names, sorted, "sorted and unique");

    let values = async |name: &str, extra: &[(&str, &str)]| -> Json {
        let mut params = span.to_vec();
        params.extend_from_slice(extra);
        ok(
            addr,
            &format!("/loki/api/v1/label/{name}/values"),
            &params,
            &[],
        )
        .await["data"]
            .clone()
    };
    assert_eq!(
        values("service_name", &[]).await,
        json!(["api", "billing", "worker"])
    );
    assert_eq!(
        values("level", &[]).await,
        json!(["debug", "error", "info", "warn"])
    );
    // Structured metadata has no values here, as in Loki.
    assert_eq!(values("detected_level", &[]).await, json!([]));
    assert_eq!(values("http_method", &[]).await, json!([]));
    assert_eq!(
        values("env", &[("query", r#"{service_name="worker"}"#)]).await,
        json!(["prod", "staging"])
    );
    assert_eq!(
        values("level", &[("query", r#"{service_name="worker"}"#)]).await,
        json!(["debug", "error", "info"])
    );
    assert_eq!(
        values("region", &[("query", r#"{service_name="api"}"#)]).await,
        json!([])
    );
    assert_eq!(values("no_such_label", &[]).await, json!([]));

    let series = ok(
        addr,
        "/loki/api/v1/series",
        &[("match[]", r#"{service_name="billing"}"#), span[0], span[1]],
        &[],
    )
    .await;
    assert_eq!(
        series["data"],
        // The stream labels, not the structured metadata.
        json!([{"service_name": "billing", "level": "warn", "region": "eu"}]),
        "{series}"
    );
    let series = ok(
        addr,
        "/loki/api/v1/series",
        &[
            ("match[]", r#"{service_name="worker", env="prod"}"#),
            ("match[]", r#"{level="debug"}"#),
            span[0],
            span[1],
        ],
        &[],
    )
    .await;
    let found = series["data"].as_array().unwrap();
    assert_eq!(
        found.len(),
        3,
        "two worker/prod series (info, error) and the debug one: {series}"
    );
    for s in found {
        assert_eq!(s["service_name"], "worker", "{series}");
    }

    // Volume by label name: each stream label of the selected streams, with their bytes.
    let by_names = ok(
        addr,
        "/loki/api/v1/index/volume",
        &[
            ("query", r#"{service_name="billing"}"#),
            ("aggregateBy", "labels"),
            span[0],
            span[1],
        ],
        &[],
    )
    .await;
    let billing_bytes = "invoice 42 overdue".len().to_string();
    let named: Vec<(String, String)> = volume_pairs(&by_names)
        .into_iter()
        .map(|(metric, bytes)| {
            let (name, value) = metric.into_iter().next().unwrap();
            assert_eq!(value, "", "{by_names}");
            (name, bytes)
        })
        .collect();
    assert_eq!(
        named,
        ["level", "region", "service_name"].map(|name| (name.to_owned(), billing_bytes.clone())),
        "{by_names}"
    );
    let bogus = get(
        addr,
        "/loki/api/v1/index/volume",
        &[
            ("query", r#"{service_name="billing"}"#),
            ("aggregateBy", "x"),
        ],
        &[],
    )
    .await;
    assert_eq!(bogus.status, 400, "{}", bogus.text());
    assert!(bogus.text().contains("invalid aggregation option"));

    // Volume: bytes per series of the selector's labels, from the rollup.
    let mut bytes: BTreeMap<&str, usize> = BTreeMap::new();
    for k in &KNOWN {
        *bytes.entry(k.service).or_default() += k.line.len();
    }
    let volume = ok(
        addr,
        "/loki/api/v1/index/volume",
        &[("query", r#"{service_name=~".+"}"#), span[0], span[1]],
        &[],
    )
    .await;
    assert_eq!(volume["data"]["resultType"], "vector", "{volume}");
    let mut got: BTreeMap<String, usize> = BTreeMap::new();
    for s in volume["data"]["result"].as_array().unwrap() {
        assert_eq!(s["metric"].as_object().unwrap().len(), 1, "{volume}");
        assert!(s["value"][0].is_number(), "{volume}");
        got.insert(
            s["metric"]["service_name"].as_str().unwrap().to_owned(),
            s["value"][1].as_str().unwrap().parse().unwrap(),
        );
    }
    let want: BTreeMap<String, usize> = bytes.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
    assert_eq!(got, want, "{volume}");
    // Largest first, as Loki orders them.
    let first = &volume["data"]["result"][0]["metric"]["service_name"];
    assert_eq!(first, "api", "{volume}");

    let volume = ok(
        addr,
        "/loki/api/v1/index/volume",
        &[
            ("query", r#"{service_name="api"}"#),
            ("targetLabels", "level"),
            span[0],
            span[1],
        ],
        &[],
    )
    .await;
    let by_level: Vec<(String, String)> = volume_pairs(&volume)
        .into_iter()
        .map(|(metric, bytes)| (metric["level"].clone(), bytes))
        .collect();
    let level_bytes = |level: &str| {
        KNOWN
            .iter()
            .filter(|k| k.service == "api" && k.level == level)
            .map(|k| k.line.len())
            .sum::<usize>()
            .to_string()
    };
    assert_eq!(
        by_level,
        [
            ("error".to_owned(), level_bytes("error")),
            ("info".to_owned(), level_bytes("info")),
            ("warn".to_owned(), level_bytes("warn"))
        ],
        "{volume}"
    );

    let (from, to) = (base.to_string(), (base + 300).to_string());
    let range = ok(
        addr,
        "/loki/api/v1/index/volume_range",
        &[
            ("query", r#"{service_name=~".+"}"#),
            ("start", &from),
            ("end", &to),
            ("step", "60"),
        ],
        &[],
    )
    .await;
    let got = matrix(&range, "service_name");
    let want = expected(
        base,
        base,
        base + 300,
        60,
        60,
        |k| k.service.to_owned(),
        |_| true,
        true,
    );
    let totals = |m: &BTreeMap<String, Vec<(i64, f64)>>| -> BTreeMap<String, f64> {
        m.iter()
            .map(|(k, v)| (k.clone(), v.iter().map(|p| p.1).sum()))
            .collect()
    };
    assert_eq!(totals(&got), totals(&want), "{range}");
    assert_eq!(got, want, "{range}");

    // The volume endpoints take a selector of indexed labels alone.
    refused(
        addr,
        "/loki/api/v1/index/volume",
        &[("query", r#"{env="prod"}"#)],
        "service_name and level only",
    )
    .await;
    refused(
        addr,
        "/loki/api/v1/index/volume",
        &[("query", r#"{service_name="api"} |= "x""#)],
        "without a pipeline",
    )
    .await;

    let build = ok_plain(addr, "/loki/api/v1/status/buildinfo").await;
    let build: Json = serde_json::from_str(&build).unwrap();
    assert_eq!(build["version"], env!("CARGO_PKG_VERSION"), "{build}");
    assert_eq!(ok_plain(addr, "/ready").await.trim(), "ready");
    server.stop().await;
}
on_both_backends!(
    loki_query_metadata_endpoints,
    label_series_and_volume_endpoints_answer_in_lokis_shapes
);

async fn ok_plain(addr: SocketAddr, path: &str) -> String {
    let answer = get(addr, path, &[], &[]).await;
    assert_eq!(answer.status, 200, "{path}: {}", answer.text());
    answer.text()
}

// ---------------------------------------------------------------------------------------------
// 4. Hostile queries.

async fn hostile_queries_are_refused_with_400_and_the_server_keeps_serving(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let base = base_minute();
    push_known(addr, db, &[], base, KNOWN.len() as i64).await;
    let now = chrono::Utc::now().timestamp();
    let start = (base - 60).to_string();

    let deep = format!("{}vector(1){}", "(".repeat(40), ")".repeat(40));
    let deep_sums = format!(
        "{}count_over_time({{service_name=\"api\"}}[1m]){}",
        "sum(".repeat(40),
        ")".repeat(40)
    );
    let giant_regex = format!(r#"{{service_name=~"{}"}}"#, "(a|b|c){1000}".repeat(50));
    let giant_filter = format!(
        r#"{{service_name="api"}} |~ "{}""#,
        "(a|b|c){1000}".repeat(50)
    );
    let huge = format!(r#"{{service_name="{}"}}"#, "x".repeat(17 * 1024));
    let thirty_days_ago = (now - 30 * 86_400).to_string();
    let thirty_two_days_ago = (now - 32 * 86_400).to_string();
    let now_s = now.to_string();
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (INSTANT, vec![("query", &deep)], "nests deeper than 32"),
        // As Loki 3: a log query is a range query.
        (
            INSTANT,
            vec![("query", r#"{service_name="api"}"#)],
            "log queries are not supported as an instant query type",
        ),
        (RANGE, vec![("query", &deep_sums)], "nests deeper than 32"),
        (RANGE, vec![("query", &giant_regex)], "is too large"),
        (RANGE, vec![("query", &giant_filter)], "is too large"),
        // As Loki: a selector must have a matcher that an empty label does not satisfy.
        (
            RANGE,
            vec![("query", r#"{service_name!="api"}"#)],
            "at least one regexp or equality matcher that does not have an empty-compatible value",
        ),
        (
            RANGE,
            vec![("query", r#"{env=~".*"}"#)],
            "empty-compatible value",
        ),
        (
            RANGE,
            vec![("query", r#"{service_name=~"("}"#)],
            "error parsing regexp: missing closing ): `(`",
        ),
        (
            RANGE,
            vec![("query", r#"{service_name="api"}"#), ("limit", "1000000")],
            "max entries limit",
        ),
        (
            RANGE,
            vec![
                ("query", r#"sum(count_over_time({service_name="api"}[1m]))"#),
                ("start", &thirty_days_ago),
                ("end", &now_s),
                ("step", "1"),
            ],
            "exceeded maximum resolution of 11000 points",
        ),
        (
            RANGE,
            vec![
                ("query", r#"{service_name="api"}"#),
                ("start", &thirty_two_days_ago),
                ("end", &now_s),
            ],
            "30d1h",
        ),
        (
            RANGE,
            vec![(
                "query",
                r#"sum(count_over_time({service_name="api"} | unwrap duration [1m]))"#,
            )],
            "invalid aggregation count_over_time with unwrap",
        ),
        (
            RANGE,
            vec![("query", r#"{service_name="api"} | unwrap duration"#)],
            "syntax error: unexpected unwrap",
        ),
        (
            "/loki/api/v1/series",
            vec![("match[]", r#"count_over_time({service_name="api"}[1m])"#)],
            "is a metric query",
        ),
        (
            "/loki/api/v1/label/level/values",
            vec![("query", r#"rate({service_name="api"}[1m])"#)],
            "is a metric query",
        ),
        (RANGE, vec![("query", &huge)], "at most 16384"),
        (
            RANGE,
            vec![("query", r#"{service_name="api""#)],
            "parse error at line 1, col",
        ),
        (
            RANGE,
            vec![
                ("query", r#"{service_name="api"}"#),
                ("direction", "sideways"),
            ],
            "direction",
        ),
        (
            RANGE,
            vec![("query", r#"{service_name="api"}"#), ("limit", "-5")],
            "limit",
        ),
        (
            RANGE,
            vec![
                ("query", r#"sum(rate({service_name="api"}[1m]))"#),
                ("step", "0"),
            ],
            "step",
        ),
        (
            RANGE,
            vec![("query", r#"{service_name="api"}"#), ("start", "yesterday")],
            "start",
        ),
        (
            RANGE,
            vec![("query", r#"count_over_time({service_name="api"}[31d])"#)],
            "range",
        ),
        (RANGE, vec![], "parse error : syntax error: unexpected $end"),
    ];
    for (path, params, says) in &cases {
        refused(addr, path, params, says).await;
        // Still serving, and still right.
        let answer = ok(
            addr,
            RANGE,
            &[("query", r#"{service_name="billing"}"#), ("start", &start)],
            &[],
        )
        .await;
        assert_eq!(
            lines(&answer),
            [KNOWN[7].line],
            "after {:?}",
            params.first().map(|p| &p.1[..p.1.len().min(80)])
        );
    }
    // A parse error says where, as Loki's do.
    let answer = get(
        addr,
        RANGE,
        &[("query", r#"{service_name="api"} |= "a" | bogus"#)],
        &[],
    )
    .await;
    assert_eq!(answer.status, 400, "{}", answer.text());
    assert!(
        answer.text().starts_with("parse error at line 1, col "),
        "{}",
        answer.text()
    );
    assert!(server
        .metrics()
        .await
        .contains("loghaul_loki_queries_total"));
    server.stop().await;
}
on_both_backends!(
    loki_query_hostile,
    hostile_queries_are_refused_with_400_and_the_server_keeps_serving
);

// ---------------------------------------------------------------------------------------------
// 5. API keys.

async fn reads_need_a_key_in_any_header_grafana_sends(db: &TestDb) {
    let mut settings = config(db);
    settings.auth.api_keys = Some(KEYS.parse().unwrap());
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    let base = base_minute();
    push_known(
        addr,
        db,
        &[("x-api-key", "key-a")],
        base,
        KNOWN.len() as i64,
    )
    .await;
    let start = ((base - 60) * NANOS).to_string();
    let params = [
        ("query", r#"{service_name="billing"}"#),
        ("start", start.as_str()),
    ];
    let bearer_wrong = "Bearer key-c".to_owned();
    let basic_wrong = basic("grafana", "key-c");
    let basic_no_password = basic("key-a", "");
    for headers in [
        vec![],
        vec![("x-api-key", "key-c")],
        vec![("authorization", bearer_wrong.as_str())],
        vec![("authorization", "Bearer ")],
        vec![("authorization", basic_wrong.as_str())],
        vec![("authorization", basic_no_password.as_str())],
    ] {
        for path in [
            RANGE,
            "/loki/api/v1/labels",
            "/loki/api/v1/label/level/values",
        ] {
            let answer = get(addr, path, &params, &headers).await;
            assert_eq!(answer.status, 401, "{path} {headers:?}: {}", answer.text());
            assert!(!answer.text().contains("overdue"), "{}", answer.text());
        }
    }
    let bearer = "Bearer key-a".to_owned();
    let basic_any_user = basic("grafana", "key-a");
    let basic_other_user = basic("anyone at all", "key-a");
    for headers in [
        vec![("x-api-key", "key-a")],
        vec![("authorization", bearer.as_str())],
        vec![("authorization", basic_any_user.as_str())],
        vec![("authorization", basic_other_user.as_str())],
    ] {
        let answer = ok(addr, RANGE, &params, &headers).await;
        assert_eq!(lines(&answer), [KNOWN[7].line], "{headers:?}");
        ok(addr, "/loki/api/v1/labels", &params[1..], &headers).await;
    }
    // Another tenant's key is a valid key that sees nothing of team-a.
    let answer = ok(addr, RANGE, &params, &[("x-api-key", "key-b")]).await;
    assert_eq!(lines(&answer), Vec::<String>::new(), "{answer}");
    server.stop().await;
}
on_both_backends!(
    loki_query_auth,
    reads_need_a_key_in_any_header_grafana_sends
);

// ---------------------------------------------------------------------------------------------
// 6. Grafana Explore.

/// What Grafana's Loki data source sends when Explore opens on service api: the health check,
/// the label browser, the logs (Grafana's unaligned nanosecond range, step in ms) and the logs
/// volume histogram.
async fn grafana_explore_sequence_is_answered(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let base = base_minute();
    push_known(addr, db, &[], base, KNOWN.len() as i64).await;
    let now = now_ns();
    let (start, end) = ((now - 3_600 * NANOS).to_string(), now.to_string());

    let health = ok(
        addr,
        INSTANT,
        &[("query", "vector(1)+vector(1)"), ("time", &end)],
        &[],
    )
    .await;
    assert_eq!(health["data"]["resultType"], "vector", "{health}");
    assert_eq!(health["data"]["result"][0]["value"][1], "2", "{health}");
    assert_eq!(health["data"]["result"][0]["metric"], json!({}), "{health}");

    let labels = ok(
        addr,
        "/loki/api/v1/labels",
        &[("start", &start), ("end", &end)],
        &[],
    )
    .await;
    assert!(
        labels["data"]
            .as_array()
            .unwrap()
            .contains(&json!("service_name")),
        "{labels}"
    );
    let services = ok(
        addr,
        "/loki/api/v1/label/service_name/values",
        &[("start", &start), ("end", &end)],
        &[],
    )
    .await;
    assert_eq!(
        services["data"],
        json!(["api", "billing", "worker"]),
        "{services}"
    );

    let logs = ok(
        addr,
        RANGE,
        &[
            ("direction", "backward"),
            ("end", &end),
            ("limit", "1000"),
            ("query", r#"{service_name="api"}"#),
            ("start", &start),
            ("step", "2000ms"),
        ],
        &[],
    )
    .await;
    let mut newest_first = known_lines(|k| k.service == "api");
    newest_first.reverse();
    let mut got = entries(&logs);
    got.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    assert_eq!(
        got.into_iter().map(|e| e.1).collect::<Vec<_>>(),
        newest_first,
        "{logs}"
    );
    for stream in logs["data"]["result"].as_array().unwrap() {
        assert_eq!(stream["stream"]["service_name"], "api");
        assert!(stream["stream"]["detected_level"].is_string(), "{stream}");
    }
    assert!(logs["data"]["stats"]["summary"].is_object(), "{logs}");

    // The logs volume, as Grafana's data source sends it: the same unaligned range, a step in
    // milliseconds, and the histogram's tag, so the rollup answers.
    let volume = get(
        addr,
        RANGE,
        &[
            ("direction", "backward"),
            ("end", &end),
            ("query", r#"sum by (level, detected_level) (count_over_time({service_name="api"} | drop __error__ [1m]))"#),
            ("start", &start),
            ("step", "60000ms"),
        ],
        &[("x-query-tags", "Source=logvolhist")],
    )
    .await;
    assert_eq!(volume.status, 200, "{}", volume.text());
    let volume: Json = serde_json::from_slice(&volume.body).unwrap();
    assert_eq!(volume["data"]["resultType"], "matrix", "{volume}");
    for series in volume["data"]["result"].as_array().unwrap() {
        assert_eq!(
            series["metric"]["level"], series["metric"]["detected_level"],
            "{series}"
        );
        assert_eq!(series["metric"].as_object().unwrap().len(), 2, "{series}");
    }
    assert_eq!(
        volume["data"]["stats"]["summary"]["totalLinesProcessed"], 0,
        "the rollup answered: {volume}"
    );
    let want = by_minute_end(base, first_minute_step(now - 3_600 * NANOS), |k| {
        k.service == "api"
    });
    assert_eq!(level_points(&volume), want, "{volume}");
    server.stop().await;
}
on_both_backends!(
    loki_query_grafana_explore,
    grafana_explore_sequence_is_answered
);

/// The logs volume on Grafana's own unaligned range (now − 1h to now, in nanoseconds): untagged,
/// it counts what a scan counts; tagged as Grafana's histogram, the rollup answers it, each
/// minute at the step after its end, with every line counted once.
async fn the_volume_query_on_an_unaligned_range_counts_what_a_scan_counts(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let base = base_minute();
    push_known(addr, db, &[], base, KNOWN.len() as i64).await;
    // An end 30.5 s into a minute: every step's window straddles two minutes.
    let end = (chrono::Utc::now().timestamp() / 60 * 60 - 30) * NANOS + 500_000_000;
    let start = end - 3_600 * NANOS;
    let ask = async |q: &str| -> Json {
        ok(
            addr,
            RANGE,
            &[
                ("query", q),
                ("start", &start.to_string()),
                ("end", &end.to_string()),
                ("step", "60000ms"),
            ],
            &[],
        )
        .await
    };
    let rollup = ask(r#"sum by (level, detected_level) (count_over_time({service_name="api"} | drop __error__ [1m]))"#).await;
    let scan = ask(r#"sum by (level, detected_level) (count_over_time({service_name="api"} | drop __error__ |~ ".*" [1m]))"#).await;
    assert_eq!(
        level_points(&rollup),
        level_points(&scan),
        "rollup {rollup}\nscan {scan}"
    );

    // Grafana's histogram tags its query; the rollup answers it, each minute at the step whose
    // range holds the minute's end, on the grid of whole steps the range is aligned to.
    let histogram = ok(
        addr,
        RANGE,
        &[
            ("query", r#"sum by (level, detected_level) (count_over_time({service_name="api"} | drop __error__ [1m]))"#),
            ("start", &start.to_string()),
            ("end", &end.to_string()),
            ("step", "60000ms"),
        ],
        &[("x-query-tags", "Source=logvolhist")],
    )
    .await;
    let stats = &histogram["data"]["stats"];
    assert!(
        stats["volume"]["rollupRowsRead"].as_u64().unwrap() > 0,
        "{histogram}"
    );
    assert_eq!(stats["summary"]["totalLinesProcessed"], 0, "{histogram}");
    let want = by_minute_end(base, first_minute_step(start), |k| k.service == "api");
    assert_eq!(level_points(&histogram), want, "{histogram}");
    let total = |answer: &Json| -> f64 {
        level_points(answer)
            .values()
            .flatten()
            .map(|(_, v)| v.parse::<f64>().unwrap())
            .sum()
    };
    assert_eq!(total(&histogram), total(&scan), "every line counted once");
    server.stop().await;
}
on_both_backends!(
    loki_query_unaligned_volume,
    the_volume_query_on_an_unaligned_range_counts_what_a_scan_counts
);

/// A scanned `sum by (level) (…)` over lines whose structured metadata has a value per line (a
/// request id): the sum has one series per level, so it is answered however many distinct label
/// sets its lines have; the series limit still holds for an answer that keeps them apart.
async fn a_scanned_sum_over_lines_with_many_label_sets_is_answered(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let base = base_minute();
    let lines = 600;
    let values: Vec<Json> = (0..lines)
        .map(|n| {
            let ts = (base + 30) * NANOS + n * 1_000_000;
            json!([ts.to_string(), format!("request {n} done"), {"request.id": format!("r{n}")}])
        })
        .collect();
    let stream = json!({"stream": {"service_name": "ids", "level": "info"}, "values": values});
    push_json(addr, &[], json!({ "streams": [stream] })).await;
    wait_until("the lines to be stored", DEADLINE, async || {
        db.count().await >= lines
    })
    .await;
    let time = (base + 120).to_string();
    let instant =
        async |q: &str| -> Json { ok(addr, INSTANT, &[("query", q), ("time", &time)], &[]).await };
    for q in [
        r#"sum by (level) (count_over_time({service_name="ids"} |= "done" [5m]))"#,
        r#"sum(count_over_time({service_name="ids"} |= "done" [5m]))"#,
        r#"sum without (request_id) (count_over_time({service_name="ids"} |= "done" [5m]))"#,
        // Loki limits the series of the answer, not those it is computed from.
        r#"count(count_over_time({service_name="ids"} |= "done" [5m]))"#,
        r#"count(count_over_time({service_name="ids"} | __error__="" [5m]))"#,
        r#"count(sum_over_time({service_name="ids"} | regexp "request (?P<n>[0-9]+)" | unwrap n [5m]))"#,
    ] {
        let answer = instant(q).await;
        let result = answer["data"]["result"].as_array().unwrap();
        assert_eq!(result.len(), 1, "{q}: {answer}");
        assert_eq!(result[0]["value"][1], lines.to_string(), "{q}: {answer}");
    }
    refused(
        addr,
        INSTANT,
        &[
            (
                "query",
                r#"count_over_time({service_name="ids"} |= "done" [5m])"#,
            ),
            ("time", &time),
        ],
        "maximum number of series (500) reached",
    )
    .await;
    server.stop().await;

    // --max-query-series moves the limit, as Loki's max_query_series does.
    let mut raised = config(db);
    raised.query.max_query_series = lines as usize;
    let server = TestServer::start(raised).await;
    let q = r#"count_over_time({service_name="ids"} |= "done" [5m])"#;
    let answer = ok(
        server.http_ingest,
        INSTANT,
        &[("query", q), ("time", &time)],
        &[],
    )
    .await;
    assert_eq!(
        answer["data"]["result"].as_array().unwrap().len(),
        lines as usize,
        "one series per request id"
    );
    server.stop().await;
    let mut lowered = config(db);
    lowered.query.max_query_series = 2;
    let server = TestServer::start(lowered).await;
    refused(
        server.http_ingest,
        INSTANT,
        &[
            (
                "query",
                r#"sum by (request_id) (count_over_time({service_name="ids"}[5m]))"#,
            ),
            ("time", &time),
        ],
        "maximum number of series (2) reached",
    )
    .await;
    server.stop().await;
}
on_both_backends!(
    loki_query_many_label_sets,
    a_scanned_sum_over_lines_with_many_label_sets_is_answered
);

/// The database counting the lines of a metric query answers what the engine answers when it
/// reads them one by one, whatever the function, the grouping, the step, the range, the offset
/// and the start (on a second, between two, between two microseconds); lines lie on step and
/// range boundaries and between them, with and without metadata (one key a line of its own, one
/// whose label name is not its key).
async fn a_counted_read_answers_what_a_scan_answers(db: &TestDb) {
    let server = Process::serve(&db.url, &[]);
    let addr = server.http_ingest;
    let base = base_minute();
    let first = (base + 20) * NANOS;
    let mut lines = 0;
    let mut streams = Vec::new();
    for (labels, every) in [
        (
            json!({"service_name": "cnt", "level": "info"}),
            1_234_567_000i64,
        ),
        (json!({"service_name": "cnt", "env": "dev"}), 2_345_678_000),
    ] {
        let mut values: Vec<Json> = (0..150)
            .map(|n| {
                let ts = first + n * every;
                let line = format!("line {n} {}", "x".repeat((n % 17) as usize));
                match n % 4 {
                    0 => json!([ts.to_string(), line, {
                        "region": if n % 8 == 0 { "eu" } else { "us" },
                        "http.method": if n % 3 == 0 { "GET" } else { "PUT" },
                        "request": format!("r{n}"),
                    }]),
                    1 => json!([ts.to_string(), line, {"trace_id": format!("t{}", n % 3)}]),
                    _ => json!([ts.to_string(), line]),
                }
            })
            .collect();
        // Lines exactly on minutes, steps and range ends (each stream's at times of its own).
        for extra in [60, 75, 90, 150, 180] {
            let ts = (base + extra) * NANOS + if every > 2 * NANOS { 1_000 } else { 0 };
            values.push(json!([ts.to_string(), format!("edge {extra}")]));
        }
        values.sort_by_key(|v| v[0].as_str().unwrap().parse::<i64>().unwrap());
        lines += values.len() as i64;
        streams.push(json!({"stream": labels, "values": values}));
    }
    push_json(addr, &[], json!({ "streams": streams })).await;
    wait_until("the lines to be stored", DEADLINE, async || {
        db.count().await >= lines
    })
    .await;
    let sources = async || {
        let text = server.metrics().await;
        (
            metric(
                &text,
                r#"loghaul_loki_metric_sources_total{source="count"}"#,
            ),
            metric(&text, r#"loghaul_loki_metric_sources_total{source="scan"}"#),
        )
    };
    let selector = r#"{service_name="cnt"}"#;
    let mut asked = 0.0;
    for function in [
        "count_over_time",
        "rate",
        "bytes_over_time",
        "bytes_rate",
        "absent_over_time",
    ] {
        for (outer, close) in [
            ("sum by (level) (", ")"),
            ("sum(", ")"),
            ("", ""),
            ("count(", ")"),
            ("sum by (trace_id, detected_level) (", ")"),
            ("sum without (region) (", ")"),
            ("sum by (region, env) (", ")"),
            ("sum by (http_method, level) (", ")"),
        ] {
            for (range, step, offset, start_ns) in [
                ("1m", "15s", "", 0),
                ("90s", "37s", "", 123_456_789),
                ("5m", "300s", "", 0),
                ("30s", "9s", " offset 1m", 500),
                ("2m", "7s", "", 999_999_999),
                ("45s", "45s", " offset 13s", 1_000),
            ] {
                let query = |stage: &str| {
                    format!("{outer}{function}({selector} {stage} [{range}]{offset}){close}")
                };
                let (counted, scanned) =
                    (query(r#"|= "line""#), query(r#"| __error__="" |= "line""#));
                let start = (base * NANOS + start_ns).to_string();
                let end = ((base + 240) * NANOS + start_ns).to_string();
                let ask = async |q: &str| {
                    ok(
                        addr,
                        RANGE,
                        &[
                            ("query", q),
                            ("start", &start),
                            ("end", &end),
                            ("step", step),
                        ],
                        &[],
                    )
                    .await["data"]["result"]
                        .clone()
                };
                let (a, b) = (ask(&counted).await, ask(&scanned).await);
                assert_eq!(a, b, "{counted} at step {step} from {start}");
                let instant = async |q: &str| {
                    ok(addr, INSTANT, &[("query", q), ("time", &end)], &[]).await["data"]["result"]
                        .clone()
                };
                let (a, b) = (instant(&counted).await, instant(&scanned).await);
                assert_eq!(a, b, "{counted} at {end}");
                asked += 2.0;
            }
        }
    }
    // Every counted query was counted by the database, every other one read by the engine.
    assert_eq!(sources().await, (asked, asked));
    drop(server);
}
on_both_backends!(
    loki_query_counted_reads,
    a_counted_read_answers_what_a_scan_answers
);

/// Loki's parser hints: a metric query that keeps only some labels has `| logfmt` and `| json`
/// extract only those it reads, so a pipeline error names the stream's labels and those, as
/// Loki's does; a query that keeps every label names every label the line has.
async fn a_query_that_keeps_some_labels_extracts_only_those(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let base = base_minute();
    let values: Vec<Json> = [
        r#"method=GET path=/items status=200 msg="served""#,
        r#"{"method":"GET","path":"/items","status":200,"msg":"served"}"#,
    ]
    .iter()
    .enumerate()
    .map(|(n, line)| json!([((base + 30) * NANOS + n as i64 * NANOS).to_string(), line]))
    .collect();
    let stream = json!({"stream": {"service_name": "hints", "level": "info"}, "values": values});
    push_json(addr, &[], json!({ "streams": [stream] })).await;
    wait_until("the lines to be stored", DEADLINE, async || {
        db.count().await >= 2
    })
    .await;
    let time = (base + 120).to_string();
    let error = async |q: &str| -> String {
        let answer = get(addr, INSTANT, &[("query", q), ("time", &time)], &[]).await;
        assert_eq!(answer.status, 400, "{q}: {}", answer.text());
        answer.text()
    };
    for parser in ["logfmt", "json"] {
        let selector = format!(
            r#"{{service_name="hints"}} |= "{}" | {parser}"#,
            if parser == "json" { "{" } else { "method=" }
        );
        let hinted = error(&format!(
            "max_over_time({selector} | unwrap path [5m]) by (method)"
        ))
        .await;
        assert!(
            hinted.contains(r#"method="GET""#) && hinted.contains(r#"path="/items""#),
            "{parser}: {hinted}"
        );
        assert!(
            !hinted.contains("msg=") && !hinted.contains("status="),
            "{parser}: only the labels the query reads: {hinted}"
        );
        let every = error(&format!("max_over_time({selector} | unwrap path [5m])")).await;
        assert!(
            every.contains(r#"msg="served""#) && every.contains(r#"status="200""#),
            "{parser}: every label: {every}"
        );
    }
    server.stop().await;
}
on_both_backends!(
    loki_query_parser_hints,
    a_query_that_keeps_some_labels_extracts_only_those
);

/// A stream of JSON lines and a plain one, as Loki 3.7.6 answers it: a label filter drops the line
/// the parser failed on unless the line meets it, and a metric query that would count that line
/// with its `__error__` is a 400 naming the error, as in Loki.
async fn a_line_the_parser_failed_on_counts_nowhere_it_is_not_asked_for(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let base = base_minute();
    let values: Vec<Json> = [
        r#"{"user":"u3","status":200}"#,
        "plain text, not json",
        r#"{"user":"u4","status":500}"#,
    ]
    .iter()
    .enumerate()
    .map(|(n, line)| json!([((base + 10) * NANOS + n as i64).to_string(), line]))
    .collect();
    let stream = json!({"stream": {"service_name": "mixed"}, "values": values});
    push_json(addr, &[], json!({ "streams": [stream] })).await;
    wait_until("the lines to be stored", DEADLINE, async || {
        db.count().await >= 3
    })
    .await;
    let (start, end) = ((base - 60).to_string(), (base + 120).to_string());
    let lines = async |q: &str| -> usize {
        let answer = ok(
            addr,
            RANGE,
            &[("query", q), ("start", &start), ("end", &end)],
            &[],
        )
        .await;
        entries(&answer).len()
    };
    assert_eq!(
        lines(r#"{service_name="mixed"} | json | user="u3""#).await,
        1
    );
    assert_eq!(
        lines(r#"{service_name="mixed"} | json | __error__="""#).await,
        2
    );
    assert_eq!(
        lines(r#"{service_name="mixed"} | json | status >= 500"#).await,
        1
    );

    let time = (base + 120).to_string();
    let count =
        async |q: &str| -> Json { ok(addr, INSTANT, &[("query", q), ("time", &time)], &[]).await };
    let over_400 =
        count(r#"sum(count_over_time({service_name="mixed"} | json | status > 400 [5m]))"#).await;
    assert_eq!(over_400["data"]["result"][0]["value"][1], "1", "{over_400}");
    let clean =
        count(r#"sum(count_over_time({service_name="mixed"} | json | __error__="" [5m]))"#).await;
    assert_eq!(clean["data"]["result"][0]["value"][1], "2", "{clean}");
    // As the real Loki answers: an error refuses a count that keeps labels, not a sum of all.
    let all = count(r#"sum(count_over_time({service_name="mixed"} | json [5m]))"#).await;
    assert_eq!(all["data"]["result"][0]["value"][1], "3", "{all}");
    for q in [
        r#"count_over_time({service_name="mixed"} | json [5m])"#,
        r#"sum by (status) (count_over_time({service_name="mixed"} | json [5m]))"#,
    ] {
        refused(
            addr,
            INSTANT,
            &[("query", q), ("time", &time)],
            "pipeline error: 'JSONParserErr' for series: '{",
        )
        .await;
    }
    server.stop().await;
}
on_both_backends!(
    loki_query_parser_errors,
    a_line_the_parser_failed_on_counts_nowhere_it_is_not_asked_for
);

/// A metric query over lines that still carry an error names the earliest such line, as Loki,
/// which reads in time order, does; of lines at the same instant, the least series. The lines are
/// stored latest first, so a store that returns them as stored meets the latest first.
async fn a_pipeline_error_names_the_earliest_line(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let base = base_minute();
    let pushes = [
        ("clean", base + 10, r#"{"status":200}"#),
        ("late", base + 50, "late plain text"),
        ("b", base + 20, "early plain text"),
        ("a", base + 20, "early plain text"),
    ];
    for (n, (pod, at, line)) in pushes.into_iter().enumerate() {
        let stream = json!({"stream": {"service_name": "order", "pod": pod},
            "values": [[(at * NANOS).to_string(), line]]});
        push_json(addr, &[], json!({ "streams": [stream] })).await;
        wait_until("the line to be stored", DEADLINE, async || {
            db.count().await > n as i64
        })
        .await;
    }
    let time = (base + 120).to_string();
    for q in [
        r#"sum by (pod) (count_over_time({service_name="order"} | json [5m]))"#,
        r#"sum_over_time({service_name="order"} | regexp "^(?P<word>[a-z]+) " | unwrap word [5m])"#,
    ] {
        refused(
            addr,
            INSTANT,
            &[("query", q), ("time", &time)],
            r#"pod="a""#,
        )
        .await;
    }
    server.stop().await;
}
on_both_backends!(
    loki_query_earliest_pipeline_error,
    a_pipeline_error_names_the_earliest_line
);

/// An `unwrap` of a label a parser makes reads only the rows that can have it, and still every
/// one: the label may come from a key written with JSON escapes, from the stream's labels or from
/// the line's structured metadata as well as from the line's plain key, and a line `| json` fails
/// on refuses the query when it has the label all the same. Loki 3.7.6 answers these queries
/// alike (24, and the two refusals).
async fn an_unwrap_reads_every_line_that_can_have_its_label(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let base = base_minute();
    let at = |n: i64| ((base + 10) * NANOS + n * NANOS).to_string();
    let plain = json!({"stream": {"service_name": "unw"}, "values": [
        [at(0), r#"{"bytes":3}"#],
        [at(1), r#"{"by\u0074es":7}"#],
        [at(2), r#"{"msg":"none"}"#],
        [at(3), "no json here"],
        [at(4), r#"{"msg":"from metadata"}"#, {"bytes": "9"}],
    ]});
    let labelled = json!({"stream": {"service_name": "unw", "bytes": "5"}, "values": [
        [at(5), r#"{"msg":"from the stream"}"#],
    ]});
    // A line `| json` fails on that has the label all the same: its error refuses the query.
    let failing_label = json!({"stream": {"service_name": "unw-label", "bytes": "5"},
        "values": [[at(6), "not json"]]});
    let failing_metadata = json!({"stream": {"service_name": "unw-metadata"},
        "values": [[at(7), "not json", {"bytes": "9"}]]});
    let streams = [plain, labelled, failing_label, failing_metadata];
    push_json(addr, &[], json!({ "streams": streams })).await;
    wait_until("the lines to be stored", DEADLINE, async || {
        db.count().await >= 8
    })
    .await;
    let time = (base + 120).to_string();
    let q = r#"sum(sum_over_time({service_name="unw"} | json | unwrap bytes [5m]))"#;
    let answer = ok(addr, INSTANT, &[("query", q), ("time", &time)], &[]).await;
    assert_eq!(answer["data"]["result"][0]["value"][1], "24", "{answer}");
    for service in ["unw-label", "unw-metadata"] {
        let q =
            format!(r#"sum_over_time({{service_name="{service}"}} | json | unwrap bytes [5m])"#);
        refused(
            addr,
            INSTANT,
            &[("query", &q), ("time", &time)],
            "pipeline error: 'JSONParserErr'",
        )
        .await;
    }
    server.stop().await;
}
on_both_backends!(
    loki_query_unwrap_reads_what_can_have_the_label,
    an_unwrap_reads_every_line_that_can_have_its_label
);

/// A line stamped exactly on a minute counts in the range that ends at that minute, `(t − 1m, t]`,
/// as in Loki: from the rollup and from a scan alike, by a range query and an instant one.
async fn a_line_on_a_minute_counts_at_that_minutes_step(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let base = base_minute();
    let minute = (base + 60) * NANOS;
    let values: Vec<Json> = [minute, minute + 1_000, minute + 60 * NANOS - 1_000]
        .iter()
        .map(|ts| json!([ts.to_string(), "tick"]))
        .collect();
    let stream = json!({"stream": {"service_name": "edge"}, "values": values});
    // A stream whose last line is on a minute: the rollup counts it in the minute before.
    let last = json!({"stream": {"service_name": "edge-last"},
        "values": [[(minute + 60 * NANOS).to_string(), "last"]]});
    push_json(addr, &[], json!({ "streams": [stream, last] })).await;
    wait_until("the lines to be stored", DEADLINE, async || {
        db.count().await >= 4
    })
    .await;
    let from_minute = |end: i64| {
        [
            ("query", r#"{service_name="edge-last"}"#.to_owned()),
            ("start", (minute + 60 * NANOS).to_string()),
            ("end", end.to_string()),
        ]
    };
    for end in [minute + 60 * NANOS + 1, (base + 600) * NANOS] {
        let params = from_minute(end);
        let params: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let answer = ok(addr, RANGE, &params, &[]).await;
        assert_eq!(lines(&answer), ["last"], "ending at {end}: {answer}");
    }
    let points = |answer: &Json| -> Vec<(i64, String)> {
        answer["data"]["result"][0]["values"]
            .as_array()
            .unwrap_or_else(|| panic!("{answer}"))
            .iter()
            .map(|p| (p[0].as_i64().unwrap(), p[1].as_str().unwrap().to_owned()))
            .collect()
    };
    // The rollup answers a bare selector; a pipeline makes it a scan.
    for q in [
        r#"sum(count_over_time({service_name="edge"}[1m]))"#,
        r#"sum(count_over_time({service_name="edge"} |= "tick" [1m]))"#,
    ] {
        let answer = ok(
            addr,
            RANGE,
            &[
                ("query", q),
                ("start", &base.to_string()),
                ("end", &(base + 180).to_string()),
                ("step", "60"),
            ],
            &[],
        )
        .await;
        assert_eq!(
            points(&answer),
            [(base + 60, "1".to_owned()), (base + 120, "2".to_owned())],
            "{q}: {answer}"
        );
        let instant = ok(
            addr,
            INSTANT,
            &[("query", q), ("time", &(base + 60).to_string())],
            &[],
        )
        .await;
        assert_eq!(
            instant["data"]["result"][0]["value"][1], "1",
            "{q} at the minute: {instant}"
        );
    }
    server.stop().await;
}
on_both_backends!(
    loki_query_line_on_a_minute,
    a_line_on_a_minute_counts_at_that_minutes_step
);

/// Streams labelled as shippers label them, read back as Loki 3.7.6 answers: the label the
/// service came from (`job`) stays a label and selects; a line pushed without a level gets the
/// `detected_level` Loki finds in it and no `level` label; a trace id sent as metadata comes back
/// as a label of its line.
async fn stream_labels_stay_labels_and_levels_are_detected_from_lines(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let base = base_minute();
    let ts = |n: i64| ((base + 10) * NANOS + n * 1_000).to_string();
    let streams = json!({"streams": [
        {"stream": {"job": "batch"}, "values": [
            [ts(1), r#"{"level":"warn","msg":"a"}"#],
            [ts(2), "level=error msg=b"],
            [ts(3), "plain WARN text"],
            [ts(4), "nothing here"],
        ]},
        {"stream": {"job": "cron", "app": "nightly"}, "values": [
            [ts(5), "run", {"trace_id": "0af7651916cd43dd8448eb211c80319c", "region": "eu"}],
        ]},
        {"stream": {"service_name": "legacy", "level": "WARNING"}, "values": [
            [ts(6), "disk almost full"],
        ]},
    ]});
    push_json(addr, &[], streams).await;
    wait_until("the lines to be stored", DEADLINE, async || {
        db.count().await >= 6
    })
    .await;
    let (start, end) = ((base - 60).to_string(), (base + 120).to_string());
    let streams = async |q: &str| -> Vec<(String, Json)> {
        let answer = ok(
            addr,
            RANGE,
            &[("query", q), ("start", &start), ("end", &end)],
            &[],
        )
        .await;
        let mut lines: Vec<(String, Json)> = answer["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| {
                s["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| (v[1].as_str().unwrap().to_owned(), s["stream"].clone()))
            })
            .collect();
        lines.sort_by(|a, b| a.0.cmp(&b.0));
        lines
    };
    let batch = streams(r#"{job="batch"}"#).await;
    let detected: Vec<(&str, &str)> = batch
        .iter()
        .map(|(line, labels)| (line.as_str(), labels["detected_level"].as_str().unwrap()))
        .collect();
    assert_eq!(
        detected,
        [
            ("level=error msg=b", "error"),
            ("nothing here", "unknown"),
            ("plain WARN text", "warn"),
            (r#"{"level":"warn","msg":"a"}"#, "warn"),
        ]
    );
    let (_, unknown) = &batch[1];
    assert_eq!(
        unknown,
        &json!({"detected_level": "unknown", "job": "batch", "service_name": "batch"}),
        "no level label for a line of no level"
    );
    let cron = streams(r#"{job="cron"}"#).await;
    assert_eq!(cron.len(), 1, "{cron:?}");
    assert_eq!(cron[0].1["service_name"], "nightly", "app comes before job");
    assert_eq!(cron[0].1["trace_id"], "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(cron[0].1["region"], "eu");
    // Structured metadata is a label of the line, not of the stream: a selector does not see it.
    assert!(streams(r#"{job="cron", region="eu"}"#).await.is_empty());
    assert_eq!(streams(r#"{job="cron"} | region="eu""#).await.len(), 1);
    // A level label is kept as it was sent; detected_level names it as Loki does.
    let legacy = streams(r#"{level="WARNING"}"#).await;
    assert_eq!(
        legacy,
        [(
            "disk almost full".to_owned(),
            json!({"detected_level": "warn", "level": "WARNING", "service_name": "legacy"})
        )]
    );
    assert!(streams(r#"{level="warn"}"#).await.is_empty());
    let volume = ok(
        addr,
        "/loki/api/v1/index/volume",
        &[
            ("query", r#"{service_name="legacy"}"#),
            ("targetLabels", "level"),
            ("start", &start),
            ("end", &end),
        ],
        &[],
    )
    .await;
    assert_eq!(
        volume["data"]["result"][0]["metric"],
        json!({"level": "WARNING"}),
        "the rollup keeps the level as sent: {volume}"
    );
    server.stop().await;
}
on_both_backends!(
    loki_query_stream_labels,
    stream_labels_stay_labels_and_levels_are_detected_from_lines
);

/// A POST of `params` as a form body, as Grafana's data source sends its queries.
async fn post_form(addr: SocketAddr, path: &str, params: &[(&str, &str)]) -> HttpAnswer {
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    let form = [("content-type", "application/x-www-form-urlencoded")];
    http_request(addr, "POST", path, &form, body.as_bytes())
        .await
        .unwrap()
}

/// `format_query`, which Grafana's query editor calls: the query written back as Loki 3.7.6
/// writes it (by GET and by POST), split over lines when long, and a query that does not parse
/// refused with 400 and Loki's JSON.
async fn format_query_writes_a_query_back_as_loki_does(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let path = "/loki/api/v1/format_query";
    let written = ok(
        addr,
        path,
        &[(
            "query",
            r#"sum by(level)(count_over_time({service_name="checkout"}|json|status>=500[5m]))"#,
        )],
        &[],
    )
    .await;
    assert_eq!(
        written,
        json!({"status": "success", "data": r#"sum by (level)(count_over_time({service_name="checkout"} | json | status>=500[5m]))"#})
    );
    let posted = post_form(
        addr,
        path,
        &[(
            "query",
            r#"{service_name="checkout",level=~"warn|error"}|="x"|json"#,
        )],
    )
    .await;
    assert_eq!(posted.status, 200, "{}", posted.text());
    let posted: Json = serde_json::from_slice(&posted.body).unwrap();
    assert_eq!(
        posted["data"],
        r#"{service_name="checkout", level=~"warn|error"} |= "x" | json"#
    );
    // A query longer than 100 characters is split over indented lines, as Loki splits it.
    let long = ok(
        addr,
        path,
        &[(
            "query",
            r#"rate({a="b"}[1m]) > bool on (x) group_left (z) rate({c="d"}[1m]) or vector(1) unless bottomk(2, rate({e="f"}[1m]))"#,
        )],
        &[],
    )
    .await;
    assert_eq!(
        long["data"],
        "  (rate({a=\"b\"}[1m]) > bool on (x) group_left (z) rate({c=\"d\"}[1m]))\nor\n  (vector(1.000000) unless bottomk(2,rate({e=\"f\"}[1m])))"
    );
    // Loki says why in JSON here.
    let bad = get(addr, path, &[("query", "{service_name=")], &[]).await;
    assert_eq!(bad.status, 400, "{}", bad.text());
    let bad: Json = serde_json::from_slice(&bad.body).unwrap();
    assert_eq!(
        bad,
        json!({"status": "invalid-query", "error": "parse error at line 1, col 15: syntax error: unexpected $end, expecting STRING"})
    );
    server.stop().await;
}
on_both_backends!(
    loki_query_format_query,
    format_query_writes_a_query_back_as_loki_does
);

/// `query` and `query_range` by POST with a form body, as Loki and Grafana's data source send
/// them: the body's parameters win over the query string's; a body past its limit is a 400.
async fn the_query_endpoints_take_a_form_body(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let base = base_minute();
    let values: Vec<Json> = (0..3)
        .map(|n| json!([((base + 10) * NANOS + n).to_string(), format!("line {n}")]))
        .collect();
    let stream = json!({"stream": {"service_name": "form"}, "values": values});
    push_json(addr, &[], json!({ "streams": [stream] })).await;
    wait_until("the lines to be stored", DEADLINE, async || {
        db.count().await >= 3
    })
    .await;
    let post = async |path: &str, params: &[(&str, &str)]| post_form(addr, path, params).await;
    let (start, end, time) = (
        (base - 60).to_string(),
        (base + 120).to_string(),
        (base + 120).to_string(),
    );
    let range = post(
        &format!("{RANGE}?limit=1"),
        &[
            ("query", r#"{service_name="form"}"#),
            ("start", &start),
            ("end", &end),
            ("limit", "2"),
        ],
    )
    .await;
    assert_eq!(range.status, 200, "{}", range.text());
    let range: Json = serde_json::from_slice(&range.body).unwrap();
    assert_eq!(entries(&range).len(), 2, "the body's limit wins: {range}");
    let instant = post(
        INSTANT,
        &[
            (
                "query",
                r#"sum(count_over_time({service_name="form"}[5m]))"#,
            ),
            ("time", &time),
        ],
    )
    .await;
    assert_eq!(instant.status, 200, "{}", instant.text());
    let instant: Json = serde_json::from_slice(&instant.body).unwrap();
    assert_eq!(instant["data"]["result"][0]["value"][1], "3", "{instant}");
    let huge = "x".repeat(70 << 10);
    let refused = post(INSTANT, &[("query", &huge)]).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(refused.text().contains("form body"), "{}", refused.text());
    server.stop().await;
}
on_both_backends!(loki_query_form_bodies, the_query_endpoints_take_a_form_body);

/// `index/stats`, which Grafana asks before a query to show how much it will read: the streams,
/// lines and bytes of a selector over a range, from the rollup.
async fn index_stats_count_what_a_selector_holds(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let base = base_minute();
    let stream = |level: &str, lines: &[&str]| {
        let values: Vec<Json> = lines
            .iter()
            .enumerate()
            .map(|(n, line)| json!([((base + 10) * NANOS + n as i64).to_string(), line]))
            .collect();
        json!({"stream": {"service_name": "sized", "level": level}, "values": values})
    };
    let streams = [
        stream("info", &["abc", "defg"]),
        stream("error", &["hijkl"]),
    ];
    push_json(addr, &[], json!({ "streams": streams })).await;
    wait_until("the lines to be stored", DEADLINE, async || {
        db.count().await >= 3
    })
    .await;
    let (start, end) = ((base - 60).to_string(), (base + 120).to_string());
    // Loki answers the bare object, without `status` and `data`.
    let stats = async |q: &str| -> Json {
        let answer = get(
            addr,
            "/loki/api/v1/index/stats",
            &[("query", q), ("start", &start), ("end", &end)],
            &[],
        )
        .await;
        assert_eq!(answer.status, 200, "{q}: {}", answer.text());
        serde_json::from_slice(&answer.body).unwrap()
    };
    let all = stats(r#"{service_name="sized"}"#).await;
    assert_eq!(
        (&all["streams"], &all["entries"], &all["bytes"]),
        (&json!(2), &json!(3), &json!(12)),
        "{all}"
    );
    let errors = stats(r#"{service_name="sized", level="error"}"#).await;
    assert_eq!(
        (&errors["streams"], &errors["entries"], &errors["bytes"]),
        (&json!(1), &json!(1), &json!(5)),
        "{errors}"
    );
    refused(
        addr,
        "/loki/api/v1/index/stats",
        &[
            ("query", r#"{service_name="sized"} |= "x""#),
            ("start", &start),
            ("end", &end),
        ],
        "without a pipeline",
    )
    .await;
    server.stop().await;
}
on_both_backends!(
    loki_query_index_stats,
    index_stats_count_what_a_selector_holds
);

// ---------------------------------------------------------------------------------------------
// 7. Grafana's label and field pickers.

/// `detected_labels`, `detected_fields` and `detected_field/NAME/values`, which Explore and Logs
/// Drilldown ask before they show a selector's logs: stream labels with their number of values,
/// and the fields of the newest lines, from JSON (nested keys, their path) or logfmt (durations,
/// sizes), structured metadata among them; each in its tenant, and bad requests refused as Loki
/// refuses them.
async fn detected_labels_and_fields_are_lokis(db: &TestDb) {
    let mut settings = config(db);
    settings.auth.api_keys = Some(KEYS.parse().unwrap());
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    let base = base_minute();
    let ts = |n: i64| ((base + 10) * NANOS + n * 1_000_000).to_string();
    let json_lines = json!({"stream": {"service_name": "shop", "level": "info", "env": "prod"}, "values": [
        [ts(1), r#"{"status":200,"user":{"name":"ann","id":"u-1"},"ratio":0.5,"tags":["a"],"gone":null}"#],
        [ts(2), r#"{"status":404,"user":{"name":"bob","id":"u-2"},"ratio":1.5}"#, {"trace_id": "t-1"}],
        [ts(3), r#"{"status":200,"user":{"name":"ann","id":"u-3"},"ratio":2.5}"#],
    ]});
    let logfmt_lines = json!({"stream": {"service_name": "shop", "level": "error", "env": "staging"}, "values": [
        [ts(4), r#"method=GET took=250ms size=2KB ok=true empty= msg="slow call""#],
        [ts(5), r#"method=POST took=1m30s size=1.5MB ok=false"#],
    ]});
    push_json(
        addr,
        &[("x-api-key", "key-a")],
        json!({ "streams": [json_lines, logfmt_lines] }),
    )
    .await;
    wait_until("the lines to be stored", DEADLINE, async || {
        db.count().await >= 5
    })
    .await;
    let (start, end) = ((base - 60).to_string(), (base + 120).to_string());
    let shop = r#"{service_name="shop"}"#;
    let ask = async |path: &str, params: &[(&str, &str)], key: &str| -> (u16, Json) {
        let mut all = vec![("start", start.as_str()), ("end", end.as_str())];
        all.extend_from_slice(params);
        let answer = get(addr, path, &all, &[("x-api-key", key)]).await;
        let body = serde_json::from_slice(&answer.body).unwrap_or(Json::Null);
        (answer.status, body)
    };
    let by_name = |list: &Json, key: &str| -> BTreeMap<String, Json> {
        list[key]
            .as_array()
            .unwrap_or_else(|| panic!("{list}"))
            .iter()
            .map(|item| (item["label"].as_str().unwrap().to_owned(), item.clone()))
            .collect()
    };

    // Stream labels with their number of values; metadata and `detected_level` are not among them.
    let (status, labels) = ask("/loki/api/v1/detected_labels", &[("query", shop)], "key-a").await;
    assert_eq!(status, 200, "{labels}");
    let labels = by_name(&labels, "detectedLabels");
    let cardinality: BTreeMap<&str, &Json> = labels
        .iter()
        .map(|(name, item)| (name.as_str(), &item["cardinality"]))
        .collect();
    assert_eq!(
        cardinality,
        BTreeMap::from([
            ("env", &json!(2)),
            ("level", &json!(2)),
            ("service_name", &json!(1))
        ])
    );
    // Without a query, every stream of the tenant, as in Loki.
    let (status, all) = ask("/loki/api/v1/detected_labels", &[], "key-a").await;
    assert_eq!(status, 200, "{all}");
    assert!(by_name(&all, "detectedLabels").contains_key("service_name"));

    let (status, fields) = ask("/loki/api/v1/detected_fields", &[("query", shop)], "key-a").await;
    assert_eq!(status, 200, "{fields}");
    assert_eq!(fields["limit"], 1000, "{fields}");
    let fields = by_name(&fields, "fields");
    let field = |name: &str| {
        fields
            .get(name)
            .unwrap_or_else(|| panic!("{name} among {:?}", fields.keys()))
    };
    assert_eq!(
        field("user_name"),
        &json!({"label": "user_name", "type": "string", "cardinality": 2, "parsers": ["json"], "jsonPath": ["user", "name"]})
    );
    assert_eq!(field("status")["type"], "int");
    assert_eq!(field("ratio")["type"], "float");
    assert_eq!(field("took")["type"], "duration");
    assert_eq!(
        field("size"),
        &json!({"label": "size", "type": "bytes", "cardinality": 2, "parsers": ["logfmt"]})
    );
    assert_eq!(field("ok")["type"], "boolean");
    assert_eq!(
        field("trace_id"),
        &json!({"label": "trace_id", "type": "string", "cardinality": 1, "parsers": null})
    );
    assert_eq!(field("detected_level")["cardinality"], 2);
    for absent in ["tags", "gone", "empty", "env", "service_name", "level"] {
        assert!(!fields.contains_key(absent), "{absent}: {fields:?}");
    }

    // A pipeline narrows the lines read; `line_limit` takes the newest; `limit` counts fields.
    let (_, narrowed) = ask(
        "/loki/api/v1/detected_fields",
        &[("query", r#"{service_name="shop"} | json | status = 404"#)],
        "key-a",
    )
    .await;
    assert_eq!(by_name(&narrowed, "fields")["user_name"]["cardinality"], 1);
    let (_, newest) = ask(
        "/loki/api/v1/detected_fields",
        &[("query", shop), ("line_limit", "1")],
        "key-a",
    )
    .await;
    assert!(by_name(&newest, "fields").contains_key("took"));
    assert!(!by_name(&newest, "fields").contains_key("status"));
    let (_, two) = ask(
        "/loki/api/v1/detected_fields",
        &[("query", shop), ("limit", "2")],
        "key-a",
    )
    .await;
    assert_eq!(
        (two["fields"].as_array().unwrap().len(), &two["limit"]),
        (2, &json!(2))
    );

    // Values, a size written as Loki writes it for a query.
    let (status, sizes) = ask(
        "/loki/api/v1/detected_field/size/values",
        &[("query", shop)],
        "key-a",
    )
    .await;
    assert_eq!(status, 200, "{sizes}");
    assert_eq!(sizes, json!({"limit": 1000, "values": ["1.5MB", "2.0kB"]}));
    let (_, names) = ask(
        "/loki/api/v1/detected_field/user_name/values",
        &[("query", shop)],
        "key-a",
    )
    .await;
    assert_eq!(names, json!({"limit": 1000, "values": ["ann", "bob"]}));

    // Another tenant sees none of it: Loki answers `{}`.
    for path in [
        "/loki/api/v1/detected_labels",
        "/loki/api/v1/detected_fields",
        "/loki/api/v1/detected_field/size/values",
    ] {
        let (status, body) = ask(path, &[("query", shop)], "key-b").await;
        assert_eq!((status, &body), (200, &json!({})), "{path}");
        // An unknown key reads nothing at all.
        let (status, _) = ask(path, &[("query", shop)], "key-c").await;
        assert_eq!(status, 401, "{path}");
    }

    // Bad requests, refused with 400 as Loki refuses them.
    let month_ago = (base - 40 * 86_400).to_string();
    for (path, params, says) in [
        (
            "/loki/api/v1/detected_fields",
            vec![],
            "parse error : syntax error: unexpected $end",
        ),
        (
            "/loki/api/v1/detected_field/size/values",
            vec![],
            "parse error : syntax error: unexpected $end",
        ),
        (
            "/loki/api/v1/detected_fields",
            vec![("query", r#"count_over_time({service_name="shop"}[1m])"#)],
            "only log selector is supported",
        ),
        (
            "/loki/api/v1/detected_labels",
            vec![("query", r#"{service_name="shop"} | json"#)],
            "only label matchers are supported",
        ),
        (
            "/loki/api/v1/detected_labels",
            vec![("query", r#"{service_name=~".*"}"#)],
            "",
        ),
        (
            "/loki/api/v1/detected_fields",
            vec![("query", shop), ("line_limit", "0")],
            "limit must be a positive value",
        ),
        (
            "/loki/api/v1/detected_fields",
            vec![("query", shop), ("line_limit", "5001")],
            "max entries limit per query exceeded",
        ),
        (
            "/loki/api/v1/detected_fields",
            vec![("query", shop), ("start", month_ago.as_str())],
            "the query time range exceeds the limit",
        ),
        (
            "/loki/api/v1/detected_labels",
            vec![("query", shop), ("start", month_ago.as_str())],
            "the query time range exceeds the limit",
        ),
    ] {
        let mut all = vec![("start", start.as_str()), ("end", end.as_str())];
        all.extend(params);
        let answer = get(addr, path, &all, &[("x-api-key", "key-a")]).await;
        assert_eq!(answer.status, 400, "{path} {all:?}: {}", answer.text());
        assert!(answer.text().contains(says), "{path}: {}", answer.text());
    }

    // No patterns are mined: 404, as Loki answers while its pattern ingester is off.
    let (status, _) = ask("/loki/api/v1/patterns", &[("query", shop)], "key-a").await;
    assert_eq!(status, 404);
    server.stop().await;
}
on_both_backends!(loki_query_detected, detected_labels_and_fields_are_lokis);

/// The labels of each line of a streams answer, oldest first, without `service_name` and the
/// level labels.
fn labelled_lines(answer: &Json) -> Vec<(String, BTreeMap<String, String>)> {
    let mut all: Vec<(i64, String, BTreeMap<String, String>)> = answer["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|stream| {
            let labels: BTreeMap<String, String> = stream["stream"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "service_name" | "detected_level"))
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect();
            stream["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |value| {
                    (
                        value[0].as_str().unwrap().parse::<i64>().unwrap(),
                        value[1].as_str().unwrap().to_owned(),
                        labels.clone(),
                    )
                })
        })
        .collect();
    all.sort();
    all.into_iter()
        .map(|(_, line, labels)| (line, labels))
        .collect()
}

/// Loki's pipeline stages over HTTP, with the answers Loki 3.7.6 gives for these lines: `or` and
/// `ip()` line filters, `ip()` label filters, `regexp`, `pattern`, `unpack`, `decolorize`,
/// `logfmt --strict`, `json` parameters, `label_format`, template functions and `drop` by value;
/// `format_query` writes them back, and a template function loghaul lacks is refused by name.
async fn pipeline_stages_answer_as_loki_does(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let base = base_minute();
    let sent = [
        r#"10.0.1.5 - - "GET /api/items HTTP/1.1" 200 512"#,
        r#"192.168.0.3 - - "POST /login HTTP/1.1" 401 20"#,
        r#"2001:db8::17 - - "PUT /api/cart HTTP/1.1" 204 0"#,
        "{\"_entry\":\"\\u001b[31mred\\u001b[0m alert\",\"pod\":\"p1\",\"n\":5}",
        r#"level=warn msg="x" bro"ken=3 user=ann"#,
        r#"{"user":{"name":"bob"},"tags":["a","b"]}"#,
    ];
    let values: Vec<Json> = sent
        .iter()
        .enumerate()
        .map(|(n, line)| json!([((base + 10) * NANOS + n as i64 * 1000).to_string(), line]))
        .collect();
    let stream = json!({"stream": {"service_name": "stages"}, "values": values});
    push_json(addr, &[], json!({ "streams": [stream] })).await;
    wait_until("the lines to be stored", DEADLINE, async || {
        db.count().await >= sent.len() as i64
    })
    .await;
    let (start, end) = ((base - 60).to_string(), (base + 120).to_string());
    let query = async |q: &str| {
        let q = format!(r#"{{service_name="stages"}} {q}"#);
        let answer = ok(
            addr,
            RANGE,
            &[("query", q.as_str()), ("start", &start), ("end", &end)],
            &[],
        )
        .await;
        labelled_lines(&answer)
    };
    let lines_of = |found: &[(String, BTreeMap<String, String>)]| -> Vec<String> {
        found.iter().map(|(line, _)| line.clone()).collect()
    };
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };

    let either = query(r#"|= "POST" or "PUT""#).await;
    assert_eq!(lines_of(&either), [sent[1], sent[2]]);
    let neither = query(r#"!= "POST" or "PUT" or "{" or "level""#).await;
    assert_eq!(lines_of(&neither), [sent[0]]);
    let private = query(r#"|= ip("192.168.0.0/16") or ip("10.0.0.0/8")"#).await;
    assert!(private.is_empty(), "with or, ip() is text: {private:?}");
    let v6 = query(r#"|= ip("2001:db8::1-2001:db8::ff")"#).await;
    assert_eq!(lines_of(&v6), [sent[2]]);
    let not_v4 = query(r#"|~ "HTTP" != ip("0.0.0.0/0")"#).await;
    assert_eq!(lines_of(&not_v4), [sent[2]]);

    let by_label = query(r#"|= "HTTP" | pattern "<ip> - - <_>" | ip = ip("10.0.0.0/8")"#).await;
    assert_eq!(
        by_label,
        [(sent[0].to_owned(), labels(&[("ip", "10.0.1.5")]))]
    );
    let regexp = query(r#"|= "HTTP" | regexp "\"(?P<method>POST|PUT) (?P<path>\\S+)""#).await;
    assert_eq!(
        regexp.iter().map(|(_, l)| l.clone()).collect::<Vec<_>>(),
        [
            labels(&[]),
            labels(&[("method", "POST"), ("path", "/login")]),
            labels(&[("method", "PUT"), ("path", "/api/cart")]),
        ]
    );
    let unpacked = query(r#"|= "_entry" | unpack | decolorize"#).await;
    assert_eq!(
        unpacked,
        [("red alert".to_owned(), labels(&[("pod", "p1")]))]
    );
    let strict = query(r#"|= "level=" | logfmt --strict"#).await;
    assert_eq!(
        strict[0].1,
        labels(&[
            ("__error__", "LogfmtParserErr"),
            (
                "__error_details__",
                r#"logfmt syntax error at pos 23 : unexpected '"'"#
            ),
            ("level", "warn"),
            ("msg", "x"),
        ])
    );
    let fields = query(r#"|= "tags" | json who="user.name", first="tags[0]", none="x.y""#).await;
    assert_eq!(
        fields[0].1,
        labels(&[("first", "a"), ("none", ""), ("who", "bob")])
    );
    let formatted = query(
        r#"|= "HTTP" | pattern "<ip> - - \"<method> <path> <_>\" <status> <size>" | label_format code=status, route="{{.method}} {{.path}}" | drop method="GET", ip, size, path, method=~"P.*" | line_format "{{ .route | ToLower }} {{ if eq .code \"200\" }}ok{{ else }}{{ .code | default \"-\" }}{{ end }}""#,
    )
    .await;
    assert_eq!(
        formatted,
        [
            (
                "get /api/items ok".to_owned(),
                labels(&[("code", "200"), ("route", "GET /api/items")])
            ),
            (
                "post /login 401".to_owned(),
                labels(&[("code", "401"), ("route", "POST /login")])
            ),
            (
                "put /api/cart 204".to_owned(),
                labels(&[("code", "204"), ("route", "PUT /api/cart")])
            ),
        ]
    );

    let written = ok(
        addr,
        "/loki/api/v1/format_query",
        &[(
            "query",
            r#"{service_name="stages"} != "a" or "b" | json a="b.c" | drop x="y""#,
        )],
        &[],
    )
    .await;
    assert_eq!(
        written["data"],
        r#"{service_name="stages"} != "a" != "b" | json a="b.c" | drop x="y""#
    );
    refused(
        addr,
        RANGE,
        &[
            (
                "query",
                r#"{service_name="stages"} | line_format "{{ fromJson .a }}""#,
            ),
            ("start", &start),
            ("end", &end),
        ],
        "\"fromJson\" is not supported",
    )
    .await;
    server.stop().await;
}
on_both_backends!(loki_query_stages, pipeline_stages_answer_as_loki_does);
