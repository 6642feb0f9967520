//! The stages that read a line into labels or rewrite it, besides `| json` and `| logfmt`:
//! `| json a="b.c[0]"` (Loki's JSON expressions), `| unpack`, `| regexp` and `| decolorize`.

use std::sync::LazyLock;

use regex::Regex;
use serde::Deserialize;
use serde_json::value::RawValue;

/// One step of a JSON expression: a key or an index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// `a`, `.a`, `["a b"]`
    Key(String),
    /// `[0]`
    Index(usize),
}

/// Reads a JSON expression: `a.b`, `a[0].b`, `["a b"].c`.
pub(crate) fn json_path(expression: &str) -> Result<Vec<Step>, String> {
    let invalid = |why: &str| format!("cannot parse expression [{expression}]: {why}");
    let mut steps = Vec::new();
    let mut rest = expression;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            let close = after.find(']').ok_or_else(|| invalid("unclosed ["))?;
            let inner = &after[..close];
            if let Some(quoted) = inner.strip_prefix('"') {
                let key = quoted
                    .strip_suffix('"')
                    .ok_or_else(|| invalid("unclosed quote"))?;
                steps.push(Step::Key(key.to_owned()));
            } else {
                let index = inner
                    .parse()
                    .map_err(|_| invalid("an index is a whole number"))?;
                steps.push(Step::Index(index));
            }
            rest = &after[close + 1..];
            continue;
        }
        let field = rest.strip_prefix('.').unwrap_or(rest);
        if field.len() < rest.len() && steps.is_empty() {
            return Err(invalid("a path starts with a field"));
        }
        let end = field.find(['.', '[']).unwrap_or(field.len());
        let key = &field[..end];
        let valid = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '$' | '@' | ':'));
        if !valid {
            return Err(invalid("a field name is letters, digits and _"));
        }
        steps.push(Step::Key(key.to_owned()));
        rest = &field[end..];
    }
    if steps.is_empty() {
        return Err(invalid("empty expression"));
    }
    Ok(steps)
}

/// The value at `path` in a JSON document, as Loki writes it into a label: a string unescaped,
/// `null` as the empty string, anything else as it is written in the line. `None` when the path
/// leads nowhere.
pub(crate) fn json_value(document: &RawValue, path: &[Step]) -> Option<String> {
    let raw = json_find(document, path)?.get();
    Some(match raw.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(raw).unwrap_or_default(),
        Some(b'n') => String::new(),
        _ => raw.to_owned(),
    })
}

/// The first value in the document's order whose keys are `path`: a key given twice is looked
/// into twice, the earlier first, as Loki's parser (`jsonparser`) reads a path.
fn json_find<'a>(current: &'a RawValue, path: &[Step]) -> Option<&'a RawValue> {
    let Some((step, rest)) = path.split_first() else {
        return Some(current);
    };
    match step {
        Step::Key(key) => {
            let Pairs(pairs) = serde_json::from_str(current.get()).ok()?;
            pairs
                .into_iter()
                .filter(|(name, _)| name == key)
                .find_map(|(_, value)| json_find(value, rest))
        }
        Step::Index(index) => {
            let array: Vec<&RawValue> = serde_json::from_str(current.get()).ok()?;
            json_find(array.get(*index)?, rest)
        }
    }
}

/// The first JSON value of `line` (what follows it is ignored, as Loki's parser ignores it).
pub(crate) fn json_document(line: &str) -> Option<&RawValue> {
    let mut reader = serde_json::Deserializer::from_str(line);
    <&RawValue>::deserialize(&mut reader).ok()
}

/// What `| unpack` makes of a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Unpacked {
    /// No `_entry`: the line and labels stay as they are.
    NotPacked,
    /// `_entry`'s text, and the other keys with text values.
    Packed(String, Vec<(String, String)>),
    /// Not a JSON object: Loki's `__error_details__`.
    Error(&'static str),
}

/// `| unpack`: a line packed by Promtail's `pack` stage.
pub(crate) fn unpack(line: &str) -> Unpacked {
    if !line.starts_with('{') {
        return Unpacked::Error("expecting json object(6), but it is not");
    }
    let mut reader = serde_json::Deserializer::from_str(line);
    let Ok(Pairs(object)) = Pairs::deserialize(&mut reader) else {
        return Unpacked::Error("Malformed JSON error");
    };
    let mut entry = None;
    let mut labels = Vec::new();
    for (key, value) in object {
        if !value.get().starts_with('"') {
            continue;
        }
        let text: String = serde_json::from_str(value.get()).unwrap_or_default();
        if key == "_entry" {
            entry = Some(text);
        } else {
            labels.push((key, text));
        }
    }
    match entry {
        Some(entry) => Unpacked::Packed(entry, labels),
        None => Unpacked::NotPacked,
    }
}

/// A JSON object's pairs in their order, duplicates included.
struct Pairs<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Pairs<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Pairs<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Pairs<'de>, A::Error> {
                let mut pairs = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    pairs.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Pairs(pairs))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// Compiles `| regexp`'s expression: it must name at least one capture, each a label name
/// once.
pub(crate) fn capture_regex(pattern: &str) -> Result<Regex, String> {
    let regex = regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|err| format!("invalid regexp parser: {err}"))?;
    let names: Vec<&str> = regex.capture_names().flatten().collect();
    if names.is_empty() {
        return Err("invalid regexp parser: at least one named capture must be supplied".into());
    }
    for (at, name) in names.iter().enumerate() {
        let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("invalid extracted label name '{name}'"));
        }
        if names[..at].contains(name) {
            return Err(format!("duplicate extracted label name '{name}'"));
        }
    }
    Ok(regex)
}

