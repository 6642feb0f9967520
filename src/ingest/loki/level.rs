//! The level of a line pushed without one, found as Loki 3 finds its `detected_level`: a level
//! field of a JSON or logfmt line (`"level":"warn"`, `lvl=info`, `severity=error`, …), else the
//! first level word in the text (`[ERROR]`, `warning:`, `"info"`). A line with neither has none.
//!
//! Each step is one pass over the line's bytes with no allocation, since it runs on the ingest
//! path for every line of a stream that names no level.

use crate::model::severity::Severity;

/// Keys whose value names the level, compared without case.
const LEVEL_KEYS: [&str; 10] = [
    "level",
    "lvl",
    "loglevel",
    "log_level",
    "log.level",
    "levelname",
    "level_name",
    "severity",
    "severitytext",
    "severity_text",
];

/// Words that name a level in free text, compared without case; the longer of two words with
/// the same start first.
const LEVEL_WORDS: [(&str, Severity); 9] = [
    ("trace", Severity::Trace),
    ("debug", Severity::Debug),
    ("info", Severity::Info),
    ("warning", Severity::Warn),
    ("warn", Severity::Warn),
    ("error", Severity::Error),
    ("err", Severity::Error),
    ("critical", Severity::Fatal),
    ("fatal", Severity::Fatal),
];

/// The severity number of the level `line` shows, if any.
pub(crate) fn detect(line: &str) -> Option<i32> {
    let field = if line.trim_start().starts_with('{') {
        json_field(line)
    } else {
        logfmt_field(line)
    };
    field
        .or_else(|| first_word(line.as_bytes()))
        .map(Severity::number)
}

/// A level field's value as Loki reads it: its level names and the short forms it knows.
fn level_value(value: &str) -> Option<Severity> {
    let known = [
        ("trace", Severity::Trace),
        ("debug", Severity::Debug),
        ("dbg", Severity::Debug),
        ("info", Severity::Info),
        ("information", Severity::Info),
        ("warn", Severity::Warn),
        ("warning", Severity::Warn),
        ("err", Severity::Error),
        ("error", Severity::Error),
        ("critical", Severity::Fatal),
        ("fatal", Severity::Fatal),
    ];
    known
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(value))
        .map(|(_, level)| *level)
}

fn is_level_key(key: &str) -> bool {
    LEVEL_KEYS
        .iter()
        .any(|known| known.eq_ignore_ascii_case(key))
}

/// The level of the first `"key": "value"` pair of a JSON text whose key is a level key and
/// whose value is a level, at any depth.
fn json_field(text: &str) -> Option<Severity> {
    let mut strings = JsonStrings::new(text);
    while let Some(key) = strings.next() {
        if !is_level_key(key) || !strings.colon_follows() {
            continue;
        }
        if let Some(level) = strings.string_value().and_then(level_value) {
            return Some(level);
        }
    }
    None
}

/// The quoted strings of a JSON text, in order, escapes left as they are (a level name has
/// none).
struct JsonStrings<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> JsonStrings<'a> {
    fn new(text: &'a str) -> Self {
        JsonStrings { text, at: 0 }
    }

    fn next(&mut self) -> Option<&'a str> {
        let start = self.at + self.text[self.at..].find('"')? + 1;
        let bytes = self.text.as_bytes();
        let mut end = start;
        while end < bytes.len() && bytes[end] != b'"' {
            end += if bytes[end] == b'\\' { 2 } else { 1 };
        }
        let end = end.min(bytes.len());
        self.at = (end + 1).min(bytes.len());
        Some(&self.text[start..end])
    }

    /// Whether the string just read is a key: a `:` follows it.
    fn colon_follows(&mut self) -> bool {
        let rest = self.text[self.at..].trim_start();
        if let Some(after) = rest.strip_prefix(':') {
            self.at = self.text.len() - after.len();
            true
        } else {
            false
        }
    }

    /// The string value after a key's colon, if the value is a string.
    fn string_value(&mut self) -> Option<&'a str> {
        if self.text[self.at..].trim_start().starts_with('"') {
            self.next()
        } else {
            None
        }
    }
}

/// The level of the first `key=value` pair of a logfmt line whose key is a level key and whose
/// value (quoted or not) is a level.
fn logfmt_field(line: &str) -> Option<Severity> {
    line.split_ascii_whitespace().find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        if !is_level_key(key) {
            return None;
        }
        level_value(value.trim_matches('"'))
    })
}

/// What may come before a level word: the line's start, a space or one of these.
fn opens_word(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'"' | b'(' | b'[' | b'{' | b'=')
}

/// What may come after a level word: the line's end, a space or one of these.
fn closes_word(byte: u8) -> bool {
    matches!(
        byte,
        b' ' | b'\t' | b'\n' | b'\r' | b'"' | b')' | b']' | b'}' | b',' | b'!' | b':' | b'='
    )
}

