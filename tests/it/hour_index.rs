//! The service index of past hours on a real PostgreSQL, with or without `citus_columnar`: a past
//! heap hour gets its btree by tenant, service and time, beside its writers and with no row
//! changed; a build that was interrupted is done again; reads of one service use it; and the
//! serving process builds it on its own while sealing is off.

use std::time::Duration;

use chrono::{DateTime, Days, DurationRound, TimeDelta, Utc};
use loghaul::storage::postgres::{
    create_partitions, hour_partition_name, index_leaf, leaves, Leaf, INDEX_AFTER,
};
use sqlx::{Connection, PgConnection};

use crate::common::process::Process;
use crate::common::{metric, migrated, query_all, record_at, wait_until, Backend, TestDb};

/// A migrated PostgreSQL database with the partitions of the last two days; `None` without
/// PostgreSQL, or on Citus, whose leaves are distributed days.
async fn partitioned_db(test: &str) -> Option<(TestDb, PgConnection)> {
    let db = TestDb::create(Backend::Postgres, test).await?;
    if db.skipped_on_citus(test, "Citus's distributed days get no hour index") {
        return None;
    }
    migrated(&db).await.close().await;
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let today = Utc::now().date_naive();
    create_partitions(&mut conn, today - Days::new(1), today)
        .await
        .unwrap();
    Some((db, conn))
}

/// The start of the hour three hours ago (always a partition of today or yesterday).
fn past_hour() -> DateTime<Utc> {
    (Utc::now() - TimeDelta::hours(3))
        .duration_trunc(TimeDelta::hours(1))
        .unwrap()
}

/// The leaf partition of `hour`.
async fn leaf_of(conn: &mut PgConnection, hour: DateTime<Utc>) -> Leaf {
    let name = hour_partition_name(
        hour.date_naive(),
        hour.format("%H").to_string().parse().unwrap(),
    );
    leaves(conn)
        .await
        .unwrap()
        .into_iter()
        .find(|leaf| leaf.name == name)
        .unwrap_or_else(|| panic!("no partition {name}"))
}

/// Rows of the hour and a checksum of every stored value.
async fn fingerprint(conn: &mut PgConnection, hour: DateTime<Utc>) -> (i64, String) {
    sqlx::query_as(
        "SELECT count(*), coalesce(sum(hashtextextended( \
             concat_ws('|', id, tenant, ts, received_at, severity, service, message, labels, \
                       attributes, trace_id, span_id), 0)::numeric), 0)::text \
         FROM logs WHERE ts >= $1 AND ts < $1 + interval '1 hour'",
    )
    .bind(hour)
    .fetch_one(conn)
    .await
    .unwrap()
}

