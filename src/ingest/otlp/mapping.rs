//! The pure translation of an OTLP log record into loghaul's own wire record.
//!
//! Nothing here does I/O or checks limits: the result goes through [`crate::ingest::validate`]
//! like a record received by `LogIngest/Push`, so both protocols share one set of limits and
//! rejection reasons. `docs/opentelemetry.md` documents the same rules as a table.
//!
//! Attributes are flattened into one string map. Sources are applied in this order, a later one
//! overwriting an earlier one on the same key, so the most specific source wins:
//! `resource.<key>` (resource attributes, except `service.name` which becomes the service) →
//! `scope.<key>` (scope attributes) → `scope.name` / `scope.version` → log attributes (unprefixed)
//! → `severity_text` / `event_name` (fields of the record itself).
//!
//! Two fallbacks serve shippers that speak OTLP without an SDK (Fluent Bit's `opentelemetry`
//! output tailing a file): a record with severity number 0 takes the number its `severity_text`
//! names, as the data model allows a receiver to do, and a record whose resource names no service
//! takes its own `service.name` attribute, the only place such a shipper can put one.

use std::collections::BTreeMap;

use base64::Engine;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord as OtlpLogRecord, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost_types::Timestamp;

use crate::ingest::validate::{Invalid, RejectReason, StreamLabels};
use crate::model::severity::Severity;
use crate::proto::v1::LogRecord;

/// The resource attribute that names the emitting service (OpenTelemetry semantic conventions).
pub const SERVICE_NAME_KEY: &str = "service.name";
/// Prefix of flattened resource attributes, so `host.name` on the resource is `resource.host.name`.
pub const RESOURCE_PREFIX: &str = "resource.";
/// Prefix of flattened scope attributes and of the scope's name and version.
pub const SCOPE_PREFIX: &str = "scope.";
/// Attribute holding `severity_text` when it says more than the severity number.
pub const SEVERITY_TEXT_KEY: &str = "severity_text";
/// Attribute holding the record's `event_name`, when it has one.
pub const EVENT_NAME_KEY: &str = "event_name";

/// OTLP trace ids are 16 bytes, span ids 8 (W3C trace context).
const TRACE_ID_BYTES: usize = 16;
const SPAN_ID_BYTES: usize = 8;
const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// What every record of one `ScopeLogs` inherits from its resource and scope. Built once per
/// resource and once per scope and only read per record: validation merges these attributes with
/// the record's own as it serializes them ([`crate::ingest::validate::validate_with`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shared {
    /// The resource's `service.name`, empty when it has none (a record then takes its own
    /// `service.name` attribute, and validation stores `unknown_service` when it has none either).
    pub service: String,
    /// Flattened `resource.*` and `scope.*` attributes: the stream labels of its records.
    pub labels: StreamLabels,
}

impl Shared {
    /// What a resource gives its records: the service name and `resource.<key>` attributes.
    pub fn from_resource(resource: Option<&Resource>) -> Shared {
        let mut service = String::new();
        let mut labels = BTreeMap::new();
        for attribute in resource.map_or(&[][..], |resource| &resource.attributes) {
            let value = text(attribute.value.clone());
            if attribute.key == SERVICE_NAME_KEY {
                // It is the `service` column; repeating it in every row's attributes buys nothing.
                service = value;
            } else {
                labels.insert(format!("{RESOURCE_PREFIX}{}", attribute.key), value);
            }
        }
        Shared {
            service,
            labels: StreamLabels::new(labels),
        }
    }

    /// The resource's share plus what a scope adds: `scope.<key>` attributes, then `scope.name`
    /// and `scope.version` when they are not empty.
    pub fn with_scope(&self, scope: Option<&InstrumentationScope>) -> Shared {
        let Some(scope) = scope else {
            return self.clone();
        };
        let mut labels = self.labels.map().clone();
        for attribute in &scope.attributes {
            labels.insert(
                format!("{SCOPE_PREFIX}{}", attribute.key),
                text(attribute.value.clone()),
            );
        }
        for (field, value) in [("name", &scope.name), ("version", &scope.version)] {
            if !value.is_empty() {
                labels.insert(format!("{SCOPE_PREFIX}{field}"), value.clone());
            }
        }
        Shared {
            service: self.service.clone(),
            labels: StreamLabels::new(labels),
        }
    }
}

