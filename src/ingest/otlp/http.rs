//! `POST /v1/logs`, OTLP/HTTP as the OTLP specification describes it: an
//! `ExportLogsServiceRequest` as protobuf (`application/x-protobuf`) or OTLP/JSON
//! (`application/json`), optionally gzip- or zstd-compressed, answered in the same encoding once
//! its records are committed: 200 with `partial_success` when some were rejected.

use std::net::IpAddr;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, Response, StatusCode};
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use prost::Message;

use super::export::Exporter;
use super::json;
use crate::error::{retry_info_detail, with_retry_after, HttpError};
use crate::ingest::metrics::Protocol;
use crate::ingest::transcode::Refused;
use crate::wire::http::body::content_encoding;
use crate::wire::http::reply;
use crate::wire::http::Reception;

/// Serves one request; returns the answer and the outcome to count.
pub(crate) async fn export(
    reception: &Reception,
    exporter: &Exporter,
    request: Request,
    peer: IpAddr,
) -> (Response<Body>, &'static str) {
    let format = BodyFormat::of(request.headers().get(header::CONTENT_TYPE));
    match store(reception, exporter, format, request, peer).await {
        Ok(answer) => {
            let outcome = if answer.partial_success.is_some() {
                "partial"
            } else {
                "ok"
            };
            let format = format.unwrap_or(BodyFormat::Protobuf);
            let body = match format {
                BodyFormat::Protobuf => answer.encode_to_vec(),
                // A full success is the empty message, `{}` rather than a null field.
                BodyFormat::Json if answer.partial_success.is_none() => b"{}".to_vec(),
                BodyFormat::Json => serde_json::to_vec(&answer).unwrap_or_default(),
            };
            let response = reply::response(StatusCode::OK, format.content_type(), body);
            (response, outcome)
        }
        Err(err) => {
            tracing::debug!(error = %err, "OTLP/HTTP request refused");
            (otlp_error(&err, format), err.kind())
        }
    }
}

async fn store(
    reception: &Reception,
    exporter: &Exporter,
    format: Option<BodyFormat>,
    request: Request,
    peer: IpAddr,
) -> Result<ExportLogsServiceResponse, HttpError> {
    let (parts, body) = request.into_parts();
    let tenant = reception.authenticate(&parts.headers, peer)?;
    let format = format.ok_or_else(|| {
        HttpError::UnsupportedMediaType(
            "OTLP/HTTP takes Content-Type application/x-protobuf or application/json".into(),
        )
    })?;
    let compression = content_encoding(&parts.headers)?;
    let (body, mut meter) = reception
        .read(&tenant, &parts.headers, body, compression)
        .await?;
    let (message, upfront) = match format {
        BodyFormat::Protobuf => (body, Refused::default()),
        BodyFormat::Json => {
            let transcoded = json::to_protobuf_charged(body.clone(), &mut meter).await?;
            meter.release(body.len());
            (Bytes::from(transcoded.protobuf), transcoded.refused)
        }
    };
    Ok(exporter
        .export(&tenant, Protocol::OtlpHttp, message, upfront, meter)
        .await?)
}

/// The body encodings OTLP/HTTP answers in: the request's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyFormat {
    /// `application/x-protobuf`.
    Protobuf,
    /// `application/json`.
    Json,
}

impl BodyFormat {
    /// The format a `Content-Type` names, parameters (`; charset=utf-8`) ignored.
    pub(crate) fn of(content_type: Option<&HeaderValue>) -> Option<BodyFormat> {
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
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            BodyFormat::Protobuf => "application/x-protobuf",
            BodyFormat::Json => "application/json",
        }
    }
}

/// The failure as OTLP/HTTP answers it: a `google.rpc.Status` in the request's encoding (JSON
/// when the request's own was not understood), with the retry delay in `Retry-After` and, for
/// protobuf, in a `google.rpc.RetryInfo` detail.
pub(crate) fn otlp_error(err: &HttpError, format: Option<BodyFormat>) -> Response<Body> {
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
    with_retry_after(
        reply::response(err.status(), format.content_type(), body),
        delay,
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::auth::AuthFailure;
    use crate::error::IngestError;
    use axum::http::HeaderValue;

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
