//! `loghaul bench-query`: loads synthetic rows server-side (`INSERT … SELECT generate_series`) into
//! an empty PostgreSQL database, then times pages read through the same code the Query service
//! uses, printing p50/p99 per kind of query.

use std::time::{Duration, Instant};

use chrono::{DateTime, Days, TimeDelta, Utc};
use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};

use crate::model::filter::Filter;
use crate::query::limits::ReadLimits;
use crate::storage::postgres::create_partitions;
use crate::storage::{PoolOptions, Reader, Store};

/// Options of `loghaul bench-query`.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchQueryArgs {
    /// A scratch PostgreSQL database; its `logs` table must be empty (or use --reuse).
    #[arg(long, env = "LOGHAUL_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// Synthetic rows to load.
    #[arg(long, default_value_t = 10_000_000)]
    pub rows: u64,
    /// Days the rows are spread over, ending now.
    #[arg(long, default_value_t = 6)]
    pub days: u64,
    /// Tenants the rows are spread over.
    #[arg(long, default_value_t = 10)]
    pub tenants: u64,
    /// Queries timed per kind.
    #[arg(long, default_value_t = 200)]
    pub queries: usize,
    /// Records per page.
    #[arg(long, default_value_t = 100)]
    pub page_size: usize,
    /// Query the rows a previous run loaded instead of loading (the table must not be empty).
    #[arg(long)]
    pub reuse: bool,
}

