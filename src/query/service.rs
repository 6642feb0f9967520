//! The `LogQuery` gRPC handlers. Every read is scoped to the tenant the auth layer attached.

use std::time::Instant;

use metrics::{counter, histogram};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status};

use super::cursor::Cursor;
use super::filter::{page_size, Filter};
use super::tail::{self, TailConfig};
use super::to_wire;
use crate::auth::tenant_of;
use crate::error::QueryError;
use crate::proto::v1::log_query_server::{LogQuery, LogQueryServer};
use crate::proto::v1::{QueryRequest, QueryResponse, TailRequest, TailResponse};
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
    ) -> LogQueryServer<QueryService> {
        let tail = TailConfig {
            poll_interval: config.tail_poll_interval.0,
            ..TailConfig::default()
        };
        LogQueryServer::new(QueryService::new(reader, tail, draining))
            .accept_compressed(CompressionEncoding::Gzip)
            .accept_compressed(CompressionEncoding::Zstd)
            .send_compressed(CompressionEncoding::Gzip)
            .send_compressed(CompressionEncoding::Zstd)
    }

    async fn query(
        &self,
        tenant: &str,
        request: QueryRequest,
    ) -> Result<QueryResponse, QueryError> {
        let filter = Filter::from_proto(request.filter)?;
        let size = page_size(request.page_size)?;
        let after = Cursor::decode(&request.cursor)?;
        // One row more than the page says whether there is a next page without a second query.
        let mut rows = self.reader.page(tenant, &filter, after, size + 1).await?;
        let more = rows.len() > size;
        rows.truncate(size);
        let next_cursor = match rows.last() {
            Some(last) if more => last.cursor().encode(),
            _ => String::new(),
        };
        Ok(QueryResponse {
            records: rows.into_iter().map(to_wire).collect(),
            next_cursor,
        })
    }
}

#[tonic::async_trait]
impl LogQuery for QueryService {
    async fn query(
        &self,
        request: Request<QueryRequest>,
    ) -> Result<Response<QueryResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let started = Instant::now();
        let outcome = QueryService::query(self, tenant.name(), request.into_inner()).await;
        histogram!("loghaul_query_duration_seconds").record(started.elapsed().as_secs_f64());
        let label = match &outcome {
            Ok(_) => "ok",
            Err(err) => err.kind(),
        };
        counter!("loghaul_queries_total", "outcome" => label).increment(1);
        outcome.map(Response::new).map_err(Status::from)
    }

    type TailStream = ReceiverStream<Result<TailResponse, Status>>;

    async fn tail(
        &self,
        request: Request<TailRequest>,
    ) -> Result<Response<Self::TailStream>, Status> {
        let tenant = tenant_of(&request)?;
        let request = request.into_inner();
        let filter = Filter::from_proto(request.filter)?;
        let after = Cursor::decode(&request.cursor)?;
        let state = self
            .reader
            .tail_start(after)
            .await
            .map_err(QueryError::from)?;
        let stream = tail::follow(
            self.reader.clone(),
            tenant.name().clone(),
            filter,
            state,
            self.tail,
            self.draining.clone(),
        );
        Ok(Response::new(stream))
    }
}
