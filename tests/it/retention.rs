//! Retention end to end: old data goes while ingest continues, and nothing is left behind —
//! no partition (PostgreSQL), no row in any table.

use std::time::Duration;

use crate::common::process::Process;
use crate::common::{
    config, metric, migrated, push, record, record_at, wait_until, Backend, TestDb, TestServer,
    DEADLINE,
};
use chrono::{Days, TimeDelta, Utc};
use loghaul::retention::{run_once, RetentionConfig};
use loghaul::storage::postgres::{create_partitions, partition_day, RETENTION_LOCK_KEY};
use loghaul::storage::Store;
use sqlx::{Connection, PgConnection, SqliteConnection};
use tokio_util::sync::CancellationToken;

/// Pushes small chunks until cancelled; returns how many records were accepted.
fn keep_ingesting(server: &Process, stop: CancellationToken) -> tokio::task::JoinHandle<u64> {
    let grpc = server.grpc;
    tokio::spawn(async move {
        let mut client = loghaul::proto::v1::log_ingest_client::LogIngestClient::connect(format!(
            "http://{grpc}"
        ))
        .await
        .unwrap();
        let mut accepted = 0;
        let mut round = 0;
        while !stop.is_cancelled() {
            let chunk = (0..100)
                .map(|n| record(format!("live-{round}-{n}")))
                .collect();
            accepted += push(&mut client, vec![chunk]).await.unwrap().accepted;
            round += 1;
        }
        accepted
    })
}

