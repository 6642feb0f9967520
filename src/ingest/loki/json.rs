//! The Loki push API's JSON encoding transcoded to its protobuf one, so that both go through one
//! decoder: `{"streams":[{"stream":{labels},"values":[["<unix ns>","line"],["<unix ns>","line",
//! {structured metadata}]]}]}`, and the older `{"streams":[{"labels":"{…}","entries":[{"ts":
//! "<RFC 3339>","line":"…"}]}]}`.
//!
//! As with OTLP/JSON, each entry is encoded as soon as it is read (no tree of the whole request),
//! and an entry that is not well formed is rejected alone, with its index.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::labels;
use super::proto::{field, EntryAdapter, LabelPairAdapter};
use crate::error::IngestError;
use crate::ingest::transcode::{self, Allowance, TranscodeError, Transcoded, Writer};
use crate::ingest::validate::RejectReason;
use crate::pipeline::Meter;

/// Transcodes a JSON push held whole (tests, fuzzing); an error names where it is malformed.
pub fn to_protobuf(json: &[u8]) -> Result<Transcoded, String> {
    transcode::whole(json, transcode)
}

/// Transcodes a JSON push, charging `meter` for what it writes before it is held.
pub async fn to_protobuf_charged(
    json: Bytes,
    meter: &mut Meter<'_>,
) -> Result<Transcoded, IngestError> {
    transcode::charged(json, meter, transcode).await
}

fn transcode(
    json: &[u8],
    allowance: &mut dyn Allowance,
) -> Result<(Transcoded, usize), TranscodeError> {
    let mut out = Writer::new(allowance);
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let parsed = Request(&mut out)
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end())
        .map_err(|err| format!("not a valid Loki JSON push: {err}"));
    out.finish(parsed)
}

/// The whole request: `{"streams": [...]}`.
struct Request<'w, 'a>(&'w mut Writer<'a>);

impl<'de> DeserializeSeed<'de> for Request<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Request<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(r#"an object {"streams": [...]}"#)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key == "streams" {
                map.next_value_seed(Streams(&mut *self.0))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// The `streams` array; each stream is written as field 1.
struct Streams<'w, 'a>(&'w mut Writer<'a>);

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
        loop {
            let stream = self.0.begin(field::STREAMS)?;
            if seq.next_element_seed(Stream(&mut *self.0))?.is_none() {
                self.0.cancel(stream);
                return Ok(());
            }
            self.0.end(stream);
        }
    }
}

/// One stream: its labels and its entries.
struct Stream<'w, 'a>(&'w mut Writer<'a>);

impl<'de> DeserializeSeed<'de> for Stream<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Stream<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(r#"a stream {"stream": {labels}, "values": [...]}"#)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "stream" => {
                    let labels: BTreeMap<String, String> = map.next_value()?;
                    self.0
                        .put_bytes(field::LABELS, labels::format(&labels).as_bytes())?;
                }
                "labels" => {
                    let labels: String = map.next_value()?;
                    self.0.put_bytes(field::LABELS, labels.as_bytes())?;
                }
                "values" | "entries" => {
                    map.next_value_seed(Entries {
                        out: &mut *self.0,
                        legacy: key == "entries",
                    })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// A stream's entries; each is written as field 2, or refused.
struct Entries<'w, 'a> {
    out: &'w mut Writer<'a>,
    /// `entries` objects (`{"ts": RFC 3339, "line": …}`) rather than `values` arrays.
    legacy: bool,
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
        // One entry at a time, as its text: it is checked to be JSON on the way, and then read
        // on its own, so that a bad one is rejected alone without building a tree of it.
        while let Some(raw) = seq.next_element::<&RawValue>()? {
            let index = self.out.next_index();
            let entry = if self.legacy {
                legacy_entry(raw.get())
            } else {
                entry(raw.get())
            };
            match entry {
                Ok(entry) => self.out.put_message(field::ENTRIES, &entry)?,
                Err(err) => self.out.refuse(index, err.reason(), &err)?,
            }
        }
        Ok(())
    }
}

