//! `loghaul bench`: measures committed-and-acknowledged records per second over real gRPC (or the
//! HTTP ingest listener: OTLP/HTTP, Loki push), ack latency, server memory, and (PostgreSQL) the
//! COPY ceiling on the same machine.
//!
//! The records are generated and encoded before the clock starts; the server runs as a child
//! process (unless `--endpoint` names one) so its peak RSS is its own; the acknowledged count is
//! re-checked against `count(*)` in the database at the end. [`query`] is `loghaul bench-query`,
//! which times Query pages on a large table.

pub mod chaos;
pub(crate) mod copy_ceiling;
pub(crate) mod load;
pub mod query;
pub(crate) mod server_process;
pub mod shipper;
pub(crate) mod workload;

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::Connection;

use crate::config::HumanDuration;
use crate::storage::Backend;
use load::{LoadPlan, Progress, Stop};
use server_process::ServerProcess;
use workload::{Protocol, WorkloadShape};

/// Options of `loghaul bench`.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchArgs {
    /// Drive these running servers instead of starting one: gRPC addresses, comma-separated
    /// (replicas of one service); the streams are spread over them in turn.
    #[arg(long, conflicts_with_all = ["replicas", "tenants"])]
    pub endpoint: Option<String>,
    /// The HTTP ingest listeners of the --endpoint servers, comma-separated, for --protocol
    /// otlp-http and loki (plaintext). Default: each --endpoint's host on port 4318.
    #[arg(long, requires = "endpoint", value_name = "URLS")]
    pub http_endpoint: Option<String>,
    /// Servers the benchmark starts on the same database (PostgreSQL), each a `loghaul serve` of
    /// its own; the streams are spread over them in turn, and their CPU and memory are summed.
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Tenants the streams send as, in turn: the servers the benchmark starts get one API key per
    /// tenant (`bench-0`, `bench-1`, …). On Citus, tenants are what spreads rows over workers.
    #[arg(long, default_value_t = 1, conflicts_with = "api_key")]
    pub tenants: usize,
    /// Database for the server the benchmark starts (and for the final count(*) and
    /// --compare-copy). Default: a fresh SQLite file in a temporary directory.
    #[arg(long, env = "LOGHAUL_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Concurrent streams; a comma-separated list runs one measurement per value, each against a
    /// fresh server (e.g. 1,4,16,64,256).
    #[arg(long, default_value = "8", value_delimiter = ',')]
    pub streams: Vec<usize>,
    /// Records per PushRequest.
    #[arg(long, default_value_t = 1000)]
    pub records_per_chunk: usize,
    /// Chunks a stream sends before it half-closes and waits for its acknowledgement (native).
    #[arg(long, default_value_t = 10)]
    pub chunks_per_stream: usize,
    /// Approximate bytes per log message.
    #[arg(long, default_value_t = 200)]
    pub message_bytes: usize,
    /// Attributes per record.
    #[arg(long, default_value_t = 4)]
    pub attributes: usize,
    /// How long each measurement runs.
    #[arg(long, default_value = "20s", conflicts_with = "records")]
    pub duration: HumanDuration,
    /// Stop after this many records instead of after --duration.
    #[arg(long)]
    pub records: Option<u64>,
    /// Offered load across all streams: records per second (`120000`), or a share of the maximum
    /// (`80%`: a run as fast as acks allow first, then one offering that share of its rate).
    /// Default: as fast as acks allow.
    #[arg(long, conflicts_with = "curve")]
    pub rate: Option<Rate>,
    /// A latency curve: a run as fast as acks allow, then one paced run offering each of these
    /// shares of the rate it measured (`25,50,75,90`, in percent), each against a fresh server.
    /// Paced latency runs from each send's scheduled time, not from when it was sent.
    #[arg(long, value_delimiter = ',', value_name = "PERCENTS")]
    pub curve: Vec<Share>,
    /// Sent as `x-api-key`.
    #[arg(long, env = "LOGHAUL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// After the run, load the same number of rows straight into the same table over one
    /// connection and report the ratio: PostgreSQL by text COPY, SQLite by one prepared INSERT
    /// per row in one transaction (the fastest plain insert).
    #[arg(long)]
    pub compare_copy: bool,
    /// Extra argument for the server the benchmark starts (repeatable): --server-arg=--shards=4.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
    /// TLS to an --endpoint server (gRPC protocols only).
    #[command(flatten)]
    pub tls: crate::tls::ClientTlsArgs,
    /// Metrics URL of an --endpoint server, for the queue depth in the progress line.
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// Send the timestamps the records were generated with, instead of letting the server stamp
    /// them at receipt. The pool is generated once, so these stand still for the whole run and
    /// scatter inserts over SQLite's time index; leave it off to measure realistic time order.
    #[arg(long)]
    pub client_timestamps: bool,
    /// Stamp the records this long before the pool is generated (implies --client-timestamps),
    /// so that they land in an hour already past: what `--seal-after` seals, for measuring disk
    /// per line after sealing.
    #[arg(long, value_name = "DURATION")]
    pub backdate: Option<HumanDuration>,
    /// Push streams (native, also called push), OTLP Export calls over gRPC (otlp), OTLP/HTTP
    /// posts (otlp-http) or Loki pushes (loki), one call or post per chunk. otlp-http and loki
    /// are plaintext HTTP/1.1, one kept-alive connection per stream, to the HTTP ingest listener.
    #[arg(long, value_enum, default_value = "native")]
    pub protocol: Protocol,
    /// Print the report as one JSON object on the last line.
    #[arg(long)]
    pub json: bool,
    /// Appends every acknowledgement to this CSV file (`streams,offered_per_sec,at_sec,latency_ms`),
    /// to find when the slow ones happened.
    #[arg(long, value_name = "PATH")]
    pub latency_log: Option<std::path::PathBuf>,
}

