//! OTLP/JSON (the OTLP specification's JSON encoding: lowerCamelCase keys, hex trace and span
//! ids, enums as numbers, 64-bit integers as strings or numbers) transcoded to the protobuf
//! encoding, so that both go through one decoder and one set of rules.
//!
//! The request is walked as it is parsed and each log record is encoded as soon as it is read,
//! so no tree of the whole request is ever built: memory stays about the size of the body,
//! whatever it holds. A record that does not deserialize is rejected alone, with its index; the
//! structure around the records (resourceLogs, scopeLogs) must be well formed.

use std::fmt;

use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::server::fields::put_field;
use crate::server::validate::{Invalid, RejectReason};

/// The protobuf encoding of the request, and the records that were invalid by index (their place
/// in the encoding holds an empty record).
#[derive(Debug, Default)]
pub struct Transcoded {
    /// An encoded `ExportLogsServiceRequest`.
    pub protobuf: Vec<u8>,
    /// Records that did not deserialize, by request index, in order.
    pub invalid: Vec<(u64, Invalid)>,
}

/// Transcodes an OTLP/JSON `ExportLogsServiceRequest`; an error names where it is malformed.
pub fn to_protobuf(json: &[u8]) -> Result<Transcoded, String> {
    let mut state = State::default();
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    Message_ {
        state: &mut state,
        level: Level::Request,
    }
    .deserialize(&mut deserializer)
    .and_then(|out| {
        deserializer.end()?;
        Ok(out)
    })
    .map(|protobuf| Transcoded {
        protobuf,
        invalid: state.invalid,
    })
    .map_err(|err| format!("not valid OTLP/JSON: {err}"))
}

#[derive(Default)]
struct State {
    next_index: u64,
    invalid: Vec<(u64, Invalid)>,
}

/// The three levels above the records.
#[derive(Clone, Copy)]
enum Level {
    Request,
    ResourceLogs,
    ScopeLogs,
}

/// One message of `level`, returned encoded.
struct Message_<'s> {
    state: &'s mut State,
    level: Level,
}

