//! The `LogQuery` gRPC handlers. Every read is scoped to the tenant the auth layer attached.

use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status};

use super::{tail, Reads};
use crate::auth::tenant_of;
use crate::proto::v1::log_query_server::{LogQuery, LogQueryServer};
use crate::proto::v1::{QueryRequest, QueryResponse, TailRequest, TailResponse};
use crate::server::refusal::ExplainRefusal;

/// The query service.
#[derive(Clone, Debug)]
pub struct QueryService {
    reads: Reads,
}

impl QueryService {
    /// A service reading through `reads`.
    pub fn new(reads: Reads) -> Self {
        QueryService { reads }
    }

    /// The gRPC server for `loghaul serve`, with the same compression as ingest.
    pub fn server(
        reads: Reads,
        config: &crate::config::ServeConfig,
    ) -> ExplainRefusal<LogQueryServer<QueryService>> {
        let server = LogQueryServer::new(QueryService::new(reads))
            .max_decoding_message_size(config.max_request_bytes.as_usize())
            .accept_compressed(CompressionEncoding::Gzip)
            .accept_compressed(CompressionEncoding::Zstd)
            .send_compressed(CompressionEncoding::Gzip)
            .send_compressed(CompressionEncoding::Zstd);
        // A request tonic cannot decode is the client's fault: INVALID_ARGUMENT, not INTERNAL.
        ExplainRefusal::new(server, config.max_request_bytes.0, "loghaul_queries_total")
    }
}

#[tonic::async_trait]
impl LogQuery for QueryService {
    async fn query(
        &self,
        request: Request<QueryRequest>,
    ) -> Result<Response<QueryResponse>, Status> {
        let tenant = tenant_of(&request)?;
        super::search(&self.reads, tenant.name(), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    type TailStream = ReceiverStream<Result<TailResponse, Status>>;

    async fn tail(
        &self,
        request: Request<TailRequest>,
    ) -> Result<Response<Self::TailStream>, Status> {
        let tenant = tenant_of(&request)?;
        let stream = tail::start(&self.reads, tenant.name(), request.into_inner()).await?;
        Ok(Response::new(stream))
    }
}
