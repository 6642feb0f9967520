//! What Grafana's Explore and Logs Drilldown ask of a selector before they show anything, read
//! as Loki 3.7 answers it: the stream labels and how many values each has (`detected_labels`),
//! the fields of the newest lines (`detected_fields`) and one field's values.
//!
//! A field is what a line carries besides its stream labels: structured metadata (no parser),
//! and what `| json` finds in the line, or `| logfmt` where the line is not JSON, each with its
//! type and the parsers that found it. As in Loki, the newest `line_limit` lines that the query
//! (stages included) keeps are read.
//!
//! A line's stream labels are those it was stored with ([`labels::row_stream_labels`]); the rest,
//! `detected_level`, `trace_id` and `span_id` among them, is its structured metadata
//! ([`labels::with_metadata`]).

mod kind;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde::Serialize;

use self::kind::Kind;
use crate::error::HttpError;
use crate::loki::logql::ast::LogQuery;
use crate::loki::logql::labels::{self, Labels};
use crate::loki::logql::pipeline::{self, Output};
use crate::loki::logql::plan;
use crate::loki::read::{Scan, Stats, TimeRange, LABEL_SAMPLE_ROWS};
use crate::model::selection::Order;
use crate::query::memory::ReadCharge;
use crate::query::Reads;
use crate::storage::StoredRow;

/// Lines read, and fields or values listed, when a request does not say: Loki's defaults.
pub(crate) const DEFAULT_LIMIT: usize = 1000;

/// Stream labels Loki lists even when every value looks like an id.
const STATIC_LABELS: [&str; 4] = ["cluster", "namespace", "instance", "pod"];

/// A stream label and how many values it has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct DetectedLabel {
    /// Its name.
    pub label: String,
    /// Its distinct values.
    pub cardinality: usize,
}

/// A field of the lines read, in Loki's shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct DetectedField {
    /// Its label name.
    pub label: String,
    /// The type of its values (of the last line read that has it, as in Loki).
    #[serde(rename = "type")]
    pub kind: Kind,
    /// Its distinct values.
    pub cardinality: usize,
    /// The parsers that found it, in the order they did; `None` for structured metadata.
    pub parsers: Option<Vec<&'static str>>,
    /// The keys that lead to it in a JSON line, when JSON gave it.
    #[serde(rename = "jsonPath", skip_serializing_if = "Option::is_none")]
    pub json_path: Option<Vec<String>>,
}

/// How much a fields or values request reads and lists.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FieldsAsk {
    /// The newest lines to read.
    pub lines: usize,
    /// The most fields (or values) to list.
    pub limit: usize,
}

/// A line read: its stream labels, its labels as stored, what the query's stages added, and its
/// text after them.
struct Line {
    stream: Labels,
    labels: Labels,
    added: Labels,
    text: String,
}

impl Line {
    fn new(row: &StoredRow, output: Output) -> Line {
        let stream = labels::row_stream_labels(row);
        let labels = labels::with_metadata(stream.clone(), row);
        let added = output
            .labels
            .into_iter()
            .filter(|(name, _)| !labels.contains_key(name) && !name.starts_with("__"))
            .collect();
        Line {
            stream,
            labels,
            added,
            text: output.line.into_owned(),
        }
    }

    /// What it costs to hold.
    fn bytes(&self) -> usize {
        let pairs = |labels: &Labels| {
            labels
                .iter()
                .map(|(k, v)| k.len() + v.len() + 48)
                .sum::<usize>()
        };
        self.text.len() + pairs(&self.stream) + pairs(&self.labels) + pairs(&self.added) + 96
    }
}

/// Lines split into what was their stream's and what was each line's own.
struct Streams<'a> {
    /// Lines by their stream labels (written as Loki writes a stream, which orders them), each
    /// stream's newest first.
    streams: BTreeMap<String, (Labels, Vec<&'a Line>)>,
}

impl<'a> Streams<'a> {
    /// Groups `lines` (newest first) by their stream labels.
    fn of(lines: &'a [Line]) -> Self {
        let mut streams: BTreeMap<String, (Labels, Vec<&Line>)> = BTreeMap::new();
        for line in lines {
            let key = line
                .stream
                .iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            streams
                .entry(format!("{{{key}}}"))
                .or_insert_with(|| (line.stream.clone(), Vec::new()))
                .1
                .push(line);
        }
        Streams { streams }
    }