/// Why the benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The database failed.
    #[error("{0}")]
    Database(#[from] sqlx::Error),
    /// The store failed.
    #[error("{0}")]
    Store(#[from] crate::storage::StoreError),
    /// The arguments do not fit the database.
    #[error("{0}")]
    Usage(String),
}

/// Queries timed for scenarios that scan a tenant's whole history (no time bound, no match).
const FULL_SCAN_QUERIES: usize = 5;

/// Rows per loading statement, so progress shows and no statement runs for minutes.
const LOAD_CHUNK: u64 = 1_000_000;

const LOAD_SQL: &str = "INSERT INTO logs (tenant, ts, received_at, severity, service, message, attributes, trace_id, span_id) \
    SELECT 'bench-' || (g % $3), t, t, \
           (ARRAY[1, 5, 9, 9, 9, 9, 9, 13, 17, 21])[1 + (g / 101) % 10]::smallint, \
           'service-' || ((g / 11) % 20), \
           'request ' || g || ' handled in ' || ((g / 13) % 1000) || ' ms', \
           jsonb_build_object('region', 'r' || ((g / 7) % 5), 'order', (g % 10000)::text), \
           md5(g::text), substr(md5(g::text), 1, 16) \
    FROM generate_series($1::bigint, $2::bigint) AS g, \
         LATERAL (SELECT $4::timestamptz + (g * $5::double precision) * interval '1 microsecond') AS at(t)";

/// Runs the benchmark and prints its report.
pub async fn run(args: BenchQueryArgs) -> Result<(), BenchError> {
    if !crate::storage::Backend::is_postgres(&args.database_url) {
        return Err(BenchError::Usage(
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
    let start = if args.reuse {
        if !has_rows {
            return Err(BenchError::Usage("--reuse: the logs table is empty".into()));
        }
        sqlx::query_scalar::<_, DateTime<Utc>>("SELECT min(ts) FROM logs")
            .fetch_one(&mut conn)
            .await?
    } else {
        if has_rows {
            return Err(BenchError::Usage(
                "the logs table is not empty: bench-query loads synthetic rows, so point it at a scratch database (or pass --reuse)".into(),
            ));
        }
        load(&mut conn, &args, start).await?;
        start
    };
    // The steady state of a running service: autovacuum has summarized the BRIN ranges
    // (autosummarize) and analyzed the partitions. Only the newest range or so is unsummarized
    // then; the loader wrote ten million rows faster than autovacuum looks.
    let vacuum = Instant::now();
    sqlx::query("VACUUM (ANALYZE) logs")
        .execute(&mut conn)
        .await?;
    println!("vacuum analyze: {:.1}s", vacuum.elapsed().as_secs_f64());
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM logs")
        .fetch_one(&mut conn)
        .await?;
    let size: String =
        sqlx::query_scalar("SELECT pg_size_pretty(sum(pg_total_relation_size(inhrelid))::bigint) FROM pg_inherits WHERE inhparent = 'logs'::regclass")
            .fetch_one(&mut conn)
            .await?;
    println!(
        "table: {rows} rows over {} days, {} tenants, {size} with indexes",
        args.days, args.tenants
    );
    conn.close().await?;
    query(&reader, &args, start).await
}

async fn load(
    conn: &mut PgConnection,
    args: &BenchQueryArgs,
    start: DateTime<Utc>,
) -> Result<(), BenchError> {
    let span_micros = TimeDelta::days(args.days as i64)
        .num_microseconds()
        .expect("days fit") as f64;
    let step = span_micros / args.rows.max(1) as f64;
    let started = Instant::now();
    let mut first = 0;
    while first < args.rows {
        let last = (first + LOAD_CHUNK).min(args.rows) - 1;
        sqlx::query(LOAD_SQL)
            .bind(first as i64)
            .bind(last as i64)
            .bind(args.tenants.max(1) as i64)
            .bind(start)
            .bind(step)
            .execute(&mut *conn)
            .await?;
        first = last + 1;
        eprintln!(
            "loaded {first} rows in {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "load: {} rows in {seconds:.1}s ({:.0} rows/s, server-side INSERT … SELECT generate_series)",
        args.rows,
        args.rows as f64 / seconds
    );
    Ok(())
}

/// One kind of query: a filter and where its pages start.
struct Scenario {
    name: &'static str,
    filter: fn(&mut fastrand::Rng, DateTime<Utc>, DateTime<Utc>) -> Filter,
    /// Read the second page (through the cursor of the first) instead of the first.
    second_page: bool,
}

/// The worst case, timed separately and fewer times: a filter nothing matches and no time range,
/// so every window down to the oldest row is read.
const WORST: Scenario = Scenario {
    name: "no match, no time range (worst case)",
    filter: |_, _, _| Filter {
        contains: Some("no such text".into()),
        ..Filter::default()
    },
    second_page: false,
};

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "newest page, no filter",
            filter: |_, _, _| Filter::default(),
            second_page: false,
        },
        Scenario {
            name: "second page via cursor",
            filter: |_, _, _| Filter::default(),
            second_page: true,
        },
        Scenario {
            name: "page ending at a random time (to=…)",
            filter: |rng, start, now| Filter {
                to: Some(start + TimeDelta::seconds(rng.i64(3600..(now - start).num_seconds()))),
                ..Filter::default()
            },
            second_page: false,
        },
        Scenario {
            name: "one service, min severity warn",
            filter: |rng, _, _| Filter {
                services: vec![format!("service-{}", rng.u32(0..20))],
                min_severity: 13,
                ..Filter::default()
            },
            second_page: false,
        },
        Scenario {
            name: "attribute region=rN",
            filter: |rng, _, _| Filter {
                attributes: [("region".to_string(), format!("r{}", rng.u32(0..5)))].into(),
                ..Filter::default()
            },
            second_page: false,
        },
        Scenario {
            name: "no match, last hour (from=now-1h)",
            filter: |_, _, now| Filter {
                from: Some(now - TimeDelta::hours(1)),
                contains: Some("no such text".into()),
                ..Filter::default()
            },
            second_page: false,
        },
        Scenario {
            name: "message contains (1 in 1000 rows)",
            filter: |rng, _, _| Filter {
                contains: Some(format!("handled in {} ms", rng.u32(0..1000))),
                ..Filter::default()
            },
            second_page: false,
        },
    ]
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

async fn query(
    reader: &Reader,
    args: &BenchQueryArgs,
    start: DateTime<Utc>,
) -> Result<(), BenchError> {
    let now = Utc::now();
    let mut rng = fastrand::Rng::with_seed(7);
    println!(
        "{:<40} {:>8} {:>10} {:>10} {:>10} {:>8}",
        "query (page of ".to_string() + &args.page_size.to_string() + ", one tenant)",
        "queries",
        "p50",
        "p99",
        "max",
        "rows"
    );
    let mut all = scenarios();
    all.push(WORST);
    for scenario in all {
        let count = if scenario.name == WORST.name {
            FULL_SCAN_QUERIES.min(args.queries)
        } else {
            args.queries
        };
        let mut times = Vec::with_capacity(count);
        let mut returned = 0;
        for _ in 0..count {
            let tenant = format!("bench-{}", rng.u64(0..args.tenants.max(1)));
            let filter = (scenario.filter)(&mut rng, start, now);
            let mut after = None;
            // One row more than the page, as the service asks, to know whether a next page exists.
            let budget = ReadLimits::default().budget(args.page_size + 1);
            if scenario.second_page {
                let first = reader.page(&tenant, &filter, None, budget).await?;
                after = first
                    .rows
                    .get(args.page_size.saturating_sub(1))
                    .map(|row| row.cursor());
            }
            let began = Instant::now();
            let rows = reader.page(&tenant, &filter, after, budget).await?.rows;
            times.push(began.elapsed());
            returned += rows.len().min(args.page_size);
        }
        times.sort();
        let ms = |duration: Duration| format!("{:.2}ms", duration.as_secs_f64() * 1000.0);
        println!(
            "{:<40} {:>8} {:>10} {:>10} {:>10} {:>8}",
            scenario.name,
            times.len(),
            ms(percentile(&times, 0.50)),
            ms(percentile(&times, 0.99)),
            ms(*times.last().unwrap_or(&Duration::ZERO)),
            returned / times.len().max(1)
        );
    }
    reader.close().await;
    Ok(())
}
