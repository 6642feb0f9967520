//! `POST /loki/api/v1/push`, the Loki push API that Promtail, Grafana Alloy, Fluent Bit's `loki`
//! output, Vector's `loki` sink and the Docker driver speak: a `logproto.PushRequest`
//! (snappy-compressed protobuf) or its JSON form, answered with 204 once every entry is
//! committed. Entries that cannot be stored are rejected alone, and the request then answers 400
//! naming them, as Loki does; the others are stored.
//!
//! - [`proto`]: Loki's messages, generated from `proto/logproto/push.proto`.
//! - [`json`]: the JSON form transcoded to the protobuf one.
//! - [`labels`]: stream labels, and how they become a record's fields.
//!
//! The other direction, Loki's query API for Grafana, is in [`crate::loki`].

pub mod json;
pub mod labels;
mod level;

/// Loki's push messages (`logproto`), with Loki's names and field numbers.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/logproto.rs"));

    /// The fields a push is walked by, and the JSON form is transcoded into.
    pub(crate) mod field {
        /// `PushRequest.streams`.
        pub(crate) const STREAMS: u32 = 1;
        /// `StreamAdapter.labels`.
        pub(crate) const LABELS: u32 = 1;
        /// `StreamAdapter.entries`.
        pub(crate) const ENTRIES: u32 = 2;

        #[cfg(test)]
        mod tests {
            use super::*;

            #[test]
            fn the_walked_field_numbers_are_lokis() {
                crate::wire::fields::assert_field_numbers(
                    include_bytes!(concat!(env!("OUT_DIR"), "/logproto_descriptor.bin")),
                    &[
                        ("logproto.PushRequest", "streams", STREAMS),
                        ("logproto.StreamAdapter", "labels", LABELS),
                        ("logproto.StreamAdapter", "entries", ENTRIES),
                    ],
                );
            }
        }
    }
}

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, Response, StatusCode};
use bytes::Bytes;
use chrono::Utc;
use prost::Message;

use crate::auth::Tenant;
use crate::error::HttpError;
use crate::error::IngestError;
use crate::ingest::charge::Collected;
use crate::ingest::metrics::{IngestMetrics, Protocol};
use crate::ingest::rejections::RequestTally;
use crate::ingest::transcode::Refused;
use crate::ingest::validate::{validate_with, Invalid, Limits, RejectReason};
use crate::pipeline::{Ingress, Meter};
use crate::proto::v1::LogRecord;
use crate::wire::fields::{last, repeated};
use crate::wire::http::body::content_encoding;
use crate::wire::http::reply;
use crate::wire::http::Reception;
use crate::wire::inflate::{inflate, Compression};
use labels::StreamFields;
use proto::{field, EntryAdapter};

/// Structured metadata keys that carry a record's trace context, as Loki's own OTLP ingest
/// writes them.
const TRACE_ID_KEYS: [&str; 2] = ["trace_id", "traceID"];
const SPAN_ID_KEYS: [&str; 2] = ["span_id", "spanID"];

/// The two encodings of a push.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PushFormat {
    /// Snappy-compressed `logproto.PushRequest`.
    Protobuf,
    /// `application/json`.
    Json,
}

/// The encoding the push's `Content-Type` names. Loki reads a body without one as protobuf;
/// here it is refused, since a web page can send such a body to any address without a CORS
/// preflight, and every Loki client names its type.
fn push_format(headers: &HeaderMap) -> Result<PushFormat, HttpError> {
    let wanted = "the Loki push API takes Content-Type application/x-protobuf (snappy-compressed) or application/json";
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(HttpError::UnsupportedMediaType(format!(
            "{wanted}, and the request has no Content-Type"
        )));
    };
    let essence = value.to_str().unwrap_or("").split(';').next().unwrap_or("");
    match essence.trim().to_ascii_lowercase().as_str() {
        "application/json" => Ok(PushFormat::Json),
        "application/x-protobuf" | "application/protobuf" => Ok(PushFormat::Protobuf),
        other => Err(HttpError::UnsupportedMediaType(format!(
            "{wanted}, not {other:?}"
        ))),
    }
}