/// An offered load.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Rate {
    /// Records per second.
    PerSecond(f64),
    /// A share (0 to 1) of the rate measured when sending as fast as acks allow.
    OfMaximum(f64),
}

impl std::str::FromStr for Rate {
    type Err = String;

    fn from_str(text: &str) -> Result<Rate, String> {
        if text.ends_with('%') {
            return text.parse::<Share>().map(|share| Rate::OfMaximum(share.0));
        }
        match text.trim().parse::<f64>() {
            // Below one record a second the pacing interval can outgrow what a timer holds.
            Ok(value) if value.is_finite() && value >= 1.0 => Ok(Rate::PerSecond(value)),
            _ => Err(format!(
                "{text:?}: records per second, at least 1 (120000), or a share of the maximum (80%)"
            )),
        }
    }
}

/// A share of the maximum rate, given in percent (`75` or `75%`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Share(
    /// Between 0 (excluded) and 1.
    pub f64,
);

impl std::str::FromStr for Share {
    type Err = String;

    fn from_str(text: &str) -> Result<Share, String> {
        let percent = text.trim();
        let percent = percent.strip_suffix('%').unwrap_or(percent);
        match percent.parse::<f64>() {
            Ok(value) if value.is_finite() && value > 0.0 && value <= 100.0 => {
                Ok(Share(value / 100.0))
            }
            _ => Err(format!(
                "{text:?}: a share of the maximum, in percent, above 0 and at most 100"
            )),
        }
    }
}

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Options that cannot work together.
    #[error("{0}")]
    Usage(String),
    /// The server could not be started.
    #[error(transparent)]
    Server(#[from] server_process::ServerProcessError),
    /// The server could not be reached.
    #[error("cannot connect to the server: {0}")]
    Connect(#[from] crate::tls::ConnectError),
    /// The database could not be read or loaded.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// A temporary directory could not be made.
    #[error("temporary directory: {0}")]
    Io(#[from] std::io::Error),
    /// SQLite refused the ceiling's inserts.
    #[error(transparent)]
    Ceiling(#[from] copy_ceiling::SqliteCeilingError),
    /// `--rate N%` or `--curve`: the run as fast as acks allow acknowledged nothing, so it has no
    /// maximum.
    #[error("the run as fast as acks allow acknowledged nothing (failed streams: {0}), so there is no maximum to take a share of")]
    NoMaximum(String),
}

/// One measurement.
#[derive(Debug, Serialize)]
pub struct RunReport {
    /// Concurrent streams.
    pub streams: usize,
    /// Records per second offered (`--rate`); `None` when sent as fast as acks allowed.
    pub offered_per_sec: Option<f64>,
    /// The share of the maximum offered (`--rate N%`, `--curve`), when that is how it was paced.
    pub share_of_maximum: Option<Share>,
    /// Committed and acknowledged records per second.
    pub records_per_sec: f64,
    /// Records acknowledged.
    pub acked: u64,
    /// Records rejected.
    pub rejected: u64,
    /// Streams (OTLP and HTTP: calls) that ended with an error, by gRPC code (an HTTP status
    /// counts as the code of the same failure).
    pub failed_streams: Vec<(String, u64)>,
    /// Seconds from the first send to the last response.
    pub elapsed_sec: f64,
    /// Ack latency from half-close to response (paced: from when the half-close was due).
    pub ack_latency_ms: Latency,
    /// Rows the table gained during the run (None without database access).
    pub stored_delta: Option<i64>,
    /// `stored_delta == acked`.
    pub verified: Option<bool>,
    /// Peak RSS of the server process, when the benchmark started it.
    pub server_peak_rss_bytes: Option<u64>,
    /// CPU seconds (user and system) the load generator used during the measurement.
    pub client_cpu_sec: Option<f64>,
    /// CPU seconds the server process used during the measurement, when the benchmark started it.
    pub server_cpu_sec: Option<f64>,
    /// The store's ceiling for the same number of rows over one connection (`--compare-copy`).
    pub copy_records_per_sec: Option<f64>,
    /// records_per_sec / copy_records_per_sec.
    pub copy_ratio: Option<f64>,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Default, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

/// The whole report: settings and one entry per stream count.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// What was run.
    pub settings: serde_json::Value,
    /// The measurements.
    pub runs: Vec<RunReport>,
}

/// Runs every measurement the arguments ask for and prints the report.
pub async fn run(args: BenchArgs) -> Result<BenchReport, BenchError> {
    if args.streams.is_empty() || args.streams.contains(&0) {
        return Err(BenchError::Usage("--streams needs positive numbers".into()));
    }
    if let Err(err) = crate::auth::request_with_key((), args.api_key.as_deref()) {
        return Err(BenchError::Usage(err.to_string()));
    }
    if args.endpoint.is_none() && args.tls.enabled_for("http://") {
        return Err(BenchError::Usage(
            "--tls-ca, --tls-cert and --tls-key are for an --endpoint server; the server the benchmark starts is plaintext".into(),
        ));
    }
    if args.protocol.is_http() && args.tls.enabled_for("http://") {
        return Err(BenchError::Usage(
            "--tls-ca, --tls-cert and --tls-key are for gRPC; --protocol otlp-http and loki send plaintext HTTP".into(),
        ));
    }
    if args.replicas == 0 || args.tenants == 0 {
        return Err(BenchError::Usage(
            "--replicas and --tenants need positive numbers".into(),
        ));
    }
    let http_endpoint = match (&args.endpoint, args.protocol.is_http()) {
        (Some(endpoints), true) => Some(external_http_endpoints(endpoints, &args.http_endpoint)?),
        _ => None,
    };
    let scratch = tempfile::tempdir()?;
    let database_url = bench_database(&args.database_url, &args.endpoint, scratch.path());
    if args.replicas > 1 && !database_url.as_deref().is_some_and(Backend::is_postgres) {
        return Err(BenchError::Usage(
            "--replicas share one database: give a PostgreSQL --database-url".into(),
        ));
    }
    if args.compare_copy && database_url.is_none() {
        return Err(BenchError::Usage(
            "--compare-copy loads the same rows straight into the database: with --endpoint, give the server's --database-url too".into(),
        ));
    }
    let shape = WorkloadShape {
        records_per_chunk: args.records_per_chunk,
        message_bytes: args.message_bytes,
        attributes: args.attributes,
        distinct_chunks: 64,
        client_timestamps: args.client_timestamps || args.backdate.is_some(),
        backdate: args.backdate.map_or(Duration::ZERO, |backdate| backdate.0),
    };
    let workload = workload::generate(shape, args.protocol);
    // What one request weighs on the wire (as compressed, for Loki), on average.
    let chunk_bytes = workload
        .encoded
        .iter()
        .map(|chunk| chunk.len())
        .sum::<usize>()
        / workload.encoded.len().max(1);
    let settings = serde_json::json!({
        "endpoint": args.endpoint,
        "database": database_url.as_deref().map(crate::storage::redact_url),
        "records_per_chunk": args.records_per_chunk,
        "chunks_per_stream": args.chunks_per_stream,
        "message_bytes": args.message_bytes,
        "attributes": args.attributes,
        "duration_sec": args.records.map_or(Some(args.duration.0.as_secs_f64()), |_| None),
        "records": args.records,
        "rate": args.rate,
        "curve": args.curve,
        "server_args": args.server_args,
        "replicas": args.replicas,
        "tenants": args.tenants,
        "protocol": args.protocol,
        "http_endpoint": http_endpoint,
        "client_timestamps": args.client_timestamps,
        "backdate_seconds": args.backdate.map(|backdate| backdate.0.as_secs_f64()),
        "chunk_bytes": chunk_bytes,
    });
    eprintln!(
        "workload: {} distinct chunks of {} records ({} bytes each on the wire, on average), ~{} B messages, {} attributes",
        workload.encoded.len(),
        args.records_per_chunk,
        chunk_bytes,
        args.message_bytes,
        args.attributes
    );

    let shares = match args.rate {
        Some(Rate::OfMaximum(fraction)) => vec![Share(fraction)],
        _ => args.curve.clone(),
    };
    let database_url = database_url.as_deref();
    let mut runs = Vec::new();
    for &streams in &args.streams {
        if shares.is_empty() {
            let offered = match args.rate {
                Some(Rate::PerSecond(rate)) => Some(rate),
                _ => None,
            };
            runs.push(measure(&args, database_url, &workload, streams, offered).await?);
            continue;
        }
        // The maximum is this machine's, today: measure it with the same settings first.
        let saturated = measure(&args, database_url, &workload, streams, None).await?;
        if saturated.acked == 0 {
            return Err(BenchError::NoMaximum(format!(
                "{:?}",
                saturated.failed_streams
            )));
        }
        let maximum = saturated.records_per_sec;
        runs.push(saturated);
        for &share in &shares {
            let rate = maximum * share.0;
            eprintln!(
                "maximum {maximum:.0} records/s; now offering {rate:.0} ({:.0} %)",
                share.0 * 100.0
            );
            let mut paced = measure(&args, database_url, &workload, streams, Some(rate)).await?;
            paced.share_of_maximum = Some(share);
            runs.push(paced);
        }
    }
    let report = BenchReport { settings, runs };
    print_table(&report);
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).expect("the report serializes")
        );
    }
    Ok(report)
}