/// Translates one OTLP record, moving its strings. Fails only for what the wire record cannot
/// express (trace or span ids of the wrong length); everything else is left to validation. The
/// wire record carries the record's own attributes only; `shared.labels` are its stream's, which
/// validation points it to, so they are not copied per record.
pub fn to_wire(record: OtlpLogRecord, shared: &Shared) -> Result<LogRecord, Invalid> {
    // Checked first: a record rejected here costs no attribute copying.
    let trace_id = hex_id(
        &record.trace_id,
        TRACE_ID_BYTES,
        RejectReason::InvalidTraceId,
        "trace_id",
    )?;
    let span_id = hex_id(
        &record.span_id,
        SPAN_ID_BYTES,
        RejectReason::InvalidSpanId,
        "span_id",
    )?;
    let mut attributes = BTreeMap::new();
    for KeyValue { key, value, .. } in record.attributes {
        attributes.insert(key, text(value));
    }
    let service = if shared.service.is_empty() {
        // Moved, not copied: it is the `service` column, as it would be on the resource.
        attributes.remove(SERVICE_NAME_KEY).unwrap_or_default()
    } else {
        shared.service.clone()
    };
    let severity = severity_number(record.severity_number, &record.severity_text);
    if severity_text_is_informative(&record.severity_text, severity) {
        attributes.insert(SEVERITY_TEXT_KEY.to_owned(), record.severity_text);
    }
    if !record.event_name.is_empty() {
        attributes.insert(EVENT_NAME_KEY.to_owned(), record.event_name);
    }
    Ok(LogRecord {
        timestamp: timestamp(record.time_unix_nano, record.observed_time_unix_nano),
        severity,
        service,
        message: text(record.body),
        attributes,
        trace_id,
        span_id,
    })
}

/// The event time, else the time the collector or SDK observed it; `None` (validation reads it as
/// "now") when both are 0, which OTLP uses for "unknown".
fn timestamp(time_unix_nano: u64, observed_time_unix_nano: u64) -> Option<Timestamp> {
    let nanos = if time_unix_nano != 0 {
        time_unix_nano
    } else {
        observed_time_unix_nano
    };
    if nanos == 0 {
        return None;
    }
    Some(Timestamp {
        // u64 nanoseconds / 1e9 is below 2^35: the casts cannot truncate.
        seconds: (nanos / NANOS_PER_SECOND) as i64,
        nanos: (nanos % NANOS_PER_SECOND) as i32,
    })
}

/// The severity number a record is stored with: its own, unless that is 0 (unspecified) and its
/// `severity_text` names a level. The data model lets a receiver derive the number from the text
/// when the source gave none, and shippers that read a `level` key from a log line (Fluent Bit's
/// `opentelemetry` output) send only the text. Read in any case, with surrounding blanks ignored:
/// OTLP's short names (`WARN`, `INFO2`), its full names (`SEVERITY_NUMBER_ERROR`), and the
/// spellings loggers use (`warning`, `err`, `notice`, `critical`), each at the lowest number of its
/// level. Any other text leaves the severity at 0.
fn severity_number(number: i32, text: &str) -> i32 {
    if number != 0 {
        return number;
    }
    let upper = text.trim().to_ascii_uppercase();
    let named = SeverityNumber::from_str_name(&upper)
        .or_else(|| SeverityNumber::from_str_name(&format!("SEVERITY_NUMBER_{upper}")));
    match named {
        Some(known) => known as i32,
        None => Severity::from_name(&upper).map_or(0, Severity::number),
    }
}

