//! `loghaul bench-query`: loads synthetic rows server-side (`INSERT … SELECT generate_series`) into
//! an empty PostgreSQL database and counts their volume rollup, then times reads through the same
//! code the service runs, printing p50/p99 per kind of query.
//!
//! - [`load`]: the synthetic rows and their rollup.
//! - [`pages`]: Query pages, one kind of filter at a time.
//! - [`logql`]: LogQL log queries and volume histograms, the rollup checked against a scan.
//! - [`report`]: the table rows as they are timed, and the run as one JSON object.

mod load;
mod logql;
mod pages;
mod report;

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{Duration, Instant};

use chrono::{DateTime, Days, TimeDelta, Utc};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};

use crate::query::limits::ReadLimits;
use crate::storage::postgres::create_partitions;
use crate::storage::{PoolOptions, Store};
use report::{Report, Setup};

/// Options of `loghaul bench-query`.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchQueryArgs {
    /// A scratch PostgreSQL database; its `logs` table must be empty (or use --reuse).
    #[arg(long, env = "LOGHAUL_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// Synthetic rows to load.
    #[arg(long, default_value_t = 10_000_000)]
    pub rows: u64,
    /// Days the rows are spread over, ending now (with --reuse: the table's).
    #[arg(long, default_value_t = 6)]
    pub days: u64,
    /// Tenants the rows are spread over (with --reuse: the table's).
    #[arg(long, default_value_t = 10)]
    pub tenants: u64,
    /// Queries timed per kind.
    #[arg(long, default_value_t = 200)]
    pub queries: usize,
    /// Records per page.
    #[arg(long, default_value_t = 100)]
    pub page_size: usize,
    /// Query the rows a previous run loaded instead of loading (the table must not be empty); the
    /// volume rollup is counted from them if it is empty.
    #[arg(long)]
    pub reuse: bool,
    /// Print the report as one JSON object on the last line.
    #[arg(long)]
    pub json: bool,
}

