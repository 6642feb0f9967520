//! Citus: a database with the extension gets its tables distributed by tenant, rows spread over
//! the workers, a tenant's reads go to one shard, and retention works shard by shard.
//!
//! These need the test server to be a Citus coordinator (`.ci/citus-check` starts one); on a plain
//! server they say SKIPPED, and `LOGHAUL_REQUIRE_CITUS=1` makes that a failure instead.

use std::time::Duration;

use chrono::{Days, TimeDelta, Utc};
use loghaul::proto::v1::Filter;
use loghaul::retention::{prepare, run_once, RetentionConfig};
use loghaul::storage::postgres::{partition_name, Flavor};
use loghaul::storage::Store;
use sqlx::{Connection, PgConnection};

use crate::common::{config, migrated, push_as, query_all, record, Backend, TestDb, TestServer};

const TENANTS: usize = 8;

/// A fresh database on a Citus cluster; `None` (after a loud line) when the server is plain.
async fn citus_db(test: &str) -> Option<TestDb> {
    let db = TestDb::create(Backend::Postgres, test).await?;
    if db.is_citus() {
        return Some(db);
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "*** SKIPPED {test}: the PostgreSQL server is not a Citus coordinator ***"
    );
    None
}

fn keys() -> String {
    (0..TENANTS)
        .map(|tenant| format!("key-{tenant}=tenant-{tenant}"))
        .collect::<Vec<_>>()
        .join(",")
}