/// The named captures of `regex`'s first match in `line` (the empty string for a group that
/// took no part); none when it does not match.
pub(crate) fn captures<'a>(regex: &'a Regex, line: &'a str) -> Vec<(&'a str, &'a str)> {
    let Some(found) = regex.captures(line) else {
        return Vec::new();
    };
    regex
        .capture_names()
        .enumerate()
        .filter_map(|(at, name)| {
            let name = name?;
            Some((name, found.get(at).map_or("", |m| m.as_str())))
        })
        .collect()
}

/// ANSI escape sequences, as Loki's `decolorize` finds them (Go's `\d` is ASCII digits).
static ANSI: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        "[\u{1b}\u{9b}][\\[\\]()#;?]*(?:(?:(?:[a-zA-Z0-9]*(?:;[a-zA-Z0-9]*)*)?\u{7})|(?:(?:[0-9]{1,4}(?:;[0-9]{0,4})*)?[0-9A-PRZcf-ntqry=><~]))",
    )
    .expect("the ANSI pattern compiles")
});

/// `| decolorize`: the line without its ANSI color codes.
pub(crate) fn decolorize(line: &str) -> std::borrow::Cow<'_, str> {
    ANSI.replace_all(line, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loki 3.7.6's labels for `| json x="a.b", …` on this line.
    #[test]
    fn json_expressions_find_what_loki_finds() {
        let line = r#"{"a":{"b":"x","c":[1,2]},"e":["f",{"g":"h"}],"n":null,"o":{"p":1},"t":true,"s":"q\"s","k y":"sp"}"#;
        let document = json_document(line).unwrap();
        let value = |expression: &str| json_value(document, &json_path(expression).unwrap());
        assert_eq!(value("a.b").as_deref(), Some("x"));
        assert_eq!(value("a.c").as_deref(), Some("[1,2]"));
        assert_eq!(value("a.c[1]").as_deref(), Some("2"));
        assert_eq!(value("e[1].g").as_deref(), Some("h"));
        assert_eq!(value("o").as_deref(), Some(r#"{"p":1}"#));
        assert_eq!(value("n").as_deref(), Some(""));
        assert_eq!(value("s").as_deref(), Some("q\"s"));
        assert_eq!(value(r#"["k y"]"#).as_deref(), Some("sp"));
        assert_eq!(value("t").as_deref(), Some("true"));
        assert_eq!(value("e[0]").as_deref(), Some("f"));
        assert_eq!(value("missing"), None);
        assert_eq!(value("a.c[5]"), None);
        assert!(json_path("a..b").is_err());
        assert!(json_path("a[x]").is_err());
    }

    /// Loki 3.7.6's labels for `| json x="a", y="a.b", z="k"` on lines that give a key twice:
    /// the first in the line's order that the whole path reaches.
    #[test]
    fn json_expressions_take_the_first_of_a_repeated_key() {
        for (line, x, y, z) in [
            (r#"{"a":"1","a":"2"}"#, Some("1"), None, None),
            (
                r#"{"a":{"b":1},"a":{"c":2}}"#,
                Some(r#"{"b":1}"#),
                Some("1"),
                None,
            ),
            (r#"{"a":"1","a":{"b":2}}"#, Some("1"), Some("2"), None),
            (
                r#"{"a":{"c":1},"a":{"b":2}}"#,
                Some(r#"{"c":1}"#),
                Some("2"),
                None,
            ),
            (r#"{"k":null,"k":"v"}"#, None, None, Some("")),
        ] {
            let document = json_document(line).unwrap();
            let value = |expression: &str| json_value(document, &json_path(expression).unwrap());
            assert_eq!(value("a").as_deref(), x, "{line}");
            assert_eq!(value("a.b").as_deref(), y, "{line}");
            assert_eq!(value("k").as_deref(), z, "{line}");
        }
    }

    /// Loki 3.7.6's answers for packed lines.
    #[test]
    fn unpack_reads_packed_lines_only() {
        assert_eq!(
            unpack(r#"{"_entry":"inner line","pod":"p1","n":5,"obj":{"a":1}}"#),
            Unpacked::Packed("inner line".into(), vec![("pod".into(), "p1".into())])
        );
        assert_eq!(unpack(r#"{"pod":"p2"}"#), Unpacked::NotPacked);
        assert_eq!(
            unpack("not json"),
            Unpacked::Error("expecting json object(6), but it is not")
        );
        assert_eq!(
            unpack(r#"{"_entry":"esc \"q\""}"#),
            Unpacked::Packed("esc \"q\"".into(), vec![])
        );
    }

    #[test]
    fn regexp_needs_named_distinct_captures() {
        let re = capture_regex(r"(?P<first>\w+)(?: (?P<second>\w+))?").unwrap();
        assert_eq!(
            captures(&re, "alpha beta"),
            [("first", "alpha"), ("second", "beta")]
        );
        assert_eq!(captures(&re, "gamma"), [("first", "gamma"), ("second", "")]);
        assert!(captures(&re, "!!").is_empty());
        assert!(capture_regex("(a)")
            .unwrap_err()
            .contains("at least one named capture"));
        assert!(capture_regex("(?P<a>x)(?P<a>y)").is_err());
    }

    #[test]
    fn decolorize_strips_ansi_codes() {
        assert_eq!(decolorize("\u{1b}[31mred\u{1b}[0m text"), "red text");
        assert_eq!(decolorize("\u{1b}[1;32mbold green\u{1b}[m"), "bold green");
        assert_eq!(decolorize("plain"), "plain");
    }
}
