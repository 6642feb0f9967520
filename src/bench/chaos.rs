//! `loghaul chaos`: a load-and-faults soak. Client shippers push uniquely numbered records into a
//! server child process while the server is killed (SIGKILL), stopped (SIGTERM) and restarted on
//! the same port, and (PostgreSQL) its database backends are terminated. At the end it counts
//! what was acknowledged, stored, stored twice and lost; any duplicate or loss fails the run.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::Connection;

use super::server_process::ServerProcess;
use super::BenchError;
use crate::client::{Client, FullPolicy, ShipperConfig, ShipperStats};
use crate::config::HumanDuration;
use crate::proto::v1::LogRecord;
use crate::storage::Backend;

/// A fault the soak injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// SIGKILL the server, then start it again on the same port.
    Kill,
    /// SIGTERM the server (a graceful drain), then start it again.
    Term,
    /// Terminate every PostgreSQL backend of the service's database (PostgreSQL only).
    DbTerminate,
}

/// Options of `loghaul chaos`.
#[derive(Clone, Debug, clap::Args)]
pub struct ChaosArgs {
    /// Database for the server. Default: a fresh SQLite file in a temporary directory.
    #[arg(long, env = "LOGHAUL_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// How long to push and inject faults.
    #[arg(long, default_value = "60s")]
    pub duration: HumanDuration,
    /// Concurrent shippers (producers), each with its own producer id.
    #[arg(long, default_value_t = 4)]
    pub producers: usize,
    /// Records per second offered across all producers.
    #[arg(long, default_value_t = 20_000)]
    pub rate: u64,
    /// Time between two faults.
    #[arg(long, default_value = "5s")]
    pub fault_every: HumanDuration,
    /// Faults to inject, in turn. Default: kill, term, and db-terminate on PostgreSQL.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub faults: Vec<Fault>,
    /// Extra argument for the server (repeatable): --server-arg=--shards=4.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
    /// Print the report as one JSON object on the last line.
    #[arg(long)]
    pub json: bool,
}

/// What a soak ends with.
#[derive(Debug, Serialize)]
pub struct ChaosReport {
    /// Records the producers handed to their shippers.
    pub pushed: u64,
    /// Records the shippers refused (buffer full while the server was down).
    pub dropped: u64,
    /// Records acknowledged as stored.
    pub acknowledged: u64,
    /// Records the shippers gave up on (never acknowledged).
    pub given_up: u64,
    /// Chunks the shippers sent again.
    pub retried_chunks: u64,
    /// Acknowledged retries the server recognised as already stored.
    pub deduplicated: u64,
    /// Rows of this run in the table.
    pub stored: u64,
    /// Rows beyond the first copy of a record.
    pub duplicated: u64,
    /// Pushed records missing from the table (acknowledged ones when `given_up` is 0).
    pub lost: u64,
    /// Faults injected, by kind.
    pub faults: HashMap<String, u64>,
    /// Seconds the soak ran, faults and final flush included.
    pub elapsed_sec: f64,
}

impl ChaosReport {
    /// True when nothing was lost or duplicated.
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.duplicated == 0
    }
}

/// The server under test, restarted in place after each fault.
struct Target {
    listen: SocketAddr,
    database_url: String,
    extra: Vec<String>,
    process: Option<ServerProcess>,
}

impl Target {
    fn start(&mut self) -> Result<(), BenchError> {
        // The port of the killed process can take a moment to be free again.
        let mut attempts = 0;
        loop {
            match ServerProcess::start_listening(
                &self.listen.to_string(),
                &self.database_url,
                &self.extra,
            ) {
                Ok(process) => {
                    self.process = Some(process);
                    return Ok(());
                }
                Err(_) if attempts < 20 => {
                    attempts += 1;
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(err) => return Err(err.into()),
            }
        }
    }

    async fn inject(&mut self, fault: Fault) -> Result<(), BenchError> {
        match fault {
            Fault::Kill => {
                if let Some(process) = self.process.take() {
                    process.kill()?;
                }
                self.start()
            }
            Fault::Term => {
                if let Some(process) = self.process.take() {
                    process.stop()?;
                }
                self.start()
            }
            Fault::DbTerminate => {
                let mut conn = sqlx::PgConnection::connect(&self.database_url).await?;
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                )
                .execute(&mut conn)
                .await?;
                Ok(())
            }
        }
    }
}

