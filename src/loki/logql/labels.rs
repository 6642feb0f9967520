//! A stored record's labels, as a Loki reader sees them: `service_name` (the record's service),
//! `level` and `detected_level` (its severity, by Loki's names), both indexed; `trace_id` and
//! `span_id` when it has them; and each attribute
//! as a label (structured metadata in Loki's terms), its name with every character Loki does not
//! allow in a label name replaced by `_`, its value the attribute's text (or its JSON, for a value
//! that is not a string).

use std::collections::BTreeMap;

use crate::model::severity::Severity;
use crate::storage::StoredRow;

/// A set of labels, sorted by name (the order Loki prints them in).
pub(crate) type Labels = BTreeMap<String, String>;

/// The label of the record's service.
pub(crate) const SERVICE_LABEL: &str = "service_name";
/// The label of its severity, by name.
pub(crate) const LEVEL_LABEL: &str = "level";
/// The same, under the name Loki gives a level it detected.
pub(crate) const DETECTED_LEVEL_LABEL: &str = "detected_level";

/// True for the labels that name the severity.
pub(crate) fn is_level_label(name: &str) -> bool {
    name == LEVEL_LABEL || name == DETECTED_LEVEL_LABEL
}

/// True for the labels the database indexes (columns, not attributes).
pub(crate) fn is_indexed(name: &str) -> bool {
    name == SERVICE_LABEL || is_level_label(name)
}

/// An attribute's key as a label name: characters other than ASCII letters, digits and `_`
/// become `_`, and a leading digit gets a `_` before it.
pub(crate) fn label_name(key: &str) -> String {
    let mut name: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// A JSON value as a label's value: strings as they are, anything else as its JSON text.
pub(crate) fn label_value(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The labels of the record's stream: its service, and its level by name. A record of no known
/// level has no `level` label, as a Loki stream sent without one, and `detected_level` says
/// `unknown`, as Loki's does.
pub(crate) fn stream_labels(service: &str, severity: i16) -> Labels {
    let level = Severity::of(severity.into());
    let mut labels = Labels::from([
        (SERVICE_LABEL.to_owned(), service.to_owned()),
        (DETECTED_LEVEL_LABEL.to_owned(), level.name().to_owned()),
    ]);
    if level != Severity::Unknown {
        labels.insert(LEVEL_LABEL.to_owned(), level.name().to_owned());
    }
    labels
}

/// The value of level label `label` for a record of `level`: what [`stream_labels`] gives it,
/// the empty text for a label it does not have.
pub(crate) fn level_value(label: &str, level: Severity) -> &'static str {
    if label == LEVEL_LABEL && level == Severity::Unknown {
        ""
    } else {
        level.name()
    }
}

/// The labels of a record's trace context, as Loki returns them (structured metadata).
const TRACE_ID_LABEL: &str = "trace_id";
const SPAN_ID_LABEL: &str = "span_id";

/// Every label of a stored record: its stream's, its trace context's and its attributes'. An
/// attribute whose label name is already taken (by the stream, or by an earlier attribute) is
/// left out.
pub(crate) fn row_labels(row: &StoredRow) -> Labels {
    let mut labels = stream_labels(&row.service, row.severity);
    for (name, id) in [
        (TRACE_ID_LABEL, &row.trace_id),
        (SPAN_ID_LABEL, &row.span_id),
    ] {
        if let Some(id) = id.as_ref().filter(|id| !id.is_empty()) {
            labels.insert(name.to_owned(), id.clone());
        }
    }
    if let Ok(attributes) =
        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&row.attributes)
    {
        for (key, value) in attributes {
            labels
                .entry(label_name(&key))
                .or_insert_with(|| label_value(&value));
        }
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitized() {
        assert_eq!(label_name("http.status_code"), "http_status_code");
        assert_eq!(label_name("k8s.pod-name"), "k8s_pod_name");
        assert_eq!(label_name("2xx"), "_2xx");
        assert_eq!(label_name(""), "_");
    }

    #[test]
    fn a_row_has_its_stream_labels_and_its_attributes() {
        let row = StoredRow {
            id: 1,
            ts: chrono::DateTime::UNIX_EPOCH,
            received_at: chrono::DateTime::UNIX_EPOCH,
            severity: 17,
            service: "checkout".into(),
            message: "boom".into(),
            attributes: r#"{"http.status": 500, "user": "ann", "level": "x"}"#.into(),
            trace_id: Some("0af7651916cd43dd8448eb211c80319c".into()),
            span_id: None,
        };
        let labels = row_labels(&row);
        assert_eq!(labels["trace_id"], "0af7651916cd43dd8448eb211c80319c");
        assert!(!labels.contains_key("span_id"));
        assert_eq!(labels["service_name"], "checkout");
        assert_eq!(labels["level"], "error", "the stream's level wins");
        assert_eq!(labels["detected_level"], "error");
        assert_eq!(labels["http_status"], "500");
        assert_eq!(labels["user"], "ann");
    }
}

#[cfg(test)]
mod level_tests {
    use super::*;

    #[test]
    fn a_record_of_no_known_level_has_no_level_label() {
        let labels = stream_labels("api", 0);
        assert!(!labels.contains_key("level"), "{labels:?}");
        assert_eq!(labels["detected_level"], "unknown");
        assert_eq!(stream_labels("api", 13)["level"], "warn");
        assert_eq!(level_value("level", Severity::Unknown), "");
        assert_eq!(level_value("detected_level", Severity::Unknown), "unknown");
    }
}
