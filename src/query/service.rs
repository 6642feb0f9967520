//! The `LogQuery` gRPC handlers. Every read is scoped to the tenant the auth layer attached.

use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status};

use super::tail::{self, TailConfig};
use crate::auth::tenant_of;
use crate::proto::v1::log_query_server::{LogQuery, LogQueryServer};
use crate::proto::v1::{QueryRequest, QueryResponse, TailRequest, TailResponse};
use crate::server::refusal::ExplainRefusal;
use crate::storage::reader::Reader;

/// The query service.
#[derive(Clone, Debug)]
pub struct QueryService {
    reader: Reader,
    tail: TailConfig,
    draining: CancellationToken,
}

impl QueryService {
    /// A service reading through `reader`; tails end when `draining` is cancelled.
    pub fn new(reader: Reader, tail: TailConfig, draining: CancellationToken) -> Self {
        QueryService {
            reader,
            tail,
            draining,
        }
    }

    /// The gRPC server for `loghaul serve`, with the same compression as ingest.
    pub fn server(
        reader: Reader,
        config: &crate::config::ServeConfig,
        draining: CancellationToken,
    ) -> ExplainRefusal<LogQueryServer<QueryService>> {
        let tail = TailConfig::from_config(config);
        let server = LogQueryServer::new(QueryService::new(reader, tail, draining))
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
        super::search(&self.reader, tenant.name(), request.into_inner())
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
        let stream = tail::start(
            &self.reader,
            tenant.name(),
            request.into_inner(),
            self.tail,
            &self.draining,
        )
        .await?;
        Ok(Response::new(stream))
    }
}
