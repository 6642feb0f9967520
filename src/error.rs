//! The errors a call can end with, and the one place they become gRPC statuses, HTTP statuses,
//! retry delays and metric labels. How each surface writes the answer's body (a gRPC status with
//! details, OTLP's `google.rpc.Status`, the console's JSON, Loki's text) is that surface's; what
//! the answer says is decided here.

use std::time::Duration;

use prost::Message;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};

use crate::auth::AuthFailure;
use crate::config::ByteSize;
use crate::proto::trailers::{self, NotStored};
use crate::proto::v1::PushResponse;
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
    /// A message's records would take more memory than one message may hold.
    #[error("request too large once decoded: its records need more than {limit} bytes of memory (half of --max-buffered-bytes, and within --tenant-buffer-share of it; every record counts a fixed overhead, and OTLP resource and scope attributes count once per record); send fewer records per request")]
    DecodedTooLarge {
        /// The most one message may hold.
        limit: usize,
    },
    /// A chunk's producer_id or sequence is malformed.
    #[error("invalid chunk: {0}")]
    InvalidChunk(String),
    /// The service is draining for shutdown and takes no more records.
    #[error("loghaul is shutting down; retry on another replica")]
    ShuttingDown,
    /// The database could not commit the stream's records, even after retries. The database's
    /// own text (host names, SQL) is logged where it happened, never sent to the client.
    #[error("records not stored, the database is unavailable ({}); retry later", .0.public_cause())]
    Store(#[from] StoreError),
    /// A message is not valid protobuf for its type: a string field that is not UTF-8, nesting
    /// deeper than the decoder's recursion limit, a truncated field.
    #[error("malformed message, not decoded: {0}")]
    Malformed(String),
    /// The stream sent no message for `--stream-idle-timeout`; what it sent before is settled.
    #[error(
        "stream idle for {0:?} (--stream-idle-timeout); open a new stream for the next records"
    )]
    StreamIdle(Duration),
    /// A body (an HTTP body, a gRPC message) arrived slower than `--min-body-rate` once past its
    /// grace; nothing of it is stored, and the budget it claimed is free again.
    #[error("the body arrived too slowly: {received} bytes in {elapsed:.1?}, under the minimum of {bytes_per_second} bytes/s averaged from its start (--min-body-rate); nothing of it is stored; send it again")]
    BodyTooSlow {
        /// The minimum.
        bytes_per_second: u64,
        /// Bytes of the body received when it was cut off.
        received: u64,
        /// Time from its first byte read to the cut.
        elapsed: Duration,
    },
    /// The client's stream failed (reset, malformed message, transport error).
    #[error(transparent)]
    Stream(Status),
}

/// Delay suggested to clients after a storage failure; long enough for a database fail-over to start.
const STORE_RETRY_AFTER: Duration = Duration::from_secs(2);
/// Delay suggested to a tenant refused for its concurrent reads: about what a slow read takes.
const TOO_MANY_READS_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Delay suggested to a read refused because the reads together hold `--max-read-bytes`: about
/// what a large read takes to be answered and give its memory back.
const READ_MEMORY_RETRY_AFTER: Duration = Duration::from_secs(1);

impl IngestError {
    /// A stable label value for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            IngestError::Backpressure { .. } => "backpressure",
            IngestError::RateLimited { .. } => "rate_limited",
            IngestError::RequestTooLarge { .. } | IngestError::DecodedTooLarge { .. } => {
                "request_too_large"
            }
            IngestError::InvalidChunk(_) => "invalid_chunk",
            IngestError::ShuttingDown => "shutting_down",
            IngestError::Store(_) => "store_unavailable",
            IngestError::StreamIdle(_) => "idle_timeout",
            IngestError::BodyTooSlow { .. } => "body_too_slow",
            IngestError::Malformed(_) => "malformed_message",
            IngestError::Stream(_) => "stream_error",
        }
    }

    /// Classifies an error the transport returned while reading the stream.
    ///
    /// tonic gives these errors no type of their own, only a code and a text, so they are told
    /// apart by their text: `tests/it/hostile.rs`, `ingest.rs` and `otlp.rs` send the oversized,
    /// compressed and malformed messages over a real connection, so a tonic or prost upgrade
    /// that rewords them fails there, not in production.
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

