//! The errors a stream can end with, and the one place they become gRPC statuses.

use std::time::Duration;

use prost::Message;
use tonic::metadata::MetadataValue;
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
    /// A chunk's producer_id or sequence is malformed.
    #[error("invalid chunk: {0}")]
    InvalidChunk(String),
    /// The service is draining for shutdown and takes no more records.
    #[error("loghaul is shutting down; retry on another replica")]
    ShuttingDown,
    /// The database could not commit the stream's records, even after retries.
    #[error("records not stored, the database is unavailable: {0}")]
    Store(#[from] StoreError),
    /// A message is not valid protobuf for its type: a string field that is not UTF-8, nesting
    /// deeper than the decoder's recursion limit, a truncated field.
    #[error("malformed message, not decoded: {0}")]
    Malformed(String),
    /// The stream sent no message for `--stream-idle-timeout`; what it sent before is settled.
    #[error("stream idle for {idle:?} (--stream-idle-timeout): the records it sent before the pause are settled ({accepted} accepted, {rejected} rejected) and must not be resent; open a new stream for the next ones")]
    StreamIdle {
        /// The configured timeout.
        idle: Duration,
        /// Records of the stream committed.
        accepted: u64,
        /// Records of the stream refused.
        rejected: u64,
    },
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
            IngestError::InvalidChunk(_) => "invalid_chunk",
            IngestError::ShuttingDown => "shutting_down",
            IngestError::Store(_) => "store_unavailable",
            IngestError::StreamIdle { .. } => "idle_timeout",
            IngestError::Malformed(_) => "malformed_message",
            IngestError::Stream(_) => "stream_error",
        }
    }

    /// Classifies an error the transport returned while reading the stream.
    pub fn from_stream(status: Status, max_request_bytes: u64) -> Self {
        // tonic reports an oversized message as OUT_OF_RANGE ("... too large"), and a compressed
        // one that inflates past the limit as RESOURCE_EXHAUSTED ("size limit ... exceeded while
        // decompressing"); neither names the option: say RESOURCE_EXHAUSTED with the limit.
        let oversized = matches!(status.code(), Code::OutOfRange | Code::ResourceExhausted)
            && (status.message().contains("too large") || status.message().contains("size limit"));
        if oversized {
            return IngestError::RequestTooLarge {
                detail: status.message().to_owned(),
                limit: max_request_bytes,
            };
        }
        // tonic-prost reports every protobuf decode error as INTERNAL, which tells the client the
        // server is at fault; it is the client's message that is wrong.
        if status.code() == Code::Internal
            && status
                .message()
                .starts_with("failed to decode Protobuf message")
        {
            let detail = status
                .message()
                .trim_start_matches("failed to decode Protobuf message: ");
            return IngestError::Malformed(detail.to_owned());
        }
        IngestError::Stream(status)
    }
}

impl From<IngestError> for Status {
    fn from(err: IngestError) -> Self {
        let message = err.to_string();
        match err {
            IngestError::Backpressure { retry_after, .. } => {
                retry_later(Code::ResourceExhausted, message, retry_after)
            }
            // At least a millisecond, so that a client never reads "retry after 0".
            IngestError::RateLimited { retry_after, .. } => retry_later(
                Code::ResourceExhausted,
                message,
                retry_after.max(Duration::from_millis(1)),
            ),
            IngestError::RequestTooLarge { .. } => Status::new(Code::ResourceExhausted, message),
            IngestError::InvalidChunk(_) => Status::invalid_argument(message),
            IngestError::ShuttingDown => {
                retry_later(Code::Unavailable, message, Duration::from_secs(1))
            }
            IngestError::Store(_) => retry_later(Code::Unavailable, message, STORE_RETRY_AFTER),
            IngestError::StreamIdle {
                accepted, rejected, ..
            } => {
                let mut status = Status::deadline_exceeded(message);
                for (key, count) in [
                    ("loghaul-accepted", accepted),
                    ("loghaul-rejected", rejected),
                ] {
                    status
                        .metadata_mut()
                        .insert(key, MetadataValue::from(count));
                }
                status
            }
            IngestError::Malformed(_) => Status::invalid_argument(message),
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

    /// The HTTP status of the error on the console's JSON API: the same classes as the gRPC
    /// codes below (400 the request, 429 too slow, 503 come back later).
    pub fn http_status(&self) -> u16 {
        match self {
            QueryError::InvalidArgument(_) => 400,
            QueryError::SubscriberTooSlow(_) => 429,
            QueryError::Store(_) | QueryError::ShuttingDown => 503,
        }
    }
}

impl From<QueryError> for Status {
    fn from(err: QueryError) -> Self {
        let message = err.to_string();
        match err {
            QueryError::InvalidArgument(_) => Status::invalid_argument(message),
            QueryError::Store(_) => retry_later(Code::Unavailable, message, STORE_RETRY_AFTER),
            QueryError::SubscriberTooSlow(_) => Status::resource_exhausted(message),
            QueryError::ShuttingDown => {
                retry_later(Code::Unavailable, message, Duration::from_secs(1))
            }
        }
    }
}

/// A status that tells the client to come back after `delay`: `google.rpc.RetryInfo` in the
/// standard status details, and the same message in the `google.rpc.retryinfo-bin` trailer, which
/// is where some OpenTelemetry exporters (Python's among them) look for it.
fn retry_later(code: Code, message: String, delay: Duration) -> Status {
    let mut status =
        Status::with_error_details(code, message, ErrorDetails::with_retry_info(Some(delay)));
    let retry_info = tonic_types::pb::RetryInfo {
        retry_delay: prost_types::Duration::try_from(delay).ok(),
    };
    status.metadata_mut().insert_bin(
        "google.rpc.retryinfo-bin",
        MetadataValue::from_bytes(&retry_info.encode_to_vec()),
    );
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_failures_are_the_clients_fault_and_idle_streams_say_what_was_stored() {
        let tonic_says = Status::internal(
            "failed to decode Protobuf message: LogRecord.message: invalid string value: data is not UTF-8 encoded",
        );
        let status = Status::from(IngestError::from_stream(tonic_says, 1024));
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status
            .message()
            .starts_with("malformed message, not decoded: LogRecord.message"));
        // Any other INTERNAL passes through unchanged.
        let other = IngestError::from_stream(Status::internal("h2 protocol error"), 1024);
        assert_eq!(Status::from(other).code(), Code::Internal);

        let status = Status::from(IngestError::StreamIdle {
            idle: Duration::from_secs(60),
            accepted: 7,
            rejected: 2,
        });
        assert_eq!(status.code(), Code::DeadlineExceeded);
        assert!(status.message().contains("7 accepted, 2 rejected"));
        assert_eq!(status.metadata().get("loghaul-accepted").unwrap(), "7");
        assert_eq!(status.metadata().get("loghaul-rejected").unwrap(), "2");
    }

    #[test]
    fn retryable_errors_carry_the_delay_in_both_places() {
        let status = Status::from(IngestError::Backpressure {
            resource: "shard queue",
            waited: Duration::from_secs(5),
            retry_after: Duration::from_secs(1),
        });
        assert_eq!(status.code(), Code::ResourceExhausted);
        let details = status.get_error_details();
        assert_eq!(
            details.retry_info().unwrap().retry_delay,
            Some(Duration::from_secs(1))
        );
        let trailer = status
            .metadata()
            .get_bin("google.rpc.retryinfo-bin")
            .unwrap();
        let decoded = tonic_types::pb::RetryInfo::decode(trailer.to_bytes().unwrap()).unwrap();
        assert_eq!(decoded.retry_delay.unwrap().seconds, 1);
    }
}
