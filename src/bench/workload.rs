//! Realistic records, generated and encoded before the timed loop so the load generator spends its
//! CPU on sending, not on building messages.

use std::collections::BTreeMap;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord as OtlpLogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use crate::ingest::loki::proto as loki;
use crate::model::time;
use crate::proto::v1::{LogRecord, PushRequest};

const SERVICES: [&str; 12] = [
    "checkout",
    "payments",
    "cart",
    "search",
    "auth",
    "inventory",
    "shipping",
    "frontend",
    "recommendations",
    "notifications",
    "billing",
    "gateway",
];
const ROUTES: [&str; 8] = [
    "/api/v1/orders",
    "/api/v1/cart/items",
    "/api/v1/search",
    "/login",
    "/api/v1/payments",
    "/healthz",
    "/api/v1/users/me",
    "/api/v1/shipments",
];
const MESSAGES: [&str; 8] = [
    "request completed",
    "payment authorised for order",
    "cache miss, loading from database",
    "retrying upstream call after timeout",
    "user session refreshed",
    "inventory reservation released",
    "slow query detected",
    "connection pool exhausted, waiting for a connection",
];
const ATTRIBUTE_KEYS: [&str; 10] = [
    "http.method",
    "http.route",
    "http.status_code",
    "user.id",
    "region",
    "k8s.pod.name",
    "duration_ms",
    "order.id",
    "peer.service",
    "retry",
];

/// What to generate.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WorkloadShape {
    /// Records per PushRequest.
    pub records_per_chunk: usize,
    /// Approximate bytes per message.
    pub message_bytes: usize,
    /// Attributes per record.
    pub attributes: usize,
    /// Distinct chunks in the pool.
    pub distinct_chunks: usize,
    /// Stamp records at generation time. The pool is reused for the whole run, so those stamps
    /// stand still while the clock moves on: every insert lands at a random place in a time index
    /// that keeps growing, which no production stream does. Without them the server stamps each
    /// record at receipt (a missing timestamp means "now"), as close to time order as real clients.
    pub client_timestamps: bool,
    /// How long before generation the records are stamped.
    pub backdate: std::time::Duration,
}

/// Which wire format the chunks are encoded in, and how they are sent. Reports spell each one
/// protocol as its value name (`native`, `otlp`, `otlp-http`, `loki`); `push` is another name for
/// `native` on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum Protocol {
    /// `loghaul.v1.LogIngest/Push`: client streams of PushRequest chunks.
    #[value(name = "native", alias = "push")]
    #[serde(rename = "native")]
    Native,
    /// `opentelemetry.proto.collector.logs.v1.LogsService/Export`: one unary request per chunk.
    #[value(name = "otlp")]
    #[serde(rename = "otlp")]
    Otlp,
    /// OTLP/HTTP `POST /v1/logs`: one protobuf `ExportLogsServiceRequest` per chunk (plaintext).
    #[value(name = "otlp-http")]
    #[serde(rename = "otlp-http")]
    OtlpHttp,
    /// Loki's `POST /loki/api/v1/push`: one snappy-compressed `PushRequest` per chunk (plaintext).
    #[value(name = "loki")]
    #[serde(rename = "loki")]
    Loki,
}

impl Protocol {
    /// Sent over the HTTP ingest listener rather than gRPC.
    pub fn is_http(self) -> bool {
        matches!(self, Protocol::OtlpHttp | Protocol::Loki)
    }
}

/// Chunks ready to send, and the records they hold (for the COPY comparison).
pub(crate) struct Workload {
    /// Each chunk encoded once: a `PushRequest`, an `ExportLogsServiceRequest` (OTLP over gRPC or
    /// HTTP), or a snappy-compressed Loki `PushRequest`.
    pub encoded: Vec<Bytes>,
    /// The records of every chunk, in order.
    pub records: Vec<LogRecord>,
}

/// Builds the pool. Deterministic for a given shape, so runs are comparable.
pub(crate) fn generate(shape: WorkloadShape, protocol: Protocol) -> Workload {
    let mut rng = fastrand::Rng::with_seed(0x10c_4a01);
    let now = chrono::Utc::now() - chrono::TimeDelta::from_std(shape.backdate).unwrap_or_default();
    let mut records = Vec::with_capacity(shape.distinct_chunks * shape.records_per_chunk);
    let mut encoded = Vec::with_capacity(shape.distinct_chunks);
    for _ in 0..shape.distinct_chunks {
        let chunk: Vec<LogRecord> = (0..shape.records_per_chunk)
            .map(|_| record(&mut rng, now, shape))
            .collect();
        let bytes = match protocol {
            Protocol::Native => PushRequest {
                records: chunk.clone(),
                ..Default::default()
            }
            .encode_to_vec(),
            Protocol::Otlp | Protocol::OtlpHttp => otlp_request(&chunk).encode_to_vec(),
            Protocol::Loki => snap::raw::Encoder::new()
                .compress_vec(&loki_request(&chunk, now).encode_to_vec())
                .expect("a chunk is far below snappy's size limit"),
        };
        encoded.push(Bytes::from(bytes));
        records.extend(chunk);
    }
    Workload { encoded, records }
}

