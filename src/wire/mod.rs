//! Transport plumbing the ingest protocols share, below any one protocol's meaning:
//!
//! - [`grpc_body`]: a gRPC request body read message by message, each under the memory budget,
//!   rather than by tonic's decoder; [`fields`]: protobuf fields read one at a time from it.
//! - [`inflate`]: gzip, deflate, zstd and snappy bodies inflated under the budget.
//! - [`body_rate`]: the least rate a body must arrive at, so that a trickling sender cannot hold
//!   its claim.
//! - [`refusal`]: a request tonic's own decoder refuses (`LogQuery`'s), answered saying what the
//!   client should do.
//! - [`http`]: the HTTP ingest listener's plumbing: auth, body, CORS and replies.

pub(crate) mod body_rate;
pub(crate) mod fields;
pub(crate) mod grpc_body;
pub(crate) mod http;
pub(crate) mod inflate;
pub(crate) mod refusal;

/// Memory per wire byte an OTLP request is expected to take once decoded; reserved before the
/// request is read, so that most requests wait for room once.
pub(crate) const EXPECTED_DECODED_RATIO: usize = 2;
