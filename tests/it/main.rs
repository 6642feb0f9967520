//! The integration tests, in one binary: one module per concern, on real servers over real
//! databases (see `common`). Run one module with `cargo test --test it hostile::`.
//!
//! Every test shares this process with the others, running in parallel: its databases, files,
//! ports and tenants are its own, and so are the numbers it asserts on. Each server has a metrics
//! registry of its own, so an in-process server's /metrics shows only its own series, and a test
//! can assert exact values on it. A test that waits for something (a tail connected, a queue
//! full, rows stored) polls for it with [`common::wait_until`]; a sleep is only ever what is tested
//! (an outage, a pace, a window in which nothing may happen), and says so.

#[macro_use]
mod common;

mod chaos;
mod citus;
mod cli;
mod client;
mod console;
mod console_volume;
mod fair_admission;
mod faults;
mod hostile;
mod hour_index;
mod http_ingest;
mod ingest;
mod loki_query;
mod loki_tail;
mod metric_scans;
mod migrations;
mod otlp;
mod overload;
mod probes;
mod process;
mod query;
mod read_memory;
mod reads;
mod refused_rows;
mod replicas;
mod retention;
mod sealing;
mod secrets;
mod send_follow;
mod slow_tails;
mod startup;
mod stream_catalog;
mod tenants;
mod tls;
