//! Loki's read side in one home, what Grafana's Loki data source, `logcli` and scripts call on the
//! HTTP ingest listener (the push side is [`crate::ingest::loki`]):
//!
//! - [`logql`]: LogQL, the query language of Loki's HTTP API (the subset Grafana uses), parsed
//!   into what a query says, with errors that say where.
//! - [`read`]: queries, labels, series and volume over the stores, within the limits of every read.
//! - [`detected`]: the labels and fields Grafana's Explore and Logs Drilldown detect in a selector.
//! - [`metric`]: metric queries, planned into reads and operations, fetched, then applied.
//! - [`tail`]: the live tail of a LogQL log query, on the tail every reader uses.
//! - [`api`]: the HTTP endpoints, their parameters and Loki's JSON shapes.

pub(crate) mod api;
pub(crate) mod detected;
pub mod logql;
pub(crate) mod metric;
pub(crate) mod read;
pub(crate) mod tail;