/// The plan PostgreSQL makes for the rows of one service in `hour`, as text.
async fn plan_of_one_service(conn: &mut PgConnection, hour: DateTime<Utc>) -> String {
    let lines: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT count(*) FROM logs \
         WHERE tenant = 't1' AND service = 's3' AND ts >= $1 AND ts < $1 + interval '1 hour'",
    )
    .bind(hour)
    .fetch_all(conn)
    .await
    .unwrap();
    lines.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_past_hour_gets_its_service_index_and_an_interrupted_build_is_done_again() {
    let Some((db, mut conn)) = partitioned_db("hour_index_build").await else {
        return;
    };
    let hour = past_hour();
    sqlx::query(
        "INSERT INTO logs (tenant, ts, severity, service, message) \
         SELECT 't' || (g % 3), $1 + (g % 3600000) * interval '1 millisecond', 9, \
                's' || (g % 50), 'line ' || g \
         FROM generate_series(1, 100000) g",
    )
    .bind(hour)
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query("ANALYZE logs")
        .execute(&mut conn)
        .await
        .unwrap();
    let now = Utc::now();
    let leaf = leaf_of(&mut conn, hour).await;
    assert!(!leaf.indexed);
    assert!(leaf.wants_index(now - INDEX_AFTER), "{leaf:?}");
    let current = leaf_of(&mut conn, now.duration_trunc(TimeDelta::hours(1)).unwrap()).await;
    assert!(
        !current.wants_index(now - INDEX_AFTER),
        "the hour being written keeps only its BRIN indexes: {current:?}"
    );
    let before = fingerprint(&mut conn, hour).await;
    assert_eq!(before.0, 100_000);
    assert!(
        !plan_of_one_service(&mut conn, hour)
            .await
            .contains("_service"),
        "no index to use yet"
    );

    // A concurrent build that fails leaves its index behind, invalid: what a build interrupted
    // by a restart leaves too.
    let broken = sqlx::raw_sql(&format!(
        "CREATE UNIQUE INDEX CONCURRENTLY {}_service ON {} (tenant)",
        leaf.name, leaf.name
    ))
    .execute(&mut conn)
    .await;
    assert!(broken.is_err(), "tenants repeat: the unique build fails");
    let leaf = leaf_of(&mut conn, hour).await;
    assert!(!leaf.indexed, "an invalid index is no index: {leaf:?}");
    assert!(leaf.wants_index(now - INDEX_AFTER));

    index_leaf(&mut conn, &leaf).await.unwrap();
    let leaf = leaf_of(&mut conn, hour).await;
    assert!(leaf.indexed, "{leaf:?}");
    assert!(!leaf.wants_index(now - INDEX_AFTER), "once is enough");
    assert_eq!(fingerprint(&mut conn, hour).await, before, "no row changed");
    let plan = plan_of_one_service(&mut conn, hour).await;
    assert!(
        plan.contains(&format!("{}_service", leaf.name)),
        "a read of one service uses the index:\n{plan}"
    );
    // Late rows still land, and are found through it.
    sqlx::query(
        "INSERT INTO logs (tenant, ts, severity, service, message) \
         VALUES ('t1', $1 + interval '10 minutes', 9, 's3', 'late')",
    )
    .bind(hour)
    .execute(&mut conn)
    .await
    .unwrap();
    let late: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM logs WHERE tenant = 't1' AND service = 's3' \
         AND ts >= $1 AND ts < $1 + interval '1 hour' AND message = 'late'",
    )
    .bind(hour)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(late, 1);
    conn.close().await.unwrap();
    drop(db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_indexes_past_hours_with_sealing_off() {
    let Some((db, conn)) = partitioned_db("hour_index_serve").await else {
        return;
    };
    conn.close().await.unwrap();
    let server = Process::serve(&db.url, &["--seal-after", "0s", "--seal-interval", "1s"]);
    let mut client = loghaul::proto::v1::log_ingest_client::LogIngestClient::connect(format!(
        "http://{}",
        server.grpc
    ))
    .await
    .unwrap();
    let age = Duration::from_secs(3 * 3600);
    let chunk: Vec<_> = (0..500)
        .map(|n| record_at(format!("indexed-{n}"), age))
        .collect();
    let pushed = crate::common::push(&mut client, vec![chunk]).await.unwrap();
    assert_eq!(pushed.accepted, 500);
    wait_until(
        "a past hour to be indexed",
        Duration::from_secs(60),
        async || metric(&server.metrics().await, "loghaul_hours_indexed_total") >= 1.0,
    )
    .await;
    let metrics = server.metrics().await;
    assert_eq!(metric(&metrics, "loghaul_sealing_enabled"), 0.0);
    assert_eq!(metric(&metrics, "loghaul_hour_index_failures_total"), 0.0);
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let indexed: Vec<String> = leaves(&mut conn)
        .await
        .unwrap()
        .into_iter()
        .filter(|leaf| leaf.indexed)
        .map(|leaf| leaf.name)
        .collect();
    let hour = Utc::now() - TimeDelta::from_std(age).unwrap();
    let expected = hour_partition_name(
        hour.date_naive(),
        hour.format("%H").to_string().parse().unwrap(),
    );
    assert_eq!(indexed, vec![expected], "only the hour with rows, once");
    conn.close().await.unwrap();
    let mut query = loghaul::proto::v1::log_query_client::LogQueryClient::connect(format!(
        "http://{}",
        server.grpc
    ))
    .await
    .unwrap();
    let found = query_all(&mut query, "", Default::default(), 200)
        .await
        .unwrap();
    assert_eq!(found.len(), 500, "every record is read back");
    drop(server);
    drop(db);
}
