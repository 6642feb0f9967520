//! The JSON error answers of the console API: `{"error": "…"}` with a status that says whose fault
//! it is, never a 500 for something the client sent.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::{with_retry_after, HttpError};

/// A refused API call, answered as `{"error": "…"}` with the status, `Retry-After` and reason
/// of its [`HttpError`].
#[derive(Debug)]
pub(crate) struct ApiError(HttpError);

impl<E: Into<HttpError>> From<E> for ApiError {
    fn from(err: E) -> Self {
        ApiError(err.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let ApiError(err) = self;
        let status = err.status();
        let mut response = with_retry_after(
            json_response(status, &serde_json::json!({"error": err.to_string()})),
            err.retry_after(),
        );
        if status == StatusCode::UNAUTHORIZED {
            // Not `Basic`: browsers would pop up their own password dialog.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("ApiKey header=\"x-api-key\""),
            );
        }
        response
    }
}

/// A JSON body with the given status; API answers are never cached.
pub(crate) fn json_response(status: StatusCode, value: &serde_json::Value) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        value.to_string(),
    )
        .into_response()
}
