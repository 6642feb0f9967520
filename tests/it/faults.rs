//! Faults injected into real processes and a real PostgreSQL: a server killed with SIGKILL, a
//! store that vanishes and comes back, database backends terminated under load. The promise under
//! test: a record whose stream was acknowledged is stored.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common;
use crate::common::process::Process;
use crate::common::proxy::Proxy;
use crate::common::{http_get, push, record, wait_until, Backend, TestDb, TestServer, DEADLINE};
use loghaul::proto::v1::log_ingest_client::LogIngestClient;
use sqlx::Connection;
use tonic::Code;

/// Streams pushing uniquely numbered records until stopped, remembering what was acknowledged.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<HashSet<String>>>,
    failures: Arc<Mutex<HashMap<Code, usize>>>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    /// `workers` concurrent clients against `endpoint`, each sending streams of 5 chunks of 50.
    fn start(endpoint: String, workers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(HashSet::new()));
        let failures = Arc::new(Mutex::new(HashMap::new()));
        let workers = (0..workers)
            .map(|worker| {
                let (stop, acked, failures) = (stop.clone(), acked.clone(), failures.clone());
                let endpoint = endpoint.clone();
                tokio::spawn(async move {
                    let mut stream = 0;
                    while !stop.load(Ordering::Relaxed) {
                        stream += 1;
                        let messages: Vec<Vec<String>> = (0..5)
                            .map(|chunk| {
                                (0..50)
                                    .map(|n| format!("w{worker}-s{stream}-c{chunk}-n{n}"))
                                    .collect()
                            })
                            .collect();
                        let chunks = messages
                            .iter()
                            .map(|chunk| chunk.iter().map(record).collect())
                            .collect();
                        // A refused connection is no stream: counting it would make "the kill
                        // cut open streams" true of any dead server.
                        let Ok(mut client) = LogIngestClient::connect(endpoint.clone()).await
                        else {
                            // A client's pause before it tries again.
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        };
                        match push(&mut client, chunks).await {
                            Ok(response) => {
                                assert_eq!(response.rejected, 0, "no record is refused");
                                assert_eq!(response.accepted, 250);
                                acked.lock().unwrap().extend(messages.into_iter().flatten());
                            }
                            Err(status) => {
                                *failures.lock().unwrap().entry(status.code()).or_default() += 1;
                                // A client's pause before it tries again.
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            acked,
            failures,
            workers,
        }
    }

    /// Records acknowledged so far.
    fn acked_count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Streams that failed with `code` so far.
    fn failed_with(&self, code: Code) -> usize {
        self.failures
            .lock()
            .unwrap()
            .get(&code)
            .copied()
            .unwrap_or(0)
    }

    /// Stops every worker and returns what was acknowledged and how opened streams failed.
    async fn finish(self) -> (HashSet<String>, HashMap<Code, usize>) {
        self.stop.store(true, Ordering::Relaxed);
        for worker in self.workers {
            worker.await.expect("a load worker does not panic");
        }
        let acked = std::mem::take(&mut *self.acked.lock().unwrap());
        let failures = std::mem::take(&mut *self.failures.lock().unwrap());
        (acked, failures)
    }
}

/// How many times each message is stored.
async fn stored_copies(db: &TestDb) -> HashMap<String, usize> {
    stored_copies_at(db.backend, &db.url).await
}

async fn stored_copies_at(backend: Backend, url: &str) -> HashMap<String, usize> {
    let sql = "SELECT message FROM logs";
    let messages: Vec<String> = match backend {
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
            sqlx::query_scalar(sql).fetch_all(&mut conn).await.unwrap()
        }
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::query_scalar(sql).fetch_all(&mut conn).await.unwrap()
        }
    };
    let mut copies = HashMap::new();
    for message in messages {
        *copies.entry(message).or_default() += 1;
    }
    copies
}

/// Fails the test naming the first acknowledged records missing from the table.
fn assert_all_stored(acked: &HashSet<String>, copies: &HashMap<String, usize>) {
    let mut lost: Vec<&String> = acked
        .iter()
        .filter(|message| !copies.contains_key(*message))
        .collect();
    lost.sort();
    assert!(
        lost.is_empty(),
        "{} acknowledged records are missing, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
}

async fn sigkill_under_load_loses_no_acknowledged_record(db: &TestDb) {
    let mut server = Process::serve(&db.url, &[]);
    let load = Load::start(format!("http://{}", server.grpc), 16);
    wait_until("some streams to be acknowledged", DEADLINE, async || {
        load.acked_count() >= 5_000
    })
    .await;
    server.signal("KILL");
    let status = server.wait(Duration::from_secs(10));
    assert!(!status.success(), "SIGKILL ends the process: {status:?}");
    let (acked, failures) = load.finish().await;

    let copies = stored_copies(db).await;
    assert_all_stored(&acked, &copies);
    // Without producer ids a record is written by one attempt only: a stream cut by the kill is
    // not retried by this client, so nothing may appear twice either.
    let doubled = copies.values().filter(|&&count| count > 1).count();
    assert_eq!(doubled, 0, "no record is stored twice");
    assert!(
        failures.values().sum::<usize>() > 0,
        "the kill cut open streams"
    );
    // The store opens cleanly after the crash (SQLite replays its WAL) and serves again.
    let restarted = Process::serve(&db.url, &[]);
    let mut client = LogIngestClient::connect(format!("http://{}", restarted.grpc))
        .await
        .unwrap();
    let response = push(&mut client, vec![vec![record("after the crash")]])
        .await
        .unwrap();
    assert_eq!(response.accepted, 1);
}
on_both_backends!(sigkill, sigkill_under_load_loses_no_acknowledged_record);

/// The service reaches PostgreSQL through a proxy that the test cuts for a few seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_turns_readiness_off_answers_unavailable_and_recovers() {
    let Some(db) = TestDb::create(Backend::Postgres, "store_outage").await else {
        return;
    };
    let (base, database) = db.url.rsplit_once('/').unwrap();
    let (user, host) = base
        .strip_prefix("postgres://")
        .and_then(|rest| rest.split_once('@'))
        .unwrap();
    // The proxy leads to whichever server TestDb found, not an assumed port.
    let upstream = std::net::ToSocketAddrs::to_socket_addrs(host)
        .unwrap()
        .next()
        .unwrap();
    let proxy = Proxy::start(upstream).await;
    // A process of its own, so the store_up gauge is this server's alone.
    let url = format!("postgres://{user}@{}/{database}", proxy.addr);
    let mut server = Process::serve(&url, &["--store-retry-timeout", "2s"]);
    let load = Load::start(format!("http://{}", server.grpc), 4);
    wait_until("load to flow", DEADLINE, async || {
        load.acked_count() >= 2_000
    })
    .await;

    proxy.cut();
    wait_until("/readyz to turn false", DEADLINE, async || {
        matches!(http_get(server.http, "/readyz").await, Ok((503, _)))
    })
    .await;
    // Loki's probe on the HTTP listener, which Grafana's data source reads, says the same.
    let (status, body) = http_get(server.http_ingest, "/ready").await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("database"), "{body}");
    // The outage lasts past the retry timeout: streams give up.
    wait_until("a stream to end with UNAVAILABLE", DEADLINE, async || {
        load.failed_with(Code::Unavailable) > 0
    })
    .await;
    let acked_during_outage = load.acked_count();
    // A second during which nothing at all may be acknowledged.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        load.acked_count(),
        acked_during_outage,
        "nothing is acknowledged while the store is unreachable"
    );
    let (_, metrics) = http_get(server.http, "/metrics").await.unwrap();
    assert!(
        metrics.contains("loghaul_store_up 0"),
        "the store_up gauge shows the outage"
    );

    proxy.restore().await;
    wait_until("/readyz to turn true again", DEADLINE, async || {
        matches!(http_get(server.http, "/readyz").await, Ok((200, _)))
    })
    .await;
    assert!(matches!(
        http_get(server.http_ingest, "/ready").await,
        Ok((200, body)) if body.trim() == "ready"
    ));
    let recovered_from = load.acked_count();
    wait_until(
        "throughput to recover without a restart",
        DEADLINE,
        async || load.acked_count() >= recovered_from + 2_000,
    )
    .await;
    let (acked, failures) = load.finish().await;
    assert!(
        failures.get(&Code::Unavailable).copied().unwrap_or(0) > 0,
        "streams that could not commit end with UNAVAILABLE: {failures:?}"
    );
    assert_eq!(
        failures.keys().copied().collect::<Vec<_>>(),
        vec![Code::Unavailable],
        "UNAVAILABLE is the only failure"
    );
    server.signal("TERM");
    assert!(server.wait(Duration::from_secs(30)).success());
    assert_all_stored(&acked, &stored_copies(&db).await);
}