/// `severity_text` is kept only when it tells something the number does not: not empty, and not
/// the canonical name of the number (`INFO` for 9, or `SEVERITY_NUMBER_INFO`, in any case).
/// So `WARNING` with 13 is kept, `warn` with 13 is not.
fn severity_text_is_informative(text: &str, number: i32) -> bool {
    if text.is_empty() {
        return false;
    }
    let Ok(known) = SeverityNumber::try_from(number) else {
        return true;
    };
    let full = known.as_str_name();
    let short = full.strip_prefix("SEVERITY_NUMBER_").unwrap_or(full);
    !(text.eq_ignore_ascii_case(short) || text.eq_ignore_ascii_case(full))
}

/// Lowercase hex of an id of the expected length; empty stays empty (absent). An all-zero id is
/// passed on as hex, and validation turns it into "absent" as it does for `LogIngest`.
fn hex_id(
    bytes: &[u8],
    expected: usize,
    reason: RejectReason,
    field: &str,
) -> Result<String, Invalid> {
    if bytes.is_empty() {
        return Ok(String::new());
    }
    if bytes.len() != expected {
        return Err(Invalid {
            reason,
            detail: format!(
                "{field} is {} bytes; OTLP requires {expected} bytes (or none)",
                bytes.len()
            ),
        });
    }
    // Into a buffer, not through `hex::encode`'s iterator of chars: this runs twice per record.
    let mut hex = vec![0; expected * 2];
    hex::encode_to_slice(bytes, &mut hex).expect("the buffer holds two digits a byte");
    Ok(String::from_utf8(hex).expect("hex digits are ASCII"))
}

/// A value as one string: strings as they are, bytes as standard base64 (as OTLP/JSON writes
/// them), an empty value as "", anything else as compact JSON (`true`, `42`, `1.5`, `[1,"a"]`,
/// `{"k":"v"}`).
pub fn text(value: Option<AnyValue>) -> String {
    match value.and_then(|any| any.value) {
        None | Some(Value::StringValueStrindex(_)) => String::new(),
        Some(Value::StringValue(text)) => text,
        Some(Value::BytesValue(bytes)) => base64::engine::general_purpose::STANDARD.encode(bytes),
        Some(other) => match json(other) {
            serde_json::Value::String(text) => text,
            structured => structured.to_string(),
        },
    }
}

