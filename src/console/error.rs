//! The JSON error answers of the console API: `{"error": "…"}` with a status that says whose fault
//! it is, never a 500 for something the client sent.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::auth::AuthFailure;
use crate::error::{with_retry_after, QueryError};

/// Why an API call was refused.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Missing or unknown key, or a caller or a `Host` a keyless service does not serve.
    #[error(transparent)]
    Unauthorized(#[from] AuthFailure),
    /// A parameter that cannot be parsed.
    #[error("{0}")]
    BadRequest(String),
    /// What the query code refused or could not do.
    #[error(transparent)]
    Query(#[from] QueryError),
}

impl ApiError {
    /// The HTTP status of the error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized(failure) => StatusCode::from_u16(failure.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Query(err) => {
                StatusCode::from_u16(err.http_status()).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
            }
        }
    }

    /// When to try again, for the errors that waiting cures.
    fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            ApiError::Query(err) => err.retry_after(),
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = with_retry_after(
            json_response(status, &serde_json::json!({"error": self.to_string()})),
            self.retry_after(),
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
pub fn json_response(status: StatusCode, value: &serde_json::Value) -> Response {
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