impl IngestError {
    /// How long the client should wait before it sends again; `None` when waiting does not help.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            IngestError::Backpressure { retry_after, .. } => Some(*retry_after),
            // At least a millisecond, so that a client never reads "retry after 0".
            IngestError::RateLimited { retry_after, .. } => {
                Some((*retry_after).max(Duration::from_millis(1)))
            }
            IngestError::ShuttingDown => Some(Duration::from_secs(1)),
            IngestError::Store(_) => Some(STORE_RETRY_AFTER),
            _ => None,
        }
    }

    /// The gRPC code of the error.
    pub fn code(&self) -> Code {
        match self {
            IngestError::Backpressure { .. }
            | IngestError::RateLimited { .. }
            | IngestError::RequestTooLarge { .. }
            | IngestError::DecodedTooLarge { .. } => Code::ResourceExhausted,
            IngestError::InvalidChunk(_) | IngestError::Malformed(_) => Code::InvalidArgument,
            IngestError::ShuttingDown | IngestError::Store(_) => Code::Unavailable,
            IngestError::StreamIdle(_) | IngestError::BodyTooSlow { .. } => Code::DeadlineExceeded,
            IngestError::Stream(status) => status.code(),
        }
    }

    /// The HTTP status of the error on the HTTP ingest listener (OTLP/HTTP, Loki push), in the
    /// classes the OTLP specification gives: 429 and 503 are retried (after `Retry-After`), 400
    /// and 413 are not.
    pub fn http_status(&self) -> u16 {
        match self {
            IngestError::RateLimited { .. } => 429,
            IngestError::Backpressure { .. }
            | IngestError::ShuttingDown
            | IngestError::Store(_) => 503,
            IngestError::RequestTooLarge { .. } | IngestError::DecodedTooLarge { .. } => 413,
            IngestError::InvalidChunk(_) | IngestError::Malformed(_) | IngestError::Stream(_) => {
                400
            }
            IngestError::StreamIdle(_) | IngestError::BodyTooSlow { .. } => 408,
        }
    }
}

impl From<IngestError> for Status {
    fn from(err: IngestError) -> Self {
        let message = err.to_string();
        let code = err.code();
        match (err.retry_after(), err) {
            (_, IngestError::Stream(status)) => status,
            (Some(delay), _) => retry_later(code, message, delay),
            (None, _) => Status::new(code, message),
        }
    }
}

impl AuthFailure {
    /// The gRPC code of the refusal: PERMISSION_DENIED when no key the client could send would
    /// help (the server's configuration decides), UNAUTHENTICATED otherwise.
    pub fn code(self) -> Code {
        match self {
            AuthFailure::NotLoopback
            | AuthFailure::OrgIdMismatch
            | AuthFailure::ForeignHost
            | AuthFailure::ForeignOrigin
            | AuthFailure::OrgIdWithoutKeys => Code::PermissionDenied,
            AuthFailure::MissingKey | AuthFailure::UnknownKey | AuthFailure::NoTenant => {
                Code::Unauthenticated
            }
        }
    }

    /// The HTTP status of the refusal: 401 when a key would help, 403 when the configuration
    /// decides.
    pub fn http_status(self) -> u16 {
        match self {
            AuthFailure::MissingKey | AuthFailure::UnknownKey => 401,
            AuthFailure::NotLoopback
            | AuthFailure::OrgIdMismatch
            | AuthFailure::ForeignHost
            | AuthFailure::ForeignOrigin
            | AuthFailure::OrgIdWithoutKeys => 403,
            AuthFailure::NoTenant => 500,
        }
    }
}

