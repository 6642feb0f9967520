//! LogQL reads timed through [`Reads`], the code behind Loki's query API: log queries (a line
//! filter, a regular expression PostgreSQL checks and the same one only the engine can, `| logfmt`
//! with a label filter) and Grafana Explore's volume histogram, answered from the per-minute
//! rollup and, to show what that saves, by a scan of the same rows. Before anything is timed, the
//! rollup and the scan must count the same lines.
//!
//! The ranges end just after the newest row, so that a reused table is read as it was loaded, and
//! a metric query's steps fall on whole minutes, the rollup's resolution.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use tokio_util::sync::CancellationToken;

use super::load::SERVICES;
use super::report::{Agreement, Report, Samples};
use super::{BenchQueryArgs, QueryBenchError};
use crate::error::HttpError;
use crate::loki::api::metrics::LokiMetrics;
use crate::loki::logql::eval::{Series, Steps, Value};
use crate::loki::logql::plan::Placement;
use crate::loki::logql::Query;
use crate::loki::read::{nanos, Stats, TimeRange};
use crate::model::selection::Order;
use crate::observability::metrics::Registry;
use crate::query::admission::{Admission, AdmissionLimits};
use crate::query::limits::ReadLimits;
use crate::query::metrics::QueryMetrics;
use crate::query::tail::TailConfig;
use crate::query::Reads;
use crate::storage::Reader;

/// Stands for the service each query picks at random.
const ANY_SERVICE: &str = "service-N";

/// One service's selector.
const ONE_SERVICE: &str = r#"{service_name="service-N"}"#;

/// Every service of the tenant, as Grafana writes a selector that must narrow something.
const ALL_SERVICES: &str = r#"{service_name=~".+"}"#;

/// Queries timed for a kind that scans every row of its range (the volume without the rollup).
const SCAN_QUERIES: usize = 20;

/// The volume histograms timed: selector, hours back, step in minutes (the range function's
/// range too, as Grafana's `$__auto` makes it).
const VOLUMES: [(&str, i64, i64); 4] = [
    (ONE_SERVICE, 1, 1),
    (ONE_SERVICE, 6, 5),
    (ONE_SERVICE, 24, 15),
    (ALL_SERVICES, 24, 15),
];

/// Where a metric query's answer comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The per-minute `log_volume` rollup.
    Rollup,
    /// The rows themselves.
    Scan,
}

