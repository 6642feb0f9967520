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
pub struct WorkloadShape {
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
}

/// Which wire format the chunks are encoded in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// `loghaul.v1.LogIngest/Push`: client streams of PushRequest chunks.
    Native,
    /// `opentelemetry.proto.collector.logs.v1.LogsService/Export`: one unary request per chunk.
    Otlp,
}

/// Chunks ready to send, and the records they hold (for the COPY comparison).
pub struct Workload {
    /// Each chunk encoded once, as a `PushRequest` or an `ExportLogsServiceRequest`.
    pub encoded: Vec<Bytes>,
    /// The records of every chunk, in order.
    pub records: Vec<LogRecord>,
}

/// Builds the pool. Deterministic for a given shape, so runs are comparable.
pub fn generate(shape: WorkloadShape, protocol: Protocol) -> Workload {
    let mut rng = fastrand::Rng::with_seed(0x10c_4a01);
    let now = chrono::Utc::now();
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
            Protocol::Otlp => otlp_request(&chunk).encode_to_vec(),
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
        timestamp: shape.client_timestamps.then(|| prost_types::Timestamp {
            seconds: ts.timestamp(),
            nanos: ts.timestamp_subsec_nanos() as i32,
        }),
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
}
