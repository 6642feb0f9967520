//! Turns a wire record into a storable [`Record`], or says precisely why it cannot be stored.
//!
//! Every check is per record: a bad record is rejected alone while the rest of its stream is stored.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

use crate::proto::v1::LogRecord;
use crate::record::Record;

/// Most attributes a record may carry.
pub const MAX_ATTRIBUTES: usize = 128;
/// Longest attribute key, in bytes.
pub const MAX_ATTRIBUTE_KEY_BYTES: usize = 256;
/// Longest attribute value, in bytes.
pub const MAX_ATTRIBUTE_VALUE_BYTES: usize = 16 * 1024;
/// Longest service name, in bytes.
pub const MAX_SERVICE_BYTES: usize = 256;
/// How far in the future a timestamp may be (clock skew between hosts).
pub const MAX_FUTURE_SKEW: TimeDelta = TimeDelta::minutes(10);
/// The service name stored when a record names none (OpenTelemetry's convention).
pub const UNKNOWN_SERVICE: &str = "unknown_service";

pub use crate::model::reject::RejectReason;

/// A refused record: the reason code and a sentence for the person reading the response.
#[derive(Clone, Debug, PartialEq)]
pub struct Invalid {
    /// The code.
    pub reason: RejectReason,
    /// What exactly was wrong.
    pub detail: String,
}

impl Invalid {
    /// A record whose bytes did not decode, with the decoder's explanation: the record's field
    /// where it went wrong and why. prost lists every nesting level on the way, which for a
    /// deeply nested value is thousands of characters of one repeated name.
    ///
    /// prost's `DecodeError` exposes only its text, which is split here into the field path and
    /// the cause; `tests/it/hostile.rs` pins that text against the prost in use.
    pub fn malformed(err: prost::DecodeError) -> Self {
        let text = err.to_string();
        let text = text
            .strip_prefix("failed to decode Protobuf message: ")
            .unwrap_or(&text);
        let parts: Vec<&str> = text.split(": ").collect();
        let path = parts
            .iter()
            .take_while(|part| part.contains('.') && !part.contains(' '))
            .count();
        let why = parts[path..].join(": ");
        let detail = match (path, parts.get(path.wrapping_sub(1))) {
            (0, _) | (_, None) => why,
            (1, Some(field)) => format!("{field}: {why}"),
            (depth, Some(field)) => format!("{field} (nested {depth} levels): {why}"),
        };
        Invalid::new(
            RejectReason::MalformedRecord,
            format!("not a valid protobuf record: {detail}"),
        )
    }

    /// A refusal for `reason`, explained by `detail`.
    pub fn new(reason: RejectReason, detail: impl Into<String>) -> Self {
        Invalid {
            reason,
            detail: detail.into(),
        }
    }

    /// `code: detail`, the form reported in `Rejection.reason`.
    pub fn to_reason(&self) -> String {
        format!("{}: {}", self.reason.as_str(), self.detail)
    }
}

/// Limits that come from configuration.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `--max-message-bytes`.
    pub max_message_bytes: usize,
    /// `--retention`: records older than this are refused; `None` accepts any age.
    pub max_age: Option<TimeDelta>,
}

/// The labels every record of a stream shares (a Loki stream's, an OTLP resource's and scope's
/// attributes): as a map, checked with each record's own attributes against the limits, and as
/// JSON once, which each of its records points to instead of a copy.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamLabels {
    map: BTreeMap<String, String>,
    json: Arc<str>,
}

impl StreamLabels {
    /// The labels of `map`.
    pub fn new(map: BTreeMap<String, String>) -> Self {
        let json = json_object(&map).into();
        StreamLabels { map, json }
    }

    /// The labels.
    pub fn map(&self) -> &BTreeMap<String, String> {
        &self.map
    }

    /// The labels as they are stored: a compact JSON object.
    pub fn json(&self) -> &str {
        &self.json
    }
}

impl Default for StreamLabels {
    fn default() -> Self {
        StreamLabels::new(BTreeMap::new())
    }
}

/// Checks one record and converts it, moving its strings. `now` stands in for a missing timestamp.
pub fn validate(wire: LogRecord, limits: &Limits, now: DateTime<Utc>) -> Result<Record, Invalid> {
    validate_with(wire, &StreamLabels::default(), limits, now)
}