/// One measurement: a fresh server (unless `--endpoint`), `streams` streams offering `offered`
/// records per second (as fast as acks allow when `None`), the count re-checked afterwards.
async fn measure(
    args: &BenchArgs,
    database_url: Option<&str>,
    workload: &workload::Workload,
    streams: usize,
    offered: Option<f64>,
) -> Result<RunReport, BenchError> {
    let chunks = Arc::new(workload.encoded.clone());
    let targets = Targets::start(
        &args.endpoint,
        database_url,
        &args.server_args,
        args.replicas,
        args.tenants,
    )?;
    let endpoints = match (args.protocol.is_http(), &args.endpoint) {
        (false, _) => targets.endpoints.clone(),
        (true, Some(grpc)) => external_http_endpoints(grpc, &args.http_endpoint)?,
        (true, None) => targets
            .servers
            .iter()
            .map(|server| match server.http_ingest.as_str() {
                "" | "off" => Err(BenchError::Usage(format!(
                    "--protocol {}: the server's HTTP ingest listener is off",
                    protocol_name(args.protocol)
                ))),
                listener => Ok(format!("http://{listener}")),
            })
            .collect::<Result<_, _>>()?,
    };
    let server = targets.servers.first();
    let metrics_url = args
        .metrics_url
        .clone()
        .or_else(|| server.map(|server| server.http.clone()));
    let before = match database_url {
        Some(url) => {
            let count = count_rows(url).await?;
            // Only a database behind a server the benchmark started is its own to checkpoint.
            if !targets.servers.is_empty() {
                settle(url).await;
            }
            Some(count)
        }
        None => None,
    };
    let plan = LoadPlan {
        endpoints,
        streams,
        chunks_per_stream: args.chunks_per_stream,
        stop: args
            .records
            .map_or(Stop::After(args.duration.0), Stop::Records),
        rate: offered,
        api_keys: match &args.api_key {
            Some(key) => vec![key.clone()],
            None => targets.api_keys.clone(),
        },
        protocol: args.protocol,
        tls: args.tls.clone(),
    };
    let progress = Arc::new(Progress::default());
    let reporter = tokio::spawn(report_progress(Arc::clone(&progress), metrics_url));
    let server_cpu_before = targets.cpu_seconds();
    let cpu_before = own_cpu_seconds();
    let outcome = load::run(plan, chunks, args.records_per_chunk, progress).await?;
    let client_cpu_sec = own_cpu_seconds()
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    reporter.abort();
    if let Some(path) = &args.latency_log {
        write_latency_log(path, streams, offered, &outcome.acks)?;
    }
    let server_peak_rss_bytes = targets.peak_rss_bytes();
    let server_cpu_sec = targets
        .cpu_seconds()
        .zip(server_cpu_before)
        .map(|(after, before)| after - before);
    targets.stop()?;
    let stored_delta = match (database_url, before) {
        (Some(url), Some(before)) => Some(count_rows(url).await? - before),
        _ => None,
    };
    let records_per_sec = outcome.acked as f64 / outcome.elapsed.as_secs_f64();
    let (copy_records_per_sec, copy_ratio) = if args.compare_copy {
        let url = database_url.expect("checked by run");
        let took = if Backend::is_postgres(url) {
            eprintln!("COPY of {} rows over one connection…", outcome.acked);
            copy_ceiling::copy_rows(url, &workload.records, outcome.acked).await?
        } else {
            eprintln!(
                "INSERT of {} rows, one prepared statement each, in one transaction…",
                outcome.acked
            );
            let path = crate::storage::sqlite::options_path(url).ok_or_else(|| {
                BenchError::Usage(format!("--compare-copy: {url} names no SQLite file"))
            })?;
            copy_ceiling::sqlite_insert_rows(path, &workload.records, outcome.acked).await?
        };
        let copy_rate = outcome.acked as f64 / took.as_secs_f64();
        (Some(copy_rate), Some(records_per_sec / copy_rate))
    } else {
        (None, None)
    };
    Ok(RunReport {
        streams,
        offered_per_sec: offered,
        share_of_maximum: None,
        records_per_sec,
        acked: outcome.acked,
        rejected: outcome.rejected,
        failed_streams: outcome
            .failed_streams
            .iter()
            .map(|(code, count)| (format!("{code:?}"), *count))
            .collect(),
        elapsed_sec: outcome.elapsed.as_secs_f64(),
        ack_latency_ms: latency(outcome.acks.iter().map(|ack| ack.latency).collect()),
        verified: stored_delta.map(|delta| delta == outcome.acked as i64),
        stored_delta,
        server_peak_rss_bytes,
        client_cpu_sec,
        server_cpu_sec,
        copy_records_per_sec,
        copy_ratio,
    })
}