async fn scalar<T>(conn: &mut PgConnection, sql: &str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    sqlx::query_scalar(sql).fetch_one(conn).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_are_distributed_by_tenant_and_reads_go_to_one_shard() {
    let Some(db) = citus_db("citus_distributed").await else {
        return;
    };
    let mut settings = config(&db);
    settings.auth.api_keys = Some(keys().parse().unwrap());
    let server = TestServer::start(settings).await;
    let mut ingest = server.client().await;
    for tenant in 0..TENANTS {
        let chunk = (0..50).map(|n| record(format!("t{tenant}-{n}"))).collect();
        let pushed = push_as(&mut ingest, &format!("key-{tenant}"), vec![chunk])
            .await
            .unwrap();
        assert_eq!(pushed.accepted, 50);
    }

    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let today = partition_name(Utc::now().date_naive());
    for table in ["logs", "producer_chunks", today.as_str()] {
        let column: String = scalar(
            &mut conn,
            &format!(
                "SELECT column_to_column_name(logicalrelid, partkey) FROM pg_dist_partition \
                 WHERE logicalrelid = '{table}'::regclass"
            ),
        )
        .await;
        assert_eq!(column, "tenant", "{table} is distributed by tenant");
    }
    let colocations: i64 = scalar(
        &mut conn,
        "SELECT count(DISTINCT colocationid) FROM pg_dist_partition \
         WHERE logicalrelid IN ('logs'::regclass, 'producer_chunks'::regclass)",
    )
    .await;
    assert_eq!(colocations, 1, "logs and producer_chunks are colocated");
    assert_eq!(
        scalar::<i64>(&mut conn, "SELECT count(*) FROM logs_default").await,
        0
    );
    // Eight tenants hash to shards on both workers (32 shards over two).
    let workers: i64 = scalar(
        &mut conn,
        &format!(
            "SELECT count(DISTINCT p.nodeport) \
             FROM run_command_on_shards('{today}', 'SELECT count(*) FROM %s') r \
             JOIN pg_dist_shard_placement p USING (shardid) WHERE r.result::bigint > 0"
        ),
    )
    .await;
    assert_eq!(workers, 2, "the rows are on both workers");
    assert_eq!(db.count().await, (TENANTS * 50) as i64);

    // A read of one tenant, shaped as the service's, is planned onto one shard.
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT id, ts, message FROM logs WHERE tenant = 'tenant-3' \
         AND ts >= now() - interval '1 hour' ORDER BY ts DESC, id DESC LIMIT 100",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(
        plan.iter().any(|line| line.contains("Task Count: 1")),
        "{plan:#?}"
    );
    let mut query = server.query_client().await;
    let found = query_all(&mut query, "key-3", Filter::default(), 20)
        .await
        .unwrap();
    assert_eq!(found.len(), 50);
    assert!(found.iter().all(|stored| stored.message.starts_with("t3-")));

    // A second start finds the tables distributed and changes nothing.
    server.stop().await;
    let store = migrated(&db).await;
    match &store {
        Store::Postgres(store) => assert_eq!(store.flavor(), Flavor::Citus),
        Store::Sqlite(_) => unreachable!("a PostgreSQL test"),
    }
    store.close().await;
    assert_eq!(db.count().await, (TENANTS * 50) as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_summarizes_and_prunes_shard_by_shard() {
    let Some(db) = citus_db("citus_retention").await else {
        return;
    };
    let store = migrated(&db).await;
    let config = RetentionConfig {
        keep: Some(TimeDelta::days(2)),
        interval: Duration::from_secs(60),
        dedup_window: Duration::from_secs(86400),
    };
    prepare(&store, &config).await.unwrap();
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    // Rows too old for any partition sit in the default one, over every tenant's shard: more per
    // shard than one delete takes, so the run deletes in rounds.
    sqlx::query(
        "INSERT INTO logs (tenant, ts, severity, service, message) \
         SELECT 'tenant-' || (g % 8), now() - interval '20 days', 9, 'older', 'older ' || g \
         FROM generate_series(1, 48000) g",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    // Recent rows leave BRIN ranges to summarize, and chunk keys past the dedup window wait.
    sqlx::query(
        "INSERT INTO logs (tenant, ts, severity, service, message) \
         SELECT 'tenant-' || (g % 8), now() - (g % 60) * interval '1 second', 9, 'svc', \
                repeat('x', 200) || g \
         FROM generate_series(1, 60000) g",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO producer_chunks (tenant, producer_id, sequence, stored_at) \
         SELECT 'tenant-' || (g % 8), '\\x01'::bytea, g, now() - interval '3 days' \
         FROM generate_series(1, 12000) g",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let report = run_once(&store, &config).await.unwrap();
    assert_eq!(report.rows_deleted, 48000, "{report:?}");
    assert!(report.ranges_summarized > 0, "{report:?}");
    assert_eq!(
        scalar::<i64>(
            &mut conn,
            "SELECT count(*) FROM logs WHERE service = 'older'"
        )
        .await,
        0
    );
    assert_eq!(db.count().await, 60000, "the recent rows stay");
    assert_eq!(report.chunk_keys_pruned, 12000, "{report:?}");
    assert_eq!(
        scalar::<i64>(&mut conn, "SELECT count(*) FROM producer_chunks").await,
        0,
        "keys past the dedup window are pruned"
    );
    let today = partition_name(Utc::now().date_naive());
    let ahead = partition_name(Utc::now().date_naive() + Days::new(3));
    let distributed: i64 = scalar(
        &mut conn,
        &format!(
            "SELECT count(*) FROM pg_dist_partition \
             WHERE logicalrelid IN ('{today}'::regclass, '{ahead}'::regclass)"
        ),
    )
    .await;
    assert_eq!(distributed, 2, "partitions made ahead are distributed too");
    let left: i64 = scalar(
        &mut conn,
        &format!(
            "SELECT coalesce(sum(result::bigint), 0)::bigint FROM run_command_on_shards('{today}', \
             $$SELECT coalesce(sum(brin_summarize_new_values(indexrelid)), 0) FROM pg_index \
               WHERE indrelid = '%s'::regclass$$)"
        ),
    )
    .await;
    assert_eq!(left, 0, "no BRIN range was left unsummarized");
    store.close().await;
}
