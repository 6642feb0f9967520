//! The synthetic rows: loaded server-side (`INSERT … SELECT generate_series`), spread evenly over
//! the days, tenants and services, so that no row crosses the network; and their volume rollup,
//! counted from them as the batcher counts each batch.
//!
//! A message is logfmt, `msg="request 42 handled in 7 ms" status=200`, so that `| logfmt` has
//! fields to read; 1 in 10 has a status of 500 or more.

use std::time::Instant;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use sqlx::PgConnection;

use super::{BenchQueryArgs, QueryBenchError};

/// Services the rows are spread over (`service-0` …).
pub(super) const SERVICES: u32 = 20;

/// Rows per loading statement, so progress shows and no statement runs for minutes.
const LOAD_CHUNK: u64 = 1_000_000;

const LOAD_SQL: &str = "INSERT INTO logs (tenant, ts, received_at, severity, service, message, attributes, trace_id_bytes, span_id_bytes) \
    SELECT 'bench-' || (g % $3), t, t, \
           (ARRAY[1, 5, 9, 9, 9, 9, 9, 13, 17, 21])[1 + (g / 101) % 10]::smallint, \
           'service-' || ((g / 11) % $6), \
           'msg=\"request ' || g || ' handled in ' || ((g / 13) % 1000) || ' ms\" status=' \
               || (ARRAY[200, 200, 200, 200, 200, 200, 200, 201, 404, 503])[1 + (g / 17) % 10], \
           jsonb_build_object('region', 'r' || ((g / 7) % 5), 'order', (g % 10000)::text), \
           decode(md5(g::text), 'hex'), decode(substr(md5(g::text), 1, 16), 'hex') \
    FROM generate_series($1::bigint, $2::bigint) AS g, \
         LATERAL (SELECT $4::timestamptz + (g * $5::double precision) * interval '1 microsecond') AS at(t)";

/// Loads `args.rows` rows from `start` over `args.days`; returns the seconds it took.
pub(super) async fn rows(
    conn: &mut PgConnection,
    args: &BenchQueryArgs,
    start: DateTime<Utc>,
) -> Result<f64, QueryBenchError> {
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

/// The rollup's rows of the logs in `[$1, $2)`, as the batcher adds a batch's: one per (tenant,
/// minute, service, severity), with the records and the bytes of their messages.
const ROLLUP_SQL: &str = "INSERT INTO log_volume (tenant, minute, service, severity, writer, records, bytes) \
    SELECT tenant, date_trunc('minute', ts AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', service, severity, \
           pg_backend_pid(), count(*), sum(octet_length(message)) \
    FROM logs WHERE ts >= $1 AND ts < $2 \
    GROUP BY 1, 2, 3, 4";

/// Fills `log_volume` from the logs between `oldest` and `newest` (inclusive) unless it holds
/// rows already; returns the seconds it took, or `None` when it was filled.
pub(super) async fn rollup(
    conn: &mut PgConnection,
    oldest: DateTime<Utc>,
    newest: DateTime<Utc>,
) -> Result<Option<f64>, QueryBenchError> {
    let filled: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM log_volume)")
        .fetch_one(&mut *conn)
        .await?;
    if filled {
        println!("rollup: already filled");
        return Ok(None);
    }
    let started = Instant::now();
    // A day at a time, from midnight: each statement's groups are whole minutes no other
    // statement has, and each reads one partition.
    let mut from = oldest
        .duration_trunc(TimeDelta::days(1))
        .expect("a day rounds");
    while from <= newest {
        let to = from + TimeDelta::days(1);
        sqlx::query(ROLLUP_SQL)
            .bind(from)
            .bind(to)
            .execute(&mut *conn)
            .await?;
        from = to;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "rollup: log_volume counted from the rows in {seconds:.1}s (INSERT … SELECT … GROUP BY)"
    );
    Ok(Some(seconds))
}