/// An ingest call's failure: a gRPC status, and a stable label for the metric that counts it.
pub trait CallFailure: Into<Status> + std::fmt::Display {
    /// The metric label.
    fn kind(&self) -> &'static str;
}

impl CallFailure for IngestError {
    fn kind(&self) -> &'static str {
        IngestError::kind(self)
    }
}

impl CallFailure for StreamFailure {
    fn kind(&self) -> &'static str {
        self.cause.kind()
    }
}

impl std::fmt::Display for StreamFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}; not stored: {}; settled: {} accepted, {} rejected",
            self.cause, self.not_stored, self.settled.accepted, self.settled.rejected
        )
    }
}

/// A Push stream that stopped part-way: why, what it had settled by then, and which of its
/// messages were not stored.
#[derive(Debug)]
pub struct StreamFailure {
    /// What stopped it.
    pub cause: IngestError,
    /// The records of its stored messages: committed or rejected, final.
    pub settled: PushResponse,
    /// The messages to send again.
    pub not_stored: NotStored,
}

/// Rejections carried in the `loghaul-settled-bin` trailer; the counts stay exact beyond it, and
/// the cap keeps the trailers under HTTP/2's usual 16 KiB header-list limit.
const MAX_TRAILER_REJECTIONS: usize = 20;
/// Longest rejection reason carried in that trailer.
const MAX_TRAILER_REASON_CHARS: usize = 120;

impl From<StreamFailure> for Status {
    /// The cause's status, its message saying what was and was not stored, and the same in the
    /// trailers a client acts on: `loghaul-unstored-messages` (which messages to resend),
    /// `loghaul-accepted` / `loghaul-rejected` (counts of the settled records) and
    /// `loghaul-settled-bin` (a `PushResponse` of the settled records).
    fn from(failure: StreamFailure) -> Self {
        let StreamFailure {
            cause,
            mut settled,
            not_stored,
        } = failure;
        let status = Status::from(cause);
        let message = format!(
            "{}; not stored: {not_stored} of this stream (resend them); settled: {} accepted, {} rejected records of its other messages (do not resend them)",
            status.message(),
            settled.accepted,
            settled.rejected
        );
        let mut metadata = status.metadata().clone();
        for (key, count) in [
            (trailers::ACCEPTED, settled.accepted),
            (trailers::REJECTED, settled.rejected),
        ] {
            metadata.insert(key, MetadataValue::from(count));
        }
        if let Ok(value) = MetadataValue::try_from(not_stored.to_header()) {
            metadata.insert(trailers::UNSTORED_MESSAGES, value);
        }
        settled.rejections.truncate(MAX_TRAILER_REJECTIONS);
        for rejection in &mut settled.rejections {
            if let Some((cut, _)) = rejection
                .reason
                .char_indices()
                .nth(MAX_TRAILER_REASON_CHARS)
            {
                rejection.reason.truncate(cut);
            }
        }
        metadata.insert_bin(
            trailers::SETTLED_BIN,
            MetadataValue::from_bytes(&settled.encode_to_vec()),
        );
        rich_status(status.code(), message, detail_entries(&status), metadata)
    }
}

impl From<AuthFailure> for Status {
    fn from(failure: AuthFailure) -> Self {
        Status::new(failure.code(), failure.to_string())
    }
}

