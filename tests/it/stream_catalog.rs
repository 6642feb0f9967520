//! Stream selectors on labels other than the service, by value or by pattern: each finds the lines
//! of every service whose streams carry the label, in the asking tenant only, late lines among
//! them. Such a selector reads the stream catalog first (on PostgreSQL, an hour at a time);
//! retention forgets the streams it has emptied, and an upgrade fills the catalog from the rows
//! already stored.

use chrono::{TimeDelta, Utc};
use serde_json::{json, Value as Json};

use crate::common::{config, migrated, wait_until, TestDb, TestServer, DEADLINE};
use crate::loki_query::{base_minute, ok, push_json, INSTANT, KEYS, NANOS, RANGE};
use loghaul::retention::{run_once, RetentionConfig};

/// The lines `query` selects over the last `hours` hours, sorted.
async fn lines(addr: std::net::SocketAddr, key: &str, query: &str, hours: i64) -> Vec<String> {
    let now = Utc::now().timestamp();
    let start = ((now - hours * 3600) * NANOS).to_string();
    let end = ((now + 60) * NANOS).to_string();
    let answer: Json = ok(
        addr,
        RANGE,
        &[("query", query), ("start", &start), ("end", &end)],
        &[("x-api-key", key)],
    )
    .await;
    let mut lines = crate::loki_query::lines(&answer);
    lines.sort();
    lines
}