    /// Each line's fields, in Loki's order (stream by stream, each newest first; a line's
    /// metadata before what its parser found), to `each`: the name, the value, the parser
    /// (`None` for metadata) and, from JSON, the keys that lead to it.
    fn fields(&self, each: &mut dyn FnMut(Seen)) {
        for (stream, lines) in self.streams.values() {
            for line in lines {
                for (name, value) in &line.labels {
                    if !stream.contains_key(name) {
                        each(Seen {
                            name,
                            value,
                            parser: None,
                            path: None,
                        });
                    }
                }
                // Loki tries JSON, and logfmt on a line that is not; a field named as a stream
                // label is `NAME_extracted`, as `| json` makes it.
                let named = |name: String| match stream.contains_key(&name) {
                    true => format!("{name}_extracted"),
                    false => name,
                };
                let mut parser = "json";
                let json = pipeline::json_fields(&line.text, &mut |name, value, path| {
                    // Loki leaves a null out; objects and arrays give no field.
                    if let Some(value) = value.label_value() {
                        each(Seen {
                            name: &named(name.to_owned()),
                            value: &value,
                            parser: Some("json"),
                            path: Some(path),
                        });
                    }
                });
                if json.is_err() {
                    parser = "logfmt";
                    // Loki's logfmt leaves out a key without a value.
                    pipeline::logfmt_pairs(&line.text, &mut |name, value| {
                        if !value.is_empty() {
                            each(Seen {
                                name: &named(name),
                                value: &value,
                                parser: Some("logfmt"),
                                path: None,
                            });
                        }
                    });
                }
                // What the query's own parsers added, found by the same parser.
                for (name, value) in &line.added {
                    each(Seen {
                        name,
                        value,
                        parser: Some(parser),
                        path: None,
                    });
                }
            }
        }
    }
}

/// One value of a field of a line.
struct Seen<'a> {
    name: &'a str,
    value: &'a str,
    /// The parser that found it; `None` for metadata.
    parser: Option<&'static str>,
    /// From JSON, the keys that lead to it.
    path: Option<&'a [&'a str]>,
}

/// A field being detected.
struct Found {
    kind: Kind,
    values: BTreeSet<String>,
    parsers: Vec<&'static str>,
    json_path: Option<Vec<String>>,
}

/// True when every value looks like an id (a number or a UUID): Loki does not list such a label,
/// unless it is one of [`STATIC_LABELS`].
fn all_ids(values: &BTreeSet<String>) -> bool {
    values.iter().all(|value| is_float(value) || is_uuid(value))
}

fn is_float(value: &str) -> bool {
    Kind::of(value) == Kind::Int || Kind::of(value) == Kind::Float
}

/// A UUID as Go's `uuid.Parse` takes it: 32 hex digits, dashed 8-4-4-4-12, maybe in braces or
/// after `urn:uuid:`.
fn is_uuid(value: &str) -> bool {
    let value = value
        .strip_prefix('{')
        .and_then(|v| v.strip_suffix('}'))
        .or_else(|| {
            value
                .get(..9)
                .filter(|prefix| prefix.eq_ignore_ascii_case("urn:uuid:"))
                .map(|_| &value[9..])
        })
        .unwrap_or(value);
    let hex = |text: &str| text.bytes().all(|b| b.is_ascii_hexdigit());
    match value.len() {
        32 => hex(value),
        36 => value.char_indices().all(|(at, c)| match at {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        }),
        _ => false,
    }
}

impl Reads {
    /// The newest `count` lines of `query` over `range` (its stages run), each charged to `charge`.
    async fn detection_lines(
        &self,
        tenant: &str,
        query: &LogQuery,
        range: TimeRange,
        count: usize,
        charge: &mut ReadCharge,
    ) -> Result<Vec<Line>, HttpError> {
        let mut lines = Vec::new();
        let mut refused = None;
        let mut each = |row: &StoredRow, output: Output| {
            let line = Line::new(row, output);
            if let Err(err) = charge.charge(line.bytes()) {
                refused = Some(err);
                return false;
            }
            lines.push(line);
            lines.len() < count
        };
        let scan = Scan {
            range,
            order: Order::Newest,
            limit: Some(count),
            needs: None,
        };
        self.each_output(tenant, query, scan, &mut Stats::default(), &mut each)
            .await?;
        match refused {
            Some(err) => Err(err.into()),
            None => Ok(lines),
        }
    }

