//! Query pages (the gRPC `Query` and the console's search) timed through the store's reader,
//! one kind of filter at a time.
//!
//! "Now" is the instant after the newest row, and a page without `to` ends there: on a fresh
//! table that is about the present, and a reused table is read as it was loaded, not from an
//! empty stretch of time since.

use std::time::Instant;

use chrono::{DateTime, TimeDelta, Utc};

use super::report::{Report, Samples};
use super::{BenchQueryArgs, QueryBenchError};
use crate::model::filter::Filter;
use crate::query::limits::ReadLimits;
use crate::storage::Reader;

/// Queries timed for scenarios that scan a tenant's whole history (no time bound, no match).
const FULL_SCAN_QUERIES: usize = 5;

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
            filter: |rng, start, end| Filter {
                to: Some(start + TimeDelta::seconds(rng.i64(3600..(end - start).num_seconds()))),
                ..Filter::default()
            },
            second_page: false,
        },
        Scenario {
            name: "one service, min severity warn",
            filter: |rng, _, _| Filter {
                services: vec![format!("service-{}", rng.u32(0..super::load::SERVICES))],
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
            filter: |_, _, end| Filter {
                from: Some(end - TimeDelta::hours(1)),
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

/// Times every kind of page of a random tenant of rows from `start` to `newest`, adding each to
/// `report`.
pub(super) async fn run(
    reader: &Reader,
    args: &BenchQueryArgs,
    start: DateTime<Utc>,
    newest: DateTime<Utc>,
    report: &mut Report,
) -> Result<(), QueryBenchError> {
    let end = newest + TimeDelta::microseconds(1);
    let mut rng = fastrand::Rng::with_seed(7);
    Report::page_header(args.page_size);
    let mut all = scenarios();
    all.push(WORST);
    for scenario in all {
        let count = if scenario.name == WORST.name {
            FULL_SCAN_QUERIES.min(args.queries)
        } else {
            args.queries
        };
        let mut samples = Samples::default();
        for _ in 0..count {
            let tenant = format!("bench-{}", rng.u64(0..args.tenants.max(1)));
            let mut filter = (scenario.filter)(&mut rng, start, end);
            filter.to = filter.to.or(Some(end));
            let mut after = None;
            // One row more than the page, as the service asks, to know whether a next page exists.
            let budget = ReadLimits::default().page_size(args.page_size + 1);
            if scenario.second_page {
                let first = reader.page(&tenant, &filter, None, budget).await?;
                after = first
                    .rows
                    .get(args.page_size.saturating_sub(1))
                    .map(|row| row.cursor());
            }
            let began = Instant::now();
            let rows = reader.page(&tenant, &filter, after, budget).await?.rows;
            samples.add(began.elapsed(), rows.len().min(args.page_size) as u64);
        }
        report.push(samples.timing("page", scenario.name.into(), None));
    }
    Ok(())
}