/// [`validate`] for a record of a stream whose labels are `stream`: they become the record's
/// labels, its own attributes its structured metadata, and the limits on attributes count both,
/// its own winning on the same key.
pub fn validate_with(
    wire: LogRecord,
    stream: &StreamLabels,
    limits: &Limits,
    now: DateTime<Utc>,
) -> Result<Record, Invalid> {
    let ts = match wire.timestamp {
        None => now,
        Some(timestamp) => {
            let ts = to_datetime(timestamp.seconds, timestamp.nanos)?;
            if ts > now + MAX_FUTURE_SKEW {
                return Err(Invalid::new(
                    RejectReason::TimestampInFuture,
                    format!(
                        "timestamp {} is more than {} minutes ahead of the server clock",
                        ts.to_rfc3339(),
                        MAX_FUTURE_SKEW.num_minutes()
                    ),
                ));
            }
            if let Some(max_age) = limits.max_age {
                if ts < now - max_age {
                    return Err(Invalid::new(
                        RejectReason::TimestampTooOld,
                        format!(
                            "timestamp {} is older than the retention window ({}s, --retention)",
                            ts.to_rfc3339(),
                            max_age.num_seconds()
                        ),
                    ));
                }
            }
            ts
        }
    };
    let severity = i16::try_from(wire.severity)
        .ok()
        .filter(|number| (0..=24).contains(number))
        .ok_or_else(|| {
            Invalid::new(
                RejectReason::InvalidSeverity,
                format!(
                    "severity {} is outside OpenTelemetry's 0..=24",
                    wire.severity
                ),
            )
        })?;
    if wire.message.len() > limits.max_message_bytes {
        return Err(Invalid::new(
            RejectReason::MessageTooLarge,
            format!(
                "message is {} bytes; the limit is {} (--max-message-bytes)",
                wire.message.len(),
                limits.max_message_bytes
            ),
        ));
    }
    if wire.service.len() > MAX_SERVICE_BYTES {
        return Err(Invalid::new(
            RejectReason::ServiceTooLarge,
            format!(
                "service name is {} bytes; the limit is {MAX_SERVICE_BYTES}",
                wire.service.len()
            ),
        ));
    }
    let attributes = Merged {
        inherited: &stream.map,
        own: &wire.attributes,
    };
    check_attributes(&attributes)?;
    reject_nul("service", &wire.service)?;
    reject_nul("message", &wire.message)?;
    let trace_id = hex_id(&wire.trace_id, RejectReason::InvalidTraceId, "trace_id")?;
    let span_id = hex_id(&wire.span_id, RejectReason::InvalidSpanId, "span_id")?;
    let labels = Arc::clone(&stream.json);
    let attributes = json_object(&wire.attributes);
    let service = if wire.service.is_empty() {
        UNKNOWN_SERVICE.to_owned()
    } else {
        wire.service
    };
    Ok(Record {
        ts,
        severity,
        service,
        message: wire.message,
        labels,
        attributes,
        trace_id,
        span_id,
    })
}

/// A map of strings as a JSON object.
fn json_object(map: &BTreeMap<String, String>) -> String {
    if map.is_empty() {
        String::from("{}")
    } else {
        serde_json::to_string(map).expect("a map of strings always serializes")
    }
}

fn to_datetime(seconds: i64, nanos: i32) -> Result<DateTime<Utc>, Invalid> {
    let invalid = || {
        Invalid::new(
            RejectReason::InvalidTimestamp,
            format!("timestamp {seconds}s {nanos}ns is not a valid time after 1970-01-01"),
        )
    };
    let nanos = u32::try_from(nanos)
        .ok()
        .filter(|n| *n < 1_000_000_000)
        .ok_or_else(invalid)?;
    if seconds <= 0 {
        return Err(invalid());
    }
    let ts = DateTime::from_timestamp(seconds, nanos).ok_or_else(invalid)?;
    // The databases keep microseconds; truncate here so what is stored is what we compare against.
    DateTime::from_timestamp_micros(ts.timestamp_micros()).ok_or_else(invalid)
}

/// Two sorted attribute maps read as one, the second winning on the same key: the record's own
/// attributes over those it inherits.
struct Merged<'a> {
    inherited: &'a BTreeMap<String, String>,
    own: &'a BTreeMap<String, String>,
}

impl<'a> Merged<'a> {
    /// The union in key order.
    fn iter(&self) -> impl Iterator<Item = (&'a String, &'a String)> {
        let mut inherited = self.inherited.iter().peekable();
        let mut own = self.own.iter().peekable();
        std::iter::from_fn(move || match (inherited.peek(), own.peek()) {
            (Some((a, _)), Some((b, _))) if a < b => inherited.next(),
            (Some((a, _)), Some((b, _))) if a == b => {
                inherited.next();
                own.next()
            }
            (Some(_), None) => inherited.next(),
            _ => own.next(),
        })
    }
}