/// The database of a benchmark's own server: the one named, else a scratch SQLite file in
/// `scratch`; none when it drives an `--endpoint` without naming the database behind it.
pub(crate) fn bench_database(
    database_url: &Option<String>,
    endpoint: &Option<String>,
    scratch: &std::path::Path,
) -> Option<String> {
    match (database_url, endpoint) {
        (Some(url), _) => Some(url.clone()),
        (None, None) => Some(format!("sqlite://{}", scratch.join("bench.db").display())),
        (None, Some(_)) => None,
    }
}

/// Where a measurement sends, and the servers the benchmark started for it.
pub(crate) struct Targets {
    /// gRPC addresses, `http://host:port`.
    pub endpoints: Vec<String>,
    /// The servers started (none when driving `--endpoint` servers).
    pub servers: Vec<ServerProcess>,
    /// One API key per tenant of `--tenants`; none for one tenant.
    pub api_keys: Vec<String>,
}

impl Targets {
    /// The `endpoint` servers when given (comma-separated), else `replicas` servers started on
    /// `database_url`, with one API key per tenant when there are several.
    pub(crate) fn start(
        endpoint: &Option<String>,
        database_url: Option<&str>,
        server_args: &[String],
        replicas: usize,
        tenants: usize,
    ) -> Result<Targets, BenchError> {
        if let Some(endpoints) = endpoint {
            return Ok(Targets {
                endpoints: split_list(endpoints),
                servers: Vec::new(),
                api_keys: Vec::new(),
            });
        }
        let database_url =
            database_url.expect("bench_database names one when there is no endpoint");
        let api_keys: Vec<String> = if tenants > 1 {
            (0..tenants)
                .map(|tenant| format!("bench-key-{tenant}"))
                .collect()
        } else {
            Vec::new()
        };
        let mut args = server_args.to_vec();
        if !api_keys.is_empty() {
            let ring: Vec<String> = api_keys
                .iter()
                .enumerate()
                .map(|(tenant, key)| format!("{key}=bench-{tenant}"))
                .collect();
            args.push(format!("--api-keys={}", ring.join(",")));
        }
        // One after the other: each migrates (a no-op after the first) before it serves.
        let servers = (0..replicas)
            .map(|_| ServerProcess::start(database_url, &args))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Targets {
            endpoints: servers
                .iter()
                .map(|server| format!("http://{}", server.grpc))
                .collect(),
            servers,
            api_keys,
        })
    }

    /// The servers' peak memory, summed.
    fn peak_rss_bytes(&self) -> Option<u64> {
        self.servers
            .iter()
            .map(ServerProcess::peak_rss_bytes)
            .sum::<Option<u64>>()
            .filter(|_| !self.servers.is_empty())
    }

    /// The servers' CPU time so far, summed.
    fn cpu_seconds(&self) -> Option<f64> {
        self.servers
            .iter()
            .map(ServerProcess::cpu_seconds)
            .sum::<Option<f64>>()
            .filter(|_| !self.servers.is_empty())
    }

    /// Stops every server started, cleanly.
    pub(crate) fn stop(self) -> Result<(), BenchError> {
        for server in self.servers {
            server.stop()?;
        }
        Ok(())
    }
}

