//! `loghaul bench-shipper`: records/s through one client [`Shipper`](loghaul_client::Shipper), from application threads
//! pushing records to every acknowledgement received, against a server started as a child
//! process (or `--endpoint`). The stored count is checked against the acknowledged one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::workload::{self, Protocol, WorkloadShape};
use super::{bench_database, count_rows, BenchError, Targets};
use crate::client::{Client, FullPolicy, ShipperConfig, ShipperStats};

/// Options of `loghaul bench-shipper`.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchShipperArgs {
    /// Drive these running servers instead of starting one: gRPC addresses, comma-separated
    /// (replicas of one service, which the shipper balances over).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Database for the server the benchmark starts. Default: a fresh SQLite file in a
    /// temporary directory.
    #[arg(long, env = "LOGHAUL_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Records to push.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    /// Application threads pushing into the one shipper.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Records per chunk the shipper seals.
    #[arg(long, default_value_t = 1000)]
    pub chunk_records: usize,
    /// Records the shipper buffers (pushes wait for room: nothing is dropped).
    #[arg(long, default_value_t = 100_000)]
    pub buffer_records: usize,
    /// Approximate bytes per log message.
    #[arg(long, default_value_t = 200)]
    pub message_bytes: usize,
    /// Attributes per record.
    #[arg(long, default_value_t = 4)]
    pub attributes: usize,
    /// Sent as `x-api-key`.
    #[arg(long, env = "LOGHAUL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Extra argument for the server the benchmark starts (repeatable).
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
}

/// The measurement.
#[derive(Debug, Serialize)]
pub struct ShipperReport {
    /// Acknowledged records per second, first push to close.
    pub records_per_sec: f64,
    /// Seconds from the first push to the last acknowledgement.
    pub elapsed_sec: f64,
    /// Rows the table gained, when the database is known.
    pub stored_delta: Option<i64>,
    /// The shipper's counters at the end.
    pub stats: ShipperStatsReport,
}

/// [`ShipperStats`] as JSON.
#[derive(Debug, Serialize)]
pub struct ShipperStatsReport {
    /// Records pushed.
    pub pushed: u64,
    /// Records acknowledged.
    pub acknowledged: u64,
    /// Records dropped.
    pub dropped: u64,
    /// Chunks sent again.
    pub retries: u64,
    /// Records given up.
    pub failed: u64,
    /// Streams opened.
    pub streams: u64,
}

impl From<&ShipperStats> for ShipperStatsReport {
    fn from(stats: &ShipperStats) -> Self {
        ShipperStatsReport {
            pushed: stats.pushed,
            acknowledged: stats.acknowledged,
            dropped: stats.dropped,
            retries: stats.retries,
            failed: stats.failed,
            streams: stats.streams,
        }
    }
}

/// Runs the measurement and prints it as one JSON line.
pub async fn run(args: BenchShipperArgs) -> Result<ShipperReport, BenchError> {
    if args.threads == 0 || args.records == 0 {
        return Err(BenchError::Usage(
            "--threads and --records must be positive".into(),
        ));
    }
    let scratch = tempfile::tempdir()?;
    let database_url = bench_database(&args.database_url, &args.endpoint, scratch.path());
    let targets = Targets::start(
        &args.endpoint,
        database_url.as_deref(),
        &args.server_args,
        1,
        1,
    )?;
    let before = match &database_url {
        Some(url) => Some(count_rows(url).await?),
        None => None,
    };
    let shape = WorkloadShape {
        records_per_chunk: 1000,
        message_bytes: args.message_bytes,
        attributes: args.attributes,
        distinct_chunks: 4,
        client_timestamps: false,
        backdate: Duration::ZERO,
    };
    let pool = Arc::new(workload::generate(shape, Protocol::Native).records);
    let mut builder = Client::builder_balanced(targets.endpoints.clone());
    if let Some(key) = &args.api_key {
        builder = builder.api_key(key.clone());
    }
    let client = builder
        .build()
        .map_err(|err| BenchError::Usage(err.to_string()))?;
    let shipper = client
        .shipper(ShipperConfig {
            chunk_records: args.chunk_records,
            buffer_records: args.buffer_records,
            when_full: FullPolicy::Block(Duration::MAX),
            ..ShipperConfig::default()
        })
        .map_err(|err| BenchError::Usage(err.to_string()))?;

    let started = Instant::now();
    let pushers: Vec<_> = (0..args.threads)
        .map(|thread| {
            let (shipper, pool) = (shipper.clone(), Arc::clone(&pool));
            let count = args.records / args.threads as u64
                + u64::from((thread as u64) < args.records % args.threads as u64);
            std::thread::spawn(move || {
                // Cloning the record is part of the cost an application pays to log.
                for n in 0..count as usize {
                    let _ = shipper.push(pool[(n + thread * 7) % pool.len()].clone());
                }
            })
        })
        .collect();
    tokio::task::spawn_blocking(move || {
        for pusher in pushers {
            pusher.join().expect("a pusher does not panic");
        }
    })
    .await
    .expect("the pushers are joined");
    let stats = shipper.close_async(Duration::from_secs(600)).await;
    let elapsed = started.elapsed();
    targets.stop()?;
    let stored_delta = match (&database_url, before) {
        (Some(url), Some(before)) => Some(count_rows(url).await? - before),
        _ => None,
    };
    let report = ShipperReport {
        records_per_sec: stats.acknowledged as f64 / elapsed.as_secs_f64(),
        elapsed_sec: elapsed.as_secs_f64(),
        stored_delta,
        stats: ShipperStatsReport::from(&stats),
    };
    println!(
        "{:.0} records/s through one shipper ({} threads pushing, {} acknowledged in {:.1} s, stored {})",
        report.records_per_sec,
        args.threads,
        stats.acknowledged,
        report.elapsed_sec,
        stored_delta.map_or("-".to_owned(), |delta| delta.to_string()),
    );
    println!(
        "{}",
        serde_json::to_string(&report).expect("the report serializes")
    );
    Ok(report)
}
