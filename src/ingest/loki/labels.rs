//! Loki's stream labels: the Prometheus text form a push carries them in (`{job="api",
//! level="info"}`), and how a stream's labels become a record's fields. The service comes from
//! `service_name`, else the first label of Loki's own list that has a value (`service`, `app`, …,
//! `job`), as Loki derives it (none: `unknown_service`, as everywhere); the severity from `level`,
//! `severity` or `detected_level` (Loki's level names). Every label but `service_name`, which
//! the record's own column holds, stays a label as it was sent: `{job="batch"}` and
//! `{level="WARNING"}` select what they select in Loki.

use std::collections::BTreeMap;

use crate::ingest::validate::StreamLabels;
use crate::model::severity::Severity;

/// The label that is the service itself.
const SERVICE_NAME: &str = "service_name";
/// Labels that name the service when `service_name` is absent, in the order Loki 3 tries them
/// (its `discover_service_name` default).
const SERVICE_LABELS: [&str; 13] = [
    "service",
    "app",
    "application",
    "app_name",
    "name",
    "app_kubernetes_io_name",
    "container",
    "container_name",
    "k8s_container_name",
    "component",
    "workload",
    "job",
    "k8s_job_name",
];
/// Labels that name the level.
const LEVEL_LABELS: [&str; 3] = ["level", "severity", "detected_level"];

/// What every entry of a stream shares.
#[derive(Clone, Debug, Default)]
pub struct StreamFields {
    /// The record's service; empty when no label names one (validation makes it
    /// `unknown_service`).
    pub service: String,
    /// The OpenTelemetry severity number; 0 when no label names a known level.
    pub severity: i32,
    /// The stream's labels but `service_name`.
    pub labels: StreamLabels,
}

impl StreamFields {
    /// Sorts a stream's labels into the record's fields.
    pub fn from_labels(mut labels: BTreeMap<String, String>) -> Self {
        let service = match labels.remove(SERVICE_NAME).filter(|v| !v.is_empty()) {
            Some(service) => service,
            None => SERVICE_LABELS
                .iter()
                .find_map(|name| labels.get(*name).filter(|value| !value.is_empty()))
                .cloned()
                .unwrap_or_default(),
        };
        let severity = level_of(&labels).unwrap_or(0);
        StreamFields {
            service,
            severity,
            labels: StreamLabels::new(labels),
        }
    }
}

/// The severity number of the first level label (or structured metadata) whose value is a level
/// name.
pub(crate) fn level_of(labels: &BTreeMap<String, String>) -> Option<i32> {
    LEVEL_LABELS
        .iter()
        .find_map(|name| Severity::from_name(labels.get(*name)?))
        .map(Severity::number)
}

/// Parses a label set in Prometheus text form: `{name="value", …}`, values quoted with Go's
/// escapes (what Loki clients write).
pub fn parse(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    let mut chars = text.trim().chars().peekable();
    if chars.next() != Some('{') {
        return Err(format!("{text:?} does not start with {{"));
    }
    loop {
        skip_spaces(&mut chars);
        match chars.peek() {
            Some('}') => {
                chars.next();
                break;
            }
            None => return Err("the label set does not end with }".into()),
            _ => {}
        }
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                name.push(c);
                chars.next();
            } else {
                break;
            }
        }
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!("a label name is expected in {text:?}"));
        }
        skip_spaces(&mut chars);
        if chars.next() != Some('=') {
            return Err(format!("label {name}: = is expected"));
        }
        skip_spaces(&mut chars);
        let value = quoted(&mut chars).map_err(|err| format!("label {name}: {err}"))?;
        labels.insert(name, value);
        skip_spaces(&mut chars);
        match chars.next() {
            Some(',') => continue,
            Some('}') => break,
            _ => return Err("labels are separated by , and end with }".into()),
        }
    }
    if chars.any(|c| !c.is_whitespace()) {
        return Err("text after the label set's }".into());
    }
    Ok(labels)
}