    /// The stream labels of what `query` (a selector) selects over `range`, each with its number
    /// of values, as Loki's `detected_labels` lists them: `service_name` and `level` from the
    /// rollup when the selector names only them, the rest from the newest lines; a label whose
    /// every value is a number or a UUID left out.
    pub(crate) async fn loki_detected_labels(
        &self,
        tenant: &Arc<str>,
        query: &LogQuery,
        range: TimeRange,
        charge: &mut ReadCharge,
    ) -> Result<Vec<DetectedLabel>, HttpError> {
        self.admitted(tenant, async {
            let mut values: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            if plan::is_indexed_selector(query) {
                let mut stats = Stats::default();
                self.selected_streams(tenant, query, range, &mut stats, &mut |mut stream, _| {
                    stream.remove(labels::DETECTED_LEVEL_LABEL);
                    for (name, value) in stream {
                        values.entry(name).or_default().insert(value);
                    }
                    Ok(())
                })
                .await?;
            }
            let lines = self
                .detection_lines(tenant, query, range, LABEL_SAMPLE_ROWS, charge)
                .await?;
            // The selector's own newest lines, for the stream labels the rollup does not keep.
            for (stream, _) in Streams::of(&lines).streams.into_values() {
                for (name, value) in stream {
                    values.entry(name).or_default().insert(value);
                }
            }
            Ok(values
                .into_iter()
                .filter(|(name, values)| STATIC_LABELS.contains(&name.as_str()) || !all_ids(values))
                .map(|(label, values)| DetectedLabel {
                    label,
                    cardinality: values.len(),
                })
                .collect())
        })
        .await
    }

    /// The fields of the newest lines of `query` over `range`, as Loki's `detected_fields`
    /// lists them, at most `ask.limit` (the first found).
    pub(crate) async fn loki_detected_fields(
        &self,
        tenant: &Arc<str>,
        query: &LogQuery,
        range: TimeRange,
        ask: FieldsAsk,
        charge: &mut ReadCharge,
    ) -> Result<Vec<DetectedField>, HttpError> {
        self.admitted(tenant, async {
            let lines = self
                .detection_lines(tenant, query, range, ask.lines, charge)
                .await?;
            let mut order: Vec<String> = Vec::new();
            let mut found: HashMap<String, Found> = HashMap::new();
            let mut held = 0;
            Streams::of(&lines).fields(&mut |seen| {
                let Seen {
                    name,
                    value,
                    parser,
                    path,
                } = seen;
                if !found.contains_key(name) {
                    if found.len() >= ask.limit {
                        return;
                    }
                    order.push(name.to_owned());
                    found.insert(
                        name.to_owned(),
                        Found {
                            kind: Kind::String,
                            values: BTreeSet::new(),
                            parsers: Vec::new(),
                            json_path: None,
                        },
                    );
                }
                let field = found.get_mut(name).expect("inserted above");
                if let Some(parser) = parser.filter(|p| !field.parsers.contains(p)) {
                    field.parsers.push(parser);
                }
                // As Loki does, the last line read decides the type and the path.
                field.kind = Kind::of(value);
                if let Some(path) = path {
                    field.json_path = Some(path.iter().map(|key| (*key).to_owned()).collect());
                }
                if field.values.insert(value.to_owned()) {
                    held += value.len() + 32;
                }
            });
            charge.charge(held)?;
            Ok(order
                .into_iter()
                .map(|label| {
                    let field = found.remove(&label).expect("every name in order is found");
                    DetectedField {
                        label,
                        kind: field.kind,
                        cardinality: field.values.len(),
                        parsers: (!field.parsers.is_empty()).then_some(field.parsers),
                        json_path: field.json_path,
                    }
                })
                .collect())
        })
        .await
    }

    /// The values of field `name` in the newest lines of `query` over `range`, until `ask.limit`
    /// are found; a size with a unit as Loki writes it for a query (`2KB` → `2.0kB`).
    pub(crate) async fn loki_detected_field_values(
        &self,
        tenant: &Arc<str>,
        query: &LogQuery,
        range: TimeRange,
        name: &str,
        ask: FieldsAsk,
        charge: &mut ReadCharge,
    ) -> Result<Vec<String>, HttpError> {
        self.admitted(tenant, async {
            let lines = self
                .detection_lines(tenant, query, range, ask.lines, charge)
                .await?;
            let mut values = BTreeSet::new();
            Streams::of(&lines).fields(&mut |seen| {
                if seen.name == name && values.len() < ask.limit {
                    values.insert(match seen.parser {
                        Some(_) => kind::listed(seen.value),
                        None => seen.value.to_owned(),
                    });
                }
            });
            Ok(values.into_iter().collect())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_numbers_and_uuids() {
        let set = |values: &[&str]| values.iter().map(|v| (*v).to_owned()).collect();
        assert!(all_ids(&set(&["42", "4.5"])));
        assert!(all_ids(&set(&[
            "550e8400-e29b-41d4-a716-446655440000",
            "{550e8400-e29b-41d4-a716-446655440000}",
            "550e8400e29b41d4a716446655440000",
        ])));
        assert!(!all_ids(&set(&["7", "x7"])));
        assert!(!all_ids(&set(&["550e8400-e29b-41d4-a716-44665544000g"])));
    }
}