/// Serves one push; returns the answer and the outcome to count.
pub async fn push(
    reception: &Reception,
    pusher: &Pusher,
    request: Request,
    peer: IpAddr,
) -> (Response<Body>, &'static str) {
    match store(reception, pusher, request, peer).await {
        Ok(tally) => {
            let numbering = "#n is an entry's position in the request, counting from 0 across all streams; the other entries are stored";
            match tally.summary("entries", numbering) {
                None => (reply::empty(StatusCode::NO_CONTENT), "ok"),
                Some((_, message)) => {
                    let body = format!("{message}\n").into_bytes();
                    let response =
                        reply::response(StatusCode::BAD_REQUEST, "text/plain; charset=utf-8", body);
                    (response, "partial")
                }
            }
        }
        Err(err) => {
            tracing::debug!(error = %err, "Loki push refused");
            (reply::text_error(&err), err.kind())
        }
    }
}

async fn store(
    reception: &Reception,
    pusher: &Pusher,
    request: Request,
    peer: IpAddr,
) -> Result<RequestTally, HttpError> {
    let (parts, body) = request.into_parts();
    let tenant = reception.authenticate(&parts.headers, peer)?;
    let format = push_format(&parts.headers)?;
    let compression = content_encoding(&parts.headers)?;
    let (body, mut meter) = reception
        .read(&tenant, &parts.headers, body, compression)
        .await?;
    let (message, upfront) = match format {
        PushFormat::Protobuf => {
            let message = inflate(
                &body,
                Compression::Snappy,
                reception.max_body_bytes(),
                &mut meter,
            )
            .await?;
            meter.release(body.len());
            (message, Refused::default())
        }
        PushFormat::Json => {
            let transcoded = json::to_protobuf_charged(body.clone(), &mut meter).await?;
            meter.release(body.len());
            (Bytes::from(transcoded.protobuf), transcoded.refused)
        }
    };
    Ok(pusher.push(&tenant, message, upfront, meter).await?)
}

/// Stores pushes: decodes a `PushRequest` entry by entry, validates each with the rules every
/// protocol shares, and queues the valid ones as one chunk.
#[derive(Clone, Debug)]
pub struct Pusher {
    ingress: Ingress,
    limits: Limits,
    metrics: Arc<IngestMetrics>,
}

impl Pusher {
    /// A pusher feeding `ingress`, checking records against `limits`, counting them in `metrics`.
    pub fn new(ingress: Ingress, limits: Limits, metrics: Arc<IngestMetrics>) -> Self {
        Pusher {
            ingress,
            limits,
            metrics,
        }
    }

    /// Stores the encoded `message`, which `meter` holds, for `tenant`; `upfront` holds the
    /// entries the JSON transcoder already refused. Returns once the valid entries are committed.
    async fn push(
        &self,
        tenant: &Tenant,
        message: Bytes,
        upfront: Refused,
        mut meter: Meter<'_>,
    ) -> Result<RequestTally, IngestError> {
        let wire_bytes = message.len();
        let mut collected = Collected::new(upfront);
        self.decode(message, &mut meter, &mut collected).await?;
        meter.release(wire_bytes);
        collected
            .store(
                &self.ingress,
                tenant,
                self.metrics.records(Protocol::Loki),
                meter,
            )
            .await
    }

    /// Walks the streams and decodes their entries one at a time, each charged to `meter` as it
    /// is built.
    async fn decode(
        &self,
        message: Bytes,
        meter: &mut Meter<'_>,
        collected: &mut Collected,
    ) -> Result<(), IngestError> {
        let malformed = |detail: String| IngestError::Malformed(format!("PushRequest: {detail}"));
        let now = Utc::now();
        for stream in repeated(&message, field::STREAMS) {
            let stream = stream.map_err(malformed)?;
            let fields = stream_fields(&stream);
            collected
                .reserve(repeated(&stream, field::ENTRIES).count(), meter)
                .await?;
            for entry in repeated(&stream, field::ENTRIES) {
                let entry = entry.map_err(malformed)?;
                collected
                    .take(meter, || {
                        let fields = fields.as_ref().map_err(Clone::clone)?;
                        let entry = EntryAdapter::decode(entry).map_err(Invalid::malformed)?;
                        let wire = to_wire(entry, fields);
                        validate_with(wire, &fields.labels, &self.limits, now)
                    })
                    .await?;
            }
        }
        Ok(())
    }
}