/// Why a read (Query or Tail) failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The filter, cursor or page size cannot be served; the message says which and why.
    #[error("{0}")]
    InvalidArgument(String),
    /// The database could not answer. Its own text is logged, never sent to the client.
    #[error("the database is unavailable ({}); retry later", .0.public_cause())]
    Store(#[source] StoreError),
    /// A Tail subscriber did not read fast enough; it was dropped so that it slows nobody else.
    #[error("subscriber too slow: {0}; narrow the filter or read faster, then resume from the last cursor")]
    SubscriberTooSlow(String),
    /// The service is draining for shutdown.
    #[error("loghaul is shutting down; resume the tail on another replica from the last cursor")]
    ShuttingDown,
    /// The tenant already has `--max-concurrent-reads-per-tenant` reads running.
    #[error("tenant {tenant} already has {limit} reads running (--max-concurrent-reads-per-tenant); retry once one has finished, and narrow slow reads (from/to, the filter) so they finish sooner")]
    TooManyReads {
        /// The tenant (from configuration, so a bounded metric label).
        tenant: std::sync::Arc<str>,
        /// The configured limit.
        limit: usize,
    },
    /// The tenant already has `--max-tails-per-tenant` tails open.
    #[error("tenant {tenant} already has {limit} open tails (--max-tails-per-tenant); close one first (one tail can follow many services: list them all in its filter)")]
    TooManyTenantTails {
        /// The tenant (from configuration, so a bounded metric label).
        tenant: std::sync::Arc<str>,
        /// The configured limit.
        limit: usize,
    },
    /// The server already has `--max-tails` tails open.
    #[error("this server already has {limit} open tails (--max-tails); retry later, or on another replica")]
    TooManyTails {
        /// The configured limit.
        limit: usize,
    },
    /// A read took longer than `--query-timeout` and was stopped, its database work with it.
    #[error("the read was stopped after {timeout:?} (--query-timeout); narrow the time range (from/to) or the filter, then retry")]
    DeadlineExceeded {
        /// The configured timeout.
        timeout: Duration,
    },
    /// One read would hold more memory than `--max-query-bytes`; it was stopped there.
    #[error("the read needs more than {limit} of memory (--max-query-bytes): ask for less (a shorter time range, a narrower selector, a larger step, or an aggregation such as sum by (…)), or raise --max-query-bytes")]
    ReadTooLarge {
        /// The configured limit.
        limit: ByteSize,
    },
    /// The reads of every tenant together hold `--max-read-bytes`; this one was stopped.
    #[error("this server's reads already hold {limit} of memory (--max-read-bytes); retry in a moment, or raise --max-read-bytes")]
    ReadMemoryFull {
        /// The configured limit.
        limit: ByteSize,
    },
}

impl From<crate::model::InvalidRequest> for QueryError {
    fn from(crate::model::InvalidRequest(message): crate::model::InvalidRequest) -> Self {
        QueryError::InvalidArgument(message)
    }
}

impl From<StoreError> for QueryError {
    /// Every read's store failure passes here: the one place its detail is logged.
    fn from(err: StoreError) -> Self {
        tracing::warn!(error = %err, "a read failed in the database");
        QueryError::Store(err)
    }
}

impl QueryError {
    /// A stable label value for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            QueryError::InvalidArgument(_) => "invalid_argument",
            QueryError::Store(_) => "store_unavailable",
            QueryError::SubscriberTooSlow(_) => "too_slow",
            QueryError::ShuttingDown => "shutting_down",
            QueryError::DeadlineExceeded { .. } => "deadline_exceeded",
            QueryError::TooManyReads { .. } => "too_many_reads",
            QueryError::TooManyTenantTails { .. } | QueryError::TooManyTails { .. } => {
                "too_many_tails"
            }
            QueryError::ReadTooLarge { .. } => "read_too_large",
            QueryError::ReadMemoryFull { .. } => "read_memory_full",
        }
    }

    /// When to try again, for the errors that waiting cures: the same delay in gRPC's
    /// `RetryInfo` and in HTTP's `Retry-After`.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            QueryError::Store(_) => Some(STORE_RETRY_AFTER),
            QueryError::ShuttingDown => Some(Duration::from_secs(1)),
            QueryError::TooManyReads { .. } => Some(TOO_MANY_READS_RETRY_AFTER),
            QueryError::ReadMemoryFull { .. } => Some(READ_MEMORY_RETRY_AFTER),
            // Waiting helps only once someone closes a tail: no delay to promise.
            QueryError::InvalidArgument(_)
            | QueryError::SubscriberTooSlow(_)
            | QueryError::DeadlineExceeded { .. }
            | QueryError::TooManyTenantTails { .. }
            | QueryError::TooManyTails { .. }
            | QueryError::ReadTooLarge { .. } => None,
        }
    }

    /// The HTTP status of the error on the console's JSON API and Loki's: the same classes as
    /// the gRPC codes below (400 the request, 429 too slow, 503 come back later, 504 too long).
    /// A read too large for `--max-query-bytes` is the request's: 400, as Loki answers its own
    /// query limits; a server whose reads hold `--max-read-bytes` is busy: 503.
    pub fn http_status(&self) -> u16 {
        match self {
            QueryError::InvalidArgument(_) | QueryError::ReadTooLarge { .. } => 400,
            QueryError::SubscriberTooSlow(_)
            | QueryError::TooManyReads { .. }
            | QueryError::TooManyTenantTails { .. }
            | QueryError::TooManyTails { .. } => 429,
            QueryError::Store(_) | QueryError::ShuttingDown | QueryError::ReadMemoryFull { .. } => {
                503
            }
            QueryError::DeadlineExceeded { .. } => 504,
        }
    }
}

