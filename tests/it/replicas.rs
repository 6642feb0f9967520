//! Replicas: three `loghaul serve` processes on one PostgreSQL database. A balanced client spreads
//! its streams over them and loses nothing when one dies; a chunk retried on another replica is
//! stored once; what one replica stored, the others' queries and console show.

use std::time::Duration;

use crate::common::http::get;
use crate::common::process::Process;
use crate::common::{metric_sum, push_paced, record, wait_until, Backend, TestDb};
use loghaul::client::{Client, FullPolicy, ShipperConfig};
use loghaul::proto::v1::log_ingest_client::LogIngestClient;
use loghaul::proto::v1::{LogRecord, PushRequest};

const KEYS: &str = "key-a=team-a";

fn replicas(db: &TestDb) -> Vec<Process> {
    (0..3)
        .map(|_| Process::serve(&db.url, &["--api-keys", KEYS]))
        .collect()
}

async fn committed(replica: &Process) -> f64 {
    metric_sum(&replica.metrics().await, "loghaul_records_committed_total")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balanced_shipper_spreads_over_three_replicas_and_loses_nothing_when_one_dies() {
    const TOTAL: usize = 40_000;
    let Some(db) = TestDb::create(Backend::Postgres, "replicas_balanced").await else {
        return;
    };
    let mut servers = replicas(&db);
    let endpoints: Vec<String> = servers
        .iter()
        .map(|server| format!("http://{}", server.grpc))
        .collect();
    let shipper = Client::builder_balanced(endpoints)
        .api_key("key-a")
        .build()
        .unwrap()
        .shipper(ShipperConfig {
            chunk_records: 200,
            linger: Duration::from_millis(20),
            rotate_chunks: 2,
            rotate_after: Duration::from_millis(100),
            first_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(500),
            when_full: FullPolicy::Block(Duration::MAX),
            ..ShipperConfig::default()
        })
        .unwrap();
    let pusher = push_paced(&shipper, TOTAL);
    // Every replica gets streams before one of them dies.
    wait_until(
        "each replica to commit records",
        Duration::from_secs(60),
        async || {
            for server in &servers {
                if committed(server).await < 1.0 {
                    return false;
                }
            }
            true
        },
    )
    .await;
    let victim = servers.remove(1);
    victim.signal("KILL");
    drop(victim);
    let killed_at = shipper.stats();
    let survivors_at_kill = [committed(&servers[0]).await, committed(&servers[1]).await];

    tokio::task::spawn_blocking(move || pusher.join().unwrap())
        .await
        .unwrap();
    let stats = shipper.close_async(Duration::from_secs(120)).await;
    assert!(
        killed_at.acknowledged < TOTAL as u64,
        "the kill happened mid-run: {killed_at:?}"
    );
    assert_eq!(stats.failed, 0, "{stats:?} {:?}", shipper.last_error());
    assert_eq!(stats.acknowledged, TOTAL as u64, "{stats:?}");
    assert_eq!(db.count().await, TOTAL as i64, "{stats:?}");
    assert_eq!(
        db.query_scalar("SELECT count(DISTINCT message) FROM logs")
            .await,
        TOTAL as i64,
        "no record was stored twice"
    );
    for (server, at_kill) in servers.iter().zip(survivors_at_kill) {
        let now = committed(server).await;
        assert!(
            now > at_kill,
            "each survivor took streams over: {at_kill} -> {now}"
        );
    }
    stop(servers);
}

fn keyed(producer: &[u8], sequence: u64, records: Vec<LogRecord>) -> PushRequest {
    PushRequest {
        records,
        producer_id: Some(producer.to_vec()),
        sequence: Some(sequence),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_retried_on_another_replica_is_stored_once_and_every_replica_reads_it() {
    let Some(db) = TestDb::create(Backend::Postgres, "replicas_dedup").await else {
        return;
    };
    let servers = replicas(&db);
    let chunk = || {
        (0..25)
            .map(|n| record(format!("keyed-{n}")))
            .collect::<Vec<_>>()
    };
    let producer = [7u8; 16];
    for (attempt, server) in servers.iter().enumerate() {
        let mut client = LogIngestClient::connect(format!("http://{}", server.grpc))
            .await
            .unwrap();
        let request = tokio_stream::iter([keyed(&producer, 41, chunk())]);
        let answer = client
            .push(crate::common::with_key("key-a", request))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.accepted, 25, "{answer:?}");
        let duplicates = if attempt == 0 { 0 } else { 25 };
        assert_eq!(answer.duplicate_records, duplicates, "{answer:?}");
    }
    assert_eq!(db.count().await, 25);
    // Each replica's console finds what the first one stored.
    for server in &servers {
        let answer = get(
            server.console,
            "/api/v1/logs?contains=keyed-&page_size=100",
            "key-a",
            &[],
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let found = answer.json()["records"].as_array().unwrap().len();
        assert_eq!(found, 25, "{}", answer.body);
    }
    stop(servers);
}

/// SIGTERM to each, and a clean exit.
fn stop(servers: Vec<Process>) {
    for mut server in servers {
        server.signal("TERM");
        assert!(server.wait(Duration::from_secs(30)).success());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_spreads_its_streams_over_replicas_and_tenants() {
    let Some(db) = TestDb::create(Backend::Postgres, "replicas_bench").await else {
        return;
    };
    let url = db.url.clone();
    let bench = tokio::task::spawn_blocking(move || {
        std::process::Command::new(crate::common::process::BINARY)
            .args(["bench", "--duration", "2s", "--streams", "6", "--json"])
            .args([
                "--records-per-chunk",
                "100",
                "--replicas",
                "3",
                "--tenants",
                "3",
            ])
            .args(["--database-url", &url])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    crate::common::process::assert_success(&bench);
    let stdout = String::from_utf8_lossy(&bench.stdout);
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(report["settings"]["replicas"], 3, "{report}");
    let run = &report["runs"][0];
    assert_eq!(run["verified"], true, "{report}");
    let tenants = db
        .query_scalar("SELECT count(DISTINCT tenant) FROM logs WHERE tenant LIKE 'bench-%'")
        .await;
    assert_eq!(tenants, 3, "each tenant's streams stored: {report}");

    // Replicas share a database: on the embedded SQLite file the command refuses them.
    let refused = std::process::Command::new(crate::common::process::BINARY)
        .args(["bench", "--duration", "1s", "--replicas", "2"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("give a PostgreSQL --database-url"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