/// Writes labels in the form [`parse`] reads.
pub fn format(labels: &BTreeMap<String, String>) -> String {
    let mut out = String::from("{");
    for (at, (name, value)) in labels.iter().enumerate() {
        if at > 0 {
            out.push_str(", ");
        }
        out.push_str(name);
        out.push_str("=\"");
        for c in value.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push('}');
    out
}

fn skip_spaces(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while chars.next_if(|c| c.is_whitespace()).is_some() {}
}

/// A double-quoted string with Go's escapes.
fn quoted(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<String, String> {
    if chars.next() != Some('"') {
        return Err("a quoted value is expected".into());
    }
    let mut value = String::new();
    let mut bytes = Vec::new();
    loop {
        let c = chars.next().ok_or("the value's closing quote is missing")?;
        match c {
            '"' => break,
            '\\' => {
                let escaped = chars.next().ok_or("an escape is cut short")?;
                let simple = match escaped {
                    '"' => Some('"'),
                    '\\' => Some('\\'),
                    '\'' => Some('\''),
                    'n' => Some('\n'),
                    'r' => Some('\r'),
                    't' => Some('\t'),
                    'a' => Some('\u{7}'),
                    'b' => Some('\u{8}'),
                    'f' => Some('\u{c}'),
                    'v' => Some('\u{b}'),
                    _ => None,
                };
                if let Some(c) = simple {
                    flush_bytes(&mut bytes, &mut value);
                    value.push(c);
                    continue;
                }
                let digits = match escaped {
                    'x' => 2,
                    'u' => 4,
                    'U' => 8,
                    other => return Err(format!("unknown escape \\{other}")),
                };
                let hex: String = (0..digits).filter_map(|_| chars.next()).collect();
                let code = u32::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|_| hex.len() == digits)
                    .ok_or_else(|| format!("bad escape \\{escaped}{hex}"))?;
                if escaped == 'x' {
                    // \xNN is a byte; several make one UTF-8 character.
                    bytes.push(code as u8);
                } else {
                    flush_bytes(&mut bytes, &mut value);
                    value.push(char::from_u32(code).ok_or("an escape names no character")?);
                }
            }
            c => {
                flush_bytes(&mut bytes, &mut value);
                value.push(c);
            }
        }
    }
    flush_bytes(&mut bytes, &mut value);
    Ok(value)
}

fn flush_bytes(bytes: &mut Vec<u8>, value: &mut String) {
    if !bytes.is_empty() {
        value.push_str(&String::from_utf8_lossy(bytes));
        bytes.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_sets_parse_as_loki_clients_write_them() {
        assert_eq!(parse("{}").unwrap(), map(&[]));
        assert_eq!(
            parse(r#" {job="varlogs", filename = "/var/log/a \"b\".log",level="info",} "#).unwrap(),
            map(&[
                ("job", "varlogs"),
                ("filename", "/var/log/a \"b\".log"),
                ("level", "info")
            ])
        );
        assert_eq!(
            parse(r#"{msg="tab\there\nline \xc3\xa9 \u00e9"}"#).unwrap()["msg"],
            "tab\there\nline é é"
        );
        for bad in [
            "",
            "job=\"x\"",
            "{job=x}",
            "{job=\"x\"",
            "{=\"x\"}",
            "{job=\"x\" app=\"y\"}",
            "{job=\"x\"} extra",
            "{job=\"\\q\"}",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn formatted_labels_parse_back() {
        let labels = map(&[("a", "quote \" backslash \\ newline \n"), ("b", "é")]);
        assert_eq!(parse(&format(&labels)).unwrap(), labels);
    }

    #[test]
    fn labels_become_service_severity_and_attributes_as_loki_derives_them() {
        let fields = StreamFields::from_labels(map(&[
            ("job", "varlogs"),
            ("app", "api"),
            ("level", "WARNING"),
            ("env", "prod"),
        ]));
        assert_eq!(fields.service, "api", "app comes before job in Loki's list");
        assert_eq!(fields.severity, 13);
        assert_eq!(
            fields.labels.map(),
            &map(&[
                ("app", "api"),
                ("env", "prod"),
                ("job", "varlogs"),
                ("level", "WARNING")
            ]),
            "every label stays a label, as sent"
        );
        let fields = StreamFields::from_labels(map(&[
            ("service_name", "checkout"),
            ("job", "x"),
            ("level", "loud"),
            ("detected_level", "error"),
        ]));
        assert_eq!(fields.service, "checkout");
        assert_eq!(fields.severity, 17);
        assert_eq!(
            fields.labels.map(),
            &map(&[("detected_level", "error"), ("job", "x"), ("level", "loud")]),
            "only service_name, which the record's column holds, leaves the labels"
        );
        let fields = StreamFields::from_labels(map(&[("app", "web"), ("severity", "error")]));
        assert_eq!((fields.service.as_str(), fields.severity), ("web", 17));
        assert_eq!(fields.labels.map()["severity"], "error");
        // Pairs Loki 3.7.6 was asked about, and the service it derived.
        for (labels, service) in [
            (map(&[("name", "n1"), ("container", "c1")]), "n1"),
            (map(&[("container", "c2"), ("component", "k1")]), "c2"),
            (map(&[("k8s_job_name", "kj"), ("workload", "w1")]), "w1"),
            (map(&[("application", "ap"), ("app_name", "an")]), "ap"),
            (map(&[("job", ""), ("k8s_job_name", "kj")]), "kj"),
            (map(&[("foo", "bar")]), ""),
            (map(&[]), ""),
        ] {
            assert_eq!(
                StreamFields::from_labels(labels.clone()).service,
                service,
                "{labels:?}"
            );
        }
    }
}