/// The same records as an OTLP export: one ResourceLogs per service, as an SDK would send them.
fn otlp_request(records: &[LogRecord]) -> ExportLogsServiceRequest {
    let text = |value: &str| AnyValue {
        value: Some(Value::StringValue(value.to_owned())),
    };
    let mut by_service: BTreeMap<&str, Vec<OtlpLogRecord>> = BTreeMap::new();
    for record in records {
        let nanos = record
            .timestamp
            .as_ref()
            .map_or(0, |ts| ts.seconds as u64 * 1_000_000_000 + ts.nanos as u64);
        by_service
            .entry(&record.service)
            .or_default()
            .push(OtlpLogRecord {
                time_unix_nano: nanos,
                observed_time_unix_nano: nanos,
                severity_number: record.severity,
                body: Some(text(&record.message)),
                attributes: record
                    .attributes
                    .iter()
                    .map(|(key, value)| KeyValue {
                        key: key.clone(),
                        value: Some(text(value)),
                        ..KeyValue::default()
                    })
                    .collect(),
                trace_id: unhex(&record.trace_id),
                span_id: unhex(&record.span_id),
                ..OtlpLogRecord::default()
            });
    }
    let resource_logs = by_service
        .into_iter()
        .map(|(service, log_records)| ResourceLogs {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: Some(text(service)),
                    ..KeyValue::default()
                }],
                ..Resource::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records,
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        })
        .collect();
    ExportLogsServiceRequest { resource_logs }
}

/// The same records as a Loki push: one stream per (service, severity), labelled
/// `{level="info", service_name="checkout"}`, each record's attributes and trace context as its
/// entry's structured metadata. A Loki entry always carries a timestamp: the record's, or `now`
/// (the pool's generation) when the records have none.
fn loki_request(records: &[LogRecord], now: chrono::DateTime<chrono::Utc>) -> loki::PushRequest {
    let generated = time::to_proto(now);
    let pair = |name: &str, value: &str| loki::LabelPairAdapter {
        name: name.to_owned(),
        value: value.to_owned(),
    };
    let mut streams: BTreeMap<(&str, i32), Vec<loki::EntryAdapter>> = BTreeMap::new();
    for record in records {
        let mut metadata: Vec<loki::LabelPairAdapter> = record
            .attributes
            .iter()
            .map(|(key, value)| pair(key, value))
            .collect();
        if !record.trace_id.is_empty() {
            metadata.push(pair("trace_id", &record.trace_id));
        }
        if !record.span_id.is_empty() {
            metadata.push(pair("span_id", &record.span_id));
        }
        streams
            .entry((&record.service, record.severity))
            .or_default()
            .push(loki::EntryAdapter {
                timestamp: Some(record.timestamp.unwrap_or(generated)),
                line: record.message.clone(),
                structured_metadata: metadata,
                parsed: Vec::new(),
            });
    }
    let streams = streams
        .into_iter()
        .map(|((service, severity), entries)| {
            let labels = BTreeMap::from([
                ("service_name".to_owned(), service.to_owned()),
                ("level".to_owned(), loki_level(severity).to_owned()),
            ]);
            loki::StreamAdapter {
                labels: crate::ingest::loki::labels::format(&labels),
                entries,
                hash: 0,
            }
        })
        .collect();
    loki::PushRequest {
        streams,
        format: String::new(),
    }
}

/// Loki's level name for the severities [`record`] draws.
fn loki_level(severity: i32) -> &'static str {
    match severity {
        ..=4 => "trace",
        5..=8 => "debug",
        9..=12 => "info",
        13..=16 => "warn",
        17..=20 => "error",
        _ => "fatal",
    }
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .filter_map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok())
        .collect()
}