/// Why the benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryBenchError {
    /// The database failed.
    #[error("{0}")]
    Database(#[from] sqlx::Error),
    /// The store failed.
    #[error("{0}")]
    Store(#[from] crate::storage::StoreError),
    /// The arguments do not fit the database.
    #[error("{0}")]
    Usage(String),
    /// A LogQL query failed.
    #[error("{query}: {source}")]
    Loki {
        /// The query.
        query: String,
        /// Why.
        source: crate::error::HttpError,
    },
    /// A metric query was answered other than the way it is timed as.
    #[error("{query} was answered by {got}, not by the {want} it is timed as")]
    WrongSource {
        /// The query.
        query: String,
        /// Where its answer should have come from.
        want: logql::Source,
        /// What read its lines.
        got: &'static str,
    },
    /// The rollup and a scan counted the same lines differently.
    #[error("the rollup and a scan disagree on {query} over the last {range} of {tenant}: the rollup counted {rollup:?}, the scan {scan:?}")]
    Disagreement {
        /// The query the rollup answered.
        query: String,
        /// Its tenant.
        tenant: String,
        /// How far back it read.
        range: String,
        /// Lines per series, by the rollup.
        rollup: BTreeMap<String, f64>,
        /// Lines per series, by the scan.
        scan: BTreeMap<String, f64>,
    },
    /// A check of the rollup against a scan found no line to count.
    #[error("the rollup and a scan both count no line for {query} over the last {range} of {tenant}, which checks nothing")]
    NothingToCompare {
        /// The query the rollup answered.
        query: String,
        /// Its tenant.
        tenant: String,
        /// How far back it read.
        range: String,
    },
}

/// Runs the benchmark and prints its report.
pub async fn run(mut args: BenchQueryArgs) -> Result<(), QueryBenchError> {
    if !crate::storage::Backend::is_postgres(&args.database_url) {
        return Err(QueryBenchError::Usage(
            "bench-query needs a postgres:// URL".into(),
        ));
    }
    let store = Store::connect(
        &args.database_url,
        PoolOptions {
            max_connections: 2,
            acquire_timeout: Duration::from_secs(30),
        },
    )
    .await?;
    store.migrate().await?;
    let reader = store.reader(1, ReadLimits::default().timeout).await?;
    store.close().await;
    let options = PgConnectOptions::from_str(&args.database_url)?.disable_statement_logging();
    let mut conn = PgConnection::connect_with(&options).await?;
    let now = Utc::now();
    let start = now - TimeDelta::days(args.days as i64);
    create_partitions(
        &mut conn,
        start.date_naive() - Days::new(1),
        now.date_naive() + Days::new(1),
    )
    .await?;
    let has_rows: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM logs)")
        .fetch_one(&mut conn)
        .await?;
    let mut setup = Setup {
        days: args.days,
        tenants: args.tenants,
        ..Setup::default()
    };
    if args.reuse {
        if !has_rows {
            return Err(QueryBenchError::Usage(
                "--reuse: the logs table is empty".into(),
            ));
        }
    } else {
        if has_rows {
            return Err(QueryBenchError::Usage(
                "the logs table is not empty: bench-query loads synthetic rows, so point it at a scratch database (or pass --reuse)".into(),
            ));
        }
        setup.load_seconds = Some(load::rows(&mut conn, &args, start).await?);
    }
    let (start, newest): (DateTime<Utc>, DateTime<Utc>) =
        sqlx::query_as("SELECT min(ts), max(ts) FROM logs")
            .fetch_one(&mut conn)
            .await?;
    setup.rollup_seconds = load::rollup(&mut conn, start, newest).await?;
    if args.reuse {
        // The table's own spread, whatever the arguments say: the queries pick among its tenants.
        let tenants: i64 = sqlx::query_scalar("SELECT count(DISTINCT tenant) FROM log_volume")
            .fetch_one(&mut conn)
            .await?;
        args.tenants = tenants.max(1) as u64;
        args.days = ((newest - start).num_seconds() as u64).div_ceil(86_400);
        setup.days = args.days;
        setup.tenants = args.tenants;
    }
    // The steady state of a running service: autovacuum has summarized the BRIN ranges
    // (autosummarize) and analyzed the partitions and the rollup. Only the newest range or so is
    // unsummarized then; the loader wrote ten million rows faster than autovacuum looks.
    let vacuum = Instant::now();
    sqlx::query("VACUUM (ANALYZE) logs, log_volume")
        .execute(&mut conn)
        .await?;
    setup.vacuum_seconds = vacuum.elapsed().as_secs_f64();
    println!("vacuum analyze: {:.1}s", setup.vacuum_seconds);
    setup.rows = sqlx::query_scalar("SELECT count(*) FROM logs")
        .fetch_one(&mut conn)
        .await?;
    setup.logs_size =
        sqlx::query_scalar("SELECT pg_size_pretty(sum(pg_total_relation_size(relid))::bigint) FROM pg_partition_tree('logs') WHERE isleaf")
            .fetch_one(&mut conn)
            .await?;
    println!(
        "table: {} rows over {} days, {} tenants, {} with indexes",
        setup.rows, args.days, args.tenants, setup.logs_size
    );
    (setup.rollup_rows, setup.rollup_size) = sqlx::query_as(
        "SELECT count(*), pg_size_pretty(pg_total_relation_size('log_volume')) FROM log_volume",
    )
    .fetch_one(&mut conn)
    .await?;
    println!(
        "rollup: {} rows (tenant, minute, service, severity), {} with its index",
        setup.rollup_rows, setup.rollup_size
    );
    conn.close().await?;
    let mut report = Report {
        setup,
        ..Report::default()
    };
    let reads = logql::reads(&reader);
    let timed = async {
        // A rollup that disagrees with the rows stops the run before anything is timed.
        logql::check_agreement(&reads, newest, &mut report).await?;
        pages::run(&reader, &args, start, newest, &mut report).await?;
        logql::run(&reads, &args, newest, &mut report).await
    }
    .await;
    reader.close().await;
    timed?;
    if args.json {
        println!("{}", report.json());
    }
    Ok(())
}