async fn a_label_selector_finds_every_service_that_carries_the_label(db: &TestDb) {
    let mut settings = config(db);
    settings.auth.api_keys = Some(KEYS.parse().unwrap());
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    let a = [("x-api-key", "key-a")];
    let recent = ((base_minute() + 10) * NANOS).to_string();
    // `job` names the service of the first stream only; the second has its own service and
    // the third shares it without the label.
    push_json(
        addr,
        &a,
        json!({"streams": [
            {"stream": {"job": "cron"}, "values": [[recent, "cron run"]]},
            {"stream": {"job": "cron", "service_name": "billing"}, "values": [[recent, "billing cron"]]},
            {"stream": {"service_name": "billing"}, "values": [[recent, "billing plain"]]},
            {"stream": {"job": "cron", "env": "prod"}, "values": [[recent, "cron prod"]]},
            {"stream": {"job": "batch"}, "values": [[recent, "batch run"]]},
        ]}),
    )
    .await;
    push_json(
        addr,
        &[("x-api-key", "key-b")],
        json!({"streams": [{"stream": {"job": "cron"}, "values": [[recent, "team-b cron"]]}]}),
    )
    .await;
    // Late lines, after the streams' recent ones: one of a stream already known (its service
    // has no other stream with the label), one of a new stream seen only in the past, and a
    // stream whose recent line lies between two late ones.
    let late = ((Utc::now() - TimeDelta::hours(3)).timestamp() * NANOS).to_string();
    push_json(
        addr,
        &a,
        json!({"streams": [
            {"stream": {"job": "cron", "service_name": "billing"}, "values": [[late, "billing cron late"]]},
            {"stream": {"job": "archive"}, "values": [[late, "archive late"]]},
            {"stream": {"job": "mixed"}, "values": [[late, "mixed 1"], [recent, "mixed 2"], [late, "mixed 3"]]},
        ]}),
    )
    .await;
    wait_until("the lines to be stored", DEADLINE, async || {
        db.count().await == 11
    })
    .await;
    assert_eq!(
        lines(addr, "key-a", r#"{job="mixed"}"#, 1).await,
        ["mixed 2"]
    );

    assert_eq!(
        lines(addr, "key-a", r#"{job="cron"}"#, 1).await,
        ["billing cron", "cron prod", "cron run"],
        "every service with the label, and only team-a's"
    );
    assert_eq!(
        lines(addr, "key-a", r#"{job="cron"}"#, 4).await,
        ["billing cron", "billing cron late", "cron prod", "cron run"],
        "a late line of a known stream"
    );
    assert_eq!(
        lines(addr, "key-a", r#"{job="archive"}"#, 4).await,
        ["archive late"]
    );
    assert!(lines(addr, "key-a", r#"{job="archive"}"#, 1)
        .await
        .is_empty());
    assert_eq!(
        lines(addr, "key-a", r#"{job="cron", env="prod"}"#, 1).await,
        ["cron prod"]
    );
    assert_eq!(
        lines(addr, "key-a", r#"{service_name="billing", job="cron"}"#, 1).await,
        ["billing cron"]
    );
    assert!(lines(addr, "key-a", r#"{job="nightly"}"#, 4)
        .await
        .is_empty());
    // A pattern only the label's streams can match, as Grafana's multi-value variables write.
    assert_eq!(
        lines(addr, "key-a", r#"{job=~"cron|nightly"}"#, 1).await,
        ["billing cron", "cron prod", "cron run"]
    );
    assert_eq!(
        lines(addr, "key-a", r#"{job=~"(?i)CRON|archive"}"#, 4).await,
        [
            "archive late",
            "billing cron",
            "billing cron late",
            "cron prod",
            "cron run"
        ]
    );
    // The store reads no line of a service without a matching stream (`batch run` and the
    // three of `mixed`), whatever else it leaves to the engine.
    let now = Utc::now().timestamp();
    let read = ok(
        addr,
        RANGE,
        &[
            ("query", r#"{job=~"(?i)CRON|archive"}"#),
            ("start", &((now - 4 * 3600) * NANOS).to_string()),
            ("end", &((now + 60) * NANOS).to_string()),
        ],
        &a,
    )
    .await;
    let processed = &read["data"]["stats"]["summary"]["totalLinesProcessed"];
    assert!(
        (5..=7).contains(&processed.as_u64().unwrap()),
        "{processed} lines read"
    );
    assert!(
        lines(addr, "key-a", r#"{job=~"b.*", service_name="billing"}"#, 1)
            .await
            .is_empty(),
        "billing's streams have no job starting with b"
    );
    assert_eq!(
        lines(addr, "key-a", r#"{job=~"c.+", env=~"pr.d"}"#, 1).await,
        ["cron prod"]
    );
    assert_eq!(
        lines(addr, "key-b", r#"{job="cron"}"#, 1).await,
        ["team-b cron"]
    );
    let counted = ok(
        addr,
        INSTANT,
        &[
            ("query", r#"sum(count_over_time({job="cron"}[1h]))"#),
            ("time", &Utc::now().timestamp().to_string()),
        ],
        &a,
    )
    .await;
    assert_eq!(counted["data"]["result"][0]["value"][1], "3", "{counted}");
    // Patterns of plain values, which the stores compare as values: literal alternatives (one
    // with an escaped `|`), negated, and the "all" of `.+` and `.*`.
    for (query, expected) in [
        (
            r#"{service_name=~"billing|batch"}"#,
            &["batch run", "billing cron", "billing plain"][..],
        ),
        (
            r#"{service_name!~"billing|batch", job=~".+"}"#,
            &["cron prod", "cron run", "mixed 2"],
        ),
        (
            r#"{job=~"cron|batch", env=~".*"}"#,
            &["batch run", "billing cron", "cron prod", "cron run"],
        ),
        (r#"{job=~"cron\\|batch|mixed"}"#, &["mixed 2"]),
        (
            r#"{service_name=~".+", job!~"cron|mixed"}"#,
            &["batch run", "billing plain"],
        ),
    ] {
        assert_eq!(lines(addr, "key-a", query, 1).await, expected, "{query}");
    }
    // Literal alternatives are checked exactly in SQL, which then counts the limit itself: the
    // two lines are both of the services named, not the newest lines of any service.
    let now = Utc::now().timestamp();
    let limited = ok(
        addr,
        RANGE,
        &[
            ("query", r#"{service_name=~"billing|batch"}"#),
            ("limit", "2"),
            ("start", &((now - 3600) * NANOS).to_string()),
            ("end", &((now + 60) * NANOS).to_string()),
        ],
        &a,
    )
    .await;
    let limited = crate::loki_query::lines(&limited);
    assert_eq!(limited.len(), 2, "{limited:?}");
    assert!(
        (limited.iter())
            .all(|line| ["batch run", "billing cron", "billing plain"].contains(&line.as_str())),
        "{limited:?}"
    );
    server.stop().await;
}
on_both_backends!(
    label_selectors,
    a_label_selector_finds_every_service_that_carries_the_label
);

/// Retention keeping two days forgets the streams whose newest line is older, and keeps one with
/// a line since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_retention_forgets_the_streams_it_emptied() {
    let Some(db) = TestDb::create(crate::common::Backend::Sqlite, "catalog_retention").await else {
        return;
    };
    let store = migrated(&db).await;
    let hour = |age: TimeDelta| (Utc::now() - age).timestamp() / 3600;
    let streams = [
        ("gone", hour(TimeDelta::days(3))),
        ("kept", hour(TimeDelta::hours(47))),
        ("new", hour(TimeDelta::zero())),
    ];
    for (service, last_hour) in streams {
        db.execute(&format!(
            "INSERT INTO streams (tenant, service, labels, last_hour) \
             VALUES ('t', '{service}', '{{\"job\":\"{service}\"}}', {last_hour})"
        ))
        .await;
    }
    keep_two_days(&store).await;
    assert_eq!(
        db.query_scalar("SELECT count(*) FROM streams WHERE service = 'gone'")
            .await,
        0
    );
    assert_eq!(db.query_scalar("SELECT count(*) FROM streams").await, 2);
    store.close().await;
}

/// On PostgreSQL the catalog lists each stream once for every hour it has lines in, late lines'
/// hours among them, in the pushing tenant only; retention keeping two days forgets the hours
/// before its horizon's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_catalogs_each_stream_an_hour_and_retention_forgets_old_hours() {
    let Some(db) = TestDb::create(crate::common::Backend::Postgres, "catalog_hours").await else {
        return;
    };
    let mut settings = config(&db);
    settings.auth.api_keys = Some(KEYS.parse().unwrap());
    let server = TestServer::start(settings).await;
    let now = Utc::now();
    let at = |age: TimeDelta| ((now - age).timestamp() * NANOS).to_string();
    let (recent, late) = (at(TimeDelta::zero()), at(TimeDelta::hours(3)));
    push_json(
        server.http_ingest,
        &[("x-api-key", "key-a")],
        json!({"streams": [
            {"stream": {"job": "cron"}, "values": [[recent, "1"], [late, "2"], [recent, "3"]]},
            {"stream": {"job": "cron", "env": "prod"}, "values": [[late, "4"]]},
        ]}),
    )
    .await;
    push_json(
        server.http_ingest,
        &[("x-api-key", "key-b")],
        json!({"streams": [{"stream": {"job": "cron"}, "values": [[recent, "5"]]}]}),
    )
    .await;
    wait_until("the lines to be stored", DEADLINE, async || {
        db.count().await == 5
    })
    .await;
    server.stop().await;
    let hour = |age: TimeDelta| (now - age).timestamp().div_euclid(3600) * 3600;
    let listed = |tenant: &str, labels: &str, age: TimeDelta| {
        format!(
            "SELECT count(*) FROM streams WHERE tenant = '{tenant}' AND service = 'cron' \
             AND labels = '{labels}'::jsonb AND hour = to_timestamp({})",
            hour(age)
        )
    };
    let cron = r#"{"job":"cron"}"#;
    for (tenant, labels, age) in [
        ("team-a", cron, TimeDelta::zero()),
        ("team-a", cron, TimeDelta::hours(3)),
        (
            "team-a",
            r#"{"job":"cron","env":"prod"}"#,
            TimeDelta::hours(3),
        ),
        ("team-b", cron, TimeDelta::zero()),
    ] {
        assert_eq!(
            db.query_scalar(&listed(tenant, labels, age)).await,
            1,
            "{tenant} {labels} {age}"
        );
    }
    assert_eq!(db.query_scalar("SELECT count(*) FROM streams").await, 4);

    // An hour three days old, and one within the two days kept.
    for age in [TimeDelta::days(3), TimeDelta::hours(47)] {
        db.execute(&format!(
            "INSERT INTO streams (tenant, hour, service, labels) \
             VALUES ('team-a', to_timestamp({}), 'old', '{{}}')",
            hour(age)
        ))
        .await;
    }
    let store = migrated(&db).await;
    keep_two_days(&store).await;
    assert_eq!(
        db.query_scalar("SELECT count(*) FROM streams WHERE service = 'old'")
            .await,
        1,
        "the hour before the horizon's is forgotten, the one after kept"
    );
    assert_eq!(db.query_scalar("SELECT count(*) FROM streams").await, 5);
    store.close().await;
}

/// One retention run that keeps two days.
async fn keep_two_days(store: &loghaul::storage::Store) {
    let config = RetentionConfig {
        keep: Some(TimeDelta::days(2)),
        interval: std::time::Duration::from_secs(60),
        dedup_window: std::time::Duration::from_secs(86400),
    };
    assert!(run_once(store, &config).await.unwrap().ran);
}
