//! The integration tests, in one binary: one module per concern, on real servers over real
//! databases (see `common`). Run one module with `cargo test --test it hostile::`.
//!
//! Every test shares this process with the others, running in parallel: its databases, files,
//! ports and tenants are its own.

#[macro_use]
mod common;

mod chaos;
mod cli;
mod client;
mod console;
mod faults;
mod hostile;
mod ingest;
mod otlp;
mod overload;
mod probes;
mod process;
mod query;
mod reads;
mod retention;
mod secrets;
mod send_follow;
mod startup;
mod tenants;
mod tls;
