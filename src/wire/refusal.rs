//! Makes tonic's answer to a request it refused to decode say what the client should do; wraps
//! `LogQuery`, the one service whose requests tonic decodes (ingest reads its own bodies).
//!
//! For a unary method tonic decodes the message before the handler runs, so a request over
//! `max_decoding_message_size` never reaches it: tonic answers `OUT_OF_RANGE` ("decoded message
//! length too large") or, for a compressed message that inflates past the limit,
//! `RESOURCE_EXHAUSTED` ("size limit … exceeded while decompressing"). OTLP clients treat
//! `OUT_OF_RANGE` as "retry" and neither message names the option to change. A message that is not
//! valid protobuf (invalid UTF-8 in a string, nesting past prost's recursion limit) gets
//! `INTERNAL`, which blames the server. This wrapper rewrites such answers into the statuses
//! `LogIngest` gives, built by the one mapping in `crate::error`: `RESOURCE_EXHAUSTED` without
//! `RetryInfo` (so OTLP clients do not retry the same request) naming `--max-request-bytes`, and
//! `INVALID_ARGUMENT` naming the malformed field.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::{Code, Status};
use tower::Service;

use crate::error::IngestError;
use crate::observability::metrics::CounterVec;

/// A gRPC service whose "too large" and "cannot decode" answers are rewritten; see the module docs.
#[derive(Clone, Debug)]
pub(crate) struct ExplainRefusal<S> {
    inner: S,
    max_request_bytes: u64,
    calls: CounterVec<1>,
}

impl<S> ExplainRefusal<S> {
    /// Wraps `inner`, whose decoding limit is `max_request_bytes`; a rewritten answer is counted
    /// in the service's own outcome counter `calls`.
    pub(crate) fn new(inner: S, max_request_bytes: u64, calls: CounterVec<1>) -> Self {
        ExplainRefusal {
            inner,
            max_request_bytes,
            calls,
        }
    }
}

impl<S: NamedService> NamedService for ExplainRefusal<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for ExplainRefusal<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let answer = self.inner.call(request);
        let (limit, calls) = (self.max_request_bytes, self.calls.clone());
        Box::pin(async move { Ok(explain(answer.await?, limit, &calls)) })
    }
}

/// The response itself, unless it is a trailers-only error that says the message was too large.
fn explain(
    response: http::Response<Body>,
    limit: u64,
    calls: &CounterVec<1>,
) -> http::Response<Body> {
    // A successful answer carries its status in the trailers, so only errors match here.
    let Some(status) = Status::from_header_map(response.headers()) else {
        return response;
    };
    if status.code() == Code::Ok {
        return response;
    }
    match IngestError::from_stream(status, limit) {
        refusal @ (IngestError::RequestTooLarge { .. } | IngestError::Malformed(_)) => {
            calls.increment_static([refusal.kind()], 1);
            Status::from(refusal).into_http()
        }
        _ => response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observability::metrics::{Registry, Series};

    /// An outcome counter of the test's own.
    fn calls() -> CounterVec<1> {
        let series = Series::new("loghaul_test_calls_total", metrics::Unit::Count, "test");
        CounterVec::register(&Registry::new(), series, ["outcome"])
    }

    fn status_of(response: &http::Response<Body>) -> Status {
        Status::from_header_map(response.headers()).unwrap()
    }

    #[test]
    fn tonic_oversize_answers_become_resource_exhausted_naming_the_option() {
        for tonic_says in [
            Status::out_of_range(
                "Error, decoded message length too large: found 70000 bytes, the limit is: 65536 bytes",
            ),
            Status::resource_exhausted(
                "Error decompressing: size limit, of 65536 bytes, exceeded while decompressing message",
            ),
        ] {
            let explained = status_of(&explain(tonic_says.into_http(), 65536, &calls()));
            assert_eq!(explained.code(), Code::ResourceExhausted);
            assert!(
                explained.message().contains("--max-request-bytes"),
                "{}",
                explained.message()
            );
            assert!(explained.message().contains("65536"));
        }
    }

    #[test]
    fn undecodable_requests_become_invalid_argument() {
        let tonic_says = Status::internal(
            "failed to decode Protobuf message: AnyValue.value: recursion limit reached",
        );
        let explained = status_of(&explain(tonic_says.into_http(), 65536, &calls()));
        assert_eq!(explained.code(), Code::InvalidArgument);
        assert!(
            explained.message().contains("recursion limit reached"),
            "{}",
            explained.message()
        );
    }

    #[test]
    fn other_answers_pass_untouched() {
        let invalid = Status::invalid_argument("nope").into_http();
        assert_eq!(status_of(&explain(invalid, 1, &calls())).message(), "nope");
        let success = http::Response::new(Body::empty());
        assert!(Status::from_header_map(explain(success, 1, &calls()).headers()).is_none());
    }
}
