//! Sealing on a real PostgreSQL with `citus_columnar`, and on Citus: a past hour (on Citus, its
//! day) rewritten into a columnar partition while rows keep arriving for it and readers keep
//! counting it, with no row lost, doubled or changed; late rows after the seal; one sealer among
//! replicas; retention over sealed days; and the serving process sealing on its own.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Days, DurationRound, TimeDelta, Utc};
use loghaul::retention::{run_once as retention_run, RetentionConfig};
use loghaul::storage::postgres::{
    create_partitions, hour_partition_name, leaves, seal, sealing, Flavor, Leaf, Pace, Sealing,
    READ_SETTINGS,
};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tokio_util::sync::CancellationToken;

use crate::common::process::Process;
use crate::common::{
    metric, migrated, query_all, record_at, wait_until, Backend, TestDb, DEADLINE,
};

/// A migrated PostgreSQL database whose server can seal, with the partitions of the last two
/// days, and whether it is Citus; `None` after a loud line when there is no PostgreSQL or
/// without the extension (unless `LOGHAUL_REQUIRE_COLUMNAR=1`, which makes that a failure).
async fn columnar_db(test: &str) -> Option<(TestDb, PgConnection, Flavor)> {
    let db = TestDb::create(Backend::Postgres, test).await?;
    migrated(&db).await.close().await;
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let flavor = Flavor::detect(&mut conn).await.unwrap();
    assert_eq!(flavor == Flavor::Citus, db.is_citus());
    match sealing(&mut conn).await.unwrap() {
        Sealing::On => {}
        Sealing::Off(why) => {
            if std::env::var("LOGHAUL_REQUIRE_COLUMNAR").as_deref() == Ok("1") {
                panic!("citus_columnar is required (LOGHAUL_REQUIRE_COLUMNAR=1): {why}");
            }
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "*** SKIPPED {test}: {why} ***");
            return None;
        }
    }
    let today = Utc::now().date_naive();
    create_partitions(&mut conn, today - Days::new(1), today)
        .await
        .unwrap();
    Some((db, conn, flavor))
}

/// The start of the hour three hours ago (always a partition of today or yesterday).
pub(crate) fn past_hour() -> DateTime<Utc> {
    (Utc::now() - TimeDelta::hours(3))
        .duration_trunc(TimeDelta::hours(1))
        .unwrap()
}

/// 05:00 of yesterday: past, on one server as on Citus, where its leaf is the whole day.
pub(crate) fn yesterdays_hour() -> DateTime<Utc> {
    (Utc::now().date_naive() - Days::new(1))
        .and_hms_opt(5, 0, 0)
        .unwrap()
        .and_utc()
}

/// Fills `[hour, hour + 1h)` with `rows` rows over three tenants and five services.
async fn fill_hour(conn: &mut PgConnection, hour: DateTime<Utc>, rows: i64) {
    sqlx::query(
        "INSERT INTO logs (tenant, ts, severity, service, message, labels, attributes, trace_id_bytes) \
         SELECT 't' || (g % 3), $1 + (g % 3600000) * interval '1 millisecond', 9 + (g % 4) * 4, \
                's' || (g % 5), 'GET /api/items/' || (g * 7919 % 1000) || ' took ' || (g % 97) || 'ms', \
                jsonb_build_object('service_name', 's' || (g % 5)), \
                jsonb_build_object('user', 'u' || (g % 50), 'n', g::text), \
                decode(md5(g::text), 'hex') \
         FROM generate_series(1, $2) g",
    )
    .bind(hour)
    .bind(rows)
    .execute(conn)
    .await
    .unwrap();
}

/// Rows, distinct ids, and a checksum of every stored value of the hour's rows that `filter`
/// keeps.
pub(crate) async fn fingerprint(
    conn: &mut PgConnection,
    hour: DateTime<Utc>,
    filter: &str,
) -> (i64, i64, String) {
    sqlx::query_as(&format!(
        "SELECT count(*), count(DISTINCT id), coalesce(sum(hashtextextended( \
             concat_ws('|', id, tenant, ts, received_at, severity, service, message, labels, \
                       attributes, trace_id_bytes, span_id_bytes), 0)::numeric), 0)::text \
         FROM logs WHERE ts >= $1 AND ts < $1 + interval '1 hour' AND {filter}"
    ))
    .bind(hour)
    .fetch_one(conn)
    .await
    .unwrap()
}

