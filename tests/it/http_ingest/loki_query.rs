//! Loki's query API on the HTTP listener, over a real socket and a real database: log queries
//! through the pipeline, a metric query answered by the rollup and by a scan alike, Grafana's
//! health check, and hostile queries refused with a 400 while the server keeps serving.

use super::send_loki;
use crate::common::{config, http_request, metric, TestDb, TestServer};

async fn get(server: &TestServer, path: &str, params: &[(&str, &str)]) -> (u16, String) {
    let query: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    let answer = http_request(
        server.http_ingest,
        "GET",
        &format!("{path}?{query}"),
        &[],
        b"",
    )
    .await
    .unwrap();
    (answer.status, answer.text())
}

async fn json(server: &TestServer, path: &str, params: &[(&str, &str)]) -> serde_json::Value {
    let (status, body) = get(server, path, params).await;
    assert_eq!(status, 200, "{path} {params:?}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// The last point of each series of a matrix answer, by the value of `label`.
fn last_points(answer: &serde_json::Value, label: &str) -> Vec<(String, String)> {
    let mut points: Vec<(String, String)> = answer["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|series| {
            let values = series["values"].as_array().unwrap();
            let last = values.last().unwrap();
            (
                series["metric"][label].as_str().unwrap_or("").to_owned(),
                last[1].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    points.sort();
    points
}

async fn logql_reads_what_was_pushed(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let api = r#"{service_name="api", level="error"}"#;
    let answer = send_loki(
        server.http_ingest,
        &[],
        api,
        &["db timeout", r#"{"status":503}"#],
    )
    .await;
    assert_eq!(answer.status, 204, "{}", answer.text());
    let web = r#"{service_name="web", level="info"}"#;
    let answer = send_loki(server.http_ingest, &[], web, &["method=GET path=/a"]).await;
    assert_eq!(answer.status, 204, "{}", answer.text());

    let range = "/loki/api/v1/query_range";
    let found = json(
        &server,
        range,
        &[("query", r#"{service_name="api"} |= "timeout""#)],
    )
    .await;
    assert_eq!(found["data"]["resultType"], "streams");
    let result = found["data"]["result"].as_array().unwrap();
    assert_eq!(result.len(), 1, "{found}");
    assert_eq!(result[0]["stream"]["level"], "error");
    assert_eq!(result[0]["values"][0][1], "db timeout");

    let parsed = json(
        &server,
        range,
        &[(
            "query",
            r#"{service_name=~"api|web"} | json | status >= 500"#,
        )],
    )
    .await;
    let lines: Vec<&str> = parsed["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["stream"]["__error__"].is_null())
        .map(|s| s["values"][0][1].as_str().unwrap())
        .collect();
    assert_eq!(lines, [r#"{"status":503}"#]);

    let formatted = json(
        &server,
        range,
        &[(
            "query",
            r#"{service_name="web"} | logfmt | method="GET" | line_format "{{.method}} {{.path}}""#,
        )],
    )
    .await;
    assert_eq!(formatted["data"]["result"][0]["values"][0][1], "GET /a");

    // The rollup and a scan (a line filter makes it one) count the same lines; the rollup
    // answers steps on whole minutes.
    let next_minute = (chrono::Utc::now().timestamp() / 60 + 1) * 60;
    let (start, end) = ((next_minute - 3600).to_string(), next_minute.to_string());
    let rollup = json(
        &server,
        range,
        &[
            (
                "query",
                r#"sum by (level) (count_over_time({service_name=~"api|web"}[1m]))"#,
            ),
            ("step", "60"),
            ("start", &start),
            ("end", &end),
        ],
    )
    .await;
    let scan = json(
        &server,
        range,
        &[
            (
                "query",
                r#"sum by (level) (count_over_time({service_name=~"api|web"} |~ "." [1m]))"#,
            ),
            ("step", "60"),
            ("start", &start),
            ("end", &end),
        ],
    )
    .await;
    let expected = [
        ("error".to_owned(), "2".to_owned()),
        ("info".into(), "1".into()),
    ];
    assert_eq!(last_points(&rollup, "level"), expected, "{rollup}");
    assert!(
        rollup["data"]["stats"]["volume"]["rollupRowsRead"].as_u64() > Some(0),
        "{rollup}"
    );
    assert_eq!(last_points(&scan, "level"), expected, "{scan}");
    let metrics = server.metrics().await;
    assert!(
        metric(
            &metrics,
            r#"loghaul_loki_metric_sources_total{source="rollup"}"#
        ) >= 1.0
    );
    assert!(
        metric(
            &metrics,
            r#"loghaul_loki_metric_sources_total{source="scan"}"#
        ) >= 1.0
    );

    let health = json(
        &server,
        "/loki/api/v1/query",
        &[("query", "vector(1)+vector(1)")],
    )
    .await;
    assert_eq!(health["data"]["result"][0]["value"][1], "2");
    let values = json(&server, "/loki/api/v1/label/service_name/values", &[]).await;
    assert_eq!(values["data"], serde_json::json!(["api", "web"]));

    for (query, limit, says) in [
        (r#"{service_name="api"} | unwrap x"#, "10", "not supported"),
        (r#"{service_name=~"("}"#, "10", "invalid regular expression"),
        (r#"{service_name="api"}"#, "100000", "max entries limit"),
        (r#"{service_name="api""#, "10", "parse error at line 1"),
    ] {
        let (status, body) = get(&server, range, &[("query", query), ("limit", limit)]).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(says), "{query}: {body}");
    }
    let (status, body) = get(
        &server,
        range,
        &[
            ("query", r#"count_over_time({service_name="api"}[1m])"#),
            ("start", "1700000000"),
            ("end", "1702000000"),
            ("step", "1"),
        ],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("maximum resolution"), "{body}");
    let still = json(&server, range, &[("query", r#"{service_name="web"}"#)]).await;
    assert_eq!(still["data"]["result"].as_array().unwrap().len(), 1);
    server.stop().await;
}
on_both_backends!(loki_query_api, logql_reads_what_was_pushed);
