//! The Loki push API's JSON encoding transcoded to its protobuf one, so that both go through one
//! decoder: `{"streams":[{"stream":{labels},"values":[["<unix ns>","line"],["<unix ns>","line",
//! {structured metadata}]]}]}`, and the older `{"streams":[{"labels":"{…}","entries":[{"ts":
//! "<RFC 3339>","line":"…"}]}]}`.
//!
//! As with OTLP/JSON, each entry is encoded as soon as it is read (no tree of the whole request),
//! and an entry that is not well formed is rejected alone, with its index.

use std::collections::BTreeMap;
use std::fmt;

use prost::Message;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::labels;
use super::proto::{EntryAdapter, LabelPairAdapter};
use crate::server::fields::put_field;
use crate::server::validate::{Invalid, RejectReason};

/// The protobuf encoding of the request, and the entries that were invalid, by index (their
/// place in the encoding holds an empty entry).
#[derive(Debug, Default)]
pub struct Transcoded {
    /// An encoded `logproto.PushRequest`.
    pub protobuf: Vec<u8>,
    /// Entries that were not well formed, by request index, in order.
    pub invalid: Vec<(u64, Invalid)>,
}

/// Transcodes a JSON push; an error names where it is malformed.
pub fn to_protobuf(json: &[u8]) -> Result<Transcoded, String> {
    let mut state = State::default();
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let protobuf = Request(&mut state)
        .deserialize(&mut deserializer)
        .and_then(|out| deserializer.end().map(|()| out))
        .map_err(|err| format!("not a valid Loki JSON push: {err}"))?;
    Ok(Transcoded {
        protobuf,
        invalid: state.invalid,
    })
}

#[derive(Default)]
struct State {
    next_index: u64,
    invalid: Vec<(u64, Invalid)>,
}

/// The whole request: `{"streams": [...]}`.
struct Request<'s>(&'s mut State);

impl<'de> DeserializeSeed<'de> for Request<'_> {
    type Value = Vec<u8>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<u8>, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Request<'_> {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(r#"an object {"streams": [...]}"#)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<u8>, A::Error> {
        let mut out = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "streams" {
                map.next_value_seed(Streams {
                    state: &mut *self.0,
                    out: &mut out,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(out)
    }
}

/// The `streams` array; each stream is appended as field 1.
struct Streams<'s, 'o> {
    state: &'s mut State,
    out: &'o mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for Streams<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Streams<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of streams")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(stream) = seq.next_element_seed(Stream(&mut *self.state))? {
            put_field(&mut *self.out, 1, &stream);
        }
        Ok(())
    }
}

/// One stream: its labels as field 1, its entries as field 2.
struct Stream<'s>(&'s mut State);

impl<'de> DeserializeSeed<'de> for Stream<'_> {
    type Value = Vec<u8>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<u8>, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Stream<'_> {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(r#"a stream {"stream": {labels}, "values": [...]}"#)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<u8>, A::Error> {
        let mut out = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "stream" => {
                    let labels: BTreeMap<String, String> = map.next_value()?;
                    put_field(&mut out, 1, labels::format(&labels).as_bytes());
                }
                "labels" => {
                    let labels: String = map.next_value()?;
                    put_field(&mut out, 1, labels.as_bytes());
                }
                "values" | "entries" => {
                    map.next_value_seed(Entries {
                        state: &mut *self.0,
                        legacy: key == "entries",
                        out: &mut out,
                    })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

/// A stream's entries; each is appended as field 2.
struct Entries<'s, 'o> {
    state: &'s mut State,
    /// `entries` objects (`{"ts": RFC 3339, "line": …}`) rather than `values` arrays.
    legacy: bool,
    out: &'o mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for Entries<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Entries<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        // One entry at a time as a JSON value, so that a bad one is rejected alone.
        while let Some(value) = seq.next_element::<serde_json::Value>()? {
            let index = self.state.next_index;
            self.state.next_index += 1;
            let entry = if self.legacy {
                legacy_entry(value)
            } else {
                entry(value)
            };
            let encoded = match entry {
                Ok(entry) => entry.encode_to_vec(),
                Err(detail) => {
                    let reason = match detail {
                        EntryError::Timestamp(_) => RejectReason::InvalidTimestamp,
                        EntryError::Shape(_) => RejectReason::MalformedRecord,
                    };
                    let invalid = Invalid::new(reason, detail.to_string());
                    self.state.invalid.push((index, invalid));
                    Vec::new()
                }
            };
            put_field(&mut *self.out, 2, &encoded);
        }
        Ok(())
    }
}

/// Why an entry was refused.
#[derive(Debug)]
enum EntryError {
    Timestamp(String),
    Shape(String),
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            EntryError::Timestamp(detail) | EntryError::Shape(detail) => f.write_str(detail),
        }
    }
}