/// Why an entry was refused; its sentence is written only when it is reported. Quoted values are
/// the entry's own text.
#[derive(Debug)]
enum EntryError<'j> {
    /// Not `["<ns>", "<line>"]` nor `["<ns>", "<line>", {structured metadata}]`.
    Shape,
    /// Not `{"ts": "<RFC 3339>", "line": "<line>"}`.
    LegacyShape,
    /// A structured metadata value that is not a string.
    Metadata { name: String, value: &'j str },
    /// A timestamp that is not a Unix epoch in nanoseconds.
    Timestamp(&'j str),
    /// One that is, past what a timestamp holds.
    TimestampRange(&'j str),
    /// A legacy entry's timestamp that is not RFC 3339.
    Rfc3339 { ts: String, err: chrono::ParseError },
}

impl EntryError<'_> {
    fn reason(&self) -> RejectReason {
        match self {
            EntryError::Timestamp(_)
            | EntryError::TimestampRange(_)
            | EntryError::Rfc3339 { .. } => RejectReason::InvalidTimestamp,
            EntryError::Shape | EntryError::LegacyShape | EntryError::Metadata { .. } => {
                RejectReason::MalformedRecord
            }
        }
    }
}

impl fmt::Display for EntryError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            EntryError::Shape => f.write_str(
                r#"an entry is ["<unix epoch in nanoseconds>", "<line>"] or ["<ns>", "<line>", {structured metadata}]"#,
            ),
            EntryError::LegacyShape => {
                f.write_str(r#"an entry is {"ts": "<RFC 3339>", "line": "<line>"}"#)
            }
            EntryError::Metadata { name, value } => write!(
                f,
                "structured metadata {name:?} is {value}; its values must be strings"
            ),
            EntryError::Timestamp(ts) => write!(
                f,
                "timestamp {ts} is not a Unix epoch in nanoseconds (a string of digits)"
            ),
            EntryError::TimestampRange(ts) => write!(f, "timestamp {ts} is out of range"),
            EntryError::Rfc3339 { ts, err } => {
                write!(f, "timestamp {ts:?} is not RFC 3339: {err}")
            }
        }
    }
}

/// The items of a `values` entry, as their text: at most three, so that an entry of a million
/// items is refused at the fourth.
struct Items<'j>([Option<&'j RawValue>; 3]);

impl<'de> Deserialize<'de> for Items<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(ItemsVisitor)
    }
}

struct ItemsVisitor;

impl<'de> Visitor<'de> for ItemsVisitor {
    type Value = Items<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an entry")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items<'de>, A::Error> {
        let mut items = [None; 3];
        for item in &mut items {
            *item = seq.next_element()?;
        }
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(serde::de::Error::custom("more than three items"));
        }
        Ok(Items(items))
    }
}

/// `["<unix ns>", "line"]` or `["<unix ns>", "line", {"name": "value", …}]`.
fn entry(json: &str) -> Result<EntryAdapter, EntryError<'_>> {
    // What is not an array is refused without asking serde, whose error would write a sentence
    // that nobody reads.
    if !json.starts_with('[') {
        return Err(EntryError::Shape);
    }
    let Ok(Items([Some(ts), Some(line), metadata])) = serde_json::from_str::<Items>(json) else {
        return Err(EntryError::Shape);
    };
    let Ok(line) = serde_json::from_str::<String>(line.get()) else {
        return Err(EntryError::Shape);
    };
    let ts = ts.get();
    let nanos = if ts.starts_with('"') {
        serde_json::from_str::<String>(ts)
            .ok()
            .and_then(|text| text.trim().parse::<i128>().ok())
    } else {
        serde_json::from_str::<i64>(ts).ok().map(i128::from)
    };
    let Some(nanos) = nanos else {
        return Err(EntryError::Timestamp(ts));
    };
    let Some(timestamp) = crate::model::time::from_unix_nanos(nanos) else {
        return Err(EntryError::TimestampRange(ts));
    };
    let structured_metadata = match metadata.map(RawValue::get) {
        None | Some("null") => Vec::new(),
        Some(pairs) => {
            let Ok(pairs) = serde_json::from_str::<BTreeMap<String, &RawValue>>(pairs) else {
                return Err(EntryError::Shape);
            };
            pairs
                .into_iter()
                .map(|(name, value)| match serde_json::from_str(value.get()) {
                    Ok(value) => Ok(LabelPairAdapter { name, value }),
                    Err(_) => Err(EntryError::Metadata {
                        name,
                        value: value.get(),
                    }),
                })
                .collect::<Result<_, _>>()?
        }
    };
    Ok(EntryAdapter {
        timestamp: Some(timestamp),
        line,
        structured_metadata,
        parsed: Vec::new(),
    })
}

