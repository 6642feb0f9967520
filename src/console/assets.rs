//! The console's page, script and style sheet, compiled into the binary: the console works with no
//! network, no CDN and nothing to install beside the binary.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// What the page may load and run: only its own files, no inline script, no framing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");
const FAVICON_SVG: &str = include_str!("assets/favicon.svg");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            // The files change with the binary; revalidating is cheap on a loopback listener.
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

/// `GET /`: the single page (views are chosen by the URL fragment).
pub(crate) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// `GET /app.js`.
pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

/// `GET /app.css`.
pub(crate) async fn style() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

/// `GET /favicon.svg`.
pub(crate) async fn favicon() -> Response {
    asset("image/svg+xml", FAVICON_SVG)
}

/// Any other path: JSON under `/api`, text elsewhere.
pub(crate) async fn not_found(uri: axum::http::Uri) -> Response {
    if uri.path().starts_with("/api") {
        return super::api::not_found().await;
    }
    (StatusCode::NOT_FOUND, "not found: the console is at /\n").into_response()
}
