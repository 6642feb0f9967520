//! The logfmt decoder of `| logfmt` with flags or keys, step for step as Loki's: it reads one
//! pair at a time, says which pairs it could not read, and remembers the error `--strict` reports
//! (`logfmt syntax error at pos 8 : unexpected '"'`).

use std::borrow::Cow;

/// A pair, or the reason the decoder could not read one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Scan<'a> {
    /// A key, and its value when it has one (`key` alone or `key=` has none).
    Pair(&'a str, Option<Cow<'a, str>>),
    /// A pair the decoder skipped; `None` at the end of the line.
    Skipped(Option<String>),
}

/// Reads the pairs of one line.
pub(crate) struct Decoder<'a> {
    line: &'a str,
    pos: usize,
}

impl<'a> Decoder<'a> {
    /// A decoder at the start of `line`.
    pub(crate) fn new(line: &'a str) -> Self {
        Decoder { line, pos: 0 }
    }

    /// True at the end of the line.
    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.line.len()
    }

    fn error(&self, message: &str) -> Scan<'a> {
        Scan::Skipped(Some(format!(
            "logfmt syntax error at pos {} : {message}",
            self.pos + 1
        )))
    }

    /// Skips to the next space (a pair it cannot read) and reports `message`.
    fn skip_value(&mut self, message: String) -> Scan<'a> {
        let bytes = self.line.as_bytes();
        let error = Scan::Skipped(Some(format!(
            "logfmt syntax error at pos {} : {message}",
            self.pos + 1
        )));
        self.pos = bytes[self.pos..]
            .iter()
            .position(|&c| c <= b' ')
            .map_or(bytes.len(), |p| self.pos + p);
        error
    }

    /// The next pair.
    pub(crate) fn next_pair(&mut self) -> Scan<'a> {
        let line = self.line;
        let bytes = line.as_bytes();
        match bytes[self.pos..].iter().position(|&c| c > b' ') {
            Some(p) => self.pos += p,
            None => {
                self.pos = bytes.len();
                return Scan::Skipped(None);
            }
        }
        let start = self.pos;
        let mut key = None;
        loop {
            let Some(&c) = bytes.get(self.pos) else {
                if self.pos > start {
                    key = Some(&line[start..self.pos]);
                }
                return match key {
                    Some(key) => Scan::Pair(key, None),
                    None => Scan::Skipped(None),
                };
            };
            match c {
                b'=' => {
                    if self.pos > start {
                        key = Some(&line[start..self.pos]);
                    }
                    let Some(key) = key else {
                        return self.skip_value("unexpected '='".into());
                    };
                    return self.value(key);
                }
                b'"' => return self.skip_value("unexpected '\"'".into()),
                c if c <= b' ' => {
                    return Scan::Pair(&line[start..self.pos], None);
                }
                _ => self.pos += 1,
            }
        }
    }

    /// The value after `key=`.
    fn value(&mut self, key: &'a str) -> Scan<'a> {
        let line = self.line;
        let bytes = line.as_bytes();
        self.pos += 1;
        match bytes.get(self.pos) {
            None => return Scan::Pair(key, None),
            Some(&c) if c <= b' ' => return Scan::Pair(key, None),
            Some(b'"') => return self.quoted(key),
            Some(_) => {}
        }
        let start = self.pos;
        while let Some(&c) = bytes.get(self.pos) {
            match c {
                b'=' | b'"' => {
                    let shown = if c == b'=' { "'='" } else { "'\"'" };
                    return self.skip_value(format!("unexpected {shown}"));
                }
                c if c <= b' ' => break,
                _ => self.pos += 1,
            }
        }
        Scan::Pair(key, Some(Cow::Borrowed(&line[start..self.pos])))
    }

    fn quoted(&mut self, key: &'a str) -> Scan<'a> {
        let line = self.line;
        let bytes = line.as_bytes();
        let start = self.pos;
        let (mut escaped, mut has_escape) = (false, false);
        let mut at = start + 1;
        while let Some(&c) = bytes.get(at) {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
                has_escape = true;
            } else if c == b'"' {
                self.pos = at + 1;
                if !has_escape {
                    let inner = &line[start + 1..at];
                    return Scan::Pair(key, (!inner.is_empty()).then_some(Cow::Borrowed(inner)));
                }
                return match unquote(&line[start + 1..at]) {
                    Some(value) => Scan::Pair(key, Some(Cow::Owned(value))),
                    None => self.error("invalid quoted value"),
                };
            }
            at += 1;
        }
        self.pos = bytes.len();
        self.error("unterminated quoted value")
    }
}

/// A quoted value's escapes, as JSON's (`\"`, `\\`, `\/`, `\n`, `\uXXXX`…).
fn unquote(inner: &str) -> Option<String> {
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            '"' => '"',
            '\\' => '\\',
            '/' => '/',
            '\'' => '\'',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => {
                let hex: String = chars.by_ref().take(4).collect();
                char::from_u32(u32::from_str_radix(&hex, 16).ok()?).unwrap_or('\u{fffd}')
            }
            _ => return None,
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(line: &str) -> Vec<Scan<'_>> {
        let mut decoder = Decoder::new(line);
        let mut out = Vec::new();
        while !decoder.at_end() {
            out.push(decoder.next_pair());
        }
        out
    }

    /// Loki 3.7.6's `--strict` errors for these lines.
    #[test]
    fn errors_are_placed_as_lokis_decoder_places_them() {
        let found = scan(r#"a=2 bro"ken=3 e=4"#);
        assert_eq!(found[0], Scan::Pair("a", Some("2".into())));
        assert_eq!(
            found[1],
            Scan::Skipped(Some(
                r#"logfmt syntax error at pos 8 : unexpected '"'"#.into()
            ))
        );
        let found = scan(r#"a=3 f="unterminated"#);
        assert_eq!(
            found[1],
            Scan::Skipped(Some(
                "logfmt syntax error at pos 20 : unterminated quoted value".into()
            ))
        );
        let found = scan(r#"a=1 b= c flag d="x y" e="q\"r""#);
        assert_eq!(
            found,
            [
                Scan::Pair("a", Some("1".into())),
                Scan::Pair("b", None),
                Scan::Pair("c", None),
                Scan::Pair("flag", None),
                Scan::Pair("d", Some("x y".into())),
                Scan::Pair("e", Some("q\"r".into())),
            ]
        );
        assert_eq!(
            scan("=x y=1"),
            [
                Scan::Skipped(Some("logfmt syntax error at pos 1 : unexpected '='".into())),
                Scan::Pair("y", Some("1".into())),
            ]
        );
    }
}