/// `{"ts": "<RFC 3339>", "line": "…"}`; other fields are ignored.
#[derive(Deserialize)]
struct LegacyEntry {
    ts: String,
    line: String,
}

/// An entry of the older form.
fn legacy_entry(json: &str) -> Result<EntryAdapter, EntryError<'_>> {
    if !json.starts_with('{') {
        return Err(EntryError::LegacyShape);
    }
    let Ok(LegacyEntry { ts, line }) = serde_json::from_str(json) else {
        return Err(EntryError::LegacyShape);
    };
    let parsed = match chrono::DateTime::parse_from_rfc3339(&ts) {
        Ok(parsed) => parsed,
        Err(err) => return Err(EntryError::Rfc3339 { ts, err }),
    };
    Ok(EntryAdapter {
        timestamp: Some(prost_types::Timestamp {
            seconds: parsed.timestamp(),
            nanos: parsed.timestamp_subsec_nanos() as i32,
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
    use crate::ingest::rejections::{MAX_LISTED_REJECTIONS, MAX_REASON_CHARS};
    use prost::Message;

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
        assert_eq!(transcoded.refused.count(), 0);
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
    fn a_bad_entry_is_rejected_alone_and_leaves_nothing_in_the_protobuf() {
        let json = r#"{"streams": [{"stream": {"job": "a"}, "values": [
            ["1700000000000000000", "ok"], ["yesterday", "bad time"], ["1", 7], ["2", "x", {"n": 1}],
            ["1700000000000000001", "also ok"]
        ]}]}"#;
        let transcoded = to_protobuf(json.as_bytes()).unwrap();
        let reasons: Vec<(u64, RejectReason, &str)> = transcoded
            .refused
            .detailed()
            .iter()
            .map(|(index, invalid)| (*index, invalid.reason, invalid.detail.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                (
                    1,
                    RejectReason::InvalidTimestamp,
                    r#"timestamp "yesterday" is not a Unix epoch in nanoseconds (a string of digits)"#
                ),
                (
                    2,
                    RejectReason::MalformedRecord,
                    r#"an entry is ["<unix epoch in nanoseconds>", "<line>"] or ["<ns>", "<line>", {structured metadata}]"#
                ),
                (
                    3,
                    RejectReason::MalformedRecord,
                    r#"structured metadata "n" is 1; its values must be strings"#
                )
            ]
        );
        assert_eq!(transcoded.refused.count(), 3);
        let request = PushRequest::decode(&transcoded.protobuf[..]).unwrap();
        let lines: Vec<&str> = request.streams[0]
            .entries
            .iter()
            .map(|entry| entry.line.as_str())
            .collect();
        assert_eq!(lines, ["ok", "also ok"]);
    }

    #[test]
    fn refused_entries_are_counted_and_only_the_first_keep_a_reason_cut_short() {
        let zeros = vec!["0"; 100_000].join(",");
        let long = format!(r#"["{}","x"]"#, "9".repeat(50_000));
        let json = format!(
            r#"{{"streams": [{{"stream": {{"job": "a"}}, "values": [{long},{zeros},["1","ok"]]}}]}}"#
        );
        let transcoded = to_protobuf(json.as_bytes()).unwrap();
        let refused = &transcoded.refused;
        assert_eq!(refused.count(), 100_001);
        assert_eq!(refused.run_at(0), 100_001);
        assert!(!refused.contains(100_001));
        let detailed = refused.detailed();
        assert_eq!(detailed.len(), MAX_LISTED_REJECTIONS);
        assert_eq!(detailed[0].1.reason, RejectReason::InvalidTimestamp);
        assert_eq!(detailed[0].1.detail.chars().count(), MAX_REASON_CHARS);
        assert!(detailed[0].1.detail.starts_with("timestamp \"9999"));
        let counts: Vec<_> = refused.by_reason().nonzero().collect();
        assert_eq!(
            counts,
            [
                (RejectReason::InvalidTimestamp, 1),
                (RejectReason::MalformedRecord, 100_000)
            ]
        );
        let request = PushRequest::decode(&transcoded.protobuf[..]).unwrap();
        assert_eq!(request.streams[0].entries.len(), 1);
        assert!(
            transcoded.protobuf.len() < 64,
            "{}",
            transcoded.protobuf.len()
        );
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