fn record(
    rng: &mut fastrand::Rng,
    now: chrono::DateTime<chrono::Utc>,
    shape: WorkloadShape,
) -> LogRecord {
    // Mostly INFO, some DEBUG and WARN, a few ERROR: what production logs look like.
    let severity = match rng.u8(..100) {
        0..=14 => 5,
        15..=79 => 9,
        80..=93 => 13,
        94..=98 => 17,
        _ => 21,
    };
    let mut message = format!(
        "{} route={} latency_ms={} request_id={:016x}",
        MESSAGES[rng.usize(..MESSAGES.len())],
        ROUTES[rng.usize(..ROUTES.len())],
        rng.u32(1..2000),
        rng.u64(..)
    );
    while message.len() < shape.message_bytes {
        message.push_str(" detail=");
        message.push_str(&format!("{:x}", rng.u64(..)));
    }
    message.truncate(shape.message_bytes.max(16));
    let attributes = (0..shape.attributes)
        .map(|i| {
            let key = ATTRIBUTE_KEYS[i % ATTRIBUTE_KEYS.len()];
            let key = if i < ATTRIBUTE_KEYS.len() {
                key.to_owned()
            } else {
                format!("{key}.{i}")
            };
            (key, format!("{}", rng.u32(..100_000)))
        })
        .collect();
    let traced = rng.u8(..10) < 8;
    let ts = now - chrono::TimeDelta::milliseconds(i64::from(rng.u32(..5000)));
    LogRecord {
        timestamp: shape.client_timestamps.then(|| time::to_proto(ts)),
        severity,
        service: SERVICES[rng.usize(..SERVICES.len())].to_owned(),
        message,
        attributes,
        trace_id: if traced {
            format!("{:016x}{:016x}", rng.u64(..), rng.u64(..))
        } else {
            String::new()
        },
        span_id: if traced {
            format!("{:016x}", rng.u64(1..))
        } else {
            String::new()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_has_the_requested_shape_and_decodes() {
        let shape = WorkloadShape {
            records_per_chunk: 50,
            message_bytes: 120,
            attributes: 4,
            distinct_chunks: 3,
            client_timestamps: true,
            backdate: std::time::Duration::ZERO,
        };
        let workload = generate(shape, Protocol::Native);
        assert_eq!(workload.encoded.len(), 3);
        assert_eq!(workload.records.len(), 150);
        let decoded = PushRequest::decode(workload.encoded[1].clone()).unwrap();
        assert_eq!(decoded.records, workload.records[50..100]);
        assert!(workload
            .records
            .iter()
            .all(|r| r.message.len() == 120 && r.attributes.len() == 4));
    }

    fn shape(client_timestamps: bool) -> WorkloadShape {
        WorkloadShape {
            records_per_chunk: 60,
            message_bytes: 100,
            attributes: 3,
            distinct_chunks: 2,
            client_timestamps,
            backdate: std::time::Duration::ZERO,
        }
    }

    /// Orders records the same way whatever order a protocol grouped them in.
    fn sorted(mut records: Vec<LogRecord>) -> Vec<LogRecord> {
        records.sort_by(|a, b| (&a.service, &a.message).cmp(&(&b.service, &b.message)));
        records
    }

    #[test]
    fn otlp_http_chunks_are_export_requests_of_every_record() {
        let workload = generate(shape(true), Protocol::OtlpHttp);
        assert_eq!(workload.encoded.len(), 2);
        let decoded = ExportLogsServiceRequest::decode(workload.encoded[1].clone()).unwrap();
        let mut records = Vec::new();
        for resource in &decoded.resource_logs {
            let service = &resource.resource.as_ref().unwrap().attributes[0];
            assert_eq!(service.key, "service.name");
            let Some(Value::StringValue(service)) = service.value.clone().unwrap().value else {
                panic!("service.name is a string");
            };
            for log in resource.scope_logs.iter().flat_map(|s| &s.log_records) {
                let Some(Value::StringValue(message)) = log.body.clone().unwrap().value else {
                    panic!("the body is a string");
                };
                assert_eq!(log.attributes.len(), 3);
                records.push((service.clone(), message, log.severity_number));
            }
        }
        assert_eq!(records.len(), 60);
        let mut expected: Vec<_> = workload.records[60..]
            .iter()
            .map(|r| (r.service.clone(), r.message.clone(), r.severity))
            .collect();
        records.sort();
        expected.sort();
        assert_eq!(records, expected);
        // The same bytes as the gRPC export (given the same clock): only the transport differs.
        assert_eq!(
            generate(shape(false), Protocol::OtlpHttp).encoded,
            generate(shape(false), Protocol::Otlp).encoded
        );
    }

    #[test]
    fn loki_chunks_are_snappy_pushes_that_store_the_same_records() {
        for client_timestamps in [true, false] {
            let workload = generate(shape(client_timestamps), Protocol::Loki);
            assert_eq!(workload.encoded.len(), 2);
            for (at, chunk) in workload.encoded.iter().enumerate() {
                let raw = snap::raw::Decoder::new().decompress_vec(chunk).unwrap();
                let push = loki::PushRequest::decode(raw.as_slice()).unwrap();
                let mut stored = Vec::new();
                let mut groups = std::collections::BTreeSet::new();
                for stream in push.streams {
                    // The server's own label parser and mapping, as a push is stored.
                    let labels = crate::ingest::loki::labels::parse(&stream.labels).unwrap();
                    assert_eq!(labels.keys().collect::<Vec<_>>(), ["level", "service_name"]);
                    let fields = crate::ingest::loki::labels::StreamFields::from_labels(labels);
                    assert_eq!(fields.labels.map().len(), 1, "{}", stream.labels);
                    assert!(groups.insert((fields.service.clone(), fields.severity)));
                    for entry in stream.entries {
                        assert!(entry.timestamp.is_some(), "a Loki entry has a timestamp");
                        stored.push(crate::ingest::loki::to_wire(entry, &fields));
                    }
                }
                let mut expected = workload.records[at * 60..(at + 1) * 60].to_vec();
                if !client_timestamps {
                    // Stamped once, at generation.
                    let stamps: std::collections::BTreeSet<_> = stored
                        .iter()
                        .map(|r| r.timestamp.unwrap().seconds)
                        .collect();
                    assert_eq!(stamps.len(), 1);
                    for record in &mut stored {
                        record.timestamp = None;
                    }
                }
                assert_eq!(stored.len(), 60);
                assert_eq!(sorted(stored), sorted(std::mem::take(&mut expected)));
            }
        }
    }
}