/// The leaf partition holding `hour`: the hour's own, or on Citus its day's.
pub(crate) async fn leaf_of(conn: &mut PgConnection, hour: DateTime<Utc>) -> Leaf {
    let flavor = Flavor::detect(conn).await.unwrap();
    let leaf = leaves(conn, flavor)
        .await
        .unwrap()
        .into_iter()
        .find(|leaf| leaf.from <= hour && hour < leaf.to)
        .unwrap_or_else(|| panic!("no partition holds {hour}"));
    if flavor == Flavor::Plain {
        let name = hour_partition_name(
            hour.date_naive(),
            hour.format("%H").to_string().parse().unwrap(),
        );
        assert_eq!(leaf.name, name, "one server's leaves are hours");
    }
    leaf
}

/// Bytes on disk of a table with its indexes: on Citus, of its shards.
async fn total_bytes(conn: &mut PgConnection, flavor: Flavor, table: &str) -> i64 {
    let size = match flavor {
        Flavor::Plain => "pg_total_relation_size",
        Flavor::Citus => "citus_total_relation_size",
    };
    sqlx::query_scalar(&format!("SELECT {size}($1::regclass)"))
        .bind(table)
        .fetch_one(conn)
        .await
        .unwrap()
}

/// The access method of a table.
async fn access_method(conn: &mut PgConnection, table: &str) -> String {
    sqlx::query_scalar(
        "SELECT am.amname::text FROM pg_class c JOIN pg_am am ON am.oid = c.relam \
         WHERE c.relname = $1",
    )
    .bind(table)
    .fetch_one(conn)
    .await
    .unwrap()
}

/// Inserts `rows` late rows (`late-{round}-…`) into `hour` in one transaction; returns how many.
async fn insert_late(conn: &mut PgConnection, hour: DateTime<Utc>, round: i32, rows: i32) -> i64 {
    sqlx::query(
        "INSERT INTO logs (tenant, ts, severity, service, message) \
         SELECT 't1', $1 + interval '30 minutes', 9, 's1', 'late-' || $2 || '-' || g \
         FROM generate_series(1, $3) g",
    )
    .bind(hour)
    .bind(round)
    .bind(rows)
    .execute(conn)
    .await
    .unwrap()
    .rows_affected() as i64
}