fn check_attributes(attributes: &Merged<'_>) -> Result<(), Invalid> {
    let count = attributes.iter().count();
    if count > MAX_ATTRIBUTES {
        return Err(Invalid::new(
            RejectReason::TooManyAttributes,
            format!("{count} attributes; the limit is {MAX_ATTRIBUTES}"),
        ));
    }
    for (key, value) in attributes.iter() {
        if key.len() > MAX_ATTRIBUTE_KEY_BYTES {
            return Err(Invalid::new(
                RejectReason::AttributeKeyTooLarge,
                format!(
                    "attribute key of {} bytes; the limit is {MAX_ATTRIBUTE_KEY_BYTES}",
                    key.len()
                ),
            ));
        }
        if value.len() > MAX_ATTRIBUTE_VALUE_BYTES {
            return Err(Invalid::new(
                RejectReason::AttributeValueTooLarge,
                format!(
                    "attribute {key:?} has a value of {} bytes; the limit is {MAX_ATTRIBUTE_VALUE_BYTES}",
                    value.len()
                ),
            ));
        }
        reject_nul("attribute key", key)?;
        reject_nul("attribute value", value)?;
    }
    Ok(())
}

fn reject_nul(field: &str, text: &str) -> Result<(), Invalid> {
    match text.find('\0') {
        None => Ok(()),
        Some(offset) => Err(Invalid::new(
            RejectReason::NulCharacter,
            format!("{field} contains a NUL character at byte {offset}"),
        )),
    }
}

