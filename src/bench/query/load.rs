//! The synthetic rows: loaded server-side (`INSERT … SELECT generate_series`), spread evenly over
//! the days, tenants and services, so that no row crosses the network.

use std::time::Instant;

use chrono::{DateTime, TimeDelta, Utc};
use sqlx::PgConnection;

use super::{BenchError, BenchQueryArgs};

/// Services the rows are spread over (`service-0` …).
pub const SERVICES: u32 = 20;

/// Rows per loading statement, so progress shows and no statement runs for minutes.
const LOAD_CHUNK: u64 = 1_000_000;

const LOAD_SQL: &str = "INSERT INTO logs (tenant, ts, received_at, severity, service, message, attributes, trace_id, span_id) \
    SELECT 'bench-' || (g % $3), t, t, \
           (ARRAY[1, 5, 9, 9, 9, 9, 9, 13, 17, 21])[1 + (g / 101) % 10]::smallint, \
           'service-' || ((g / 11) % $6), \
           'request ' || g || ' handled in ' || ((g / 13) % 1000) || ' ms', \
           jsonb_build_object('region', 'r' || ((g / 7) % 5), 'order', (g % 10000)::text), \
           md5(g::text), substr(md5(g::text), 1, 16) \
    FROM generate_series($1::bigint, $2::bigint) AS g, \
         LATERAL (SELECT $4::timestamptz + (g * $5::double precision) * interval '1 microsecond') AS at(t)";

/// Loads `args.rows` rows from `start` over `args.days`; returns the seconds it took.
pub async fn rows(
    conn: &mut PgConnection,
    args: &BenchQueryArgs,
    start: DateTime<Utc>,
) -> Result<f64, BenchError> {
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
            .bind(i64::from(SERVICES))
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
    Ok(seconds)
}