impl QueryError {
    /// The gRPC code of the error.
    pub fn code(&self) -> Code {
        match self {
            QueryError::InvalidArgument(_) => Code::InvalidArgument,
            QueryError::Store(_) | QueryError::ShuttingDown => Code::Unavailable,
            QueryError::SubscriberTooSlow(_)
            | QueryError::TooManyReads { .. }
            | QueryError::TooManyTenantTails { .. }
            | QueryError::TooManyTails { .. }
            | QueryError::ReadTooLarge { .. }
            | QueryError::ReadMemoryFull { .. } => Code::ResourceExhausted,
            QueryError::DeadlineExceeded { .. } => Code::DeadlineExceeded,
        }
    }
}

impl From<QueryError> for Status {
    fn from(err: QueryError) -> Self {
        let code = err.code();
        let message = err.to_string();
        match err.retry_after() {
            Some(delay) => retry_later(code, message, delay),
            None => Status::new(code, message),
        }
    }
}

/// Why an HTTP request (to the console's API, Loki's API or the HTTP ingest listener) was not
/// served: whatever the caller, the ingest path or a read refused, and what the request itself
/// got wrong.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// No key, a wrong key, or a caller the configuration does not serve.
    #[error(transparent)]
    Auth(#[from] AuthFailure),
    /// What the ingest path refused or could not do.
    #[error(transparent)]
    Ingest(#[from] IngestError),
    /// What a read refused or could not do.
    #[error(transparent)]
    Query(#[from] QueryError),
    /// A `Content-Type` or `Content-Encoding` the endpoint does not take.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// A request that cannot be served as written: a parameter, a header, a query.
    #[error("{0}")]
    BadRequest(String),
}

impl HttpError {
    /// The HTTP status.
    pub fn status(&self) -> axum::http::StatusCode {
        let code = match self {
            HttpError::Auth(failure) => failure.http_status(),
            HttpError::Ingest(err) => err.http_status(),
            HttpError::Query(err) => err.http_status(),
            HttpError::UnsupportedMediaType(_) => 415,
            HttpError::BadRequest(_) => 400,
        };
        axum::http::StatusCode::from_u16(code)
            .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The gRPC code of the same failure, for the `google.rpc.Status` OTLP/HTTP answers with.
    pub fn grpc_code(&self) -> Code {
        match self {
            HttpError::Auth(failure) => failure.code(),
            HttpError::Ingest(err) => err.code(),
            HttpError::Query(err) => err.code(),
            HttpError::UnsupportedMediaType(_) | HttpError::BadRequest(_) => Code::InvalidArgument,
        }
    }

    /// When the client should send again, for `Retry-After`.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            HttpError::Ingest(err) => err.retry_after(),
            HttpError::Query(err) => err.retry_after(),
            HttpError::Auth(_) | HttpError::UnsupportedMediaType(_) | HttpError::BadRequest(_) => {
                None
            }
        }
    }

    /// The `outcome` label of the metric that counts the endpoint's requests.
    pub fn kind(&self) -> &'static str {
        match self {
            HttpError::Auth(failure) if failure.code() == Code::PermissionDenied => "forbidden",
            HttpError::Auth(_) => "unauthenticated",
            HttpError::Ingest(err) => err.kind(),
            HttpError::Query(err) => err.kind(),
            HttpError::UnsupportedMediaType(_) => "unsupported_media_type",
            HttpError::BadRequest(_) => "bad_request",
        }
    }
}

