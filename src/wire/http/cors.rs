//! CORS for browsers sending logs (a web app's OpenTelemetry SDK): off unless
//! `--http-cors-origins` lists the page's origin. A preflight from a listed origin is answered
//! with what the exporters send (POST, their content and auth headers); every other origin gets
//! no CORS header at all, so the browser refuses the send.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Response, StatusCode};

use super::reply::empty;
use crate::config::CorsOrigins;

/// Headers a browser exporter sends; `x-api-key` and `authorization` carry the key.
const ALLOWED_HEADERS: &str =
    "content-type, content-encoding, x-api-key, authorization, x-scope-orgid";
/// How long a browser may cache a preflight answer, in seconds.
const PREFLIGHT_MAX_AGE: &str = "600";

/// The configured origins.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cors {
    origins: CorsOrigins,
}

impl Cors {
    /// CORS for `origins` (none: off).
    pub(crate) fn new(origins: CorsOrigins) -> Self {
        Cors { origins }
    }

    /// The request's `Origin` when it is allowed, to be echoed back.
    pub(crate) fn allowed(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        let origin = headers.get(header::ORIGIN)?;
        let text = origin.to_str().ok()?.to_ascii_lowercase();
        self.origins
            .0
            .iter()
            .any(|allowed| allowed == "*" || *allowed == text)
            .then(|| origin.clone())
    }

    /// The answer to a preflight (`OPTIONS`): 204 with the allowances for a listed origin, 403
    /// without any for the others.
    pub(crate) fn preflight(&self, headers: &HeaderMap) -> Response<Body> {
        let Some(origin) = self.allowed(headers) else {
            return empty(StatusCode::FORBIDDEN);
        };
        let mut response = empty(StatusCode::NO_CONTENT);
        let answer = response.headers_mut();
        answer.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("POST, OPTIONS"),
        );
        answer.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOWED_HEADERS),
        );
        answer.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(PREFLIGHT_MAX_AGE),
        );
        allow(&mut response, Some(origin));
        response
    }
}

/// Marks `response` readable by `origin` (when it is allowed), and says that the answer depends
/// on the origin so caches keep one per origin.
pub(crate) fn allow(response: &mut Response<Body>, origin: Option<HeaderValue>) {
    let Some(origin) = origin else {
        return;
    };
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("retry-after"),
    );
    headers.append(header::VARY, HeaderValue::from_static("origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_from(origin: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ORIGIN, origin.parse().unwrap());
        headers
    }

    #[test]
    fn only_listed_origins_get_an_allowance() {
        let cors = Cors::new("https://app.example.com".parse().unwrap());
        let listed = cors.preflight(&request_from("https://APP.example.com"));
        assert_eq!(listed.status(), StatusCode::NO_CONTENT);
        let headers = listed.headers();
        assert_eq!(
            headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://APP.example.com"
        );
        assert!(headers[header::ACCESS_CONTROL_ALLOW_HEADERS]
            .to_str()
            .unwrap()
            .contains("x-api-key"));
        let other = cors.preflight(&request_from("https://evil.example"));
        assert_eq!(other.status(), StatusCode::FORBIDDEN);
        assert!(other
            .headers()
            .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
            .is_none());
        assert_eq!(Cors::default().allowed(&request_from("https://a.b")), None);
        let any = Cors::new("*".parse().unwrap());
        assert!(any
            .allowed(&request_from("http://localhost:5173"))
            .is_some());
    }
}