/// The items of a comma-separated list, trimmed, empty ones left out.
fn split_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The HTTP ingest listeners of `--endpoint` servers: `--http-endpoint`'s list, else each gRPC
/// endpoint's host on port 4318.
fn external_http_endpoints(grpc: &str, http: &Option<String>) -> Result<Vec<String>, BenchError> {
    match http {
        Some(http) => Ok(split_list(http)),
        None => split_list(grpc)
            .iter()
            .map(|grpc| external_http_endpoint(grpc, &None))
            .collect(),
    }
}

/// The HTTP ingest listener of an `--endpoint` server: `--http-endpoint`, else the gRPC
/// endpoint's host on port 4318.
fn external_http_endpoint(grpc: &str, http: &Option<String>) -> Result<String, BenchError> {
    if let Some(http) = http {
        return Ok(http.clone());
    }
    let uri: hyper::Uri = grpc.parse().map_err(|_| {
        BenchError::Usage(format!(
            "--endpoint {grpc:?} is not a URL; give --http-endpoint"
        ))
    })?;
    let host = uri.host().ok_or_else(|| {
        BenchError::Usage(format!(
            "--endpoint {grpc:?} names no host; give --http-endpoint"
        ))
    })?;
    Ok(format!("http://{host}:4318"))
}

/// How a protocol is spelled on the command line and in the report.
fn protocol_name(protocol: Protocol) -> String {
    serde_json::to_value(protocol)
        .ok()
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// CPU seconds (user and system, every thread) this process has used so far.
fn own_cpu_seconds() -> Option<f64> {
    // SAFETY: getrusage fills the struct it is given, which is zeroed and owned here.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        (libc::getrusage(libc::RUSAGE_SELF, &mut usage) == 0).then_some(usage)
    }?;
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    Some(seconds(usage.ru_utime) + seconds(usage.ru_stime))
}