/// Every backend of the service's database is terminated, repeatedly, while streams push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_database_backends_are_retried_without_losing_acknowledged_records() {
    let Some(db) = TestDb::create(Backend::Postgres, "terminated_backends").await else {
        return;
    };
    let server = TestServer::start(common::config(&db)).await;
    let load = Load::start(format!("http://{}", server.grpc), 8);
    let mut admin = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let mut terminated = 0;
    for _ in 0..5 {
        let before = load.acked_count();
        wait_until("streams to keep being acknowledged", DEADLINE, async || {
            load.acked_count() >= before + 1_000
        })
        .await;
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_all(&mut admin)
        .await
        .unwrap();
        terminated += killed.len();
    }
    let before = load.acked_count();
    wait_until("throughput to recover", DEADLINE, async || {
        load.acked_count() >= before + 1_000
    })
    .await;
    let (acked, failures) = load.finish().await;
    assert!(terminated >= 5, "backends were terminated ({terminated})");
    assert!(
        failures.keys().all(|code| *code == Code::Unavailable),
        "a stream fails only with UNAVAILABLE: {failures:?}"
    );
    server.stop().await;
    assert_all_stored(&acked, &stored_copies(&db).await);
}

/// A small tmpfs mounted for one test and unmounted on drop; `None` where mounting is not allowed.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        mounted.then_some(SmallDisk { dir })
    }

    fn resize(&self, size: &str) {
        let status = std::process::Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.dir.path())
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// SQLite on a disk that fills up: streams get UNAVAILABLE naming the cause, the service stays up,
/// and once there is room again it stores without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_a_clear_unavailable_and_recovers_when_space_returns() {
    let Some(disk) = SmallDisk::mount("4m") else {
        assert!(
            std::env::var("LOGHAUL_REQUIRE_FAULTS").as_deref() != Ok("1"),
            "LOGHAUL_REQUIRE_FAULTS=1 but a tmpfs cannot be mounted (needs root)"
        );
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "*** SKIPPED a_full_disk_is_a_clear_unavailable_and_recovers_when_space_returns: mounting a tmpfs needs root ***"
        );
        return;
    };
    let url = format!("sqlite://{}", disk.dir.path().join("logs.db").display());
    let mut server = Process::serve(&url, &["--store-retry-timeout", "1s"]);
    let mut client = LogIngestClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    let mut acked = HashSet::new();
    let mut refusal = None;
    for stream in 0..400 {
        let messages: Vec<String> = (0..200)
            .map(|n| format!("s{stream}-n{n}-{}", "x".repeat(200)))
            .collect();
        match push(&mut client, vec![messages.iter().map(record).collect()]).await {
            Ok(response) => {
                assert_eq!(response.accepted, 200);
                acked.extend(messages);
            }
            Err(status) => {
                refusal = Some(status);
                break;
            }
        }
    }
    let status = refusal.expect("4 MiB fill up before 400 streams of 200 records");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("full"),
        "the status names the cause: {:?}",
        status.message()
    );
    // The process is alive and answers its probes.
    assert!(http_get(server.http, "/healthz").await.is_ok());

    disk.resize("64m");
    wait_until(
        "the service to store again once space returns",
        DEADLINE,
        async || match push(&mut client, vec![vec![record("room again")]]).await {
            Ok(response) => {
                assert_eq!(response.accepted, 1);
                true
            }
            Err(_) => false,
        },
    )
    .await;
    server.signal("TERM");
    assert!(server.wait(Duration::from_secs(30)).success());
    assert!(
        !server.logs().iter().any(|line| line.contains("panicked")),
        "no panic"
    );
    let copies = stored_copies_at(Backend::Sqlite, &url).await;
    assert_all_stored(&acked, &copies);
    assert!(copies.contains_key("room again"));
}

