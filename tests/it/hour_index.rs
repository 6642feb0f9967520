//! The indexes of past hours on a real PostgreSQL, with or without `citus_columnar`: a past heap
//! hour gets its btree by tenant, service and time and its GIN of stream labels, beside its
//! writers and with no row changed; a build that was interrupted is done again; reads of one
//! service, or of a stream by its labels, use them; and the serving process builds them on its
//! own while sealing is off. Indexing an hour lists its streams in the stream catalog.

use std::time::Duration;

use chrono::{DateTime, Days, DurationRound, TimeDelta, Utc};
use loghaul::storage::postgres::{
    create_partitions, hour_partition_name, index_leaf, leaves, Flavor, INDEX_AFTER,
};
use sqlx::{Connection, PgConnection};

use crate::common::process::Process;
use crate::common::{metric, migrated, query_all, record_at, wait_until, Backend, TestDb};
use crate::sealing::{fingerprint, leaf_of, past_hour};

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

/// The plan PostgreSQL makes for the rows of `hour` that `condition` keeps, as text.
async fn plan_of(conn: &mut PgConnection, hour: DateTime<Utc>, condition: &str) -> String {
    let lines: Vec<String> = sqlx::query_scalar(&format!(
        "EXPLAIN SELECT count(*) FROM logs \
         WHERE tenant = 't1' AND {condition} AND ts >= $1 AND ts < $1 + interval '1 hour'"
    ))
    .bind(hour)
    .fetch_all(conn)
    .await
    .unwrap();
    lines.join("\n")
}

/// One service's rows.
const ONE_SERVICE: &str = "service = 's3'";
/// One stream's rows, by a label other than the service, as the reads ask for them.
const ONE_STREAM: &str = "labels @> '{\"job\": \"j7\"}'::jsonb";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_past_hour_gets_its_service_index_and_an_interrupted_build_is_done_again() {
    let Some((db, mut conn)) = partitioned_db("hour_index_build").await else {
        return;
    };
    let hour = past_hour();
    sqlx::query(
        "INSERT INTO logs (tenant, ts, severity, service, message, labels) \
         SELECT 't' || (g % 3), $1 + (g % 3600000) * interval '1 millisecond', 9, \
                's' || (g % 50), 'line ' || g, \
                jsonb_build_object('job', 'j' || (g % 40), 'env', 'prod') \
         FROM generate_series(1, 100000) g",
    )
    .bind(hour)
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
    let before = fingerprint(&mut conn, hour, "true").await;
    assert_eq!(before.0, 100_000);
    for condition in [ONE_SERVICE, ONE_STREAM] {
        let plan = plan_of(&mut conn, hour, condition).await;
        assert!(
            !plan.contains("_service") && !plan.contains("_labels"),
            "no index to use yet:\n{plan}"
        );
    }

    // A concurrent build that fails leaves its index behind, invalid: what a build interrupted
    // by a restart leaves too. The other index is built and left alone.
    let broken = sqlx::raw_sql(&format!(
        "CREATE UNIQUE INDEX CONCURRENTLY {}_service ON {} (tenant)",
        leaf.name, leaf.name
    ))
    .execute(&mut conn)
    .await;
    assert!(broken.is_err(), "tenants repeat: the unique build fails");
    let labels_index = format!("{}_labels", leaf.name);
    sqlx::raw_sql(&format!(
        "CREATE INDEX CONCURRENTLY {labels_index} ON {} USING gin (labels jsonb_path_ops)",
        leaf.name
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let index_oid = async |conn: &mut PgConnection| -> i64 {
        sqlx::query_scalar("SELECT oid::int8 FROM pg_class WHERE relname = $1")
            .bind(&labels_index)
            .fetch_one(conn)
            .await
            .unwrap()
    };
    let labels_oid = index_oid(&mut conn).await;
    let leaf = leaf_of(&mut conn, hour).await;
    assert!(!leaf.indexed, "an invalid index is no index: {leaf:?}");
    assert!(leaf.wants_index(now - INDEX_AFTER));

    // The rows went in without the stream catalog, as a writer of the version before it writes.
    let cataloged = async |conn: &mut PgConnection| -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM streams WHERE hour = $1")
            .bind(hour)
            .fetch_one(conn)
            .await
            .unwrap()
    };
    assert_eq!(cataloged(&mut conn).await, 0);
    index_leaf(&mut conn, &leaf).await.unwrap();
    let leaf = leaf_of(&mut conn, hour).await;
    assert!(leaf.indexed, "{leaf:?}");
    // 3 tenants, 50 services and 40 jobs, by the remainders of one number: 600 streams.
    assert_eq!(
        cataloged(&mut conn).await,
        600,
        "the hour's streams are listed"
    );
    assert!(!leaf.wants_index(now - INDEX_AFTER), "once is enough");
    let statistics: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_statistic WHERE starelid = $1::regclass")
            .bind(&leaf.name)
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert!(statistics > 0, "the hour is analyzed");
    assert_eq!(
        index_oid(&mut conn).await,
        labels_oid,
        "a valid index is left as it is"
    );
    assert_eq!(
        fingerprint(&mut conn, hour, "true").await,
        before,
        "no row changed"
    );
    let plan = plan_of(&mut conn, hour, ONE_SERVICE).await;
    assert!(
        plan.contains(&format!("{}_service", leaf.name)),
        "a read of one service uses its index:\n{plan}"
    );
    let plan = plan_of(&mut conn, hour, ONE_STREAM).await;
    assert!(
        plan.contains(&format!("{}_labels", leaf.name)),
        "a read of one stream by its labels uses theirs:\n{plan}"
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
    let indexed: Vec<String> = leaves(&mut conn, Flavor::Plain)
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
