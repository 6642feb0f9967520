//! The ingest side, per protocol, from a decoded request to records queued on the pipeline and an
//! answer once they are committed:
//!
//! - [`push`]: `loghaul.v1.LogIngest/Push`, the client stream, and its [`push::settlement`].
//! - [`otlp`]: OpenTelemetry's OTLP logs `Export`, over gRPC and HTTP.
//! - [`loki`]: the Loki push API, on the HTTP ingest listener.
//! - [`validate`]: each wire record → a storable [`crate::record::Record`], or a rejection with a
//!   reason; every protocol checks the same.
//! - [`transcode`]: the JSON bodies (OTLP/JSON, Loki JSON) turned into protobuf under the budget.
//! - [`charge`]: around the pipeline: a tenant's rate limit charged before records are queued, a
//!   unary request's records collected until their commit, and how each call ended counted.
//! - [`rejections`]: what a unary request reports about its refused records.
//! - [`metrics`]: the series ingest emits, by protocol and outcome.
//!
//! The transport underneath (gRPC bodies, HTTP auth and bodies, inflation) is in [`crate::wire`].

pub(crate) mod charge;
pub mod loki;
pub(crate) mod metrics;
pub mod otlp;
pub(crate) mod push;
pub(crate) mod rejections;
pub mod transcode;
pub mod validate;
