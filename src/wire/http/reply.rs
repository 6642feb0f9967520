//! The answers of the HTTP listeners: a body of a content type, an empty answer, and a failure
//! as plain text. What a failure's status and `Retry-After` are is [`crate::error::HttpError`]'s.

use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};

use crate::error::{with_retry_after, HttpError};

/// A response of `status` with `body` of `content_type`.
pub(crate) fn response(
    status: StatusCode,
    content_type: &'static str,
    body: Vec<u8>,
) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// An empty response of `status`.
pub(crate) fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    response
}

/// The failure as the Loki push API answers it: its message as plain text.
pub(crate) fn text_error(err: &HttpError) -> Response<Body> {
    let body = format!("{err}\n").into_bytes();
    with_retry_after(
        response(err.status(), "text/plain; charset=utf-8", body),
        err.retry_after(),
    )
}
