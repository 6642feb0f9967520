//! A stored record as people and programs read it: one line for `loghaul query` and `tail`, one
//! JSON object for `--json` and the console's API.

use std::io::Write;

use chrono::SecondsFormat;
use serde_json::json;

use crate::model::severity::Severity;
use crate::proto::v1::StoredRecord;

/// A timestamp in RFC 3339 with microseconds (empty when absent).
pub(crate) fn time(ts: Option<&prost_types::Timestamp>) -> String {
    ts.and_then(crate::model::time::from_proto)
        .map(|ts| ts.to_rfc3339_opts(SecondsFormat::Micros, true))
        .unwrap_or_default()
}

/// One record as a human-readable line: time, severity, service, message, then attributes sorted.
pub(crate) fn human(record: &StoredRecord) -> String {
    let mut line = format!(
        "{} {:<5} {}: {}",
        time(record.timestamp.as_ref()),
        Severity::of(record.severity).short_name(),
        record.service,
        record.message
    );
    let mut attributes: Vec<_> = record.attributes.iter().collect();
    attributes.sort();
    for (key, value) in attributes {
        line.push_str(&format!(" {key}={value}"));
    }
    if !record.trace_id.is_empty() {
        line.push_str(&format!(" trace_id={}", record.trace_id));
    }
    line
}

/// One record as a JSON object with the stored fields (and its cursor, to resume a tail from).
pub(crate) fn json(record: &StoredRecord) -> String {
    json_value(record).to_string()
}

/// The object [`json()`] prints.
pub(crate) fn json_value(record: &StoredRecord) -> serde_json::Value {
    let optional = |text: &str| (!text.is_empty()).then(|| text.to_owned());
    json!({
        "ts": time(record.timestamp.as_ref()),
        "severity": record.severity,
        "service": record.service,
        "message": record.message,
        "attributes": record.attributes,
        "trace_id": optional(&record.trace_id),
        "span_id": optional(&record.span_id),
        "cursor": record.cursor,
    })
}

/// Writes records in the chosen format.
pub(crate) fn write_all(
    out: &mut impl Write,
    records: &[StoredRecord],
    as_json: bool,
) -> std::io::Result<()> {
    for record in records {
        let line = if as_json { json(record) } else { human(record) };
        writeln!(out, "{line}")?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> StoredRecord {
        StoredRecord {
            cursor: "c".into(),
            timestamp: Some(prost_types::Timestamp {
                seconds: 1_795_946_400,
                nanos: 500_000,
            }),
            severity: 13,
            service: "checkout".into(),
            message: "card declined".into(),
            attributes: [("order".to_string(), "42".to_string())].into(),
            trace_id: String::new(),
            span_id: String::new(),
            received_at: None,
        }
    }

    #[test]
    fn lines_for_people_and_for_machines() {
        assert_eq!(
            human(&record()),
            "2026-11-29T10:00:00.000500Z WARN  checkout: card declined order=42"
        );
        let value: serde_json::Value = serde_json::from_str(&json(&record())).unwrap();
        assert_eq!(value["ts"], "2026-11-29T10:00:00.000500Z");
        assert_eq!(value["severity"], 13);
        assert_eq!(value["attributes"]["order"], "42");
        assert!(value["trace_id"].is_null());
    }
}