/// For reads outside Loki's API that share its code (the console's histogram reads the rollup as
/// Loki's API does): a request that cannot be served as asked is an invalid argument there.
impl From<HttpError> for QueryError {
    fn from(err: HttpError) -> Self {
        match err {
            HttpError::Query(err) => err,
            other => QueryError::InvalidArgument(other.to_string()),
        }
    }
}

impl From<StoreError> for HttpError {
    fn from(err: StoreError) -> Self {
        HttpError::Query(QueryError::Store(err))
    }
}

/// An HTTP answer with `Retry-After` when there is a `delay` to promise: whole seconds, at least
/// 1, since the header has no finer unit and 0 would invite an immediate retry.
pub fn with_retry_after(
    mut response: axum::response::Response,
    delay: Option<Duration>,
) -> axum::response::Response {
    if let Some(delay) = delay {
        let seconds = delay.as_secs_f64().ceil().max(1.0) as u64;
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from(seconds),
        );
    }
    response
}

/// A status that tells the client to come back after `delay`: `google.rpc.RetryInfo` in the
/// standard status details, and the same message in the `google.rpc.retryinfo-bin` trailer, which
/// is where some OpenTelemetry exporters (Python's among them) look for it.
fn retry_later(code: Code, message: String, delay: Duration) -> Status {
    let mut metadata = MetadataMap::new();
    metadata.insert_bin(
        "google.rpc.retryinfo-bin",
        MetadataValue::from_bytes(&retry_info(delay).encode_to_vec()),
    );
    rich_status(code, message, vec![retry_info_detail(delay)], metadata)
}

/// `google.rpc.RetryInfo` saying to come back after `delay`.
fn retry_info(delay: Duration) -> tonic_types::pb::RetryInfo {
    tonic_types::pb::RetryInfo {
        retry_delay: prost_types::Duration::try_from(delay).ok(),
    }
}

/// `google.rpc.RetryInfo` as an entry of a `google.rpc.Status`'s details, gRPC's or OTLP/HTTP's.
pub fn retry_info_detail(delay: Duration) -> prost_types::Any {
    prost_types::Any {
        type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
        value: retry_info(delay).encode_to_vec(),
    }
}

/// A status of `code` and `message` with the detail entries `details` and `metadata`. Its
/// `grpc-status-details-bin` is a `google.rpc.Status` of the same code and message, built here
/// once the message is final: gRPC's status libraries refuse details that disagree with the
/// status (Python's `grpc_status.rpc_status.from_call` raises), which would hide the details.
/// Every status with details is built here.
fn rich_status(
    code: Code,
    message: String,
    details: Vec<prost_types::Any>,
    metadata: MetadataMap,
) -> Status {
    if details.is_empty() {
        return Status::with_metadata(code, message, metadata);
    }
    let encoded = tonic_types::pb::Status {
        code: code as i32,
        message: message.clone(),
        details,
    }
    .encode_to_vec();
    Status::with_details_and_metadata(code, message, encoded.into(), metadata)
}

