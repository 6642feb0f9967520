//! The errors a stream can end with, and the one place they become gRPC statuses.

use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::auth::AuthFailure;
use crate::storage::StoreError;

/// Why a stream could not be served to the end. Per-record problems are not errors: they are
/// rejections reported in the response while the rest of the stream is stored.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The queues or the memory budget stayed full for the whole enqueue timeout.
    #[error("loghaul is overloaded: no room in the {resource} for {waited:?}; retry after {retry_after:?}")]
    Backpressure {
        /// Which limit was full: "shard queue" or "memory budget".
        resource: &'static str,
        /// How long the stream waited.
        waited: Duration,
        /// The delay suggested to the client.
        retry_after: Duration,
    },
    /// The tenant sent faster than its rate limit allows.
    #[error("tenant {tenant} is over its ingest rate limit; retry after {retry_after:?}")]
    RateLimited {
        /// The tenant (from configuration, so a bounded metric label).
        tenant: std::sync::Arc<str>,
        /// How long until the tenant's buckets hold enough tokens for the refused chunk.
        retry_after: Duration,
    },
    /// A gRPC message was larger than the configured maximum.
    #[error("request too large: {detail}; the limit is {limit} bytes after decompression (--max-request-bytes); send smaller chunks")]
    RequestTooLarge {
        /// What the transport reported.
        detail: String,
        /// The configured maximum.
        limit: u64,
    },
    /// The service is draining for shutdown and takes no more records.
    #[error("loghaul is shutting down; retry on another replica")]
    ShuttingDown,
    /// The database could not commit the stream's records, even after retries.
    #[error("records not stored, the database is unavailable: {0}")]
    Store(#[from] StoreError),
    /// The client's stream failed (reset, malformed message, transport error).
    #[error(transparent)]
    Stream(Status),
}

/// Delay suggested to clients after a storage failure; long enough for a database fail-over to start.
const STORE_RETRY_AFTER: Duration = Duration::from_secs(2);

impl IngestError {
    /// A stable label value for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            IngestError::Backpressure { .. } => "backpressure",
            IngestError::RateLimited { .. } => "rate_limited",
            IngestError::RequestTooLarge { .. } => "request_too_large",
            IngestError::ShuttingDown => "shutting_down",
            IngestError::Store(_) => "store_unavailable",
            IngestError::Stream(_) => "stream_error",
        }
    }

    /// Classifies an error the transport returned while reading the stream.
    pub fn from_stream(status: Status, max_request_bytes: u64) -> Self {
        // tonic reports an oversized message as OUT_OF_RANGE, which clients do not read as
        // "send less": say RESOURCE_EXHAUSTED with the limit instead.
        let oversized = matches!(status.code(), Code::OutOfRange | Code::ResourceExhausted)
            && status.message().contains("too large");
        if oversized {
            return IngestError::RequestTooLarge {
                detail: status.message().to_owned(),
                limit: max_request_bytes,
            };
        }
        IngestError::Stream(status)
    }
}

impl From<IngestError> for Status {
    fn from(err: IngestError) -> Self {
        let message = err.to_string();
        match err {
            IngestError::Backpressure { retry_after, .. } => Status::with_error_details(
                Code::ResourceExhausted,
                message,
                ErrorDetails::with_retry_info(Some(retry_after)),
            ),
            IngestError::RateLimited { retry_after, .. } => Status::with_error_details(
                Code::ResourceExhausted,
                message,
                // At least a millisecond, so that a client never reads "retry after 0".
                ErrorDetails::with_retry_info(Some(retry_after.max(Duration::from_millis(1)))),
            ),
            IngestError::RequestTooLarge { .. } => Status::new(Code::ResourceExhausted, message),
            IngestError::ShuttingDown => Status::with_error_details(
                Code::Unavailable,
                message,
                ErrorDetails::with_retry_info(Some(Duration::from_secs(1))),
            ),
            IngestError::Store(_) => Status::with_error_details(
                Code::Unavailable,
                message,
                ErrorDetails::with_retry_info(Some(STORE_RETRY_AFTER)),
            ),
            IngestError::Stream(status) => status,
        }
    }
}

impl From<AuthFailure> for Status {
    fn from(failure: AuthFailure) -> Self {
        Status::unauthenticated(failure.to_string())
    }
}

/// Why a read (Query or Tail) failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The filter, cursor or page size cannot be served; the message says which and why.
    #[error("{0}")]
    InvalidArgument(String),
    /// The database could not answer.
    #[error("the database is unavailable: {0}")]
    Store(#[from] StoreError),
    /// A Tail subscriber did not read fast enough; it was dropped so that it slows nobody else.
    #[error("subscriber too slow: {0}; narrow the filter or read faster, then resume from the last cursor")]
    SubscriberTooSlow(&'static str),
    /// The service is draining for shutdown.
    #[error("loghaul is shutting down; resume the tail on another replica from the last cursor")]
    ShuttingDown,
}

impl QueryError {
    /// A stable label value for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            QueryError::InvalidArgument(_) => "invalid_argument",
            QueryError::Store(_) => "store_unavailable",
            QueryError::SubscriberTooSlow(_) => "too_slow",
            QueryError::ShuttingDown => "shutting_down",
        }
    }
}

impl From<QueryError> for Status {
    fn from(err: QueryError) -> Self {
        let message = err.to_string();
        match err {
            QueryError::InvalidArgument(_) => Status::invalid_argument(message),
            QueryError::Store(_) => Status::with_error_details(
                Code::Unavailable,
                message,
                ErrorDetails::with_retry_info(Some(STORE_RETRY_AFTER)),
            ),
            QueryError::SubscriberTooSlow(_) => Status::resource_exhausted(message),
            QueryError::ShuttingDown => Status::with_error_details(
                Code::Unavailable,
                message,
                ErrorDetails::with_retry_info(Some(Duration::from_secs(1))),
            ),
        }
    }
}
