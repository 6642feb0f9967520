//! A request body read under the size limit and the memory budget, then decompressed as its
//! `Content-Encoding` says: the limit holds for the body as sent and again once inflated, so a
//! compression bomb is refused before it is inflated past the limit. The request claims its place
//! in the budget before the first byte is read, charges every byte as it arrives, and is cut off
//! if the body comes slower than `--min-body-rate`.

use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;

use crate::error::HttpError;
use crate::error::IngestError;
use crate::pipeline::Meter;
use crate::wire::body_rate::BodyPace;
use crate::wire::inflate::{inflate, Compression};
use crate::wire::EXPECTED_DECODED_RATIO;

/// What a body may be.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyLimits {
    /// Bytes as sent, and again once decompressed (`--max-request-bytes`).
    pub max_bytes: usize,
    /// How the body must keep arriving (`--stream-idle-timeout`, `--min-body-rate`).
    pub pace: BodyPace,
}

/// The compression `Content-Encoding` names; `None` for none. Loki's `snappy` is not a transfer
/// encoding: its protobuf bodies are always snappy-compressed, so the endpoint inflates them
/// itself.
pub(crate) fn content_encoding(headers: &HeaderMap) -> Result<Option<Compression>, HttpError> {
    let Some(value) = headers.get(header::CONTENT_ENCODING) else {
        return Ok(None);
    };
    let name = value.to_str().unwrap_or("").trim().to_ascii_lowercase();
    match name.as_str() {
        "" | "identity" | "snappy" => Ok(None),
        "gzip" | "x-gzip" => Ok(Some(Compression::Gzip)),
        "deflate" => Ok(Some(Compression::Deflate)),
        "zstd" => Ok(Some(Compression::Zstd)),
        other => Err(HttpError::UnsupportedMediaType(format!(
            "Content-Encoding {other:?} is not supported; send gzip, zstd, deflate or none"
        ))),
    }
}

/// Reads the body, charging `meter` for it, and inflates it per `compression`.
pub(crate) async fn read(
    body: Body,
    headers: &HeaderMap,
    compression: Option<Compression>,
    limits: BodyLimits,
    meter: &mut Meter<'_>,
) -> Result<Bytes, HttpError> {
    let too_large = |detail: String| IngestError::RequestTooLarge {
        detail,
        limit: limits.max_bytes as u64,
    };
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    if let Some(length) = announced {
        if length > limits.max_bytes {
            return Err(too_large(format!("a body of {length} bytes")).into());
        }
    }
    // What the records will take once decoded too, as gRPC claims: most requests then wait for
    // room once, holding nothing, and never again. A body of unknown length may be as long as
    // the limit.
    let expected = announced.unwrap_or(limits.max_bytes);
    meter
        .reserve(expected.saturating_mul(EXPECTED_DECODED_RATIO))
        .await?;
    let mut raw = BytesMut::with_capacity(announced.unwrap_or(0));
    let mut body = body;
    let mut clock = limits.pace.start();
    loop {
        let Some(frame) = clock.next(body.frame()).await? else {
            break;
        };
        let frame = frame.map_err(|err| {
            IngestError::Malformed(format!("the request body could not be read: {err}"))
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if raw.len() + data.len() > limits.max_bytes {
            return Err(too_large("a body longer than the limit".into()).into());
        }
        clock.received(data.len());
        meter.charge(data.len()).await?;
        raw.extend_from_slice(&data);
    }
    let raw = raw.freeze();
    let Some(compression) = compression else {
        return Ok(raw);
    };
    let inflated = inflate(&raw, compression, limits.max_bytes, meter).await?;
    meter.release(raw.len());
    Ok(inflated)
}