impl<'de> DeserializeSeed<'de> for Message_<'_> {
    type Value = Vec<u8>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<u8>, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Message_<'_> {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self.level {
            Level::Request => "an ExportLogsServiceRequest object",
            Level::ResourceLogs => "a ResourceLogs object",
            Level::ScopeLogs => "a ScopeLogs object",
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<u8>, A::Error> {
        let mut out = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            // The specification asks for lowerCamelCase; protobuf's JSON mapping also accepts the
            // field names as written in the .proto.
            match (self.level, key.as_str()) {
                (Level::Request, "resourceLogs" | "resource_logs") => {
                    map.next_value_seed(List {
                        state: &mut *self.state,
                        item: Item::Message(Level::ResourceLogs),
                        out: &mut out,
                    })?;
                }
                (Level::ResourceLogs, "resource") => {
                    if let Some(resource) = map.next_value::<Option<Resource>>()? {
                        put_field(&mut out, 1, &resource.encode_to_vec());
                    }
                }
                (Level::ResourceLogs, "scopeLogs" | "scope_logs") => {
                    map.next_value_seed(List {
                        state: &mut *self.state,
                        item: Item::Message(Level::ScopeLogs),
                        out: &mut out,
                    })?;
                }
                (Level::ScopeLogs, "scope") => {
                    if let Some(scope) = map.next_value::<Option<InstrumentationScope>>()? {
                        put_field(&mut out, 1, &scope.encode_to_vec());
                    }
                }
                (Level::ScopeLogs, "logRecords" | "log_records") => {
                    map.next_value_seed(List {
                        state: &mut *self.state,
                        item: Item::Record,
                        out: &mut out,
                    })?;
                }
                (Level::ResourceLogs | Level::ScopeLogs, "schemaUrl" | "schema_url") => {
                    if let Some(url) = map.next_value::<Option<String>>()? {
                        put_field(&mut out, 3, url.as_bytes());
                    }
                }
                // Unknown fields are ignored, as the specification asks of receivers.
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

/// What a list holds.
#[derive(Clone, Copy)]
enum Item {
    Message(Level),
    Record,
}

/// A JSON array whose items are appended to `out` as repeated field 1 (resourceLogs), 2
/// (scopeLogs) or 2 (logRecords).
struct List<'s, 'o> {
    state: &'s mut State,
    item: Item,
    out: &'o mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for List<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for List<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let tag = match self.item {
            Item::Message(Level::ResourceLogs) => 1,
            _ => 2,
        };
        loop {
            let encoded = match self.item {
                Item::Message(level) => {
                    let seed = Message_ {
                        state: &mut *self.state,
                        level,
                    };
                    match seq.next_element_seed(seed)? {
                        Some(encoded) => encoded,
                        None => return Ok(()),
                    }
                }
                Item::Record => {
                    // One record at a time as a JSON value, so that a bad one is rejected alone.
                    let Some(value) = seq.next_element::<serde_json::Value>()? else {
                        return Ok(());
                    };
                    let index = self.state.next_index;
                    self.state.next_index += 1;
                    match LogRecord::deserialize(value) {
                        Ok(record) => record.encode_to_vec(),
                        Err(err) => {
                            let detail = format!("not a valid OTLP/JSON log record: {err}");
                            self.state
                                .invalid
                                .push((index, Invalid::new(RejectReason::MalformedRecord, detail)));
                            Vec::new()
                        }
                    }
                }
            };
            put_field(&mut *self.out, tag, &encoded);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;

    /// The logs example of the OTLP specification's repository (examples/logs.json).
    const SPEC_EXAMPLE: &str = r#"{
      "resourceLogs": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "my.service"}}]},
        "scopeLogs": [{
          "scope": {"name": "my.library", "version": "1.0.0",
                    "attributes": [{"key": "my.scope.attribute", "value": {"stringValue": "some scope attribute"}}]},
          "logRecords": [{
            "timeUnixNano": "1544712660300000000",
            "observedTimeUnixNano": "1544712660300000000",
            "severityNumber": 10,
            "severityText": "Information",
            "traceId": "5B8EFFF798038103D269B633813FC60C",
            "spanId": "EEE19B7EC3C1B174",
            "body": {"stringValue": "Example log record"},
            "attributes": [
              {"key": "string.attribute", "value": {"stringValue": "some string"}},
              {"key": "boolean.attribute", "value": {"boolValue": true}},
              {"key": "int.attribute", "value": {"intValue": "10"}},
              {"key": "double.attribute", "value": {"doubleValue": 637.704}},
              {"key": "array.attribute", "value": {"arrayValue": {"values": [{"stringValue": "many"}, {"stringValue": "values"}]}}},
              {"key": "map.attribute", "value": {"kvlistValue": {"values": [{"key": "some.map.key", "value": {"stringValue": "some value"}}]}}}
            ]
          }]
        }]
      }]
    }"#;

    #[test]
    fn the_specifications_example_transcodes_field_for_field() {
        let transcoded = to_protobuf(SPEC_EXAMPLE.as_bytes()).unwrap();
        assert!(transcoded.invalid.is_empty());
        let request = ExportLogsServiceRequest::decode(&transcoded.protobuf[..]).unwrap();
        let scope_logs = &request.resource_logs[0].scope_logs[0];
        assert_eq!(scope_logs.scope.as_ref().unwrap().name, "my.library");
        let record = &scope_logs.log_records[0];
        assert_eq!(record.time_unix_nano, 1_544_712_660_300_000_000);
        assert_eq!(record.severity_number, 10);
        assert_eq!(record.trace_id.len(), 16);
        assert_eq!(record.trace_id[0], 0x5b);
        assert_eq!(record.span_id.len(), 8);
        assert_eq!(
            record.body.as_ref().unwrap().value,
            Some(Value::StringValue("Example log record".into()))
        );
        assert_eq!(record.attributes.len(), 6);
        assert_eq!(
            record.attributes[2].value.as_ref().unwrap().value,
            Some(Value::IntValue(10))
        );
    }

    #[test]
    fn a_double_keeps_every_digit_it_was_sent_with() {
        // The nearest double to the text, not a neighbour of it: serde_json's fast float parser
        // is off by one unit in the last place for some inputs such as this one.
        let text = "1796295206.0067441";
        let json = format!(
            r#"{{"resourceLogs":[{{"scopeLogs":[{{"logRecords":[{{"attributes":[
                {{"key":"d","value":{{"doubleValue":{text}}}}}]}}]}}]}}]}}"#
        );
        let transcoded = to_protobuf(json.as_bytes()).unwrap();
        let request = ExportLogsServiceRequest::decode(&transcoded.protobuf[..]).unwrap();
        let record = &request.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!(
            record.attributes[0].value.as_ref().unwrap().value,
            Some(Value::DoubleValue(text.parse().unwrap()))
        );
    }

    #[test]
    fn a_bad_record_is_rejected_alone_and_unknown_fields_are_ignored() {
        let json = r#"{"resourceLogs":[{"futureField":{"a":[1,2]},"scopeLogs":[{"logRecords":[
            {"body":{"stringValue":"one"}},
            {"traceId":"not hex","body":{"stringValue":"two"}},
            {"body":{"stringValue":"three"},"newField":7}
        ]}]}]}"#;
        let transcoded = to_protobuf(json.as_bytes()).unwrap();
        assert_eq!(transcoded.invalid.len(), 1);
        assert_eq!(transcoded.invalid[0].0, 1);
        assert_eq!(
            transcoded.invalid[0].1.reason,
            RejectReason::MalformedRecord
        );
        let request = ExportLogsServiceRequest::decode(&transcoded.protobuf[..]).unwrap();
        let records = &request.resource_logs[0].scope_logs[0].log_records;
        assert_eq!(records.len(), 3);
        assert_eq!(records[1], LogRecord::default());
    }

    #[test]
    fn a_malformed_structure_is_refused_with_its_position() {
        for bad in [
            "",
            "[]",
            r#"{"resourceLogs": {}}"#,
            r#"{"resourceLogs": [{"scopeLogs": [{"logRecords": [{}]}]}"#,
            r#"{"resourceLogs": []} trailing"#,
        ] {
            let err = to_protobuf(bad.as_bytes()).unwrap_err();
            assert!(err.starts_with("not valid OTLP/JSON"), "{bad}: {err}");
        }
        assert!(to_protobuf(b"{}").unwrap().protobuf.is_empty());
    }
}