/// Starts a server keeping `(retention, interval)` while streams keep pushing, waits until
/// `old_rows` counts none, lets ingest go on through one more retention run, and returns the
/// server with how many records the streams had acknowledged (at least one). The server is a
/// process of its own, so that its retention metrics count its runs alone.
async fn retain_while_ingesting(
    db: &TestDb,
    (retention, interval): (&str, &str),
    old_rows: &str,
) -> (Process, u64) {
    let server = Process::serve(
        &db.url,
        &["--retention", retention, "--retention-interval", interval],
    );
    let stop = CancellationToken::new();
    let ingest = keep_ingesting(&server, stop.clone());
    let runs = async || {
        metric(
            &server.metrics().await,
            "loghaul_retention_runs_total{outcome=\"ok\"}",
        )
    };
    wait_until("old rows to go", Duration::from_secs(60), async || {
        db.query_scalar(old_rows).await == 0
    })
    .await;
    let gone_after = runs().await;
    wait_until("one more retention run", DEADLINE, async || {
        runs().await > gone_after
    })
    .await;
    stop.cancel();
    let accepted = ingest.await.unwrap();
    assert!(accepted > 0, "ingest went on during retention");
    (server, accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_partitions_are_dropped_while_ingest_continues() {
    let Some(db) = TestDb::create(Backend::Postgres, "retention_partitions").await else {
        return;
    };
    let store = migrated(&db).await;
    store.close().await;
    // History as a long-running service would have it: partitions 12..10 days old with rows, and
    // rows 20 days old that had no partition and sit in the default partition.
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let today = Utc::now().date_naive();
    let created = create_partitions(&mut conn, today - Days::new(12), today - Days::new(10))
        .await
        .unwrap();
    assert_eq!(created, 3);
    // Noon of each partition's day: an offset from now() would leave a day's partition before
    // noon UTC.
    let noon_ten_days_ago = (today - Days::new(10))
        .and_hms_opt(12, 0, 0)
        .unwrap()
        .and_utc();
    sqlx::query(
        "INSERT INTO logs (tenant, ts, severity, service, message) \
         SELECT 'default', $1 - (g % 3) * interval '1 day', 9, 'old', 'old ' || g \
         FROM generate_series(1, 3000) g",
    )
    .bind(noon_ten_days_ago)
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO logs (tenant, ts, severity, service, message) \
         SELECT 'default', now() - interval '20 days', 9, 'older', 'older ' || g \
         FROM generate_series(1, 12000) g",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let in_default: i64 = sqlx::query_scalar("SELECT count(*) FROM logs_default")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        in_default, 12000,
        "rows with no partition of their day are in the default one"
    );

    let (server, accepted) = retain_while_ingesting(
        &db,
        ("2d", "300ms"),
        "SELECT count(*) FROM logs WHERE ts < now() - interval '2 days'",
    )
    .await;

    let partitions: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = 'logs'::regclass ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let oldest_kept = today - Days::new(3);
    for name in &partitions {
        if let Some(day) = partition_day(name) {
            assert!(
                day >= oldest_kept,
                "{name} should have been dropped: {partitions:?}"
            );
        }
    }
    assert!(partitions.contains(&"logs_default".to_string()));
    assert!(
        partitions.contains(&format!(
            "logs_p{}",
            (today + Days::new(3)).format("%Y%m%d")
        )),
        "partitions are created ahead: {partitions:?}"
    );
    // No table is left holding the dropped rows: every relation inheriting from logs is listed
    // above, and no other logs_p table exists outside the partition tree.
    let orphans: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class c WHERE c.relname LIKE 'logs\\_p%' AND c.relkind = 'r' \
         AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(orphans, 0);
    assert_eq!(
        db.query_scalar("SELECT count(*) FROM logs WHERE service IN ('old', 'older')")
            .await,
        0
    );
    assert_eq!(
        db.count().await,
        accepted as i64,
        "every live record stayed"
    );
    let metrics = server.metrics().await;
    let dropped = metric(&metrics, "loghaul_retention_partitions_dropped_total");
    assert!(dropped >= 3.0, "{dropped}");
    assert_eq!(
        metric(&metrics, "loghaul_retention_rows_deleted_total"),
        12000.0
    );
    assert!(metric(&metrics, "loghaul_retention_last_run_timestamp_seconds") > 0.0);
    stop(server);
}

/// SIGTERM, and a clean exit.
fn stop(mut server: Process) {
    server.signal("TERM");
    assert!(server.wait(Duration::from_secs(30)).success());
}

/// Retention keeping two days, for tests that call `run_once` themselves.
fn keep_two_days() -> RetentionConfig {
    RetentionConfig {
        keep: Some(TimeDelta::days(2)),
        interval: Duration::from_secs(60),
        dedup_window: Duration::from_secs(86400),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_at_a_time_runs_retention() {
    let Some(db) = TestDb::create(Backend::Postgres, "retention_lock").await else {
        return;
    };
    let store = migrated(&db).await;
    let config = keep_two_days();
    let mut other_replica = PgConnection::connect(&db.url).await.unwrap();
    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(RETENTION_LOCK_KEY)
        .fetch_one(&mut other_replica)
        .await
        .unwrap();
    assert!(locked);
    let report = run_once(&store, &config).await.unwrap();
    assert!(!report.ran, "skipped while another replica holds the lock");
    // The replica goes away; its backend releases the lock once it has ended, which is after
    // close() returns.
    other_replica.close().await.unwrap();
    wait_until(
        "the other replica's lock to be released",
        DEADLINE,
        async || {
            db.query_scalar(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            .await
                == 0
        },
    )
    .await;
    let report = run_once(&store, &config).await.unwrap();
    assert!(report.ran);
    store.close().await;
}

async fn sqlite_deletes_old_rows_in_chunks_while_ingest_continues(db: &TestDb) {
    let store = migrated(db).await;
    store.close().await;
    let mut conn = SqliteConnection::connect(&db.url).await.unwrap();
    let old = (Utc::now() - TimeDelta::hours(3)).timestamp_micros();
    // 12,000 rows over two tenants: more than two chunks of 5,000 for one of them.
    sqlx::query(
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 12000) \
         INSERT INTO logs (tenant, ts, received_at, severity, service, message) \
         SELECT CASE WHEN n % 6 = 0 THEN 'other' ELSE 'default' END, ?, ?, 9, 'old', 'old ' || n FROM g",
    )
    .bind(old)
    .bind(old)
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let (server, accepted) = retain_while_ingesting(
        db,
        ("1h", "200ms"),
        "SELECT count(*) FROM logs WHERE service = 'old'",
    )
    .await;
    assert_eq!(
        db.count().await,
        accepted as i64,
        "every live record stayed"
    );
    let metrics = server.metrics().await;
    assert_eq!(
        metric(&metrics, "loghaul_retention_rows_deleted_total"),
        12000.0
    );
    stop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_retention() {
    if let Some(db) = TestDb::create(Backend::Sqlite, "retention_sqlite").await {
        sqlite_deletes_old_rows_in_chunks_while_ingest_continues(&db).await;
    }
}

async fn records_older_than_the_window_are_refused(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let mut client = server.client().await;
    let response = push(
        &mut client,
        vec![vec![
            record_at("fresh", Duration::from_secs(3600)),
            record_at("stale", Duration::from_secs(8 * 24 * 3600)),
        ]],
    )
    .await
    .unwrap();
    assert_eq!(response.accepted, 1);
    assert_eq!(response.rejections.len(), 1);
    assert_eq!(response.rejections[0].index, 1);
    assert!(
        response.rejections[0]
            .reason
            .starts_with("timestamp_too_old:"),
        "{:?}",
        response.rejections
    );
    server.stop().await;
}
on_both_backends!(too_old, records_older_than_the_window_are_refused);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_summarizes_the_brin_ranges_of_recent_partitions() {
    let Some(db) = TestDb::create(Backend::Postgres, "retention_brin").await else {
        return;
    };
    if db.skipped_on_citus(
        "retention_brin",
        "the partitions' rows are on the workers; citus::retention_deletes_summarizes_and_prunes_shard_by_shard covers it there",
    ) {
        return;
    }
    let store = migrated(&db).await;
    let config = keep_two_days();
    run_once(&store, &config).await.unwrap();
    // Rows written after the index exists leave their BRIN ranges unsummarized: enough of them
    // for the run to summarize in several paced steps (16 ranges, 2,048 blocks each).
    sqlx::query(
        "INSERT INTO logs (tenant, ts, severity, service, message) \
         SELECT 'default', now() - (g % 60) * interval '1 second', 9, 'svc', repeat('x', 200) || g \
         FROM generate_series(1, 150000) g",
    )
    .execute(store_pool(&store))
    .await
    .unwrap();
    // Today's hours that hold the rows (the last minute may straddle two of them), with their
    // sizes in blocks.
    let today = loghaul::storage::postgres::partition_name(Utc::now().date_naive());
    let hours: Vec<(String, i64)> = sqlx::query_as(&format!(
        "SELECT c.relname::text, pg_relation_size(c.oid) / current_setting('block_size')::bigint \
         FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = '{today}'::regclass AND pg_relation_size(c.oid) > 0"
    ))
    .fetch_all(store_pool(&store))
    .await
    .unwrap();
    let blocks: i64 = hours.iter().map(|(_, blocks)| blocks).sum();
    assert!(blocks > 2 * 2048, "only {blocks} blocks");
    let report = run_once(&store, &config).await.unwrap();
    // Two BRIN indexes, one range per 128 blocks, the last one partial; the first range of each
    // is summarized as the index starts filling, so it may not be left to the run.
    let ranges: u64 = hours
        .iter()
        .map(|(_, blocks)| (*blocks as u64).div_ceil(128) - 1)
        .sum();
    assert!(
        report.ranges_summarized >= 2 * ranges,
        "{ranges} ranges per index: {report:?}"
    );
    for (hour, _) in &hours {
        for index in ["ts", "received_at"] {
            let left: i32 = sqlx::query_scalar(&format!(
                "SELECT brin_summarize_new_values('{hour}_{index}'::regclass)"
            ))
            .fetch_one(store_pool(&store))
            .await
            .unwrap();
            assert_eq!(left, 0, "{hour} {index}: nothing was left unsummarized");
        }
    }
    store.close().await;
}

fn store_pool(store: &Store) -> &sqlx::PgPool {
    match store {
        Store::Postgres(store) => store.pool(),
        Store::Sqlite(_) => unreachable!("a PostgreSQL test"),
    }
}

/// The volume rollup leaves with the window: 6,000 old minutes of one tenant (more than a chunk),
/// a few of another and the minute before the horizon's go; the minute after it and newer stay.
async fn the_volume_rollup_is_trimmed_to_the_window(db: &TestDb) {
    let store = migrated(db).await;
    let now = Utc::now().timestamp() / 60 * 60;
    // The newest of the old minutes, the minute the horizon (two days) falls in when the test
    // starts (or the next one, should a minute begin meanwhile), and a recent minute.
    let old = now - 3 * 86_400;
    let cut = now - 2 * 86_400;
    let recent = now - 3_600;
    let rows = [
        ("a", old, 6000),
        ("b", old, 3),
        ("a", cut - 60, 1),
        ("a", cut + 60, 1),
        ("a", recent, 2),
        ("b", recent, 2),
    ];
    for (tenant, first, minutes) in rows {
        let sql = match db.backend {
            Backend::Sqlite => format!(
                "WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n < {minutes} - 1) \
                 INSERT INTO log_volume (tenant, minute, service, severity, records, bytes) \
                 SELECT '{tenant}', {first} - 60 * n, 'svc', 9, 1, 10 FROM g"
            ),
            Backend::Postgres => format!(
                "INSERT INTO log_volume (tenant, minute, service, severity, writer, records, bytes) \
                 SELECT '{tenant}', to_timestamp({first} - 60 * n), 'svc', 9, 1, 1, 10 \
                 FROM generate_series(0, {minutes} - 1) AS n"
            ),
        };
        db.execute(&sql).await;
    }
    let report = run_once(&store, &keep_two_days()).await.unwrap();
    assert!(report.ran);
    assert_eq!(report.volume_rows_deleted, 6004, "{report:?}");
    assert_eq!(
        db.query_scalar("SELECT count(*) FROM log_volume").await,
        5,
        "the minute after the horizon's and the recent ones stay"
    );
    let again = run_once(&store, &keep_two_days()).await.unwrap();
    assert_eq!(again.volume_rows_deleted, 0, "nothing left to trim");
    store.close().await;
}
on_both_backends!(retention_volume, the_volume_rollup_is_trimmed_to_the_window);