/// PostgreSQL: a `CHECKPOINT` before the clock starts, so that every run begins with no dirty
/// pages left by the one before (its rows, and the hint bits the verifying `count(*)` set on every
/// page it read), and runs have the same start.
/// Needs a superuser or `pg_checkpoint`; without it the run goes ahead unsettled, and says so.
async fn settle(url: &str) {
    if !Backend::is_postgres(url) {
        return;
    }
    let checkpoint = async {
        let mut conn = sqlx::PgConnection::connect(url).await?;
        sqlx::query("CHECKPOINT").execute(&mut conn).await
    };
    if let Err(err) = checkpoint.await {
        eprintln!("note: no CHECKPOINT before the run ({err}); it may pay for earlier writes");
    }
}

pub(crate) async fn count_rows(url: &str) -> Result<i64, sqlx::Error> {
    let sql = "SELECT count(*) FROM logs";
    if Backend::is_postgres(url) {
        let mut conn = sqlx::PgConnection::connect(url).await?;
        return sqlx::query_scalar(sql).fetch_one(&mut conn).await;
    }
    let options: sqlx::sqlite::SqliteConnectOptions = url.parse()?;
    let mut conn = sqlx::SqliteConnection::connect_with(&options.create_if_missing(true)).await?;
    // A fresh file has no table until the server migrates it.
    let exists: i64 = sqlx::query_scalar("SELECT count(*) FROM sqlite_master WHERE name = 'logs'")
        .fetch_one(&mut conn)
        .await?;
    if exists == 0 {
        return Ok(0);
    }
    sqlx::query_scalar(sql).fetch_one(&mut conn).await
}