/// The detail entries of `status`, to carry over to a status with another message.
fn detail_entries(status: &Status) -> Vec<prost_types::Any> {
    tonic_types::pb::Status::decode(status.details())
        .map(|decoded| decoded.details)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::{ErrorDetails, StatusExt};

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

        let status = Status::from(StreamFailure {
            cause: IngestError::StreamIdle(Duration::from_secs(60)),
            settled: PushResponse {
                accepted: 7,
                rejected: 2,
                ..PushResponse::default()
            },
            not_stored: NotStored {
                failed: vec![],
                from: Some(3),
            },
        });
        assert_eq!(status.code(), Code::DeadlineExceeded);
        assert!(status.message().contains("7 accepted, 2 rejected"));
        assert!(status.message().contains("not stored: messages 3.."));
        assert_eq!(status.metadata().get("loghaul-accepted").unwrap(), "7");
        assert_eq!(status.metadata().get("loghaul-rejected").unwrap(), "2");
        assert_eq!(
            status.metadata().get("loghaul-unstored-messages").unwrap(),
            "3-"
        );
    }

    #[test]
    fn a_failed_stream_keeps_the_causes_retry_delay_and_lists_what_was_settled() {
        let rejections = (0..100)
            .map(|index| crate::proto::v1::Rejection {
                index,
                reason: "r".repeat(1000),
            })
            .collect();
        let status = Status::from(StreamFailure {
            cause: IngestError::Backpressure {
                resource: "shard queue",
                waited: Duration::from_secs(5),
                retry_after: Duration::from_secs(1),
            },
            settled: PushResponse {
                accepted: 10,
                rejected: 100,
                rejections,
                duplicate_records: 0,
            },
            not_stored: NotStored {
                failed: vec![1],
                from: Some(4),
            },
        });
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(status.get_error_details().retry_info().is_some());
        assert!(status
            .metadata()
            .get_bin("google.rpc.retryinfo-bin")
            .is_some());
        let settled = status.metadata().get_bin("loghaul-settled-bin").unwrap();
        let settled = PushResponse::decode(settled.to_bytes().unwrap()).unwrap();
        assert_eq!((settled.accepted, settled.rejected), (10, 100));
        assert_eq!(settled.rejections.len(), MAX_TRAILER_REJECTIONS);
        let trailers: usize = status
            .metadata()
            .clone()
            .into_headers()
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len())
            .sum();
        assert!(trailers < 8 * 1024, "{trailers} bytes of trailers");
        assert!(
            status.message().contains("not stored: messages 1, 4.."),
            "{}",
            status.message()
        );
    }

    /// What a client's status library reads: the status as it travels (`grpc-status`,
    /// `grpc-message`, `grpc-status-details-bin`), and the `google.rpc.Status` in its details.
    fn on_the_wire(status: Status) -> (Status, Option<tonic_types::pb::Status>) {
        let response: tonic::codegen::http::Response<()> = status.into_http();
        let read = Status::from_header_map(response.headers()).unwrap();
        let details = (!read.details().is_empty())
            .then(|| tonic_types::pb::Status::decode(read.details()).unwrap());
        (read, details)
    }

    #[test]
    fn the_rich_status_repeats_the_final_code_and_message() {
        let settled = || PushResponse {
            accepted: 3,
            rejected: 1,
            ..PushResponse::default()
        };
        let failed = |cause| {
            Status::from(StreamFailure {
                cause,
                settled: settled(),
                not_stored: NotStored {
                    failed: vec![],
                    from: Some(2),
                },
            })
        };
        let backpressure = || IngestError::Backpressure {
            resource: "memory budget",
            waited: Duration::from_secs(2),
            retry_after: Duration::from_secs(1),
        };
        let rate_limited = || IngestError::RateLimited {
            tenant: std::sync::Arc::from("t"),
            retry_after: Duration::from_millis(250),
        };
        let store = || IngestError::Store(StoreError::Unavailable("pool timed out".into()));
        // A transport status that came with details of its own.
        let from_transport = || {
            IngestError::Stream(Status::with_error_details(
                Code::Unavailable,
                "h2 stream reset",
                ErrorDetails::with_retry_info(Some(Duration::from_secs(3))),
            ))
        };
        let statuses = [
            Status::from(backpressure()),
            failed(backpressure()),
            Status::from(rate_limited()),
            failed(rate_limited()),
            Status::from(IngestError::ShuttingDown),
            failed(IngestError::ShuttingDown),
            Status::from(store()),
            failed(store()),
            failed(from_transport()),
            failed(IngestError::StreamIdle(Duration::from_secs(60))),
            Status::from(QueryError::ShuttingDown),
            Status::from(QueryError::TooManyReads {
                tenant: std::sync::Arc::from("t"),
                limit: 2,
            }),
        ];
        let mut with_retry_info = 0;
        for status in statuses {
            let (read, details) = on_the_wire(status);
            let Some(details) = details else {
                assert_eq!(read.code(), Code::DeadlineExceeded, "{read:?}");
                continue;
            };
            assert_eq!(details.code, read.code() as i32, "{read:?}");
            assert_eq!(details.message, read.message(), "{read:?}");
            let retry_info = details
                .details
                .iter()
                .find(|any| any.type_url == "type.googleapis.com/google.rpc.RetryInfo");
            with_retry_info += usize::from(retry_info.is_some());
        }
        assert_eq!(with_retry_info, 11, "every retryable status says when");
    }

    #[test]
    fn the_databases_own_text_never_reaches_the_client() {
        let raw = "error communicating with database: connection refused (db-7.internal:5432) in INSERT INTO logs";
        let ingest = Status::from(IngestError::Store(StoreError::Unavailable(raw.into())));
        assert_eq!(ingest.code(), Code::Unavailable);
        let query = Status::from(QueryError::Store(StoreError::Unavailable(raw.into())));
        assert_eq!(query.code(), Code::Unavailable);
        for message in [ingest.message(), query.message()] {
            assert!(message.contains("the database is unavailable"), "{message}");
            assert!(
                message.contains("(the connection to the database failed)"),
                "{message}"
            );
            assert!(
                !message.contains("db-7") && !message.contains("INSERT"),
                "{message}"
            );
        }
    }

    #[test]
    fn read_limits_map_to_their_codes_on_grpc_and_http() {
        let tenant: std::sync::Arc<str> = std::sync::Arc::from("t");
        let cases = [
            (
                QueryError::DeadlineExceeded {
                    timeout: Duration::from_secs(10),
                },
                Code::DeadlineExceeded,
                504,
            ),
            (
                QueryError::TooManyReads {
                    tenant: tenant.clone(),
                    limit: 2,
                },
                Code::ResourceExhausted,
                429,
            ),
            (
                QueryError::TooManyTenantTails { tenant, limit: 32 },
                Code::ResourceExhausted,
                429,
            ),
            (
                QueryError::TooManyTails { limit: 256 },
                Code::ResourceExhausted,
                429,
            ),
            (
                QueryError::ReadTooLarge {
                    limit: ByteSize(64 << 20),
                },
                Code::ResourceExhausted,
                400,
            ),
            (
                QueryError::ReadMemoryFull {
                    limit: ByteSize(256 << 20),
                },
                Code::ResourceExhausted,
                503,
            ),
        ];
        for (err, code, http) in cases {
            assert_eq!(err.http_status(), http, "{err}");
            let message = err.to_string();
            assert!(message.starts_with(char::is_lowercase), "{message}");
            assert!(message.contains("(--"), "names its option: {message}");
            let retries = matches!(
                err,
                QueryError::TooManyReads { .. } | QueryError::ReadMemoryFull { .. }
            );
            assert_eq!(err.retry_after().is_some(), retries, "{message}");
            let status = Status::from(err);
            assert_eq!(status.code(), code, "{message}");
            assert_eq!(status.get_error_details().retry_info().is_some(), retries);
        }
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
