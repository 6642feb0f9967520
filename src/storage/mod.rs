//! Where batches land and where reads come from: one module per backend ([`postgres`],
//! [`sqlite`]) with its writes, reads, tails and retention, behind the handles callers hold
//! ([`Store`], [`Reader`], [`Tail`], [`RetentionSession`]), whose methods are the one place that
//! tells the backends apart.
//!
//! sqlx's `Any` driver is not used on purpose: it has no timestamptz, arrays or jsonb, and its
//! placeholders do not suit PostgreSQL. Each backend writes a batch as one statement (PostgreSQL)
//! or one transaction (SQLite).
//!
//! Reads run on connections of their own, so they never wait behind ingest: a small PostgreSQL
//! pool, or read-only SQLite connections (WAL lets them read while the single writer writes).
//! Every read is bounded in rows and in bytes ([`PageSize`]): rows are streamed from the database
//! and the read stops at the first row that would not fit, so neither an answer nor the memory
//! behind it grows with the size of the records. Dropping a read's future stops its work in the
//! database, not only in the service: SQLite statements are interrupted, and a PostgreSQL
//! connection with a statement running is closed, which the server acts on (see each backend's
//! `read.rs`). Callers bound reads in time by dropping them at their deadline.
//!
//! The backends use only the neutral modules beside them (`row`, `stored`, `error`, `connect`,
//! [`chunked_delete`], [`metrics`]), never the handles, so within storage too the dependencies run
//! one way: handles → backends → shared types.

pub(crate) mod chunked_delete;
mod connect;
mod dispatch;
mod error;
pub(crate) mod metrics;
pub mod postgres;
mod row;
mod row_batches;
pub(crate) mod sqlite;
mod stored;
mod volume;

pub use connect::{Backend, PoolOptions};
pub use dispatch::Store;
pub use error::StoreError;

pub(crate) use connect::redact_url;
pub(crate) use dispatch::{Reader, RetentionSession, Tail};
pub(crate) use row::{ChunkKey, Claim, Row};
pub(crate) use stored::{CountedRow, PageSize, StoredRow};