/// Appends one CSV line per acknowledgement (`streams,offered_per_sec,at_sec,latency_ms`; the
/// offered rate is empty for a run as fast as acks allow), so a latency tail can be lined up with
/// what the database logged at that moment.
fn write_latency_log(
    path: &std::path::Path,
    streams: usize,
    offered: Option<f64>,
    acks: &[load::AckSample],
) -> std::io::Result<()> {
    let fresh = !path.exists();
    let mut file = std::io::BufWriter::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?,
    );
    if fresh {
        writeln!(file, "streams,offered_per_sec,at_sec,latency_ms")?;
    }
    let offered = offered.map_or(String::new(), |rate| format!("{rate:.0}"));
    for ack in acks {
        writeln!(
            file,
            "{streams},{offered},{:.3},{:.1}",
            ack.at.as_secs_f64(),
            ack.latency.as_secs_f64() * 1000.0
        )?;
    }
    file.flush()
}

fn latency(mut samples: Vec<Duration>) -> Latency {
    if samples.is_empty() {
        return Latency::default();
    }
    samples.sort_unstable();
    let at = |quantile: f64| {
        let index = ((samples.len() as f64 * quantile).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[index].as_secs_f64() * 1000.0
    };
    Latency {
        p50: at(0.50),
        p99: at(0.99),
        p999: at(0.999),
        max: samples[samples.len() - 1].as_secs_f64() * 1000.0,
    }
}

async fn report_progress(progress: Arc<Progress>, metrics: Option<String>) {
    let started = Instant::now();
    let mut last = 0;
    let mut every = tokio::time::interval(Duration::from_secs(2));
    every.tick().await;
    loop {
        every.tick().await;
        let acked = progress.acked.load(Ordering::Relaxed);
        let rate = (acked - last) as f64 / 2.0;
        last = acked;
        let queue = match &metrics {
            Some(addr) => queue_depth(addr)
                .await
                .map_or_else(String::new, |(depth, capacity)| {
                    format!("  queue {depth:.0}/{capacity:.0} chunks")
                }),
            None => String::new(),
        };
        eprintln!(
            "[{:>4.0}s] {:>10.0} records/s  acked {:>10}{queue}",
            started.elapsed().as_secs_f64(),
            rate,
            acked
        );
        let _ = std::io::stderr().flush();
    }
}

/// Sums `loghaul_queue_depth` and `loghaul_queue_capacity` over shards from the metrics page.
async fn queue_depth(addr: &str) -> Option<(f64, f64)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = addr
        .trim_start_matches("http://")
        .trim_end_matches("/metrics");
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .await
        .ok()?;
    let mut page = String::new();
    stream.read_to_string(&mut page).await.ok()?;
    let sum = |name: &str| -> f64 {
        page.lines()
            .filter(|line| line.starts_with(name))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    Some((sum("loghaul_queue_depth{"), sum("loghaul_queue_capacity{")))
}

fn print_table(report: &BenchReport) {
    println!(
        "{:>8} {:>9} {:>12} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8} {:>12} {:>6}",
        "streams",
        "offered",
        "records/s",
        "acked",
        "rejected",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
        "peak RSS",
        "verified",
        "ceiling/s",
        "ratio"
    );
    for run in &report.runs {
        let opt = |value: Option<f64>, digits: usize| {
            value.map_or("-".to_owned(), |v| format!("{v:.digits$}"))
        };
        let failures: u64 = run.failed_streams.iter().map(|(_, count)| count).sum();
        println!(
            "{:>8} {:>9} {:>12.0} {:>11} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10} {:>8} {:>12} {:>6}",
            run.streams,
            match (run.share_of_maximum, run.offered_per_sec) {
                (Some(share), _) => format!("{:.0} %", share.0 * 100.0),
                (None, Some(rate)) => format!("{rate:.0}"),
                (None, None) => "max".to_owned(),
            },
            run.records_per_sec,
            run.acked,
            run.rejected,
            run.ack_latency_ms.p50,
            run.ack_latency_ms.p99,
            run.ack_latency_ms.p999,
            run.ack_latency_ms.max,
            run.server_peak_rss_bytes
                .map_or("-".to_owned(), |bytes| format!(
                    "{:.0} MiB",
                    bytes as f64 / 1048576.0
                )),
            run.verified.map_or("-".to_owned(), |ok| if ok {
                "yes".into()
            } else {
                "NO".into()
            }),
            opt(run.copy_records_per_sec, 0),
            opt(run.copy_ratio, 2),
        );
        if failures > 0 {
            println!("         failed streams: {:?}", run.failed_streams);
        }
        if let Some(offered) = run.offered_per_sec {
            // A run that fell behind its offered rate measured a saturated server, not one at that
            // rate (the machine slowed after the maximum was taken, say): say so by the figures.
            let share = run.records_per_sec / offered;
            if share < 0.98 {
                println!(
                    "         only {:.1} % of the offered rate was sustained: a saturated server, not one at that rate",
                    share * 100.0
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_per_second_or_a_share_of_the_maximum() {
        assert_eq!("120000".parse(), Ok(Rate::PerSecond(120000.0)));
        assert_eq!("80%".parse(), Ok(Rate::OfMaximum(0.8)));
        assert_eq!("0.5%".parse(), Ok(Rate::OfMaximum(0.005)));
        for bad in ["0", "-5", "0.001", "0%", "150%", "fast", "NaN", "inf%"] {
            let refused = bad.parse::<Rate>();
            assert!(refused.is_err(), "{bad} was taken as {refused:?}");
        }
    }

    #[test]
    fn curve_shares_are_percents() {
        let parse = |text: &str| text.parse::<Share>();
        assert_eq!(parse("25"), Ok(Share(0.25)));
        assert_eq!(parse("90%"), Ok(Share(0.9)));
        assert_eq!(parse("100"), Ok(Share(1.0)));
        for bad in ["0", "-5", "101", "half", "NaN", ""] {
            assert!(parse(bad).is_err(), "{bad:?} was taken");
        }
    }

    #[test]
    fn an_external_servers_http_listener_defaults_to_its_host_on_4318() {
        let default = |grpc: &str| external_http_endpoint(grpc, &None).unwrap();
        assert_eq!(default("http://127.0.0.1:4317"), "http://127.0.0.1:4318");
        assert_eq!(
            default("https://logs.example.com"),
            "http://logs.example.com:4318"
        );
        assert_eq!(default("http://[::1]:4317"), "http://[::1]:4318");
        let given = Some("http://other:9000".to_owned());
        assert_eq!(
            external_http_endpoint("http://a:1", &given).unwrap(),
            "http://other:9000"
        );
        assert!(external_http_endpoint("not a url at all", &None).is_err());
    }

    #[test]
    fn several_external_servers_are_a_comma_separated_list() {
        assert_eq!(
            external_http_endpoints("http://a:4317, http://b:4317,", &None).unwrap(),
            ["http://a:4318", "http://b:4318"]
        );
        let given = Some("http://x:1,http://y:2".to_owned());
        assert_eq!(
            external_http_endpoints("http://a:4317,http://b:4317", &given).unwrap(),
            ["http://x:1", "http://y:2"]
        );
        let targets =
            Targets::start(&Some("http://a:4317,http://b:4317".into()), None, &[], 1, 1).unwrap();
        assert_eq!(targets.endpoints, ["http://a:4317", "http://b:4317"]);
        assert!(targets.servers.is_empty() && targets.api_keys.is_empty());
    }

    #[test]
    fn protocols_have_one_spelling_and_push_is_native() {
        use clap::ValueEnum;
        let parse = |text: &str| Protocol::from_str(text, false).unwrap();
        assert_eq!(parse("push"), Protocol::Native);
        assert_eq!(parse("otlp-http"), Protocol::OtlpHttp);
        for protocol in Protocol::value_variants() {
            let name = protocol_name(*protocol);
            assert_eq!(parse(&name), *protocol);
            let shown = protocol.to_possible_value().unwrap();
            assert_eq!(shown.get_name(), name);
        }
        assert_eq!(protocol_name(Protocol::Native), "native");
        assert_eq!(protocol_name(Protocol::Loki), "loki");
    }

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let samples = (1..=100).map(Duration::from_millis).collect();
        let latency = latency(samples);
        assert_eq!((latency.p50, latency.p99, latency.max), (50.0, 99.0, 100.0));
        let fine = super::latency((1..=1000).map(Duration::from_millis).collect());
        assert_eq!((fine.p99, fine.p999), (990.0, 999.0));
        assert_eq!(super::latency(Vec::new()).max, 0.0);
    }
}
