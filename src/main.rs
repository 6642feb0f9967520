//! The `loghaul` binary: parses the command line and hands over to the library.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use loghaul::cli::read::{QueryArgs, TailArgs};
use loghaul::config::{LogFormat, ServeConfig};
use loghaul::observability::logging;
use loghaul::send::SendArgs;
use loghaul::storage::{PoolOptions, Store};

// Every record is a handful of short-lived strings, so the server allocates and frees at the rate
// it ingests; mimalloc's thread-local free lists keep that cheap, where glibc's allocator does not.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Log ingestion over gRPC into SQLite or PostgreSQL, acknowledged only after commit.
#[derive(Parser)]
#[command(name = "loghaul", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service.
    Serve(Box<ServeConfig>),
    /// Apply database migrations and exit.
    Migrate(MigrateArgs),
    /// Ship lines from files or stdin (or follow a file with --follow) to a server, retrying
    /// without duplicates; exit 0 if all were accepted, 1 if some were rejected, 2 on failure.
    Send(SendArgs),
    /// Measure throughput, ack latency and memory over real gRPC.
    #[cfg(feature = "bench")]
    Bench(loghaul::bench::BenchArgs),
    /// Print a tenant's records, newest first, following pages up to --limit; exit 0 on success,
    /// 2 on failure.
    Query(QueryArgs),
    /// Follow a tenant's records as they are committed, oldest first, until interrupted or
    /// --limit; exit 0 on success, 2 on failure.
    Tail(TailArgs),
    /// Load synthetic rows into an empty PostgreSQL database and time Query pages (p50/p99).
    #[cfg(feature = "bench")]
    BenchQuery(loghaul::bench::query::BenchQueryArgs),
    /// Push records through one client shipper and report records/s acknowledged.
    #[cfg(feature = "bench")]
    BenchShipper(loghaul::bench::shipper::BenchShipperArgs),
    /// Soak: shippers push while the server is killed, stopped and restarted and its database
    /// connections are cut; prints acknowledged / stored / duplicated / lost; exit 1 unless none
    /// was lost or duplicated.
    #[cfg(feature = "bench")]
    Chaos(loghaul::bench::chaos::ChaosArgs),
}

#[derive(clap::Args)]
struct MigrateArgs {
    /// Database to migrate.
    #[arg(
        long,
        env = "LOGHAUL_DATABASE_URL",
        default_value = "sqlite://loghaul.db",
        hide_env_values = true
    )]
    database_url: String,
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(2);
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Serve(config) => {
                let serve_matches = matches
                    .subcommand_matches("serve")
                    .expect("clap matched the serve subcommand");
                serve((*config).merge_file(serve_matches)?).await?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Migrate(args) => {
                logging::init(LogFormat::Text);
                migrate(&args.database_url).await?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Send(args) => Ok(send(args).await),
            #[cfg(feature = "bench")]
            Command::BenchShipper(args) => {
                loghaul::bench::shipper::run(args).await?;
                Ok(ExitCode::SUCCESS)
            }
            #[cfg(feature = "bench")]
            Command::Bench(args) => {
                loghaul::bench::run(args).await?;
                Ok(ExitCode::SUCCESS)
            }
            #[cfg(feature = "bench")]
            Command::Chaos(args) => {
                let report = loghaul::bench::chaos::run(args).await?;
                Ok(if report.clean() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                })
            }
            Command::Query(args) => Ok(read_outcome(loghaul::cli::read::query(args).await)),
            Command::Tail(args) => Ok(read_outcome(loghaul::cli::read::tail(args).await)),
            #[cfg(feature = "bench")]
            Command::BenchQuery(args) => {
                logging::init(LogFormat::Text);
                loghaul::bench::query::run(args).await?;
                Ok(ExitCode::SUCCESS)
            }
        }
    });
    outcome.unwrap_or_else(|err: anyhow::Error| {
        eprintln!("error: {err:#}");
        ExitCode::FAILURE
    })
}

async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    logging::init(config.log_format);
    let listeners = loghaul::serve::Listeners::bind(&config).await?;
    loghaul::serve::run(config, listeners, shutdown_signal()).await?;
    Ok(())
}

async fn migrate(url: &str) -> anyhow::Result<()> {
    let pool = PoolOptions {
        max_connections: 1,
        acquire_timeout: std::time::Duration::from_secs(10),
    };
    let store = Store::connect(url, pool).await?;
    store.migrate().await?;
    tracing::info!(backend = store.backend(), "migrations applied");
    store.close().await;
    Ok(())
}

async fn send(args: SendArgs) -> ExitCode {
    let stop = Arc::new(AtomicBool::new(false));
    let signalled = {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            shutdown_signal().await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let outcome = loghaul::send::send(args, stop).await;
    signalled.abort();
    match outcome {
        Ok(summary) => {
            println!(
                "accepted {} rejected {}",
                summary.accepted, summary.rejected
            );
            for rejection in &summary.rejections {
                println!("  record {}: {}", rejection.record, rejection.reason);
            }
            if summary.rejected == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
    }
}

fn read_outcome(outcome: Result<usize, loghaul::cli::filter_args::ReadError>) -> ExitCode {
    match outcome {
        Ok(_) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
    }
}

/// Resolves on SIGTERM (Kubernetes) or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        ) {
            Ok(signal) => signal,
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGTERM; only Ctrl-C stops the service");
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
