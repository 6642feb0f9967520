//! Upgrades: a database written by the schema before stream labels were kept apart (migrations
//! 0001 to 0003) is migrated in place by the current server, and its rows read as the docs say:
//! every label of an old row is structured metadata (`labels` is empty) and its rollup rows have
//! no `level` label, with their counts intact. And one written while trace and span ids were hex
//! text (migrations 0001 to 0006) keeps answering them, heap and sealed, on PostgreSQL and Citus.
//! On SQLite, the stream catalog lists the streams of the rows stored before it.

use std::path::Path;

use sqlx::migrate::Migrator;
use sqlx::{Connection, Row};

use crate::common::{Backend, TestDb};

/// The last version of the schema before `logs.labels` and `log_volume.level`.
const BEFORE_STREAM_LABELS: i64 = 3;

/// The project's own migrations for `backend`, up to and including `version`.
async fn migrations_up_to(backend: Backend, version: i64) -> Migrator {
    let dir = match backend {
        Backend::Sqlite => "migrations/sqlite",
        Backend::Postgres => "migrations/postgres",
    };
    let mut migrator = Migrator::new(Path::new(env!("CARGO_MANIFEST_DIR")).join(dir))
        .await
        .unwrap();
    let kept: Vec<_> = migrator
        .migrations
        .iter()
        .filter(|m| m.version <= version)
        .cloned()
        .collect();
    assert_eq!(kept.len() as i64, version, "migrations 1..={version}");
    migrator.migrations = kept.into();
    migrator
}

async fn old_rows_read_as_metadata_after_the_upgrade(db: &TestDb) {
    let old = migrations_up_to(db.backend, BEFORE_STREAM_LABELS).await;
    let (logs_sql, volume_sql, read_logs, read_volume) = match db.backend {
        Backend::Sqlite => (
            "INSERT INTO logs (tenant, ts, received_at, severity, service, message, attributes) \
             VALUES ('t', 1000000, 1000000, 13, 'api', 'old line', '{\"job\":\"batch\"}')",
            "INSERT INTO log_volume (tenant, minute, service, severity, records, bytes) \
             VALUES ('t', 60, 'api', 13, 7, 70)",
            "SELECT labels, attributes FROM logs",
            "SELECT level, records, bytes FROM log_volume",
        ),
        Backend::Postgres => (
            "INSERT INTO logs (tenant, ts, severity, service, message, attributes) \
             VALUES ('t', now(), 13, 'api', 'old line', '{\"job\":\"batch\"}')",
            "INSERT INTO log_volume (tenant, minute, service, severity, writer, records, bytes) \
             VALUES ('t', to_timestamp(60), 'api', 13, 1, 7, 70)",
            "SELECT labels::text AS labels, attributes::text AS attributes FROM logs",
            "SELECT level, records, bytes FROM log_volume",
        ),
    };
    match db.backend {
        Backend::Sqlite => {
            let options: sqlx::sqlite::SqliteConnectOptions = db.url.parse().unwrap();
            let mut conn = sqlx::SqliteConnection::connect_with(&options.create_if_missing(true))
                .await
                .unwrap();
            old.run(&mut conn).await.unwrap();
            sqlx::query(logs_sql).execute(&mut conn).await.unwrap();
            sqlx::query(volume_sql).execute(&mut conn).await.unwrap();
        }
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
            old.run(&mut conn).await.unwrap();
            sqlx::query(logs_sql).execute(&mut conn).await.unwrap();
            sqlx::query(volume_sql).execute(&mut conn).await.unwrap();
        }
    }

    // The current server finds the old schema and migrates it.
    let store = crate::common::migrated(db).await;
    drop(store);

    macro_rules! read {
        ($conn:expr) => {{
            let logs = sqlx::query(read_logs).fetch_all(&mut $conn).await.unwrap();
            let volume = sqlx::query(read_volume)
                .fetch_all(&mut $conn)
                .await
                .unwrap();
            let logs: Vec<(String, String)> = logs
                .iter()
                .map(|row| (row.get("labels"), row.get("attributes")))
                .collect();
            let volume: Vec<(String, i64, i64)> = volume
                .iter()
                .map(|row| (row.get("level"), row.get("records"), row.get("bytes")))
                .collect();
            (logs, volume)
        }};
    }
    let (logs, volume) = match db.backend {
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            read!(conn)
        }
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
            read!(conn)
        }
    };
    let attributes: serde_json::Value = serde_json::from_str(&logs[0].1).unwrap();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].0, "{}", "an old row has no stream labels");
    assert_eq!(
        attributes,
        serde_json::json!({"job": "batch"}),
        "nor loses a label"
    );
    assert_eq!(
        volume,
        [(String::new(), 7, 70)],
        "the rollup keeps its counts"
    );
}
on_both_backends!(
    upgrade_to_stream_labels,
    old_rows_read_as_metadata_after_the_upgrade
);