/// Runs the soak and prints the report; the caller turns [`ChaosReport::clean`] into the exit code.
pub async fn run(args: ChaosArgs) -> Result<ChaosReport, BenchError> {
    if args.producers == 0 || args.rate == 0 {
        return Err(BenchError::Usage(
            "--producers and --rate must be positive".into(),
        ));
    }
    let scratch = tempfile::tempdir()?;
    let database_url = args
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", scratch.path().join("chaos.db").display()));
    let postgres = Backend::is_postgres(&database_url);
    let faults = if args.faults.is_empty() {
        let mut all = vec![Fault::Kill, Fault::Term];
        if postgres {
            all.push(Fault::DbTerminate);
        }
        all
    } else {
        args.faults.clone()
    };
    if faults.contains(&Fault::DbTerminate) && !postgres {
        return Err(BenchError::Usage(
            "db-terminate needs a PostgreSQL --database-url".into(),
        ));
    }
    // A fixed port, so the shippers reconnect to the restarted server where the old one was.
    let listen = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let mut target = Target {
        listen,
        database_url: database_url.clone(),
        extra: args.server_args.clone(),
        process: None,
    };
    target.start()?;

    let run_id = format!("{:08x}", fastrand::u32(..));
    let client = Client::builder(format!("http://{listen}"))
        .build()
        .map_err(|err| BenchError::Usage(err.to_string()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut producers = Vec::new();
    for producer in 0..args.producers {
        let shipper = client
            .shipper(ShipperConfig {
                chunk_records: 500,
                // Enough to ride out a restart; beyond it a push waits, then drops and counts.
                buffer_records: 200_000,
                when_full: FullPolicy::Block(Duration::from_millis(100)),
                max_backoff: Duration::from_secs(2),
                service: Some("chaos".into()),
                ..ShipperConfig::default()
            })
            .map_err(|err| BenchError::Usage(err.to_string()))?;
        let per_producer = (args.rate / args.producers as u64).max(1);
        let (stop, run_id) = (Arc::clone(&stop), run_id.clone());
        producers.push(std::thread::spawn(move || {
            let mut pushed_ok = Vec::new();
            let mut sequence: u64 = 0;
            let began = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                // Pace in slices of 100 records to hold the offered rate.
                let due = Duration::from_secs_f64(sequence as f64 / per_producer as f64);
                if let Some(wait) = due.checked_sub(began.elapsed()) {
                    std::thread::sleep(wait);
                }
                for _ in 0..100 {
                    let record = LogRecord {
                        severity: 9,
                        message: format!("chaos {run_id} p{producer} n{sequence}"),
                        ..LogRecord::default()
                    };
                    if shipper.push(record).is_ok() {
                        pushed_ok.push(sequence);
                    }
                    sequence += 1;
                }
            }
            let stats = shipper.close(Duration::from_secs(120));
            (producer, pushed_ok, stats)
        }));
    }

    let mut injected: HashMap<String, u64> = HashMap::new();
    let deadline = started + args.duration.0;
    let mut turn = 0;
    loop {
        let next = Instant::now() + args.fault_every.0;
        if next >= deadline {
            tokio::time::sleep(deadline.saturating_duration_since(Instant::now())).await;
            break;
        }
        tokio::time::sleep_until(next.into()).await;
        let fault = faults[turn % faults.len()];
        turn += 1;
        target.inject(fault).await?;
        let name = serde_json::to_value(fault).expect("a fault serializes");
        let name = name.as_str().unwrap_or_default().to_owned();
        eprintln!(
            "[{:>4.0}s] injected {name}",
            started.elapsed().as_secs_f64()
        );
        *injected.entry(name).or_default() += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let finished = tokio::task::spawn_blocking(move || {
        producers
            .into_iter()
            .map(|producer| producer.join().expect("a producer does not panic"))
            .collect::<Vec<_>>()
    })
    .await
    .expect("the producers are joined");
    let elapsed = started.elapsed();
    if let Some(process) = target.process.take() {
        process.stop()?;
    }

    let copies = stored_copies(&database_url, &run_id).await?;
    let mut totals = ShipperStats::default();
    let mut lost = 0;
    for (producer, pushed_ok, stats) in &finished {
        for sequence in pushed_ok {
            if !copies.contains_key(&(*producer, *sequence)) {
                lost += 1;
            }
        }
        totals.pushed += stats.pushed;
        totals.dropped += stats.dropped;
        totals.acknowledged += stats.acknowledged;
        totals.failed += stats.failed;
        totals.retries += stats.retries;
        totals.duplicates += stats.duplicates;
    }
    let stored: u64 = copies.values().sum();
    let report = ChaosReport {
        pushed: totals.pushed,
        dropped: totals.dropped,
        acknowledged: totals.acknowledged,
        given_up: totals.failed,
        retried_chunks: totals.retries,
        deduplicated: totals.duplicates,
        stored,
        duplicated: stored - copies.len() as u64,
        lost,
        faults: injected,
        elapsed_sec: elapsed.as_secs_f64(),
    };
    print_report(&report, args.json);
    Ok(report)
}

/// How many rows each (producer, sequence) of this run has.
async fn stored_copies(
    database_url: &str,
    run_id: &str,
) -> Result<HashMap<(usize, u64), u64>, BenchError> {
    let sql = "SELECT message FROM logs WHERE message LIKE $1";
    let pattern = format!("chaos {run_id} %");
    let messages: Vec<String> = if Backend::is_postgres(database_url) {
        let mut conn = sqlx::PgConnection::connect(database_url).await?;
        sqlx::query_scalar(sql)
            .bind(pattern)
            .fetch_all(&mut conn)
            .await?
    } else {
        let mut conn = sqlx::SqliteConnection::connect(database_url).await?;
        sqlx::query_scalar(&sql.replace("$1", "?1"))
            .bind(pattern)
            .fetch_all(&mut conn)
            .await?
    };
    let mut copies = HashMap::new();
    for message in messages {
        let mut words = message.rsplit(' ');
        let sequence = words.next().and_then(|n| n.strip_prefix('n')?.parse().ok());
        let producer = words.next().and_then(|p| p.strip_prefix('p')?.parse().ok());
        if let (Some(producer), Some(sequence)) = (producer, sequence) {
            *copies.entry((producer, sequence)).or_default() += 1;
        }
    }
    Ok(copies)
}

fn print_report(report: &ChaosReport, json: bool) {
    let mut faults: Vec<_> = report.faults.iter().collect();
    faults.sort();
    let faults: Vec<String> = faults
        .iter()
        .map(|(name, count)| format!("{name}×{count}"))
        .collect();
    println!(
        "faults {} over {:.0} s",
        if faults.is_empty() {
            "none".to_owned()
        } else {
            faults.join(" ")
        },
        report.elapsed_sec
    );
    println!(
        "pushed {}  acknowledged {}  dropped {}  given up {}  retried chunks {}  deduplicated {}",
        report.pushed,
        report.acknowledged,
        report.dropped,
        report.given_up,
        report.retried_chunks,
        report.deduplicated
    );
    println!(
        "stored {}  duplicated {}  lost {}  => {}",
        report.stored,
        report.duplicated,
        report.lost,
        if report.clean() { "CLEAN" } else { "FAILED" }
    );
    if json {
        println!(
            "{}",
            serde_json::to_string(report).expect("the report serializes")
        );
    }
}