/// What every entry of an encoded stream shares, or why none of them can be stored.
fn stream_fields(stream: &Bytes) -> Result<StreamFields, Invalid> {
    let refused = |detail: String| {
        Invalid::new(
            RejectReason::MalformedRecord,
            format!("the stream's labels cannot be read: {detail}"),
        )
    };
    let text = match last(stream, field::LABELS).map_err(refused)? {
        None => return Ok(StreamFields::default()),
        Some(bytes) => {
            String::from_utf8(bytes.to_vec()).map_err(|_| refused("not UTF-8".into()))?
        }
    };
    if text.trim().is_empty() {
        return Ok(StreamFields::default());
    }
    labels::parse(&text)
        .map(StreamFields::from_labels)
        .map_err(refused)
}

/// An entry as `LogIngest`'s wire record: the line, the stream's service and severity, and its
/// structured metadata as attributes (a trace or span id among them becomes the record's).
pub(crate) fn to_wire(entry: EntryAdapter, fields: &StreamFields) -> LogRecord {
    let mut attributes: BTreeMap<String, String> = entry
        .structured_metadata
        .into_iter()
        .map(|pair| (pair.name, pair.value))
        .collect();
    // As Loki finds `detected_level`: the stream's level label, the entry's metadata, the line.
    let severity = if fields.severity == 0 {
        labels::level_of(&attributes)
            .or_else(|| level::detect(&entry.line))
            .unwrap_or(0)
    } else {
        fields.severity
    };
    let trace_id = take_id(&mut attributes, &TRACE_ID_KEYS, 32);
    let span_id = take_id(&mut attributes, &SPAN_ID_KEYS, 16);
    LogRecord {
        timestamp: entry.timestamp,
        severity,
        service: fields.service.clone(),
        message: entry.line,
        attributes,
        trace_id,
        span_id,
    }
}

/// Removes and returns the first of `keys` whose value is an id of `len` hex digits; an
/// attribute that is not such an id stays an attribute.
fn take_id(attributes: &mut BTreeMap<String, String>, keys: &[&str], len: usize) -> String {
    for key in keys {
        let is_id = attributes.get(*key).is_some_and(|value| {
            value.len() == len && value.bytes().all(|b| b.is_ascii_hexdigit())
        });
        if is_id {
            return attributes
                .remove(*key)
                .unwrap_or_default()
                .to_ascii_lowercase();
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::LabelPairAdapter;

    #[test]
    fn an_entry_takes_the_streams_fields_and_its_own_metadata() {
        let fields = StreamFields::from_labels(
            [("job", "api"), ("env", "prod")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        );
        let pair = |name: &str, value: &str| LabelPairAdapter {
            name: name.into(),
            value: value.into(),
        };
        let entry = EntryAdapter {
            timestamp: Some(prost_types::Timestamp {
                seconds: 1,
                nanos: 2,
            }),
            line: "hello".into(),
            structured_metadata: vec![
                pair("traceID", "0AF7651916CD43DD8448EB211C80319C"),
                pair("span_id", "not-an-id"),
                pair("detected_level", "warn"),
                pair("user", "u1"),
            ],
            parsed: Vec::new(),
        };
        let wire = to_wire(entry, &fields);
        assert_eq!(wire.service, "api");
        assert_eq!(wire.severity, 13);
        assert_eq!(wire.trace_id, "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(wire.span_id, "");
        let keys: Vec<&str> = wire.attributes.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["detected_level", "span_id", "user"],
            "metadata stays metadata; only a trace or span id becomes the record's"
        );
        assert_eq!(fields.labels.map()["env"], "prod");
    }

    #[test]
    fn content_types_pick_the_encoding() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            push_format(&headers)
        };
        assert_eq!(
            with("application/json; charset=utf-8").unwrap(),
            PushFormat::Json
        );
        assert_eq!(
            with("application/x-protobuf").unwrap(),
            PushFormat::Protobuf
        );
        for refused in [with("text/plain"), with(""), push_format(&HeaderMap::new())] {
            assert!(
                matches!(refused, Err(HttpError::UnsupportedMediaType(_))),
                "{refused:?}"
            );
        }
    }
}