/// The last version of the schema that stored trace and span ids as hex text.
const BEFORE_BINARY_IDS: i64 = 6;

/// Ids an older server wrote as hex, into an hour it then sealed and into one still heap, answer
/// as they were sent once the current server has migrated the database, beside ids it writes
/// itself into both hours. Needs `citus_columnar` to seal; on Citus the old schema is
/// distributed first, as the older server did, so the migration renames and adds columns of
/// distributed tables and their columnar shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_stored_as_hex_before_the_upgrade_still_answer_sealed_or_not() {
    use chrono::{Days, Utc};
    use loghaul::proto::v1::{
        log_ingest_client::LogIngestClient, log_query_client::LogQueryClient,
    };
    use loghaul::storage::postgres::{create_partitions, seal, sealing, Flavor, Pace, Sealing};

    let Some(db) = TestDb::create(Backend::Postgres, "upgrade_binary_ids").await else {
        return;
    };
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    migrations_up_to(Backend::Postgres, BEFORE_BINARY_IDS)
        .await
        .run(&mut conn)
        .await
        .unwrap();
    let flavor = Flavor::detect(&mut conn).await.unwrap();
    if flavor == Flavor::Citus {
        for (table, colocate_with) in [
            ("producer_chunks", "default"),
            ("logs", "producer_chunks"),
            ("log_volume", "producer_chunks"),
        ] {
            sqlx::query(
                "SELECT create_distributed_table($1::regclass, 'tenant', colocate_with => $2)",
            )
            .bind(table)
            .bind(colocate_with)
            .execute(&mut conn)
            .await
            .unwrap();
        }
    }
    if let Sealing::Off(why) = sealing(&mut conn).await.unwrap() {
        assert_ne!(
            std::env::var("LOGHAUL_REQUIRE_COLUMNAR").as_deref(),
            Ok("1"),
            "citus_columnar is required (LOGHAUL_REQUIRE_COLUMNAR=1): {why}"
        );
        eprintln!("*** SKIPPED upgrade_binary_ids: {why} ***");
        return;
    }
    let today = Utc::now().date_naive();
    create_partitions(&mut conn, today - Days::new(1), today)
        .await
        .unwrap();
    let past = crate::sealing::yesterdays_hour();
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let span = "00f067aa0ba902b7";
    for (message, at) in [("old-sealed", past), ("old-heap", Utc::now())] {
        sqlx::query(
            "INSERT INTO logs (tenant, ts, severity, service, message, trace_id, span_id) \
             VALUES ('default', $1, 9, 'api', $2, $3, $4)",
        )
        .bind(at)
        .bind(message)
        .bind(trace)
        .bind(span)
        .execute(&mut conn)
        .await
        .unwrap();
        // Where LogQL reads look for rows, as ingest writes it.
        sqlx::query(
            "INSERT INTO log_volume (tenant, minute, service, severity, writer, records, bytes) \
             VALUES ('default', date_trunc('minute', $1), 'api', 9, 1, 1, 10)",
        )
        .bind(at)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let leaf = crate::sealing::leaf_of(&mut conn, past).await;
    let pace = Pace {
        busy_percent: 100,
        slice_bytes: 1 << 20,
    };
    seal(&mut conn, flavor, &leaf, pace).await.unwrap();

    let server = crate::common::process::Process::serve(&db.url, &[]);
    let url = format!("http://{}", server.grpc);
    let mut ingest = LogIngestClient::connect(url.clone()).await.unwrap();
    let age = (Utc::now() - past).to_std().unwrap();
    let new = ["new-sealed", "new-heap"].map(|message| {
        let mut record = match message {
            "new-sealed" => crate::common::record_at(message, age),
            _ => crate::common::record_at(message, std::time::Duration::ZERO),
        };
        record.trace_id = trace.to_uppercase();
        record.span_id = span.into();
        record
    });
    let pushed = crate::common::push(&mut ingest, vec![new.to_vec()])
        .await
        .unwrap();
    assert_eq!(pushed.accepted, 2);

    let mut query = LogQueryClient::connect(url).await.unwrap();
    let filter = loghaul::proto::v1::Filter {
        from: Some(prost_types::Timestamp {
            seconds: past.timestamp(),
            nanos: 0,
        }),
        ..Default::default()
    };
    let mut found: Vec<_> = crate::common::query_all(&mut query, "", filter, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|record| (record.message, record.trace_id, record.span_id))
        .collect();
    found.sort();
    let expected: Vec<_> = ["new-heap", "new-sealed", "old-heap", "old-sealed"]
        .map(|message| (message.to_owned(), trace.to_owned(), span.to_owned()))
        .into();
    assert_eq!(found, expected);

    // A LogQL read selects the ids on its own (as bytes where it can): the same four lines,
    // each with its ids as labels.
    let nanos = |at: chrono::DateTime<Utc>| at.timestamp_nanos_opt().unwrap().to_string();
    let (start, end) = (
        nanos(past - chrono::TimeDelta::minutes(1)),
        nanos(Utc::now() + chrono::TimeDelta::minutes(1)),
    );
    let answer = crate::loki_query::ok(
        server.http_ingest,
        "/loki/api/v1/query_range",
        &[
            ("query", r#"{service_name=~"api|checkout"}"#),
            ("start", &start),
            ("end", &end),
            ("limit", "100"),
        ],
        &[],
    )
    .await;
    let mut found: Vec<_> = answer["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|stream| {
            let label = |name: &str| stream["stream"][name].as_str().unwrap_or("").to_owned();
            let ids = (label("trace_id"), label("span_id"));
            stream["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |value| {
                    let line = value[1].as_str().unwrap().to_owned();
                    (line, ids.0.clone(), ids.1.clone())
                })
        })
        .collect();
    found.sort();
    assert_eq!(found, expected, "{answer}");

    // The new rows hold bytes, the old ones hex, each in its own columns: the upgraded database
    // keeps the text ones, where a new one has none.
    let columns: Vec<(String, Option<Vec<u8>>, Option<String>)> =
        sqlx::query_as("SELECT message, trace_id_bytes, trace_id FROM logs ORDER BY message")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    let bytes = hex::decode(trace).unwrap();
    assert_eq!(
        columns,
        [
            ("new-heap".to_owned(), Some(bytes.clone()), None),
            ("new-sealed".to_owned(), Some(bytes), None),
            ("old-heap".to_owned(), None, Some(trace.to_owned())),
            ("old-sealed".to_owned(), None, Some(trace.to_owned())),
        ]
    );
    conn.close().await.unwrap();
}

