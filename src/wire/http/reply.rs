//! The answers of the HTTP ingest listener: why a request failed as one type, its HTTP status
//! (from the ingest and auth errors' own mappings in [`crate::error`]), its `Retry-After`, and its
//! body in the form the protocol's clients read.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
use prost::Message;

use crate::auth::AuthFailure;
use crate::error::{retry_info_detail, with_retry_after, IngestError};

/// Why an HTTP ingest request was not served.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// No key, a wrong key, or a caller the configuration does not serve.
    #[error(transparent)]
    Auth(#[from] AuthFailure),
    /// What the shared ingest path refused or could not do.
    #[error(transparent)]
    Ingest(#[from] IngestError),
    /// A `Content-Type` or `Content-Encoding` the endpoint does not take.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// A request the endpoint cannot serve as sent (a header, not the body).
    #[error("{0}")]
    BadRequest(String),
}

impl HttpError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        let code = match self {
            HttpError::Auth(failure) => failure.http_status(),
            HttpError::Ingest(err) => err.http_status(),
            HttpError::UnsupportedMediaType(_) => 415,
            HttpError::BadRequest(_) => 400,
        };
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The gRPC code of the same failure, for the `google.rpc.Status` OTLP/HTTP answers with.
    pub fn grpc_code(&self) -> tonic::Code {
        match self {
            HttpError::Auth(failure) => failure.code(),
            HttpError::Ingest(err) => err.code(),
            HttpError::UnsupportedMediaType(_) | HttpError::BadRequest(_) => {
                tonic::Code::InvalidArgument
            }
        }
    }

    /// When the client should send again, for `Retry-After`.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            HttpError::Ingest(err) => err.retry_after(),
            _ => None,
        }
    }

    /// The `outcome` label of `loghaul_http_ingest_requests_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            HttpError::Auth(failure) if failure.code() == tonic::Code::PermissionDenied => {
                "forbidden"
            }
            HttpError::Auth(_) => "unauthenticated",
            HttpError::Ingest(err) => err.kind(),
            HttpError::UnsupportedMediaType(_) => "unsupported_media_type",
            HttpError::BadRequest(_) => "bad_request",
        }
    }
}

/// The body encodings OTLP/HTTP answers in: the request's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFormat {
    /// `application/x-protobuf`.
    Protobuf,
    /// `application/json`.
    Json,
}

impl BodyFormat {
    /// The format a `Content-Type` names, parameters (`; charset=utf-8`) ignored.
    pub fn of(content_type: Option<&HeaderValue>) -> Option<BodyFormat> {
        let value = content_type?.to_str().ok()?;
        let essence = value.split(';').next()?.trim();
        if essence.eq_ignore_ascii_case("application/x-protobuf")
            || essence.eq_ignore_ascii_case("application/protobuf")
        {
            Some(BodyFormat::Protobuf)
        } else if essence.eq_ignore_ascii_case("application/json") {
            Some(BodyFormat::Json)
        } else {
            None
        }
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            BodyFormat::Protobuf => "application/x-protobuf",
            BodyFormat::Json => "application/json",
        }
    }
}

/// A response of `status` with `body` of `content_type`.
pub fn response(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// An empty response of `status`.
pub fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    response
}

/// The failure as OTLP/HTTP answers it: a `google.rpc.Status` in the request's encoding (JSON
/// when the request's own was not understood), with the retry delay in `Retry-After` and, for
/// protobuf, in a `google.rpc.RetryInfo` detail.
pub fn otlp_error(err: &HttpError, format: Option<BodyFormat>) -> Response<Body> {
    let delay = err.retry_after();
    let code = err.grpc_code() as i32;
    let message = err.to_string();
    let format = format.unwrap_or(BodyFormat::Json);
    let body = match format {
        BodyFormat::Protobuf => {
            let details = delay.map(retry_info_detail).into_iter().collect();
            tonic_types::pb::Status {
                code,
                message,
                details,
            }
            .encode_to_vec()
        }
        BodyFormat::Json => {
            let details: Vec<serde_json::Value> = delay
                .map(|delay| {
                    serde_json::json!({
                        "@type": "type.googleapis.com/google.rpc.RetryInfo",
                        "retryDelay": format!("{:.3}s", delay.as_secs_f64()),
                    })
                })
                .into_iter()
                .collect();
            serde_json::json!({"code": code, "message": message, "details": details})
                .to_string()
                .into_bytes()
        }
    };
    with_retry_after(response(err.status(), format.content_type(), body), delay)
}

/// The failure as the Loki push API answers it: its message as plain text.
pub fn text_error(err: &HttpError) -> Response<Body> {
    let body = format!("{err}\n").into_bytes();
    with_retry_after(
        response(err.status(), "text/plain; charset=utf-8", body),
        err.retry_after(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_are_matched_by_their_essence() {
        let of = |value: &str| BodyFormat::of(Some(&HeaderValue::from_str(value).unwrap()));
        assert_eq!(of("application/x-protobuf"), Some(BodyFormat::Protobuf));
        assert_eq!(
            of("Application/JSON; charset=utf-8"),
            Some(BodyFormat::Json)
        );
        assert_eq!(of("text/plain"), None);
        assert_eq!(BodyFormat::of(None), None);
    }

    #[test]
    fn a_retryable_failure_says_when_in_the_header_and_the_status() {
        let err = HttpError::Ingest(IngestError::Backpressure {
            resource: "shard queue",
            waited: Duration::from_secs(5),
            retry_after: Duration::from_millis(1500),
        });
        let answer = otlp_error(&err, Some(BodyFormat::Protobuf));
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.headers()[header::RETRY_AFTER], "2");
        let answer = otlp_error(&HttpError::Auth(AuthFailure::MissingKey), None);
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);
        assert!(answer.headers().get(header::RETRY_AFTER).is_none());
        assert_eq!(answer.headers()[header::CONTENT_TYPE], "application/json");
    }
}