/// The same full disk for chunks stored once per (producer, sequence): a chunk is acknowledged
/// only once stored, its key is claimed only with its records, and the chunk refused when the disk
/// filled, sent again with the same key once there is room, is stored exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deduplicated_chunks_on_a_full_disk_are_stored_once_each_when_space_returns() {
    use loghaul::proto::v1::PushRequest;
    let Some(disk) = SmallDisk::mount("4m") else {
        assert!(
            std::env::var("LOGHAUL_REQUIRE_FAULTS").as_deref() != Ok("1"),
            "LOGHAUL_REQUIRE_FAULTS=1 but a tmpfs cannot be mounted (needs root)"
        );
        eprintln!(
            "*** SKIPPED deduplicated_chunks_on_a_full_disk: mounting a tmpfs needs root ***"
        );
        return;
    };
    let url = format!("sqlite://{}", disk.dir.path().join("logs.db").display());
    let mut server = Process::serve(&url, &["--store-retry-timeout", "1s"]);
    let mut client = LogIngestClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    let keyed = |sequence: u64| {
        let messages: Vec<String> = (0..200)
            .map(|n| format!("k{sequence}-n{n}-{}", "x".repeat(200)))
            .collect();
        let request = PushRequest {
            records: messages.iter().map(record).collect(),
            producer_id: Some(b"full-disk-producer".to_vec()),
            sequence: Some(sequence),
        };
        (messages, request)
    };
    let mut acked = HashSet::new();
    let mut refused = None;
    for sequence in 0..400 {
        let (messages, request) = keyed(sequence);
        match client.push(tokio_stream::iter([request])).await {
            Ok(response) => {
                assert_eq!(response.into_inner().accepted, 200);
                acked.extend(messages);
            }
            Err(status) => {
                assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                refused = Some((sequence, messages));
                break;
            }
        }
    }
    let (sequence, messages) = refused.expect("4 MiB fill up before 400 chunks of 200 records");
    disk.resize("64m");
    // The refused chunk again, under its key, until it is stored; then once more, as a client
    // whose answer was lost would: that copy is a duplicate, not stored again.
    wait_until("the refused chunk to be stored", DEADLINE, async || {
        client
            .push(tokio_stream::iter([keyed(sequence).1]))
            .await
            .is_ok()
    })
    .await;
    let again = client
        .push(tokio_stream::iter([keyed(sequence).1]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.duplicate_records, 200);
    acked.extend(messages);
    server.signal("TERM");
    assert!(server.wait(Duration::from_secs(30)).success());
    let copies = stored_copies_at(Backend::Sqlite, &url).await;
    assert_all_stored(&acked, &copies);
    assert!(
        copies.values().all(|&count| count == 1),
        "every record stored once"
    );
    assert_eq!(
        copies.len(),
        acked.len(),
        "nothing stored that was not acknowledged"
    );
}