/// A new database keeps ids as bytes only: it has no rows written before, and a column that is
/// always NULL still costs a sealed hour a bitmap of which rows have it.
#[tokio::test]
async fn a_new_database_has_no_hex_id_columns() {
    let Some(db) = TestDb::create(Backend::Postgres, "binary_ids_new").await else {
        return;
    };
    crate::common::migrated(&db).await.close().await;
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT attname::text FROM pg_attribute WHERE attrelid = 'logs'::regclass \
         AND attname ~ '^(trace|span)_id' AND NOT attisdropped ORDER BY attname",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(columns, ["span_id_bytes", "trace_id_bytes"]);
    conn.close().await.unwrap();
}

/// The last version of SQLite's schema without the stream catalog.
const BEFORE_STREAM_CATALOG: i64 = 5;

/// The upgrade to the stream catalog lists every label set a service of a tenant had, with the
/// hour of its newest row, so that label selectors still find the rows written before it.
#[tokio::test]
async fn sqlite_catalogs_the_streams_stored_before_the_upgrade() {
    let Some(db) = TestDb::create(Backend::Sqlite, "catalog_upgrade").await else {
        return;
    };
    let old = migrations_up_to(Backend::Sqlite, BEFORE_STREAM_CATALOG).await;
    let options: sqlx::sqlite::SqliteConnectOptions = db.url.parse().unwrap();
    let mut conn = sqlx::SqliteConnection::connect_with(&options.create_if_missing(true))
        .await
        .unwrap();
    old.run(&mut conn).await.unwrap();
    const HOUR: i64 = 3_600_000_000;
    for (tenant, ts, service, labels) in [
        ("a", 5 * HOUR + 7, "cron", r#"{"job":"cron"}"#),
        ("a", 9 * HOUR, "cron", r#"{"job":"cron"}"#),
        ("a", 2 * HOUR, "cron", r#"{"job":"cron","env":"prod"}"#),
        ("b", 3 * HOUR, "cron", r#"{"job":"cron"}"#),
    ] {
        sqlx::query(
            "INSERT INTO logs (tenant, ts, received_at, severity, service, message, labels) \
             VALUES (?, ?, ?, 9, ?, 'old line', ?)",
        )
        .bind(tenant)
        .bind(ts)
        .bind(ts)
        .bind(service)
        .bind(labels)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    conn.close().await.unwrap();

    crate::common::migrated(&db).await.close().await;
    let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
    let streams: Vec<(String, String, String, i64)> = sqlx::query_as(
        "SELECT tenant, service, labels, last_hour FROM streams ORDER BY tenant, labels",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let expected = [
        ("a", r#"{"job":"cron","env":"prod"}"#, 2),
        ("a", r#"{"job":"cron"}"#, 9),
        ("b", r#"{"job":"cron"}"#, 3),
    ]
    .map(|(tenant, labels, hour)| (tenant.into(), "cron".into(), labels.into(), hour));
    assert_eq!(streams, expected);
    conn.close().await.unwrap();
}

/// The last version of PostgreSQL's schema without the stream catalog.
const BEFORE_POSTGRES_STREAM_CATALOG: i64 = 7;

/// On PostgreSQL, the upgrade to the stream catalog lists every label set a service of a tenant
/// had, once for each hour it had rows in.
#[tokio::test]
async fn postgres_catalogs_the_streams_stored_before_the_upgrade() {
    let Some(db) = TestDb::create(Backend::Postgres, "catalog_upgrade_pg").await else {
        return;
    };
    let old = migrations_up_to(Backend::Postgres, BEFORE_POSTGRES_STREAM_CATALOG).await;
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    old.run(&mut conn).await.unwrap();
    for (tenant, ts, labels) in [
        ("a", "2026-01-02 05:00:00+00", r#"{"job":"cron"}"#),
        ("a", "2026-01-02 05:59:59.999999+00", r#"{"job":"cron"}"#),
        ("a", "2026-01-02 09:00:00+00", r#"{"job":"cron"}"#),
        (
            "a",
            "2026-01-02 02:30:00+00",
            r#"{"env":"prod","job":"cron"}"#,
        ),
        ("b", "2026-01-02 03:00:00+00", r#"{"job":"cron"}"#),
    ] {
        sqlx::query(
            "INSERT INTO logs (tenant, ts, received_at, severity, service, message, labels) \
             VALUES ($1, $2::timestamptz, $2::timestamptz, 9, 'cron', 'old line', $3::jsonb)",
        )
        .bind(tenant)
        .bind(ts)
        .bind(labels)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    conn.close().await.unwrap();

    crate::common::migrated(&db).await.close().await;
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let streams: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT tenant, to_char(hour AT TIME ZONE 'UTC', 'HH24'), service, labels::text \
         FROM streams ORDER BY tenant, hour, labels",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let expected = [
        ("a", "02", r#"{"env": "prod", "job": "cron"}"#),
        ("a", "05", r#"{"job": "cron"}"#),
        ("a", "09", r#"{"job": "cron"}"#),
        ("b", "03", r#"{"job": "cron"}"#),
    ]
    .map(|(tenant, hour, labels)| (tenant.into(), hour.into(), "cron".into(), labels.into()));
    assert_eq!(streams, expected);
    conn.close().await.unwrap();
}