/// `["<unix ns>", "line"]` or `["<unix ns>", "line", {"name": "value", …}]`.
fn entry(value: serde_json::Value) -> Result<EntryAdapter, EntryError> {
    use serde_json::Value;
    let shape = || {
        EntryError::Shape(
            r#"an entry is ["<unix epoch in nanoseconds>", "<line>"] or ["<ns>", "<line>", {structured metadata}]"#.into(),
        )
    };
    let Value::Array(items) = value else {
        return Err(shape());
    };
    let mut items = items.into_iter();
    let (Some(ts), Some(Value::String(line))) = (items.next(), items.next()) else {
        return Err(shape());
    };
    let nanos = match &ts {
        Value::String(text) => text.trim().parse::<i128>().ok(),
        Value::Number(number) => number.as_i64().map(i128::from),
        _ => None,
    }
    .ok_or_else(|| {
        EntryError::Timestamp(format!(
            "timestamp {ts} is not a Unix epoch in nanoseconds (a string of digits)"
        ))
    })?;
    let timestamp = prost_types::Timestamp {
        seconds: i64::try_from(nanos.div_euclid(1_000_000_000))
            .map_err(|_| EntryError::Timestamp(format!("timestamp {ts} is out of range")))?,
        nanos: nanos.rem_euclid(1_000_000_000) as i32,
    };
    let structured_metadata = match items.next() {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(pairs)) => pairs
            .into_iter()
            .map(|(name, value)| match value {
                Value::String(value) => Ok(LabelPairAdapter { name, value }),
                other => Err(EntryError::Shape(format!(
                    "structured metadata {name:?} is {other}; its values must be strings"
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(shape()),
    };
    if items.next().is_some() {
        return Err(shape());
    }
    Ok(EntryAdapter {
        timestamp: Some(timestamp),
        line,
        structured_metadata,
        parsed: Vec::new(),
    })
}

/// `{"ts": "<RFC 3339>", "line": "…"}`.
fn legacy_entry(value: serde_json::Value) -> Result<EntryAdapter, EntryError> {
    let shape =
        || EntryError::Shape(r#"an entry is {"ts": "<RFC 3339>", "line": "<line>"}"#.into());
    let serde_json::Value::Object(mut fields) = value else {
        return Err(shape());
    };
    let Some(serde_json::Value::String(line)) = fields.remove("line") else {
        return Err(shape());
    };
    let Some(serde_json::Value::String(ts)) = fields.remove("ts") else {
        return Err(shape());
    };
    let ts = chrono::DateTime::parse_from_rfc3339(&ts)
        .map_err(|err| EntryError::Timestamp(format!("timestamp {ts:?} is not RFC 3339: {err}")))?;
    Ok(EntryAdapter {
        timestamp: Some(prost_types::Timestamp {
            seconds: ts.timestamp(),
            nanos: ts.timestamp_subsec_nanos() as i32,
        }),
        line,
        structured_metadata: Vec::new(),
        parsed: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::proto::PushRequest;
    use super::*;

    #[test]
    fn both_json_forms_transcode_entry_for_entry() {
        let json = r#"{"streams": [
            {"stream": {"job": "api", "level": "info"},
             "values": [["1700000000123456789", "first"],
                        ["1700000001000000000", "second", {"trace_id": "abc", "user": "u1"}]]},
            {"labels": "{app=\"legacy\"}",
             "entries": [{"ts": "2023-11-14T22:13:20.5Z", "line": "third"}]}
        ]}"#;
        let transcoded = to_protobuf(json.as_bytes()).unwrap();
        assert!(transcoded.invalid.is_empty());
        let request = PushRequest::decode(&transcoded.protobuf[..]).unwrap();
        assert_eq!(request.streams.len(), 2);
        let first = &request.streams[0];
        assert_eq!(first.labels, r#"{job="api", level="info"}"#);
        let ts = first.entries[0].timestamp.unwrap();
        assert_eq!((ts.seconds, ts.nanos), (1_700_000_000, 123_456_789));
        assert_eq!(first.entries[1].structured_metadata.len(), 2);
        let third = &request.streams[1].entries[0];
        assert_eq!(third.line, "third");
        assert_eq!(third.timestamp.unwrap().nanos, 500_000_000);
    }

    #[test]
    fn a_bad_entry_is_rejected_alone() {
        let json = r#"{"streams": [{"stream": {"job": "a"}, "values": [
            ["1700000000000000000", "ok"], ["yesterday", "bad time"], ["1", 7], ["2", "x", {"n": 1}]
        ]}]}"#;
        let transcoded = to_protobuf(json.as_bytes()).unwrap();
        let reasons: Vec<(u64, RejectReason)> = transcoded
            .invalid
            .iter()
            .map(|(index, invalid)| (*index, invalid.reason))
            .collect();
        assert_eq!(
            reasons,
            [
                (1, RejectReason::InvalidTimestamp),
                (2, RejectReason::MalformedRecord),
                (3, RejectReason::MalformedRecord)
            ]
        );
        let request = PushRequest::decode(&transcoded.protobuf[..]).unwrap();
        assert_eq!(request.streams[0].entries.len(), 4);
    }

    #[test]
    fn a_malformed_structure_is_refused() {
        for bad in [
            "",
            "{",
            r#"{"streams": {}}"#,
            r#"{"streams": [{"stream": "x"}]}"#,
            "[]",
        ] {
            let err = to_protobuf(bad.as_bytes()).unwrap_err();
            assert!(
                err.starts_with("not a valid Loki JSON push"),
                "{bad}: {err}"
            );
        }
    }
}
