//! `POST /v1/logs`, OTLP/HTTP as the OTLP specification describes it: an
//! `ExportLogsServiceRequest` as protobuf (`application/x-protobuf`) or OTLP/JSON
//! (`application/json`), optionally gzip- or zstd-compressed, answered in the same encoding once
//! its records are committed: 200 with `partial_success` when some were rejected.

use std::net::IpAddr;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, Response, StatusCode};
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use prost::Message;

use super::export::Exporter;
use super::json;
use crate::ingest::transcode::Refused;
use crate::observability::metrics::Protocol;
use crate::wire::http::body::content_encoding;
use crate::wire::http::reply::{self, BodyFormat, HttpError};
use crate::wire::http::Reception;

/// Serves one request; returns the answer and the outcome to count.
pub async fn export(
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
            (reply::otlp_error(&err, format), err.kind())
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