/// The first level word of a text, without case.
fn first_word(bytes: &[u8]) -> Option<Severity> {
    (0..bytes.len())
        .filter(|&at| at == 0 || opens_word(bytes[at - 1]))
        .find_map(|at| {
            let rest = &bytes[at..];
            LEVEL_WORDS.iter().find_map(|(word, level)| {
                let word = word.as_bytes();
                let fits = rest.len() >= word.len()
                    && rest[..word.len()].eq_ignore_ascii_case(word)
                    && rest.get(word.len()).is_none_or(|&b| closes_word(b));
                fits.then_some(*level)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines Loki 3.7.6 was sent in a stream without a level label, and the `detected_level` it
    /// gave each (its `critical` is this service's `fatal`).
    const LOKI_DETECTED: &[(&str, &str)] = &[
        (r#"{"level":"warn","msg":"a"}"#, "warn"),
        ("level=error msg=b", "error"),
        ("plain WARN text", "warn"),
        ("nothing here", "unknown"),
        (r#"{"severity":"debug"}"#, "debug"),
        ("an ERROR and info", "error"),
        ("errors happened", "unknown"),
        ("INFO", "info"),
        ("Info: x", "info"),
        ("critical failure", "fatal"),
        ("fatal thing", "fatal"),
        ("critical fatal", "fatal"),
        ("fatal critical", "fatal"),
        ("[FATAL] x", "fatal"),
        ("panic now", "unknown"),
        ("dbg x", "unknown"),
        ("warning: x", "warn"),
        ("a trace of", "trace"),
        ("err: x", "error"),
        ("DEBUG x", "debug"),
        ("inf x", "unknown"),
        ("wrn x", "unknown"),
        ("level=WARN msg=x", "warn"),
        ("lvl=info x", "info"),
        (r#"{"lvl":"error"}"#, "error"),
        (r#"{"LEVEL":"info"}"#, "info"),
        (r#"{"severity_text":"warn"}"#, "warn"),
        (r#"{"msg":"error in json"}"#, "error"),
        ("severity=error x", "error"),
        ("x level=debug", "debug"),
        (r#"{"level":"Information"}"#, "info"),
        (r#"{"level":"WARNING"}"#, "warn"),
        (r#"{"level":"notice"}"#, "unknown"),
        (r#"{"level":"CRIT"}"#, "unknown"),
        (r#"{"level":5}"#, "unknown"),
        ("msg=\"some error\" level=info", "info"),
        ("[ERROR] x", "error"),
        ("E1204 klog", "unknown"),
        ("emergency", "unknown"),
        ("alert x", "unknown"),
        ("eRRor x", "error"),
        ("xerrorx", "unknown"),
        ("error_x", "unknown"),
        ("status=failed", "unknown"),
        ("info then error", "info"),
        ("debug and trace", "debug"),
        ("warn and error", "warn"),
        ("critical and error", "fatal"),
        (r#"{"Level":"warn"}"#, "warn"),
        (r#"{"SEVERITY":"warn"}"#, "warn"),
        (r#"{"log.level":"warn"}"#, "warn"),
        (r#"{"loglevel":"warn"}"#, "warn"),
        ("loglevel=warn", "warn"),
        (r#"{"lvl":"w"}"#, "unknown"),
        (r#"{"level":"err"}"#, "error"),
        (r#"{"level":"fatal"}"#, "fatal"),
        (r#"{"level":"dbg"}"#, "debug"),
        (r#"{"level":"eror"}"#, "unknown"),
        ("level=information", "info"),
        (r#"{"level":"info","msg":"error"}"#, "info"),
        (r#"{"level":"critical"}"#, "fatal"),
        ("level=fatal", "fatal"),
        (r#"{"level":"E"}"#, "unknown"),
        ("Severity=warn", "warn"),
        ("LEVEL=error", "error"),
        (r#"{"nested":{"level":"warn"}}"#, "warn"),
        (r#" {"level":"warn"}"#, "warn"),
        ("level=\"warn\"", "warn"),
        ("debug info warn", "debug"),
        ("  info", "info"),
        ("xinfo info", "info"),
        ("INFO:x", "info"),
        ("info.x", "unknown"),
        ("info-x", "unknown"),
        ("info/x", "unknown"),
        ("information", "unknown"),
        ("x \"info\" y", "info"),
        ("x (info) y", "info"),
        ("x info, y", "info"),
        ("x info; y", "unknown"),
        ("x info= y", "info"),
        ("x 'info' y", "unknown"),
        ("x=info", "info"),
        ("x:info", "unknown"),
        ("x,info", "unknown"),
        ("x|info|", "unknown"),
        (r#"{"log_level":"warn"}"#, "warn"),
        (r#"{"levelname":"warn"}"#, "warn"),
        (r#"{"severityText":"warn"}"#, "warn"),
        (r#"{"LogLevel":"warn"}"#, "warn"),
        (r#"{"level_name":"warn"}"#, "warn"),
        (r#"{"a":{"b":{"level":"warn"}}}"#, "warn"),
        (r#"{"msg":"x","data":"warn"}"#, "warn"),
        (r#"{"arr":["warn"]}"#, "warn"),
        ("a.info b", "unknown"),
        ("a info.", "unknown"),
        ("a info!", "info"),
        ("x iNfO", "info"),
        (r#"{"level":"warn", "level":"error"}"#, "warn"),
        ("level=error level=warn", "error"),
        ("a level=bogus error", "error"),
        (r#"{"level":"bogus","m":"error"}"#, "error"),
        (r#"{"level":""}"#, "unknown"),
        ("level= error", "error"),
        ("x info\nerror", "info"),
    ];

    #[test]
    fn levels_are_detected_as_loki_detects_them() {
        for (line, want) in LOKI_DETECTED {
            let got = Severity::of(detect(line).unwrap_or(0)).name();
            assert_eq!(got, *want, "{line:?}");
        }
    }
}
