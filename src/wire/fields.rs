//! Protobuf messages walked field by field, so that an ingest request's records are decoded one
//! at a time, each charged to the budget before the next, instead of all at once into structs
//! that can be a hundred times the size of their bytes (an empty record is 2 bytes on the wire).

use bytes::{Buf, Bytes};
use prost::encoding::{decode_key, decode_varint, encode_key, encode_varint, WireType};

/// One field's value. Fixed-width fields are skipped: no ingest message has a field of that kind
/// that the walkers read.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    /// A varint.
    Varint(u64),
    /// A length-delimited value: a string, bytes, or an embedded message.
    Bytes(Bytes),
    /// A fixed-width value, not read.
    Fixed,
}

/// The fields of one encoded message, in the order they were written.
pub(crate) struct Fields {
    rest: Bytes,
}

/// Appends `bytes` to `out` as the length-delimited field `number`: how the JSON transcoders
/// write the protobuf form that these walkers read.
pub(crate) fn put_field(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    encode_key(number, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// The fields of `message`; walking it copies nothing.
pub(crate) fn fields(message: &Bytes) -> Fields {
    Fields {
        rest: message.clone(),
    }
}

impl Iterator for Fields {
    type Item = Result<(u32, Value), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let field = self.field();
        if field.is_err() {
            // Nothing after a framing error can be trusted.
            self.rest = Bytes::new();
        }
        Some(field)
    }
}

impl Fields {
    fn field(&mut self) -> Result<(u32, Value), String> {
        let (number, wire_type) = decode_key(&mut self.rest).map_err(|err| err.to_string())?;
        let value = match wire_type {
            WireType::Varint => {
                Value::Varint(decode_varint(&mut self.rest).map_err(|err| err.to_string())?)
            }
            WireType::LengthDelimited => {
                let len = decode_varint(&mut self.rest).map_err(|err| err.to_string())?;
                if len > self.rest.len() as u64 {
                    return Err(format!(
                        "field {number} is {len} bytes long but only {} remain",
                        self.rest.len()
                    ));
                }
                Value::Bytes(self.rest.split_to(len as usize))
            }
            WireType::ThirtyTwoBit | WireType::SixtyFourBit => {
                let width = if wire_type == WireType::ThirtyTwoBit {
                    4
                } else {
                    8
                };
                if self.rest.len() < width {
                    return Err(format!("field {number} is cut short"));
                }
                self.rest.advance(width);
                Value::Fixed
            }
            WireType::StartGroup | WireType::EndGroup => {
                return Err(format!(
                    "field {number} is a group, which no ingest message has"
                ));
            }
        };
        Ok((number, value))
    }
}

/// The embedded messages or strings of field `number` (a repeated message field), in order.
pub(crate) fn repeated(
    message: &Bytes,
    number: u32,
) -> impl Iterator<Item = Result<Bytes, String>> {
    fields(message).filter_map(move |field| match field {
        Ok((found, Value::Bytes(bytes))) if found == number => Some(Ok(bytes)),
        Ok((found, _)) if found == number => Some(Err(format!(
            "field {number} has the wrong wire type for a message"
        ))),
        Ok(_) => None,
        Err(err) => Some(Err(err)),
    })
}

/// The last occurrence of the embedded message `number`, as protobuf reads a singular field.
pub(crate) fn last(message: &Bytes, number: u32) -> Result<Option<Bytes>, String> {
    let mut found = None;
    for value in repeated(message, number) {
        found = Some(value?);
    }
    Ok(found)
}

/// Checks each `(message, field, number)` against an encoded descriptor set: a message by its full
/// name (`package.Outer.Inner`), the number as the walkers name it.
#[cfg(test)]
pub(crate) fn assert_field_numbers(descriptors: &[u8], expected: &[(&str, &str, u32)]) {
    for &(message, field, number) in expected {
        assert_eq!(
            number,
            field_number(descriptors, message, field),
            "{message}.{field}"
        );
    }
}

/// The number of `field` in `message` according to an encoded descriptor set.
#[cfg(test)]
fn field_number(descriptors: &[u8], message: &str, field: &str) -> u32 {
    use prost::Message;
    use prost_types::{DescriptorProto, FileDescriptorSet};

    fn find<'a>(
        prefix: &str,
        messages: &'a [DescriptorProto],
        wanted: &str,
    ) -> Option<&'a DescriptorProto> {
        messages.iter().find_map(|candidate| {
            let name = format!("{prefix}.{}", candidate.name());
            if name == wanted {
                Some(candidate)
            } else {
                find(&name, &candidate.nested_type, wanted)
            }
        })
    }
    let set = FileDescriptorSet::decode(descriptors).expect("a valid descriptor set");
    let found = set
        .file
        .iter()
        .find_map(|file| find(file.package(), &file.message_type, message))
        .unwrap_or_else(|| panic!("no message {message} in the descriptor set"));
    found
        .field
        .iter()
        .find(|candidate| candidate.name() == field)
        .unwrap_or_else(|| panic!("{message} has no field {field}"))
        .number() as u32
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::proto::v1::{LogRecord, PushRequest};

    #[test]
    fn a_push_request_walks_into_its_records_and_key() {
        let request = PushRequest {
            records: vec![
                LogRecord {
                    message: "one".into(),
                    ..LogRecord::default()
                },
                LogRecord::default(),
            ],
            producer_id: Some(vec![7; 3]),
            sequence: Some(300),
        };
        let encoded = Bytes::from(request.encode_to_vec());
        let records: Vec<LogRecord> = repeated(&encoded, 1)
            .map(|bytes| LogRecord::decode(bytes.unwrap()).unwrap())
            .collect();
        assert_eq!(records, request.records);
        let fields: Vec<(u32, Value)> = fields(&encoded).map(Result::unwrap).collect();
        assert!(fields.contains(&(2, Value::Bytes(Bytes::from(vec![7; 3])))));
        assert!(fields.contains(&(3, Value::Varint(300))));
        assert_eq!(last(&encoded, 2).unwrap(), Some(Bytes::from(vec![7; 3])));
    }

    #[test]
    fn broken_framing_is_an_error_and_ends_the_walk() {
        // Field 1, length-delimited, claiming 10 bytes with 2 left.
        let truncated = Bytes::from_static(&[0x0a, 10, 1, 2]);
        let walked: Vec<_> = fields(&truncated).collect();
        assert_eq!(walked.len(), 1);
        assert!(walked[0].as_ref().unwrap_err().contains("10 bytes long"));
        // Unknown fixed-width fields are skipped; a group is refused.
        let fixed = Bytes::from_static(&[0x0d, 1, 2, 3, 4, 0x08, 5]);
        let walked: Vec<_> = fields(&fixed).map(Result::unwrap).collect();
        assert_eq!(walked, vec![(1, Value::Fixed), (1, Value::Varint(5))]);
        assert!(fields(&Bytes::from_static(&[0x0b]))
            .next()
            .unwrap()
            .is_err());
    }
}
