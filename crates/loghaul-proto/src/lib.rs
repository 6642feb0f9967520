//! loghaul's gRPC contract: the generated protobuf and gRPC code of the `loghaul.v1` package
//! (built from the repository's `proto/`), how a client presents its API key, and the trailers a
//! Push stream that fails part-way carries.
//!
//! ```no_run
//! use loghaul_proto::api_key::request_with_key;
//! use loghaul_proto::v1::log_query_client::LogQueryClient;
//! use loghaul_proto::v1::QueryRequest;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let mut client = LogQueryClient::connect("http://127.0.0.1:4317").await?;
//! let page = client
//!     .query(request_with_key(QueryRequest::default(), Some("my-key"))?)
//!     .await?;
//! println!("{} records", page.into_inner().records.len());
//! # Ok(())
//! # }
//! ```

pub mod api_key;
pub mod trailers;

/// The encoded descriptors of `loghaul.v1`, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("loghaul_descriptor");

/// `loghaul.v1`: the ingest and query contracts.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("loghaul.v1");
}
