//! loghaul: log ingestion over gRPC, batched into SQLite or PostgreSQL, acknowledged only after
//! the records are committed.
//!
//! The modules follow one record's journey through the service:
//!
//! - [`proto`]: the generated gRPC contract (`loghaul.v1`), the `loghaul-proto` crate.
//! - [`serve`]: starting and stopping: the store, pipeline and listeners wired together, the gRPC
//!   port and the HTTP ingest listener's router, the drain that loses nothing.
//! - [`wire`]: the transport plumbing every protocol shares: gRPC bodies read message by message,
//!   HTTP auth, bodies and replies, inflation, the least rate a body must arrive at.
//! - [`ingest`]: the ingest side per protocol (the `loghaul.v1` Push, OTLP's `Export` in
//!   [`ingest::otlp`], the Loki push API in [`ingest::loki`]); [`ingest::validate`] turns each
//!   wire record into a storable [`record::Record`] or a rejection with a reason, the same for
//!   every protocol.
//! - [`pipeline`]: the router pins a stream to a shard; each shard is a bounded queue drained by one
//!   batching task ([`pipeline::batcher`]) that owns its buffer, so the hot path takes no lock.
//! - [`storage`]: one multi-row insert per batch, PostgreSQL ([`storage::postgres`]) or SQLite
//!   ([`storage::sqlite`]); acknowledgements are resolved after the commit.
//! - [`model`]: what every layer speaks of and none owns: filters, cursors, rejection reasons.
//! - [`auth`]: API keys → tenants, checked by a tower layer in front of every service; per-tenant
//!   ingest rate limits ([`ratelimit`]).
//! - [`query`]: `LogQuery` — pages (`Query`) and live follow (`Tail`) of a tenant's records, read
//!   through [`storage::Reader`] on connections separate from ingest.
//! - [`loki`]: Loki's read side: [`loki::logql`], the query language of Loki's HTTP API (the
//!   subset Grafana uses) parsed into what a query says, with errors that say where; the reads and
//!   the live tail over the stores; the query endpoints Grafana calls.
//! - [`retention`]: when it runs and what the window keeps; the store drops daily partitions whole
//!   (PostgreSQL) or deletes in chunks (SQLite).
//! - [`sealing`]: past hours rewritten into compressed columnar partitions (PostgreSQL).
//! - [`console`]: the browser console (search, live tail, pipeline health) and its JSON API, on
//!   a listener of its own.
//! - [`observability`]: every metric series (typed handles, declared once), readiness, and tracing
//!   set-up.
//! - [`web`]: the HTTP listeners' shared accept loop (header deadline, connection cap) and the
//!   metrics and probes port.
//! - [`config`]: every knob, its default, and how flags, environment and file combine.
//! - [`error`]: the errors a call can end with, and the one place they become gRPC statuses.
//! - [`client`]: the Rust client, the `loghaul-client` crate: a [`client::Shipper`] that batches,
//!   retries without duplicates (producer id + sequence) and never blocks the application, and a
//!   tracing layer.
//! - [`tls`]: rustls for the gRPC port and the TLS options of the clients.
//! - [`send`]: the `loghaul send` command, built on the shipper; [`cli`]: `loghaul query` and `loghaul tail`.
//! - `bench` (with the `bench` feature): `loghaul bench` (ingest throughput, latency, memory, the
//!   COPY ceiling), `loghaul bench-query` (Query pages on a large table), `loghaul bench-shipper`
//!   (one client shipper) and `loghaul chaos` (a load-and-faults soak that counts lost and
//!   duplicated records).
//!
//! The binary (`src/main.rs`) only parses the command line and calls [`serve::run`]; tests call the
//! same function with listeners on ephemeral ports. The public modules are what the binary, the
//! tests and the fuzz targets use; the pipeline, queries, console, metrics and HTTP listeners are
//! internal. Running the service inside another program:
//!
//! ```no_run
//! use clap::Parser;
//! use loghaul::config::ServeConfig;
//! use loghaul::serve::{run, Listeners};
//!
//! #[derive(Parser)]
//! struct Args {
//!     #[command(flatten)]
//!     serve: ServeConfig,
//! }
//!
//! # async fn example() -> Result<(), loghaul::serve::ServeError> {
//! let config = Args::parse_from(["serve", "--database-url", "sqlite://logs.db"]).serve;
//! let listeners = Listeners::bind(&config).await?;
//! // Runs until the future completes, then drains: every acknowledged record is committed.
//! run(config, listeners, std::future::pending()).await
//! # }
//! ```

// `pub` only where the binary, the tests or the fuzz targets need it, so that rustc reports
// what nothing calls.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub use loghaul_client as client;
pub use loghaul_proto as proto;

pub(crate) mod auth;
#[cfg(feature = "bench")]
pub mod bench;
pub mod cli;
pub mod config;
pub(crate) mod console;
pub mod error;
pub mod ingest;
pub mod loki;
pub(crate) mod model;
pub mod observability;
pub(crate) mod pipeline;
pub(crate) mod query;
pub(crate) mod ratelimit;
pub mod record;
pub mod retention;
pub mod sealing;
pub mod send;
pub mod serve;
pub mod storage;
pub mod tls;
pub(crate) mod web;
pub(crate) mod wire;
