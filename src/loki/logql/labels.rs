//! A stored record's labels, as a Loki reader sees them. Its stream labels: `service_name` (the
//! record's service) and the labels its stream was sent with (a Loki stream's, an OpenTelemetry
//! resource's attributes), `level` among them only where it was sent, as it was sent. Then its
//! structured metadata, as Loki adds it to each line: `detected_level` (its severity, by Loki's
//! names), `trace_id` and `span_id` when it has them, and each attribute as a label, its name with
//! every character Loki does not allow in a label name replaced by `_`, its value the
//! attribute's text (or its JSON, for a value that is not a string). A selector sees the stream
//! labels alone.

use std::collections::{BTreeMap, HashMap};

use super::json_object::{JsonObject, JsonValue};
use crate::model::severity::Severity;
use crate::storage::StoredRow;

/// A set of labels, sorted by name (the order Loki prints them in).
pub(crate) type Labels = BTreeMap<String, String>;

/// A map keyed by label sets. A query over many series looks each line's labels up in one: a
/// fast hash of their text, where the default (SipHash) was a tenth of such a query's time.
pub(crate) type LabelsMap<V> = HashMap<Labels, V, foldhash::fast::RandomState>;

/// A map of series keyed by their label sets, each hashed once ([`HashedLabels`]).
pub(crate) type SeriesMap<V> = HashMap<HashedLabels, V, foldhash::fast::RandomState>;

/// A label set and its hash, computed once when the set is made a key. A map of tens of
/// thousands of series (a pipeline's every label kept, one series per line) hashes each of its
/// keys again every time it grows, walking label sets scattered over memory: that was a tenth
/// of such a query's time.
#[derive(Debug)]
pub(crate) struct HashedLabels {
    hash: u64,
    labels: Labels,
}

impl HashedLabels {
    /// `labels`, hashed.
    pub(crate) fn new(labels: Labels) -> Self {
        use std::hash::BuildHasher;
        let hash = foldhash::fast::FixedState::default().hash_one(&labels);
        HashedLabels { hash, labels }
    }

    /// The label set.
    pub(crate) fn labels(&self) -> &Labels {
        &self.labels
    }

    /// The label set, its hash dropped.
    pub(crate) fn into_labels(self) -> Labels {
        self.labels
    }
}

impl std::hash::Hash for HashedLabels {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialEq for HashedLabels {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.labels == other.labels
    }
}

impl Eq for HashedLabels {}

/// Bytes that sort as `labels` do: comparing two label sets pair by pair (name, then value) was
/// a third of the time of a query that answers tens of thousands of series, and each comparison
/// of these is one `memcmp`. Each text is written with its NUL bytes as `0 1` and ends in `0 0`,
/// so a text sorts before every longer one it begins, and a set before every larger one it
/// begins.
pub(crate) fn order_key(labels: &Labels) -> Vec<u8> {
    let size: usize = labels.iter().map(|(k, v)| k.len() + v.len() + 4).sum();
    let mut key = Vec::with_capacity(size);
    for text in labels.iter().flat_map(|(name, value)| [name, value]) {
        if text.as_bytes().contains(&0) {
            for &byte in text.as_bytes() {
                key.push(byte);
                if byte == 0 {
                    key.push(1);
                }
            }
        } else {
            key.extend_from_slice(text.as_bytes());
        }
        key.extend_from_slice(&[0, 0]);
    }
    key
}

/// The label of the record's service.
pub(crate) const SERVICE_LABEL: &str = "service_name";
/// The label of its severity, by name.
pub(crate) const LEVEL_LABEL: &str = "level";
/// The same, under the name Loki gives a level it detected.
pub(crate) const DETECTED_LEVEL_LABEL: &str = "detected_level";

/// True for the stream labels the rollup keeps (columns of `log_volume`).
pub(crate) fn is_indexed(name: &str) -> bool {
    name == SERVICE_LABEL || name == LEVEL_LABEL
}

/// True for the labels the rollup can group by: its stream labels and `detected_level`, which
/// its severity gives.
pub(crate) fn is_rollup_label(name: &str) -> bool {
    is_indexed(name) || name == DETECTED_LEVEL_LABEL
}

