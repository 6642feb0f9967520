//! The `LogQuery` gRPC handlers. Every read is scoped to the tenant the auth layer attached.

use std::pin::Pin;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::{tail, Reads};
use crate::auth::tenant_of;
use crate::proto::v1::log_query_server::LogQuery;
use crate::proto::v1::{QueryRequest, QueryResponse, TailRequest, TailResponse};

/// The query service.
#[derive(Clone, Debug)]
pub(crate) struct QueryService {
    reads: Reads,
}

impl QueryService {
    /// A service reading through `reads`.
    pub(crate) fn new(reads: Reads) -> Self {
        QueryService { reads }
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

    type TailStream = Pin<Box<dyn Stream<Item = Result<TailResponse, Status>> + Send>>;

    async fn tail(
        &self,
        request: Request<TailRequest>,
    ) -> Result<Response<Self::TailStream>, Status> {
        let tenant = tenant_of(&request)?;
        let stream = tail::start(&self.reads, tenant.name(), request.into_inner()).await?;
        Ok(Response::new(Box::pin(stream)))
    }
}
