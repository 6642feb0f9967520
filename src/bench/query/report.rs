//! What `bench-query` measured: each kind of query's latencies, printed as a table row as soon as
//! it is timed, and the whole run as one JSON object for scripts.

use std::time::Duration;

use serde::Serialize;

/// How the table was made before anything was timed.
#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct Setup {
    /// Rows in `logs`.
    pub rows: i64,
    /// Days the rows were spread over.
    pub days: u64,
    /// Tenants the rows were spread over.
    pub tenants: u64,
    /// Seconds loading took; `None` when the rows were reused.
    pub load_seconds: Option<f64>,
    /// Seconds filling the volume rollup took; `None` when it was already filled.
    pub rollup_seconds: Option<f64>,
    /// Seconds `VACUUM (ANALYZE)` took.
    pub vacuum_seconds: f64,
    /// The size of `logs` with its indexes, as PostgreSQL prints it.
    pub logs_size: String,
    /// Rows in `log_volume`.
    pub rollup_rows: i64,
    /// The size of `log_volume` with its index, as PostgreSQL prints it.
    pub rollup_size: String,
}

/// One kind of query, timed.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Timing {
    /// `page` (a Query page) or `logql`.
    pub kind: &'static str,
    /// What the table calls it.
    pub name: String,
    /// The LogQL query, with `service-N` where each run picks a service.
    pub query: Option<String>,
    /// Queries timed.
    pub queries: usize,
    /// Median, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile, in milliseconds.
    pub p99_ms: f64,
    /// Slowest, in milliseconds.
    pub max_ms: f64,
    /// Records, lines or points returned per query, on average.
    pub returned: f64,
    /// Rows the database sent per query, on average (LogQL only).
    pub lines_scanned: Option<f64>,
    /// Rollup rows read per query, on average (LogQL only).
    pub volume_rows: Option<f64>,
}

/// The latencies and counts of one kind of query as they are gathered.
#[derive(Debug, Default)]
pub(super) struct Samples {
    times: Vec<Duration>,
    returned: u64,
    lines_scanned: u64,
    volume_rows: u64,
}

impl Samples {
    /// Adds one query that took `time` and returned `returned` records, lines or points.
    pub(super) fn add(&mut self, time: Duration, returned: u64) {
        self.times.push(time);
        self.returned += returned;
    }

    /// Adds what one LogQL query read.
    pub(super) fn read(&mut self, lines_scanned: u64, volume_rows: u64) {
        self.lines_scanned += lines_scanned;
        self.volume_rows += volume_rows;
    }

    /// The timing of these samples, under `name`.
    pub(super) fn timing(
        mut self,
        kind: &'static str,
        name: String,
        query: Option<String>,
    ) -> Timing {
        self.times.sort();
        let count = self.times.len();
        let per_query = |total: u64| total as f64 / count.max(1) as f64;
        let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
        let logql = query.is_some();
        Timing {
            kind,
            name,
            query,
            queries: count,
            p50_ms: ms(percentile(&self.times, 0.50)),
            p99_ms: ms(percentile(&self.times, 0.99)),
            max_ms: ms(self.times.last().copied().unwrap_or_default()),
            returned: per_query(self.returned),
            lines_scanned: logql.then(|| per_query(self.lines_scanned)),
            volume_rows: logql.then(|| per_query(self.volume_rows)),
        }
    }
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

/// The rollup and a scan counting the same lines, checked before anything is timed.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Agreement {
    /// The query the rollup answered.
    pub query: String,
    /// Its tenant.
    pub tenant: String,
    /// The range, as the table names it.
    pub range: String,
    /// Lines the rollup counted, all series and steps together.
    pub rollup: f64,
    /// Lines the scan counted.
    pub scan: f64,
}

/// The whole run, printed as it goes and, with `--json`, as one object at the end.
#[derive(Debug, Default, Serialize)]
pub(super) struct Report {
    /// How the table was made.
    pub setup: Setup,
    /// Every kind of query, in the order timed.
    pub timings: Vec<Timing>,
    /// The rollup-against-scan checks.
    pub agreements: Vec<Agreement>,
}

fn ms(value: f64) -> String {
    format!("{value:.2}ms")
}

impl Report {
    /// Prints the header of the Query pages' table.
    pub(super) fn page_header(page_size: usize) {
        println!(
            "{:<40} {:>8} {:>10} {:>10} {:>10} {:>8}",
            format!("query (page of {page_size}, one tenant)"),
            "queries",
            "p50",
            "p99",
            "max",
            "rows"
        );
    }

    /// Prints the header of the LogQL table.
    pub(super) fn logql_header() {
        println!(
            "{:<44} {:>7} {:>10} {:>10} {:>10} {:>8} {:>9} {:>7}",
            "LogQL (one tenant)", "queries", "p50", "p99", "max", "returned", "scanned", "rollup"
        );
    }

    /// Keeps `timing` and prints its row.
    pub(super) fn push(&mut self, timing: Timing) {
        match (timing.lines_scanned, timing.volume_rows) {
            (Some(scanned), Some(rollup)) => println!(
                "{:<44} {:>7} {:>10} {:>10} {:>10} {:>8.0} {:>9.0} {:>7.0}",
                timing.name,
                timing.queries,
                ms(timing.p50_ms),
                ms(timing.p99_ms),
                ms(timing.max_ms),
                timing.returned,
                scanned,
                rollup
            ),
            _ => println!(
                "{:<40} {:>8} {:>10} {:>10} {:>10} {:>8.0}",
                timing.name,
                timing.queries,
                ms(timing.p50_ms),
                ms(timing.p99_ms),
                ms(timing.max_ms),
                timing.returned.floor()
            ),
        }
        self.timings.push(timing);
    }

    /// The report as one line of JSON.
    pub(super) fn json(&self) -> String {
        serde_json::to_string(self).expect("the report serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_sample_at_or_above_the_fraction() {
        let times: Vec<Duration> = (1..=200).map(Duration::from_millis).collect();
        assert_eq!(percentile(&times, 0.50), Duration::from_millis(100));
        assert_eq!(percentile(&times, 0.99), Duration::from_millis(198));
        assert_eq!(percentile(&times[..5], 0.99), Duration::from_millis(5));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }

    #[test]
    fn a_timing_averages_what_each_query_returned_and_read() {
        let mut samples = Samples::default();
        for (ms, returned) in [(3, 10), (1, 20), (2, 30)] {
            samples.add(Duration::from_millis(ms), returned);
            samples.read(100, 0);
        }
        let timing = samples.timing("logql", "x".into(), Some("{…}".into()));
        assert_eq!((timing.p50_ms, timing.max_ms), (2.0, 3.0));
        assert_eq!(timing.returned, 20.0);
        assert_eq!(timing.lines_scanned, Some(100.0));
        assert_eq!(timing.volume_rows, Some(0.0));
        let page = Samples::default().timing("page", "y".into(), None);
        assert_eq!((page.queries, page.lines_scanned), (0, None));
    }
}
