//! Generated protobuf and gRPC code for the `loghaul.v1` package, and the trailers a Push stream
//! that fails part-way carries.

pub mod trailers;

/// `loghaul.v1`: the ingest and query contracts.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("loghaul.v1");
}

/// Encoded descriptors of every `loghaul.v1` file, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("loghaul_descriptor");