/// An attribute's key as a label name: characters other than ASCII letters, digits and `_`
/// become `_`, and a leading digit gets a `_` before it.
pub(crate) fn label_name(key: &str) -> String {
    let mut name = String::with_capacity(key.len() + 1);
    push_label_name(&mut name, key);
    name
}

/// Appends [`label_name`]`(key)` to `name`.
pub(crate) fn push_label_name(name: &mut String, key: &str) {
    if key.is_empty() || key.starts_with(|c: char| c.is_ascii_digit()) {
        name.push('_');
    }
    // Most keys are names already: copied whole, not char by char.
    if key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        name.push_str(key);
        return;
    }
    name.extend(
        key.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }),
    );
}

/// A JSON value as a label's value: strings as they are, anything else as its JSON text.
pub(crate) fn label_value(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The stream labels of a rollup row: its service, and its `level` label where one was sent.
fn volume_stream_labels(service: &str, level: &str) -> Labels {
    let mut labels = Labels::from([(SERVICE_LABEL.to_owned(), service.to_owned())]);
    if !level.is_empty() {
        labels.insert(LEVEL_LABEL.to_owned(), level.to_owned());
    }
    labels
}

/// The labels of a rollup row a metric query groups by: its stream labels and the
/// `detected_level` of its severity.
pub(crate) fn volume_labels(service: &str, level: &str, severity: i16) -> Labels {
    let mut labels = volume_stream_labels(service, level);
    labels.insert(
        DETECTED_LEVEL_LABEL.to_owned(),
        Severity::of(severity.into()).name().to_owned(),
    );
    labels
}

/// The label of a record's trace id, as Loki returns it (structured metadata).
pub(crate) const TRACE_ID_LABEL: &str = "trace_id";
/// The label of its span id.
pub(crate) const SPAN_ID_LABEL: &str = "span_id";

/// The stream labels of a stored record: its service and the labels its stream was sent with.
pub(crate) fn row_stream_labels(row: &StoredRow) -> Labels {
    let mut labels = Labels::from([(SERVICE_LABEL.to_owned(), row.service.clone())]);
    add_object(&mut labels, &row.labels);
    labels
}

/// Loki's hash of a stream's labels (Prometheus' `labels.Hash`: xxHash64 of each name and value
/// followed by a 0xff byte, in name order). Loki orders the samples of one instant from several
/// streams by it, so `first_over_time` and `last_over_time` pick among them by it too.
pub(crate) fn stream_hash(labels: &Labels) -> u64 {
    let mut hasher = xxhash_rust::xxh64::Xxh64::new(0);
    for (name, value) in labels {
        hasher.update(name.as_bytes());
        hasher.update(&[0xff]);
        hasher.update(value.as_bytes());
        hasher.update(&[0xff]);
    }
    hasher.digest()
}

/// The hasher of a [`StreamLabelCache`]'s maps.
type FastHash = foldhash::fast::RandomState;

/// The most streams a [`StreamLabelCache`] holds before it starts over.
const MAX_CACHED_STREAMS: usize = 4096;

/// The stream labels of one read's rows, parsed once per stream and judged once by the read's
/// selector: a scan meets the same few streams on every row, and parsing their JSON again was a
/// tenth of its time.
#[derive(Default)]
pub(crate) struct StreamLabelCache {
    /// By service, then by the stream's labels as stored: where in `labels` they are. Looked up
    /// twice a row, by a fast hash (SipHash was a few percent of a scan).
    streams: HashMap<String, HashMap<String, usize, FastHash>, FastHash>,
    /// Each stream's labels and [`stream_hash`], or `None` where the selector refused them.
    labels: Vec<Option<(Labels, u64)>>,
}

impl StreamLabelCache {
    /// The row's stream labels and their [`stream_hash`] when `selects` keeps them, `None` when
    /// it refuses them. `selects` must be the same for every row of one cache.
    pub(crate) fn selected(
        &mut self,
        row: &StoredRow,
        selects: impl FnOnce(&Labels) -> bool,
    ) -> Option<(&Labels, u64)> {
        let known = self
            .streams
            .get(&row.service)
            .and_then(|streams| streams.get(&row.labels))
            .copied();
        let at = match known {
            Some(at) => at,
            None => {
                if self.labels.len() >= MAX_CACHED_STREAMS {
                    self.streams.clear();
                    self.labels.clear();
                }
                let labels = row_stream_labels(row);
                let hash = stream_hash(&labels);
                self.labels.push(selects(&labels).then_some((labels, hash)));
                self.streams
                    .entry(row.service.clone())
                    .or_default()
                    .insert(row.labels.clone(), self.labels.len() - 1);
                self.labels.len() - 1
            }
        };
        self.labels[at]
            .as_ref()
            .map(|(labels, hash)| (labels, *hash))
    }
}

/// Every label of a stored record whose stream labels are `stream`: those, then its
/// `detected_level`, its trace context's and its attributes'. A label whose name is already
/// taken (by the stream, or by an earlier attribute) is left out.
pub(crate) fn with_metadata(mut labels: Labels, row: &StoredRow) -> Labels {
    labels
        .entry(DETECTED_LEVEL_LABEL.to_owned())
        .or_insert_with(|| Severity::of(row.severity.into()).name().to_owned());
    for (name, id) in [
        (TRACE_ID_LABEL, &row.trace_id),
        (SPAN_ID_LABEL, &row.span_id),
    ] {
        if let Some(id) = id.as_ref().filter(|id| !id.is_empty()) {
            labels.entry(name.to_owned()).or_insert_with(|| id.clone());
        }
    }
    add_object(&mut labels, &row.attributes);
    labels
}

/// Adds the keys of a JSON object as labels, where their names are free.
fn add_object(labels: &mut Labels, json: &str) {
    if json.len() <= 2 {
        return;
    }
    // Stored label sets are objects of strings: read in place. Anything else (an attribute
    // holding an object or an array) is written as `serde_json` writes it.
    if let Ok(object) = JsonObject::parse_whole(json) {
        if object
            .members()
            .all(|(_, value)| matches!(value, JsonValue::Text(_)))
        {
            for (key, value) in object.members() {
                if let Some(value) = value.label_value() {
                    labels.entry(label_name(key)).or_insert(value);
                }
            }
            return;
        }
    }
    if let Ok(object) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json) {
        for (key, value) in object {
            labels
                .entry(label_name(&key))
                .or_insert_with(|| label_value(&value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_keys_sort_as_the_label_sets_do() {
        let texts = [
            "", "a", "a\0", "a\0b", "a\u{1}", "ab", "b", "\0", "\0\0", "é",
        ];
        let mut sets: Vec<Labels> = vec![Labels::new()];
        for name in texts {
            for value in texts {
                sets.push(Labels::from([(name.to_owned(), value.to_owned())]));
                for other in ["a", "a\0", "b"] {
                    sets.push(Labels::from([
                        (name.to_owned(), value.to_owned()),
                        (other.to_owned(), value.to_owned()),
                    ]));
                }
            }
        }
        for a in &sets {
            for b in &sets {
                assert_eq!(
                    order_key(a).cmp(&order_key(b)),
                    a.cmp(b),
                    "{a:?} against {b:?}"
                );
            }
        }
    }

    #[test]
    fn names_are_sanitized() {
        assert_eq!(label_name("http.status_code"), "http_status_code");
        assert_eq!(label_name("k8s.pod-name"), "k8s_pod_name");
        assert_eq!(label_name("2xx"), "_2xx");
        assert_eq!(label_name(""), "_");
        assert_eq!(label_name("_already_a_name2"), "_already_a_name2");
        assert_eq!(label_name("2_x"), "_2_x");
        assert_eq!(label_name("é"), "_");
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
            labels: r#"{"job":"batch","level":"ERR"}"#.into(),
            attributes: r#"{"http.status": 500, "user": "ann", "level": "x", "job": "y"}"#.into(),
            trace_id: Some("0af7651916cd43dd8448eb211c80319c".into()),
            span_id: None,
        };
        let labels = with_metadata(row_stream_labels(&row), &row);
        assert_eq!(labels["trace_id"], "0af7651916cd43dd8448eb211c80319c");
        assert!(!labels.contains_key("span_id"));
        assert_eq!(labels["service_name"], "checkout");
        assert_eq!(labels["level"], "ERR", "the stream's level, as sent, wins");
        assert_eq!(labels["job"], "batch", "the stream's labels win");
        assert_eq!(labels["detected_level"], "error");
        let stream = row_stream_labels(&row);
        assert_eq!(
            stream.keys().collect::<Vec<_>>(),
            ["job", "level", "service_name"],
            "metadata is not a stream label"
        );
        assert_eq!(labels["http_status"], "500");
        assert_eq!(labels["user"], "ann");
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    fn row(service: &str, labels: &str) -> StoredRow {
        StoredRow {
            id: 1,
            ts: chrono::DateTime::UNIX_EPOCH,
            received_at: chrono::DateTime::UNIX_EPOCH,
            severity: 9,
            service: service.into(),
            message: "line".into(),
            labels: labels.into(),
            attributes: "{}".into(),
            trace_id: None,
            span_id: None,
        }
    }

    #[test]
    fn each_stream_is_parsed_and_judged_once_and_the_same_text_of_another_service_apart() {
        let mut cache = StreamLabelCache::default();
        let mut judged = 0;
        let mut selects = |labels: &Labels| {
            judged += 1;
            labels["job"] == "batch"
        };
        let batch = row("api", r#"{"job":"batch"}"#);
        let other = row("api", r#"{"job":"web"}"#);
        let elsewhere = row("billing", r#"{"job":"batch"}"#);
        for _ in 0..3 {
            let stream = row_stream_labels(&batch);
            assert_eq!(
                cache.selected(&batch, &mut selects),
                Some((&stream, stream_hash(&stream)))
            );
            assert_eq!(cache.selected(&other, &mut selects), None);
            assert_eq!(
                cache.selected(&elsewhere, &mut selects).unwrap().0["service_name"],
                "billing"
            );
        }
        assert_eq!(judged, 3, "one judgement per stream");
    }

    #[test]
    fn a_read_of_more_streams_than_it_holds_starts_over_and_stays_right() {
        let mut cache = StreamLabelCache::default();
        for round in 0..2 {
            for n in 0..MAX_CACHED_STREAMS + 10 {
                let row = row("api", &format!(r#"{{"pod":"p{n}"}}"#));
                let (labels, _) = cache.selected(&row, |_| true).unwrap();
                assert_eq!(labels["pod"], format!("p{n}"), "round {round}");
            }
            assert!(cache.labels.len() <= MAX_CACHED_STREAMS);
        }
    }
}

#[cfg(test)]
mod hash_tests {
    use super::*;

    #[test]
    fn a_stream_hash_is_the_one_loki_orders_streams_by() {
        // Prometheus' `labels.FromStrings(...).Hash()` of these, as Loki 3.7.6 computes them: of
        // samples at one instant, Loki's `last_over_time` took the stream with the larger hash.
        let labels = |pairs: &[(&str, &str)]| -> Labels {
            pairs
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect()
        };
        let checkout = |level| {
            labels(&[
                ("env", "prod"),
                ("level", level),
                ("service_name", "checkout"),
            ])
        };
        assert_eq!(stream_hash(&checkout("info")), 4360209482037265495);
        assert_eq!(stream_hash(&checkout("error")), 1145697102962757096);
        assert_eq!(
            stream_hash(&labels(&[("level", "info"), ("service_name", "proxy")])),
            11685404345680170769
        );
        assert_eq!(stream_hash(&Labels::new()), 0xef46db3751d8e999);
    }
}

#[cfg(test)]
mod level_tests {
    use super::*;

    #[test]
    fn a_rollup_row_has_a_level_label_only_where_one_was_sent() {
        let labels = volume_labels("api", "", 0);
        assert!(!labels.contains_key("level"), "{labels:?}");
        assert_eq!(labels["detected_level"], "unknown");
        let labels = volume_labels("api", "WARNING", 13);
        assert_eq!(labels["level"], "WARNING");
        assert_eq!(labels["detected_level"], "warn");
        assert!(!volume_stream_labels("api", "x").contains_key("detected_level"));
    }
}