impl Source {
    /// Its name in the table and in errors.
    pub fn name(self) -> &'static str {
        match self {
            Source::Rollup => "rollup",
            Source::Scan => "scan",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What read a metric query's lines, by what `stats` counted.
fn answered_by(stats: &Stats) -> &'static str {
    match (stats.volume_rows > 0, stats.lines_scanned > 0) {
        (true, false) => Source::Rollup.name(),
        (false, true) => Source::Scan.name(),
        (true, true) => "rollup and a scan",
        (false, false) => "nothing (no row read)",
    }
}

/// What a scenario asks for.
#[derive(Clone, Copy, Debug)]
enum Ask {
    /// The newest `limit` lines of a log query.
    Lines { limit: usize },
    /// A metric query at `step`, which must be answered from `source`.
    Metric { step: TimeDelta, source: Source },
}

/// One kind of LogQL query.
#[derive(Clone, Debug)]
struct Scenario {
    name: String,
    /// The query, [`ANY_SERVICE`] standing for the service each run picks.
    query: String,
    /// How far back from the end it reads.
    range: TimeDelta,
    ask: Ask,
}

/// Grafana Explore's volume histogram of `selector` at `step` minutes; with `scan`, a line filter
/// every line passes, which asks the same question but leaves the rollup out.
fn volume_query(selector: &str, step: i64, scan: bool) -> String {
    let filter = if scan { r#" |= """# } else { "" };
    format!(
        "sum by (level, detected_level) (count_over_time({selector}{filter} | drop __error__ [{step}m]))"
    )
}

fn volume_scenario(selector: &str, hours: i64, step: i64, source: Source) -> Scenario {
    let whose = if selector == ALL_SERVICES {
        "all services"
    } else {
        "one service"
    };
    Scenario {
        name: format!("volume {hours}h step {step}m, {whose}, {source}"),
        query: volume_query(selector, step, source == Source::Scan),
        range: TimeDelta::hours(hours),
        ask: Ask::Metric {
            step: TimeDelta::minutes(step),
            source,
        },
    }
}

fn scenarios() -> Vec<Scenario> {
    let lines = |name: &str, pipeline: &str, hours: i64, limit: usize| Scenario {
        name: format!("{name}, {hours}h, newest {limit}"),
        query: format!("{ONE_SERVICE} {pipeline}"),
        range: TimeDelta::hours(hours),
        ask: Ask::Lines { limit },
    };
    let handled = r#"|= "handled""#;
    let mut all = vec![
        lines(handled, handled, 1, 100),
        lines(handled, handled, 1, 1000),
        lines(handled, handled, 24, 100),
        lines(handled, handled, 24, 1000),
        // The same lines (1 in 10): PostgreSQL reads the first expression as the engine does;
        // the second's repetition it is not given, so every row of the service comes back.
        lines("|~ regex, in SQL", r#"|~ "handled in [0-9]*7 ms""#, 24, 100),
        lines(
            "|~ regex, engine only",
            r"|~ `handled in \d{0,2}7 ms`",
            24,
            100,
        ),
        lines(
            "| logfmt | status >= 500",
            "| logfmt | status >= 500",
            24,
            100,
        ),
    ];
    for (selector, hours, step) in VOLUMES {
        for source in [Source::Rollup, Source::Scan] {
            all.push(volume_scenario(selector, hours, step, source));
        }
    }
    all
}

/// The first instant after `newest` on a whole multiple of `step`, in nanoseconds.
fn end_after(newest: DateTime<Utc>, step: TimeDelta) -> i64 {
    let step = step.num_nanoseconds().expect("a step of minutes fits");
    (nanos(newest).div_euclid(step) + 1) * step
}

/// What one query did.
struct Outcome {
    took: Duration,
    stats: Stats,
    /// A metric query's answer.
    value: Option<Value>,
}

impl Scenario {
    /// Runs the scenario once for `tenant` and `service` over its range, ending after `newest`.
    async fn run(
        &self,
        reads: &Reads,
        tenant: &Arc<str>,
        service: &str,
        newest: DateTime<Utc>,
    ) -> Result<Outcome, QueryBenchError> {
        let text = self.query.replace(ANY_SERVICE, service);
        let failed = |source: HttpError| QueryBenchError::Loki {
            query: text.clone(),
            source,
        };
        let parsed = crate::loki::logql::parse(&text).map_err(|err| failed(err.into()))?;
        match (self.ask, parsed) {
            (Ask::Lines { limit }, Query::Log(query)) => {
                let to = DateTime::from_timestamp_nanos(end_after(newest, TimeDelta::minutes(1)));
                let range = TimeRange {
                    from: to - self.range,
                    to,
                };
                let began = Instant::now();
                let (_, stats) = reads
                    .loki_logs(
                        tenant,
                        &query,
                        range,
                        limit,
                        Order::Newest,
                        &mut reads.charge(tenant),
                    )
                    .await
                    .map_err(failed)?;
                Ok(Outcome {
                    took: began.elapsed(),
                    stats,
                    value: None,
                })
            }
            (Ask::Metric { step, source }, Query::Metric(expr)) => {
                let end = end_after(newest, step);
                let range = self.range.num_nanoseconds().expect("hours fit");
                let step = step.num_nanoseconds().expect("minutes fit");
                let steps = Steps::new(end - range, end, step).map_err(|err| failed(err.into()))?;
                let sources = LokiMetrics::register(&Registry::new()).metric_sources;
                let began = Instant::now();
                let (value, stats) = reads
                    .loki_metric(
                        tenant,
                        &expr,
                        steps,
                        Placement::Exact,
                        &mut reads.charge(tenant),
                        &sources,
                    )
                    .await
                    .map_err(failed)?;
                let took = began.elapsed();
                let got = answered_by(&stats);
                if got != source.name() {
                    return Err(QueryBenchError::WrongSource {
                        query: text,
                        want: source,
                        got,
                    });
                }
                Ok(Outcome {
                    took,
                    stats,
                    value: Some(value),
                })
            }
            _ => Err(QueryBenchError::Usage(format!(
                "{text}: the scenario asks for the other kind of query"
            ))),
        }
    }
}

/// Lines per series (by its labels) of a metric query's answer, every step together.
fn totals(value: Option<Value>) -> BTreeMap<String, f64> {
    let series = match value {
        Some(Value::Matrix(series)) => series,
        _ => Vec::new(),
    };
    series
        .into_iter()
        .map(|Series { labels, points }| {
            let name = labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            (name, points.into_iter().flatten().sum())
        })
        .collect()
}

/// What the LogQL queries are read through: one read at a time, within the read limits of a
/// server with the default settings.
pub(super) fn reads(reader: &Reader) -> Reads {
    let metrics = Arc::new(QueryMetrics::register(&Registry::new()));
    Reads::new(
        reader.clone(),
        ReadLimits::default(),
        Admission::new(
            AdmissionLimits {
                reads_per_tenant: 1,
                tails: 1,
                tails_per_tenant: 1,
            },
            &metrics,
        ),
        TailConfig::default(),
        CancellationToken::new(),
        metrics,
    )
}

/// Checks, for every volume histogram timed, that the rollup and a scan count the same lines per
/// series over the same range, on the first tenant and service.
pub(super) async fn check_agreement(
    reads: &Reads,
    newest: DateTime<Utc>,
    report: &mut Report,
) -> Result<(), QueryBenchError> {
    let tenant: Arc<str> = "bench-0".into();
    let service = "service-0";
    for (selector, hours, step) in VOLUMES {
        let rollup = volume_scenario(selector, hours, step, Source::Rollup);
        let scan = volume_scenario(selector, hours, step, Source::Scan);
        let by_rollup = totals(rollup.run(reads, &tenant, service, newest).await?.value);
        let by_scan = totals(scan.run(reads, &tenant, service, newest).await?.value);
        let query = rollup.query.replace(ANY_SERVICE, service);
        let range = format!("{hours}h");
        if by_rollup != by_scan {
            return Err(QueryBenchError::Disagreement {
                query,
                tenant: tenant.to_string(),
                range,
                rollup: by_rollup,
                scan: by_scan,
            });
        }
        let total: f64 = by_rollup.values().sum();
        if total == 0.0 {
            return Err(QueryBenchError::NothingToCompare {
                query,
                tenant: tenant.to_string(),
                range,
            });
        }
        println!(
            "rollup = scan: {total:.0} lines in {} series, {hours}h of {tenant}, {}",
            by_rollup.len(),
            if selector == ALL_SERVICES {
                "all services"
            } else {
                service
            }
        );
        report.agreements.push(Agreement {
            query,
            tenant: tenant.to_string(),
            range,
            rollup: total,
            scan: total,
        });
    }
    Ok(())
}

/// Times every kind of LogQL query of a random tenant and service over rows up to `newest`,
/// adding each to `report`.
pub(super) async fn run(
    reads: &Reads,
    args: &BenchQueryArgs,
    newest: DateTime<Utc>,
    report: &mut Report,
) -> Result<(), QueryBenchError> {
    let all = scenarios();
    println!("LogQL queries ({ANY_SERVICE}: a random service of the tenant):");
    for scenario in &all {
        println!("  {:<44} {}", scenario.name, scenario.query);
    }
    Report::logql_header();
    let mut rng = fastrand::Rng::with_seed(11);
    for scenario in &all {
        let count = match scenario.ask {
            Ask::Metric {
                source: Source::Scan,
                ..
            } => SCAN_QUERIES.min(args.queries),
            _ => args.queries,
        };
        let mut samples = Samples::default();
        for _ in 0..count {
            let tenant: Arc<str> = format!("bench-{}", rng.u64(0..args.tenants.max(1))).into();
            let service = format!("service-{}", rng.u32(0..SERVICES));
            let outcome = scenario.run(reads, &tenant, &service, newest).await?;
            samples.add(outcome.took, outcome.stats.returned);
            samples.read(outcome.stats.lines_scanned, outcome.stats.volume_rows);
        }
        report.push(samples.timing("logql", scenario.name.clone(), Some(scenario.query.clone())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loki::logql::plan;

    #[test]
    fn every_query_parses_and_each_volume_goes_where_it_is_meant_to() {
        let newest = Utc::now();
        for scenario in scenarios() {
            let text = scenario.query.replace(ANY_SERVICE, "service-3");
            let parsed =
                crate::loki::logql::parse(&text).unwrap_or_else(|err| panic!("{text}: {err}"));
            match (scenario.ask, parsed) {
                (Ask::Lines { .. }, Query::Log(_)) => {}
                (Ask::Metric { step, source }, Query::Metric(expr)) => {
                    let end = end_after(newest, step);
                    let steps = Steps::new(
                        end - scenario.range.num_nanoseconds().unwrap(),
                        end,
                        step.num_nanoseconds().unwrap(),
                    )
                    .unwrap();
                    let planned = plan::volume_plan(&expr, steps, Placement::Exact).is_some();
                    assert_eq!(planned, source == Source::Rollup, "{text}");
                }
                (_, other) => panic!("{text} parsed as {other:?}"),
            }
        }
    }

    #[test]
    fn ranges_end_on_the_first_step_after_the_newest_row() {
        let newest = DateTime::from_timestamp(3600 * 5 + 61, 0).unwrap();
        let end = end_after(newest, TimeDelta::minutes(15));
        assert_eq!(end, (3600 * 5 + 900) * 1_000_000_000);
        let on_a_step = DateTime::from_timestamp(900, 0).unwrap();
        assert_eq!(
            end_after(on_a_step, TimeDelta::minutes(15)),
            1800 * 1_000_000_000,
            "a row on the step is before the end"
        );
    }

    #[test]
    fn the_source_is_told_by_what_was_read() {
        let read = |lines_scanned, volume_rows| Stats {
            lines_scanned,
            volume_rows,
            ..Stats::default()
        };
        assert_eq!(answered_by(&read(0, 3)), "rollup");
        assert_eq!(answered_by(&read(5, 0)), "scan");
        assert_ne!(answered_by(&read(0, 0)), "scan");
    }
}