/// A value as JSON: nested strings, numbers, booleans, arrays and maps as themselves; bytes as
/// base64 strings; an empty value as `null`; non-finite doubles as the strings `NaN`, `Infinity`,
/// `-Infinity` (JSON has no such numbers; this is protobuf's JSON mapping). Map keys come out
/// sorted, and of duplicate keys the last wins.
pub fn json(value: Value) -> serde_json::Value {
    use serde_json::Value as Json;
    match value {
        Value::StringValue(text) => Json::String(text),
        Value::BoolValue(flag) => Json::Bool(flag),
        Value::IntValue(number) => Json::from(number),
        Value::DoubleValue(number) => match serde_json::Number::from_f64(number) {
            Some(finite) => Json::Number(finite),
            None if number.is_nan() => Json::String("NaN".into()),
            None if number > 0.0 => Json::String("Infinity".into()),
            None => Json::String("-Infinity".into()),
        },
        Value::BytesValue(bytes) => {
            Json::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        Value::ArrayValue(array) => Json::Array(
            array
                .values
                .into_iter()
                .map(|item| item.value.map_or(Json::Null, json))
                .collect(),
        ),
        Value::KvlistValue(list) => Json::Object(
            list.values
                .into_iter()
                .map(|KeyValue { key, value, .. }| {
                    (
                        key,
                        value.and_then(|any| any.value).map_or(Json::Null, json),
                    )
                })
                .collect(),
        ),
        // Profiling-only; the spec says to treat it as absent elsewhere.
        Value::StringValueStrindex(_) => Json::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};

    fn any(value: Value) -> Option<AnyValue> {
        Some(AnyValue { value: Some(value) })
    }

    fn kv(key: &str, value: Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: any(value),
            ..KeyValue::default()
        }
    }

    fn string(text: &str) -> Value {
        Value::StringValue(text.into())
    }

    fn resource(attributes: Vec<KeyValue>) -> Resource {
        Resource {
            attributes,
            ..Resource::default()
        }
    }

    fn record() -> OtlpLogRecord {
        OtlpLogRecord {
            time_unix_nano: 1_764_417_600_123_456_789,
            observed_time_unix_nano: 1_764_417_601_000_000_000,
            severity_number: 13,
            severity_text: "WARN".into(),
            body: any(string("card declined")),
            attributes: vec![kv("order", Value::IntValue(42))],
            trace_id: (1..=16).collect(),
            span_id: vec![0xab; 8],
            ..OtlpLogRecord::default()
        }
    }

    /// The attributes a record is stored with, as a reader sees them: its own merged over its
    /// stream's labels (what it shares).
    fn stored_attributes(wire: LogRecord, shared: &Shared) -> BTreeMap<String, String> {
        let limits = crate::ingest::validate::Limits {
            max_message_bytes: 1 << 20,
            max_age: None,
        };
        let now = chrono::DateTime::from_timestamp(1_764_417_700, 0).unwrap();
        let stored =
            crate::ingest::validate::validate_with(wire, &shared.labels, &limits, now).unwrap();
        let mut attributes: BTreeMap<String, String> =
            serde_json::from_str(&stored.labels).unwrap();
        attributes
            .extend(serde_json::from_str::<BTreeMap<String, String>>(&stored.attributes).unwrap());
        attributes
    }

    #[test]
    fn a_full_record_maps_field_by_field() {
        let shared = Shared::from_resource(Some(&resource(vec![
            kv("service.name", string("checkout")),
            kv("host.name", string("web-1")),
        ])))
        .with_scope(Some(&InstrumentationScope {
            name: "app.payments".into(),
            version: "1.2.0".into(),
            attributes: vec![kv("team", string("billing"))],
            ..InstrumentationScope::default()
        }));
        let wire = to_wire(record(), &shared).unwrap();
        assert_eq!(
            wire.timestamp,
            Some(Timestamp {
                seconds: 1_764_417_600,
                nanos: 123_456_789
            })
        );
        assert_eq!(wire.severity, 13);
        assert_eq!(wire.service, "checkout");
        assert_eq!(wire.message, "card declined");
        assert_eq!(wire.trace_id, "0102030405060708090a0b0c0d0e0f10");
        assert_eq!(wire.span_id, "abababababababab");
        let expected: BTreeMap<String, String> = [
            ("resource.host.name", "web-1"),
            ("scope.team", "billing"),
            ("scope.name", "app.payments"),
            ("scope.version", "1.2.0"),
            ("order", "42"),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect();
        assert_eq!(
            stored_attributes(wire, &shared),
            expected,
            "service.name is not repeated"
        );
    }

    #[test]
    fn nested_values_become_compact_json() {
        let nested = Value::KvlistValue(KeyValueList {
            values: vec![
                kv("z", Value::BoolValue(true)),
                kv(
                    "a",
                    Value::ArrayValue(ArrayValue {
                        values: vec![
                            AnyValue {
                                value: Some(Value::IntValue(1)),
                            },
                            AnyValue {
                                value: Some(Value::DoubleValue(2.5)),
                            },
                            AnyValue {
                                value: Some(Value::BytesValue(vec![0xff, 0x00])),
                            },
                            AnyValue { value: None },
                            AnyValue {
                                value: Some(string("x")),
                            },
                        ],
                    }),
                ),
                kv("d", Value::DoubleValue(f64::NAN)),
                kv("z", Value::BoolValue(false)),
            ],
        });
        assert_eq!(
            text(any(nested)),
            r#"{"a":[1,2.5,"/wA=",null,"x"],"d":"NaN","z":false}"#,
            "sorted keys, last duplicate wins, bytes in base64, empty as null"
        );
    }

    #[test]
    fn scalar_values_have_one_obvious_text() {
        assert_eq!(text(any(string("plain"))), "plain");
        assert_eq!(text(any(Value::BoolValue(false))), "false");
        assert_eq!(text(any(Value::IntValue(-7))), "-7");
        assert_eq!(text(any(Value::DoubleValue(3.0))), "3.0");
        assert_eq!(text(any(Value::DoubleValue(f64::INFINITY))), "Infinity");
        assert_eq!(
            text(any(Value::DoubleValue(f64::NEG_INFINITY))),
            "-Infinity"
        );
        assert_eq!(text(any(Value::BytesValue(b"hi\n".to_vec()))), "aGkK");
        assert_eq!(text(None), "");
        assert_eq!(text(Some(AnyValue { value: None })), "");
        assert_eq!(text(any(Value::StringValueStrindex(3))), "");
    }

    #[test]
    fn bodies_of_every_kind() {
        let with_body = |body: Value| {
            let mut record = record();
            record.body = any(body);
            to_wire(record, &Shared::default()).unwrap().message
        };
        assert_eq!(with_body(Value::BytesValue(vec![1, 2, 3, 250])), "AQID+g==");
        assert_eq!(
            with_body(Value::KvlistValue(KeyValueList {
                values: vec![
                    kv("event", string("login")),
                    kv("ok", Value::BoolValue(true))
                ]
            })),
            r#"{"event":"login","ok":true}"#
        );
        assert_eq!(with_body(Value::IntValue(12)), "12");
        let mut no_body = record();
        no_body.body = None;
        assert_eq!(to_wire(no_body, &Shared::default()).unwrap().message, "");
    }

    #[test]
    fn an_empty_resource_names_no_service() {
        for shared in [
            Shared::from_resource(None),
            Shared::from_resource(Some(&Resource::default())),
            Shared::from_resource(None).with_scope(None),
        ] {
            let wire = to_wire(record(), &shared).unwrap();
            assert_eq!(wire.service, "", "validation turns it into unknown_service");
            assert_eq!(wire.attributes.len(), 1, "{:?}", wire.attributes);
        }
        // A non-string service.name is still a name.
        let shared = Shared::from_resource(Some(&resource(vec![kv(
            "service.name",
            Value::IntValue(7),
        )])));
        assert_eq!(shared.service, "7");
    }

    #[test]
    fn timestamps_fall_back_to_observed_then_to_now() {
        let mut observed_only = record();
        observed_only.time_unix_nano = 0;
        let wire = to_wire(observed_only, &Shared::default()).unwrap();
        assert_eq!(
            wire.timestamp,
            Some(Timestamp {
                seconds: 1_764_417_601,
                nanos: 0
            })
        );
        let mut neither = record();
        neither.time_unix_nano = 0;
        neither.observed_time_unix_nano = 0;
        assert_eq!(
            to_wire(neither, &Shared::default()).unwrap().timestamp,
            None
        );
    }

    #[test]
    fn severity_text_is_kept_only_when_it_says_more_than_the_number() {
        let mapped = |number: i32, text: &str| {
            let mut record = record();
            record.severity_number = number;
            record.severity_text = text.into();
            let wire = to_wire(record, &Shared::default()).unwrap();
            if number != 0 {
                assert_eq!(wire.severity, number);
            }
            wire.attributes.get(SEVERITY_TEXT_KEY).cloned()
        };
        assert_eq!(mapped(13, "WARN"), None);
        assert_eq!(mapped(13, "warn"), None);
        assert_eq!(mapped(13, "SEVERITY_NUMBER_WARN"), None);
        assert_eq!(mapped(14, "WARN2"), None);
        assert_eq!(mapped(9, ""), None);
        assert_eq!(mapped(13, "WARNING").as_deref(), Some("WARNING"));
        assert_eq!(mapped(14, "WARN").as_deref(), Some("WARN"));
        assert_eq!(mapped(0, "notice").as_deref(), Some("notice"));
        assert_eq!(mapped(0, "UNSPECIFIED"), None);
        // A number read from the text: the text is kept by the same rule.
        assert_eq!(mapped(0, "WARN"), None);
        assert_eq!(mapped(0, "warning").as_deref(), Some("warning"));
        // Out-of-range numbers pass through for validation to reject; their text is kept.
        assert_eq!(mapped(99, "INFO").as_deref(), Some("INFO"));
    }

    #[test]
    fn a_severity_text_without_a_number_gives_the_number() {
        let severity = |number: i32, text: &str| {
            let mut record = record();
            record.severity_number = number;
            record.severity_text = text.into();
            to_wire(record, &Shared::default()).unwrap().severity
        };
        for (text, number) in [
            ("WARN", 13),
            ("warn", 13),
            ("warning", 13),
            ("Error", 17),
            ("err", 17),
            ("info", 9),
            ("INFO", 9),
            ("Information", 9),
            ("notice", 9),
            (" debug ", 5),
            ("trace", 1),
            ("FATAL", 21),
            ("critical", 21),
            ("panic", 21),
            ("INFO2", 10),
            ("warn4", 16),
            ("SEVERITY_NUMBER_ERROR3", 19),
            ("severity_number_debug", 5),
        ] {
            assert_eq!(severity(0, text), number, "{text:?}");
        }
        for text in ["", "UNSPECIFIED", "unknown", "loud", "WARN5", "-", "13"] {
            assert_eq!(severity(0, text), 0, "{text:?}");
        }
        // A number the record names is never overridden by its text.
        assert_eq!(severity(9, "ERROR"), 9);
        assert_eq!(severity(99, "INFO"), 99, "left for validation to reject");
    }

    #[test]
    fn a_record_names_its_service_when_its_resource_does_not() {
        let mut named = record();
        named
            .attributes
            .push(kv("service.name", string("checkout")));
        let wire = to_wire(named.clone(), &Shared::default()).unwrap();
        assert_eq!(wire.service, "checkout");
        assert!(
            !wire.attributes.contains_key("service.name"),
            "moved to the service: {:?}",
            wire.attributes
        );
        // The resource's name wins, and the record's stays one of its attributes.
        let shared = Shared::from_resource(Some(&resource(vec![kv(
            "service.name",
            string("payments"),
        )])));
        let wire = to_wire(named, &shared).unwrap();
        assert_eq!(wire.service, "payments");
        assert_eq!(
            wire.attributes.get("service.name").map(String::as_str),
            Some("checkout")
        );
    }

    #[test]
    fn ids_of_the_wrong_length_are_rejected_with_a_reason() {
        let mut short_trace = record();
        short_trace.trace_id = vec![1; 5];
        let invalid = to_wire(short_trace, &Shared::default()).unwrap_err();
        assert_eq!(invalid.reason, RejectReason::InvalidTraceId);
        assert_eq!(
            invalid.to_reason(),
            "invalid_trace_id: trace_id is 5 bytes; OTLP requires 16 bytes (or none)"
        );
        let mut long_span = record();
        long_span.span_id = vec![1; 16];
        let invalid = to_wire(long_span, &Shared::default()).unwrap_err();
        assert_eq!(invalid.reason, RejectReason::InvalidSpanId);
        let mut none = record();
        none.trace_id.clear();
        none.span_id.clear();
        let wire = to_wire(none, &Shared::default()).unwrap();
        assert_eq!((wire.trace_id.as_str(), wire.span_id.as_str()), ("", ""));
    }

    #[test]
    fn the_most_specific_source_wins_a_key() {
        let shared = Shared::from_resource(Some(&resource(vec![kv("k", string("resource"))])))
            .with_scope(Some(&InstrumentationScope {
                name: "scope-name".into(),
                attributes: vec![kv("name", string("scope attribute"))],
                ..InstrumentationScope::default()
            }));
        let mut record = record();
        record.severity_text = "Warning!".into();
        record.event_name = "payment.declined".into();
        record.attributes = vec![
            kv("resource.k", string("log")),
            kv("severity_text", string("log attribute")),
            kv("event_name", string("log attribute")),
        ];
        let attributes = stored_attributes(to_wire(record, &shared).unwrap(), &shared);
        let get = |key: &str| attributes.get(key).map(String::as_str);
        assert_eq!(get("resource.k"), Some("log"), "log beats resource");
        assert_eq!(
            get("scope.name"),
            Some("scope-name"),
            "name beats attribute"
        );
        assert_eq!(
            get("severity_text"),
            Some("Warning!"),
            "field beats attribute"
        );
        assert_eq!(get("event_name"), Some("payment.declined"));
    }
}
