//! A JSON object read for its fields without copying them: keys and texts borrow from the line
//! where they hold no escape. `| json` reads every line of a scan this way, and most of what it
//! reads it drops (a metric query keeps only the labels it uses), so copying each field into a
//! `serde_json::Map` first cost more than the parse itself.
//!
//! The members come out in the line's order, a repeated key as often as it is given: Loki's
//! parser walks a line so, and keeps the first label of a name. Numbers are written as
//! `serde_json::Value` writes them; errors are that deserializer's, so their messages are too.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A JSON value, its text borrowed where the line holds it unescaped.
#[derive(Debug, PartialEq)]
pub(crate) enum JsonValue<'a> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number.
    Number(serde_json::Number),
    /// A string.
    Text(Cow<'a, str>),
    /// An object.
    Object(JsonObject<'a>),
    /// An array, its elements checked and left out: no label comes from one.
    Array,
}

impl JsonValue<'_> {
    /// The value as a label's value: a string as it is, a number or boolean as its JSON text;
    /// None for `null`, an object or an array, which make no label (as in Loki).
    pub(crate) fn label_value(&self) -> Option<String> {
        match self {
            JsonValue::Bool(value) => Some(value.to_string()),
            JsonValue::Number(number) => Some(number.to_string()),
            JsonValue::Text(text) => Some(text.as_ref().to_owned()),
            JsonValue::Null | JsonValue::Object(_) | JsonValue::Array => None,
        }
    }
}

/// An object's members in the line's order, repeated keys included.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct JsonObject<'a> {
    members: Vec<(Cow<'a, str>, JsonValue<'a>)>,
}

impl<'a> JsonObject<'a> {
    /// The object at the start of `text`; what follows it is not read.
    pub(crate) fn parse(text: &'a str) -> Result<Self, serde_json::Error> {
        let mut reader = serde_json::Deserializer::from_str(text);
        reader.deserialize_map(ObjectVisitor)
    }

    /// The object that is the whole of `text`.
    pub(crate) fn parse_whole(text: &'a str) -> Result<Self, serde_json::Error> {
        let mut reader = serde_json::Deserializer::from_str(text);
        let object = reader.deserialize_map(ObjectVisitor)?;
        reader.end()?;
        Ok(object)
    }

    /// The members, in the line's order.
    pub(crate) fn members(&self) -> impl Iterator<Item = (&str, &JsonValue<'a>)> {
        self.members
            .iter()
            .map(|(key, value)| (key.as_ref(), value))
    }
}

/// A key or a string, borrowed where it can be.
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(text)))
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(text.to_owned())))
            }

            fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(text)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

impl<'de> Deserialize<'de> for JsonValue<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = JsonValue<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(JsonValue::Null)
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Self::Value, E> {
        Ok(JsonValue::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
        Ok(JsonValue::Number(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
        Ok(JsonValue::Number(value.into()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Self::Value, E> {
        // As `serde_json::Value` does: a float JSON cannot hold is null.
        Ok(serde_json::Number::from_f64(value).map_or(JsonValue::Null, JsonValue::Number))
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
        Ok(JsonValue::Text(Cow::Borrowed(text)))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(JsonValue::Text(Cow::Owned(text.to_owned())))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
        Ok(JsonValue::Text(Cow::Owned(text)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(JsonValue::Array)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        ObjectVisitor.visit_map(map).map(JsonValue::Object)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = JsonObject<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            let value = map.next_value::<JsonValue<'de>>()?;
            members.push((key, value));
        }
        Ok(JsonObject { members })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The members as `serde_json::Map` reads them, written the same way.
    fn by_serde_json(text: &str) -> Result<Vec<(String, String)>, String> {
        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text)
            .map(|map| {
                map.into_iter()
                    .map(|(key, value)| (key, value.to_string()))
                    .collect()
            })
            .map_err(|err| err.to_string())
    }

    fn written(value: &JsonValue) -> String {
        match value {
            JsonValue::Text(text) => serde_json::Value::String(text.to_string()).to_string(),
            JsonValue::Object(object) => {
                // In key order, as `serde_json::Map` writes its members.
                let mut members: Vec<String> = object
                    .members()
                    .map(|(key, value)| {
                        format!(
                            "{}:{}",
                            serde_json::Value::String(key.to_owned()),
                            written(value)
                        )
                    })
                    .collect();
                members.sort();
                format!("{{{}}}", members.join(","))
            }
            JsonValue::Array => "[…]".to_owned(),
            JsonValue::Null => "null".to_owned(),
            other => other.label_value().unwrap(),
        }
    }

    fn by_us(text: &str) -> Result<Vec<(String, String)>, String> {
        JsonObject::parse_whole(text)
            .map(|object| {
                object
                    .members()
                    .map(|(key, value)| (key.to_owned(), written(value)))
                    .collect()
            })
            .map_err(|err| err.to_string())
    }

    #[test]
    fn members_errors_and_numbers_are_serde_jsons() {
        for text in [
            r#"{"b":1,"a":"x","c":{"z":true,"y":null}}"#,
            r#"{"n":1.0,"m":-0,"f":1e3,"g":12345678901234567890,"h":-9223372036854775808,"i":0.1}"#,
            r#"{"esc\"aped":"a\nb\u00e9","plain":"é"}"#,
            r#"{}"#,
            r#"{"a":1"#,
            r#"{"a":tru}"#,
            r#"{"a":}"#,
            r#"{"a" 1}"#,
            r#"[1,2]"#,
            r#""text""#,
            r#"{"a":[1,{"b":2}],"c":3}"#,
            r#"{"a":[1,2}"#,
            r#"{"a":1e400}"#,
        ] {
            let ours = by_us(text);
            let theirs = by_serde_json(text);
            match (&ours, &theirs) {
                // Arrays are left out here; everything else is written alike.
                (Ok(ours), Ok(theirs)) => {
                    // `serde_json::Map` gives its keys in order.
                    let mut ours = ours.clone();
                    ours.sort();
                    assert_eq!(ours.len(), theirs.len(), "{text}");
                    for ((key, value), (their_key, their_value)) in ours.iter().zip(theirs) {
                        assert_eq!(key, their_key, "{text}");
                        if value != "[…]" {
                            assert_eq!(value, their_value, "{text}");
                        }
                    }
                }
                (Err(ours), Err(theirs)) => assert_eq!(ours, theirs, "{text}"),
                _ => panic!("{text}: {ours:?} against {theirs:?}"),
            }
        }
    }

    #[test]
    fn members_keep_the_lines_order_and_repeated_keys() {
        let members = by_us(r#"{"k":1,"k":2,"j":0,"inner":{"b":1,"b":{"c":2}},"k":"three"}"#);
        assert_eq!(
            members.unwrap(),
            [
                ("k", "1"),
                ("k", "2"),
                ("j", "0"),
                ("inner", r#"{"b":1,"b":{"c":2}}"#),
                ("k", r#""three""#),
            ]
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
        );
    }

    #[test]
    fn unescaped_texts_are_borrowed() {
        let line = r#"{"user":"u3","note":"a\"b"}"#;
        let object = JsonObject::parse(line).unwrap();
        let members: Vec<_> = object.members.iter().collect();
        assert!(matches!(
            members[0],
            (Cow::Borrowed("user"), JsonValue::Text(Cow::Borrowed("u3")))
        ));
        assert!(matches!(
            members[1],
            (Cow::Borrowed("note"), JsonValue::Text(Cow::Owned(_)))
        ));
    }
}
