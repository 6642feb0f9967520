//! OTLP/JSON (the OTLP specification's JSON encoding: lowerCamelCase keys, hex trace and span
//! ids, enums as numbers, 64-bit integers as strings or numbers) transcoded to the protobuf
//! encoding, so that both go through one decoder and one set of rules.
//!
//! The request is walked as it is parsed and each log record is encoded as soon as it is read,
//! so no tree of the whole request is ever built: memory stays about the size of the body,
//! whatever it holds. A record that does not deserialize is rejected alone, with its index; the
//! structure around the records (resourceLogs, scopeLogs) must be well formed.

use std::fmt;

use bytes::Bytes;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::export::field;
use crate::error::IngestError;
use crate::ingest::transcode::{self, Allowance, TranscodeError, Transcoded, Writer};
use crate::ingest::validate::RejectReason;
use crate::pipeline::Meter;

/// Transcodes an OTLP/JSON request held whole (tests, fuzzing); an error names where it is malformed.
pub fn to_protobuf(json: &[u8]) -> Result<Transcoded, String> {
    transcode::whole(json, transcode)
}

/// Transcodes an OTLP/JSON request, charging `meter` for what it writes before it is held.
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
    let parsed = Message_ {
        out: &mut out,
        level: Level::Request,
    }
    .deserialize(&mut deserializer)
    .and_then(|()| deserializer.end())
    .map_err(|err| format!("not valid OTLP/JSON: {err}"));
    out.finish(parsed)
}

/// The three levels above the records.
#[derive(Clone, Copy)]
enum Level {
    Request,
    ResourceLogs,
    ScopeLogs,
}

/// One message of `level`, its fields written to `out`.
struct Message_<'w, 'a> {
    out: &'w mut Writer<'a>,
    level: Level,
}

impl<'de> DeserializeSeed<'de> for Message_<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Message_<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self.level {
            Level::Request => "an ExportLogsServiceRequest object",
            Level::ResourceLogs => "a ResourceLogs object",
            Level::ScopeLogs => "a ScopeLogs object",
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let out = self.out;
        while let Some(key) = map.next_key::<String>()? {
            // The specification asks for lowerCamelCase; protobuf's JSON mapping also accepts the
            // field names as written in the .proto.
            match (self.level, key.as_str()) {
                (Level::Request, "resourceLogs" | "resource_logs") => {
                    map.next_value_seed(List {
                        out: &mut *out,
                        item: Item::Message(Level::ResourceLogs),
                    })?;
                }
                (Level::ResourceLogs, "resource") => {
                    if let Some(resource) = map.next_value::<Option<Resource>>()? {
                        out.put_message(field::RESOURCE, &resource)?;
                    }
                }
                (Level::ResourceLogs, "scopeLogs" | "scope_logs") => {
                    map.next_value_seed(List {
                        out: &mut *out,
                        item: Item::Message(Level::ScopeLogs),
                    })?;
                }
                (Level::ScopeLogs, "scope") => {
                    if let Some(scope) = map.next_value::<Option<InstrumentationScope>>()? {
                        out.put_message(field::SCOPE, &scope)?;
                    }
                }
                (Level::ScopeLogs, "logRecords" | "log_records") => {
                    map.next_value_seed(List {
                        out: &mut *out,
                        item: Item::Record,
                    })?;
                }
                (Level::ResourceLogs | Level::ScopeLogs, "schemaUrl" | "schema_url") => {
                    if let Some(url) = map.next_value::<Option<String>>()? {
                        out.put_bytes(field::SCHEMA_URL, url.as_bytes())?;
                    }
                }
                // Unknown fields are ignored, as the specification asks of receivers.
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// What a list holds.
#[derive(Clone, Copy)]
enum Item {
    Message(Level),
    Record,
}

/// A JSON array whose items are written as the repeated field `resourceLogs`, `scopeLogs` or
/// `logRecords`; a record that does not deserialize is refused and leaves nothing.
struct List<'w, 'a> {
    out: &'w mut Writer<'a>,
    item: Item,
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
        let out = self.out;
        match self.item {
            Item::Message(level) => {
                let tag = match level {
                    Level::ResourceLogs => field::RESOURCE_LOGS,
                    _ => field::SCOPE_LOGS,
                };
                loop {
                    let nested = out.begin(tag)?;
                    let seed = Message_ {
                        out: &mut *out,
                        level,
                    };
                    if seq.next_element_seed(seed)?.is_none() {
                        out.cancel(nested);
                        return Ok(());
                    }
                    out.end(nested);
                }
            }
            Item::Record => {
                // One record at a time, as its text: it is checked to be JSON on the way, and
                // then read on its own, so that a bad one is rejected alone without building a
                // tree of it.
                while let Some(raw) = seq.next_element::<&RawValue>()? {
                    let index = out.next_index();
                    let json = raw.get();
                    if !json.starts_with('{') {
                        // Refused without asking serde, whose error would write a sentence that
                        // only the first few refused records keep.
                        out.refuse(index, RejectReason::MalformedRecord, &NotARecord(json))?;
                        continue;
                    }
                    match serde_json::from_str::<LogRecord>(json) {
                        Ok(record) => out.put_message(field::LOG_RECORDS, &record)?,
                        Err(_) => {
                            out.refuse(index, RejectReason::MalformedRecord, &NotARecord(json))?
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

/// The text of a record that does not deserialize; it says why when it is reported, as serde
/// does, less the position (within the record, which would read as within the body).
struct NotARecord<'j>(&'j str);

impl fmt::Display for NotARecord<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("not a valid OTLP/JSON log record")?;
        let Err(err) = serde_json::from_str::<LogRecord>(self.0) else {
            return Ok(());
        };
        let text = err.to_string();
        let position = format!(" at line {} column {}", err.line(), err.column());
        write!(f, ": {}", text.strip_suffix(&position).unwrap_or(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use prost::Message;

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
        assert_eq!(transcoded.refused.count(), 0);
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
        assert_eq!(transcoded.refused.count(), 1);
        let (index, invalid) = &transcoded.refused.detailed()[0];
        assert_eq!((*index, invalid.reason), (1, RejectReason::MalformedRecord));
        assert!(
            invalid
                .detail
                .starts_with("not a valid OTLP/JSON log record: "),
            "{}",
            invalid.detail
        );
        let request = ExportLogsServiceRequest::decode(&transcoded.protobuf[..]).unwrap();
        let records = &request.resource_logs[0].scope_logs[0].log_records;
        let bodies: Vec<_> = records
            .iter()
            .map(|record| record.body.clone().unwrap().value.unwrap())
            .collect();
        assert_eq!(
            bodies,
            [
                Value::StringValue("one".into()),
                Value::StringValue("three".into())
            ]
        );
    }

    #[test]
    fn a_record_that_is_not_an_object_is_refused_with_serdes_reason() {
        let json = r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[0,{},"x"]}]}]}"#;
        let transcoded = to_protobuf(json.as_bytes()).unwrap();
        let details: Vec<(u64, &str)> = transcoded
            .refused
            .detailed()
            .iter()
            .map(|(index, invalid)| (*index, invalid.detail.as_str()))
            .collect();
        assert_eq!(
            details,
            [
                (
                    0,
                    "not a valid OTLP/JSON log record: invalid type: integer `0`, expected struct LogRecord"
                ),
                (
                    2,
                    "not a valid OTLP/JSON log record: invalid type: string \"x\", expected struct LogRecord"
                )
            ]
        );
        let request = ExportLogsServiceRequest::decode(&transcoded.protobuf[..]).unwrap();
        assert_eq!(request.resource_logs[0].scope_logs[0].log_records.len(), 1);
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