/// Inserts late rows (`late-…`) into `hour` in small transactions until `stop`; returns how many.
fn late_writer(
    url: String,
    hour: DateTime<Utc>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<i64> {
    tokio::spawn(async move {
        let mut conn = PgConnection::connect(&url).await.unwrap();
        let mut written = 0;
        let mut round = 0;
        while !stop.is_cancelled() {
            written += insert_late(&mut conn, hour, round, 20).await;
            round += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        written
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_is_sealed_under_late_rows_and_reads_with_no_row_lost_doubled_or_changed() {
    let Some((db, mut conn, flavor)) = columnar_db("sealing_swap").await else {
        return;
    };
    let hour = yesterdays_hour();
    fill_hour(&mut conn, hour, 200_000).await;
    let before = fingerprint(&mut conn, hour, "message NOT LIKE 'late-%'").await;
    assert_eq!(before.0, 200_000);
    let heap = leaf_of(&mut conn, hour).await.name;
    let heap_bytes = total_bytes(&mut conn, flavor, &heap).await;

    let stop = CancellationToken::new();
    let writer = late_writer(db.url.clone(), hour, stop.clone());
    // A reader counting the hour all along: rows never vanish, not even for one statement.
    let fewest = Arc::new(AtomicI64::new(i64::MAX));
    let reads = Arc::new(AtomicU64::new(0));
    let reader = {
        let (url, stop, fewest, reads) =
            (db.url.clone(), stop.clone(), fewest.clone(), reads.clone());
        tokio::spawn(async move {
            let mut conn = PgConnection::connect(&url).await.unwrap();
            while !stop.is_cancelled() {
                let seen: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM logs WHERE ts >= $1 AND ts < $1 + interval '1 hour'",
                )
                .bind(hour)
                .fetch_one(&mut conn)
                .await
                .unwrap();
                fewest.fetch_min(seen, Ordering::Relaxed);
                reads.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;

    let leaf = leaf_of(&mut conn, hour).await;
    assert!(!leaf.sealed);
    // In slices of a few pages with rests between them, so that late rows also land while the
    // copy rests, and the slices must add up to the hour.
    let pace = Pace {
        busy_percent: 50,
        slice_bytes: 64 * 1024,
    };
    let sealed = seal(&mut conn, flavor, &leaf, pace).await.unwrap();
    // Late rows keep landing, now in the columnar partition.
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.cancel();
    let late = writer.await.unwrap();
    reader.await.unwrap();

    assert_eq!(access_method(&mut conn, &leaf.name).await, "columnar");
    assert!(sealed.rows >= 200_000, "{sealed:?}");
    assert_eq!(
        fingerprint(&mut conn, hour, "message NOT LIKE 'late-%'").await,
        before,
        "the hour's rows are the same after the seal"
    );
    let (rows, distinct, _) = fingerprint(&mut conn, hour, "message LIKE 'late-%'").await;
    assert_eq!(rows, late, "every late row is there once");
    assert_eq!(distinct, late);
    assert!(reads.load(Ordering::Relaxed) > 0);
    assert!(
        fewest.load(Ordering::Relaxed) >= 200_000,
        "a reader saw the hour with rows missing: {}",
        fewest.load(Ordering::Relaxed)
    );
    let columnar_bytes = total_bytes(&mut conn, flavor, &leaf.name).await;
    assert!(
        columnar_bytes * 3 < heap_bytes,
        "sealed {columnar_bytes} bytes, heap {heap_bytes}"
    );
    // Nothing left behind by the swap.
    let strays: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_class WHERE relname LIKE '%\\_sealing'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(strays, 0);
    conn.close().await.unwrap();
    drop(db);
}

/// Holds a lock that conflicts with the swap's on `table`, in a transaction of its own, from
/// when this returns until `release` is cancelled.
async fn hold_lock(
    url: String,
    table: String,
    release: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let (held, holding) = tokio::sync::oneshot::channel();
    let holder = tokio::spawn(async move {
        let mut conn = PgConnection::connect(&url).await.unwrap();
        let mut transaction = conn.begin().await.unwrap();
        sqlx::query(&format!("LOCK TABLE {table} IN ACCESS SHARE MODE"))
            .execute(&mut *transaction)
            .await
            .unwrap();
        held.send(()).unwrap();
        release.cancelled().await;
        transaction.commit().await.unwrap();
        conn.close().await.unwrap();
    });
    holding.await.unwrap();
    holder
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_outwaits_a_long_read_and_a_lock_never_let_go_leaves_the_heap_whole() {
    let Some((db, mut conn, flavor)) = columnar_db("sealing_swap_wait").await else {
        return;
    };
    let hour = yesterdays_hour();
    fill_hour(&mut conn, hour, 20_000).await;
    let before = fingerprint(&mut conn, hour, "true").await;
    let leaf = leaf_of(&mut conn, hour).await;

    // A read of the partition that outlasts one swap's lock timeout, but not a few: the seal
    // waits it out instead of throwing its copy away.
    let release = CancellationToken::new();
    let holder = hold_lock(db.url.clone(), leaf.name.clone(), release.clone()).await;
    // Let go once the swap has waited for it longer than its lock timeout.
    let releasing = {
        let (url, table, release) = (db.url.clone(), leaf.name.clone(), release.clone());
        tokio::spawn(async move {
            let mut watcher = PgConnection::connect(&url).await.unwrap();
            let waited_for = "SELECT EXISTS (SELECT 1 FROM pg_locks \
                              WHERE relation = $1::regclass AND NOT granted)";
            let started = std::time::Instant::now();
            while !sqlx::query_scalar::<_, bool>(waited_for)
                .bind(&table)
                .fetch_one(&mut watcher)
                .await
                .unwrap()
            {
                assert!(
                    started.elapsed() < DEADLINE,
                    "the swap never waited for its lock"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(Duration::from_millis(600)).await;
            release.cancel();
            watcher.close().await.unwrap();
        })
    };
    let sealed = seal(&mut conn, flavor, &leaf, Pace::new(100))
        .await
        .unwrap();
    releasing.await.unwrap();
    holder.await.unwrap();
    assert_eq!(access_method(&mut conn, &leaf.name).await, "columnar");
    assert_eq!(sealed.rows, 20_000, "{sealed:?}");
    // The try that waited out its lock timeout held inserts off too, and counts.
    assert!(sealed.swap >= Duration::from_millis(200), "{sealed:?}");
    assert_eq!(fingerprint(&mut conn, hour, "true").await, before);

    // A lock that is never let go: the seal fails with PostgreSQL's own reason, and the sealed
    // partition is left as it was, whole, to be sealed again later.
    insert_late(&mut conn, hour, 0, 10).await;
    let before = fingerprint(&mut conn, hour, "true").await;
    let leaf = leaf_of(&mut conn, hour).await;
    let release = CancellationToken::new();
    let holder = hold_lock(db.url.clone(), leaf.name.clone(), release.clone()).await;
    let err = seal(&mut conn, flavor, &leaf, Pace::new(100))
        .await
        .expect_err("the swap never gets its locks");
    assert_eq!(
        err.as_database_error().and_then(|db| db.code()).as_deref(),
        Some("55P03"),
        "{err}"
    );
    release.cancel();
    holder.await.unwrap();
    assert_eq!(access_method(&mut conn, &leaf.name).await, "columnar");
    assert_eq!(fingerprint(&mut conn, hour, "true").await, before);
    seal(&mut conn, flavor, &leaf, Pace::new(100))
        .await
        .unwrap();
    assert_eq!(fingerprint(&mut conn, hour, "true").await, before);
    conn.close().await.unwrap();
    drop(db);
}

/// A read session's read of one service over a sealed hour, whose statistics are gathered,
/// decompresses that service's chunk groups only: the hour is sorted by tenant and then service,
/// and the statistics call the service column too little correlated with that order for
/// columnar to test it against each group's bounds by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_one_service_skips_the_chunk_groups_of_the_others_in_a_sealed_hour() {
    let Some((db, mut conn, flavor)) = columnar_db("sealing_skip").await else {
        return;
    };
    // Citus plans the shards' scans in sessions of its own, which these settings do not reach.
    if db.skipped_on_citus("sealing_skip", "the workers' sessions are Citus's") {
        return;
    }
    let hour = yesterdays_hour();
    // Three tenants and five services, 4,000 rows each.
    fill_hour(&mut conn, hour, 60_000).await;
    let leaf = leaf_of(&mut conn, hour).await;
    seal(&mut conn, flavor, &leaf, Pace::new(100))
        .await
        .unwrap();
    sqlx::query(&format!("ANALYZE {}", leaf.name))
        .execute(&mut conn)
        .await
        .unwrap();
    let options = db.url.parse::<PgConnectOptions>().unwrap();
    let mut reader = PgConnection::connect_with(&options.options(READ_SETTINGS))
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN ANALYZE SELECT message FROM logs WHERE tenant = 't1' AND service = 's2' \
         AND ts >= $1 AND ts < $1 + interval '1 hour'",
    )
    .bind(hour)
    .fetch_all(&mut reader)
    .await
    .unwrap();
    let plan = plan.join("\n");
    // EXPLAIN leaves out a figure that is 0.
    let figure = |label: &str| -> i64 {
        plan.lines()
            .find_map(|line| line.trim().strip_prefix(label))
            .map_or(0, |figure| figure.trim().parse().unwrap())
    };
    assert!(plan.contains("rows=4000 "), "{plan}");
    assert_eq!(
        figure("Rows Removed by Filter:"),
        0,
        "whole chunk groups of other services were read:\n{plan}"
    );
    assert!(
        figure("Columnar Chunk Groups Removed by Filter:") > 0,
        "{plan}"
    );
    reader.close().await.unwrap();
    conn.close().await.unwrap();
    drop(db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_rows_after_the_seal_are_kept_and_sealed_again() {
    let Some((db, mut conn, flavor)) = columnar_db("sealing_late").await else {
        return;
    };
    let hour = yesterdays_hour();
    fill_hour(&mut conn, hour, 20_000).await;
    let leaf = leaf_of(&mut conn, hour).await;
    seal(&mut conn, flavor, &leaf, Pace::new(100))
        .await
        .unwrap();
    // Each transaction of late rows writes a small stripe of its own.
    for round in 0..16 {
        insert_late(&mut conn, hour, round, 10).await;
    }
    let before = fingerprint(&mut conn, hour, "true").await;
    assert_eq!(before.0, 20_160);
    let leaf = leaf_of(&mut conn, hour).await;
    assert!(leaf.sealed);
    assert!(leaf.small_stripes >= 16, "{leaf:?}");
    assert!(leaf.wants_sealing(Utc::now()));

    seal(&mut conn, flavor, &leaf, Pace::new(100))
        .await
        .unwrap();
    let leaf = leaf_of(&mut conn, hour).await;
    assert!(leaf.sealed);
    // A seal ends each table (on Citus, each shard) with at most one stripe short of full.
    assert!(
        leaf.small_stripes <= 1,
        "sealed again in full stripes: {leaf:?}"
    );
    assert!(!leaf.wants_sealing(Utc::now()));
    assert_eq!(fingerprint(&mut conn, hour, "true").await, before);
    conn.close().await.unwrap();
    drop(db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_days_leave_with_retention_and_one_replica_seals_at_a_time() {
    let Some((db, mut conn, _)) = columnar_db("sealing_retention").await else {
        return;
    };
    let store = migrated(&db).await;
    let old_day = Utc::now().date_naive() - Days::new(10);
    create_partitions(&mut conn, old_day, old_day)
        .await
        .unwrap();
    let old_hour = old_day.and_hms_opt(5, 0, 0).unwrap().and_utc();
    fill_hour(&mut conn, old_hour, 5_000).await;

    // Replicas share the database: while one sealer holds the lock, another does nothing.
    let mut first = store.sealer().await.unwrap().unwrap();
    let mut second = store.sealer().await.unwrap().unwrap();
    assert!(first.try_lock().await.unwrap());
    assert!(!second.try_lock().await.unwrap());
    first.unlock().await;
    assert!(second.try_lock().await.unwrap());
    second.unlock().await;

    let leaf = leaf_of(&mut conn, old_hour).await;
    first.seal(&leaf, Pace::new(100)).await.unwrap();
    assert_eq!(access_method(&mut conn, &leaf.name).await, "columnar");
    assert_eq!(fingerprint(&mut conn, old_hour, "true").await.0, 5_000);

    let config = RetentionConfig {
        keep: Some(TimeDelta::days(3)),
        interval: Duration::from_secs(600),
        dedup_window: Duration::from_secs(3600),
    };
    let report = retention_run(&store, &config).await.unwrap();
    assert!(report.partitions_dropped >= 1, "{report:?}");
    assert_eq!(fingerprint(&mut conn, old_hour, "true").await.0, 0);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_class WHERE relname = $1")
        .bind(&leaf.name)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 0, "the sealed hour went with its day");
    first.close().await;
    second.close().await;
    store.close().await;
    conn.close().await.unwrap();
    drop(db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_seals_past_hours_and_still_answers_from_them() {
    let Some((db, mut conn, flavor)) = columnar_db("sealing_serve").await else {
        return;
    };
    let server = Process::serve(&db.url, &["--seal-after", "1s", "--seal-interval", "1s"]);
    let mut client = loghaul::proto::v1::log_ingest_client::LogIngestClient::connect(format!(
        "http://{}",
        server.grpc
    ))
    .await
    .unwrap();
    let mut query = loghaul::proto::v1::log_query_client::LogQueryClient::connect(format!(
        "http://{}",
        server.grpc
    ))
    .await
    .unwrap();
    // A tail open before the pushes: rows of yesterday are new to it all the same.
    let mut tail = query
        .tail(loghaul::proto::v1::TailRequest::default())
        .await
        .unwrap()
        .into_inner();
    let age = (Utc::now() - yesterdays_hour()).to_std().unwrap();
    let chunk: Vec<_> = (0..500)
        .map(|n| record_at(format!("sealed-{n}"), age))
        .collect();
    let pushed = crate::common::push(&mut client, vec![chunk]).await.unwrap();
    assert_eq!(pushed.accepted, 500);
    let mut tailed = 0;
    while tailed < 500 {
        let message = tokio::time::timeout(DEADLINE, tail.message())
            .await
            .expect("the tail brings the late rows")
            .unwrap()
            .unwrap();
        tailed += message.records.len();
    }
    assert_eq!(tailed, 500);
    wait_until(
        "an hour to be sealed",
        Duration::from_secs(60),
        async || metric(&server.metrics().await, "loghaul_partitions_sealed_total") >= 1.0,
    )
    .await;
    // Oldest first: every past partition before the one with rows was looked at already, and
    // those that never held a row stay heap (on Citus, too, where an empty table takes pages).
    let sealed: Vec<Leaf> = leaves(&mut conn, flavor)
        .await
        .unwrap()
        .into_iter()
        .filter(|leaf| leaf.sealed)
        .collect();
    assert!(!sealed.is_empty());
    for leaf in &sealed {
        let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}", leaf.name))
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert!(rows > 0, "an empty partition was sealed: {leaf:?}");
    }
    conn.close().await.unwrap();
    let metrics = server.metrics().await;
    assert_eq!(metric(&metrics, "loghaul_sealing_enabled"), 1.0);
    // Each seal's swap is timed, and it is a part of that seal.
    assert!(metric(&metrics, "loghaul_seal_swap_seconds_count") >= 1.0);
    assert!(
        metric(&metrics, "loghaul_seal_swap_seconds_sum")
            <= metric(&metrics, "loghaul_seal_duration_seconds_sum")
    );
    wait_until("the storage gauges", Duration::from_secs(30), async || {
        metric(
            &server.metrics().await,
            "loghaul_storage_bytes{tier=\"columnar\"}",
        ) > 0.0
    })
    .await;
    // The console's health view shows both tiers.
    let answer = crate::common::http::get(server.console, "/api/v1/health", "", &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let health = answer.json();
    assert_eq!(health["sealing"]["enabled"], true, "{health}");
    assert!(
        health["sealing"]["columnar_bytes"].as_f64().unwrap() > 0.0,
        "{health}"
    );
    assert!(
        health["sealing"]["partitions_sealed"].as_f64().unwrap() >= 1.0,
        "{health}"
    );

    // A late row for the sealed hour lands in its columnar partition and reaches the tail.
    let late = crate::common::push(&mut client, vec![vec![record_at("after-the-seal", age)]])
        .await
        .unwrap();
    assert_eq!(late.accepted, 1);
    let message = tokio::time::timeout(DEADLINE, tail.message())
        .await
        .expect("the tail brings the row that arrived after the seal")
        .unwrap()
        .unwrap();
    assert_eq!(message.records.len(), 1);
    assert_eq!(message.records[0].message, "after-the-seal");
    let from = prost_types::Timestamp {
        seconds: yesterdays_hour().timestamp(),
        nanos: 0,
    };
    let filter = loghaul::proto::v1::Filter {
        from: Some(from),
        ..Default::default()
    };
    let found = query_all(&mut query, "", filter, 200).await.unwrap();
    assert_eq!(
        found.len(),
        501,
        "every record is read back from the sealed hour"
    );
    assert!(
        server
            .transcript()
            .iter()
            .any(|line| line.contains("sealing past hours")),
        "the start-up log says sealing is on"
    );
    drop(server);
    drop(db);
}