/// The `N` bytes of an id written as `2 × N` hex digits, either case; empty and all-zero ids
/// (W3C's "invalid") mean absent.
fn hex_id<const N: usize>(
    text: &str,
    reason: RejectReason,
    field: &str,
) -> Result<Option<[u8; N]>, Invalid> {
    if text.is_empty() {
        return Ok(None);
    }
    let mut id = [0u8; N];
    if text.len() != 2 * N || hex::decode_to_slice(text, &mut id).is_err() {
        let shown: String = text.chars().take(40).collect();
        return Err(Invalid::new(
            reason,
            format!("{field} {shown:?} is not {} hex characters", 2 * N),
        ));
    }
    Ok((id != [0; N]).then_some(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_types::Timestamp;

    const LIMITS: Limits = Limits {
        max_message_bytes: 1024,
        max_age: Some(TimeDelta::days(7)),
    };

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-29T12:00:00.123456789Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn record() -> LogRecord {
        LogRecord {
            timestamp: Some(Timestamp {
                seconds: now().timestamp() - 5,
                nanos: 987_654_321,
            }),
            severity: 13,
            service: "checkout".into(),
            message: "card declined".into(),
            attributes: [("order".to_string(), "42".to_string())].into(),
            trace_id: "4BF92F3577B34DA6A3CE929D0E0E4736".into(),
            span_id: "00f067aa0ba902b7".into(),
        }
    }

    fn reason_of(wire: LogRecord) -> RejectReason {
        validate(wire, &LIMITS, now()).unwrap_err().reason
    }

    #[test]
    fn a_good_record_converts_field_by_field() {
        let stored = validate(record(), &LIMITS, now()).unwrap();
        assert_eq!(stored.ts.timestamp_subsec_nanos(), 987_654_000);
        assert_eq!(stored.severity, 13);
        assert_eq!(stored.service, "checkout");
        assert_eq!(stored.attributes, r#"{"order":"42"}"#);
        assert_eq!(
            stored.trace_id.map(hex::encode).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(
            stored.span_id.map(hex::encode).as_deref(),
            Some("00f067aa0ba902b7")
        );
    }

    #[test]
    fn missing_fields_get_their_defaults() {
        let wire = LogRecord {
            message: "hi".into(),
            ..LogRecord::default()
        };
        let stored = validate(wire, &LIMITS, now()).unwrap();
        assert_eq!(stored.ts, now());
        assert_eq!(stored.service, UNKNOWN_SERVICE);
        assert_eq!(stored.attributes, "{}");
        assert_eq!((stored.trace_id, stored.span_id), (None, None));
    }

    #[test]
    fn a_record_older_than_the_retention_window_is_refused() {
        let mut wire = record();
        wire.timestamp = Some(Timestamp {
            seconds: (now() - TimeDelta::days(8)).timestamp(),
            nanos: 0,
        });
        assert_eq!(reason_of(wire.clone()), RejectReason::TimestampTooOld);
        let keep_all = Limits {
            max_age: None,
            ..LIMITS
        };
        assert!(validate(wire, &keep_all, now()).is_ok());
    }

    #[test]
    fn each_limit_has_its_reason() {
        let mut wire = record();
        wire.message = "x".repeat(1025);
        assert_eq!(reason_of(wire), RejectReason::MessageTooLarge);

        let mut wire = record();
        wire.attributes = (0..129).map(|i| (format!("k{i}"), "v".into())).collect();
        assert_eq!(reason_of(wire), RejectReason::TooManyAttributes);

        let mut wire = record();
        wire.attributes = [("k".repeat(257), "v".into())].into();
        assert_eq!(reason_of(wire), RejectReason::AttributeKeyTooLarge);

        let mut wire = record();
        wire.attributes = [("k".into(), "v".repeat(16 * 1024 + 1))].into();
        assert_eq!(reason_of(wire), RejectReason::AttributeValueTooLarge);

        let mut wire = record();
        wire.service = "s".repeat(257);
        assert_eq!(reason_of(wire), RejectReason::ServiceTooLarge);
    }

    #[test]
    fn nul_characters_are_refused_wherever_they_are() {
        let mut wire = record();
        wire.message = "a\0b".into();
        let invalid = validate(wire, &LIMITS, now()).unwrap_err();
        assert_eq!(invalid.reason, RejectReason::NulCharacter);
        assert_eq!(
            invalid.to_reason(),
            "nul_character: message contains a NUL character at byte 1"
        );

        let mut wire = record();
        wire.attributes = [("k".into(), "\0".into())].into();
        assert_eq!(reason_of(wire), RejectReason::NulCharacter);
    }

    #[test]
    fn timestamps_must_be_sane() {
        let mut wire = record();
        wire.timestamp = Some(Timestamp {
            seconds: now().timestamp() + 11 * 60,
            nanos: 0,
        });
        assert_eq!(reason_of(wire), RejectReason::TimestampInFuture);

        let mut wire = record();
        wire.timestamp = Some(Timestamp {
            seconds: now().timestamp() + 9 * 60,
            nanos: 0,
        });
        assert!(validate(wire, &LIMITS, now()).is_ok());

        for (seconds, nanos) in [
            (0, 0),
            (-5, 0),
            (i64::MAX, 0),
            (10, -1),
            (10, 1_000_000_000),
        ] {
            let mut wire = record();
            wire.timestamp = Some(Timestamp { seconds, nanos });
            assert_eq!(
                reason_of(wire),
                RejectReason::InvalidTimestamp,
                "{seconds} {nanos}"
            );
        }
    }

    #[test]
    fn ids_and_severity_are_checked() {
        let mut wire = record();
        wire.trace_id = "xyz".into();
        assert_eq!(reason_of(wire), RejectReason::InvalidTraceId);
        let mut wire = record();
        wire.span_id = "g".repeat(16);
        assert_eq!(reason_of(wire), RejectReason::InvalidSpanId);
        let mut wire = record();
        wire.trace_id = "0".repeat(32);
        assert_eq!(validate(wire, &LIMITS, now()).unwrap().trace_id, None);
        // One bad byte anywhere, a digit-looking non-ASCII one included, spoils the id.
        for bad in [
            "0123456789abcdef0123456789abcdeG",
            "0123456789abcdef0123456789abcd\u{e9}",
        ] {
            let mut wire = record();
            wire.trace_id = bad.into();
            assert_eq!(reason_of(wire), RejectReason::InvalidTraceId, "{bad}");
        }
        for wrong_length in ["a".repeat(31), "A".repeat(33), "0".repeat(31)] {
            let mut wire = record();
            wire.trace_id = wrong_length;
            assert_eq!(reason_of(wire), RejectReason::InvalidTraceId);
        }
        let mut wire = record();
        wire.span_id = "00000000000000Af".into();
        assert_eq!(
            validate(wire, &LIMITS, now()).unwrap().span_id,
            Some([0, 0, 0, 0, 0, 0, 0, 0xaf])
        );
        let mut wire = record();
        wire.severity = 25;
        assert_eq!(reason_of(wire), RejectReason::InvalidSeverity);
        let mut wire = record();
        wire.severity = 24;
        assert!(validate(wire, &LIMITS, now()).is_ok());
    }
}
