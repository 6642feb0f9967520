//! `| pattern "<ip> - <_> <method> …"`: literals and captures, matched the way Loki's pattern
//! parser matches them. A leading literal must start the line; each capture takes the text up
//! to the next occurrence of the literal after it, and a capture whose literal is not found takes
//! the rest of the line and ends the match.

/// A piece of a pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Literal(String),
    /// `<name>`; `None` for `<_>`, which matches and keeps nothing.
    Capture(Option<String>),
}

/// A compiled pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pattern {
    pieces: Vec<Piece>,
}

/// Why a pattern cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PatternError {
    /// No `<name>` at all.
    #[error("at least one capture is required")]
    NoCapture,
    /// `<a><b>`: where one ends and the next starts is unknown.
    #[error("found consecutive capture '{0}'")]
    Consecutive(String),
    /// The same name twice.
    #[error("duplicate capture name ({0})")]
    Duplicate(String),
}

impl Pattern {
    /// Reads `text`: `<name>` (a letter or `_`, then letters, digits and `_`) is a capture, and
    /// everything else, a `<` that starts no capture included, literal text.
    pub(crate) fn parse(text: &str) -> Result<Self, PatternError> {
        let mut pieces: Vec<Piece> = Vec::new();
        let mut rest = text;
        let mut literal = String::new();
        while !rest.is_empty() {
            if let Some(name) = capture_at(rest) {
                if !literal.is_empty() {
                    pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                }
                if matches!(pieces.last(), Some(Piece::Capture(_))) {
                    return Err(PatternError::Consecutive(format!("<{name}>")));
                }
                pieces.push(Piece::Capture((name != "_").then(|| name.to_owned())));
                rest = &rest[name.len() + 2..];
                continue;
            }
            let c = rest.chars().next().expect("rest is not empty");
            literal.push(c);
            rest = &rest[c.len_utf8()..];
        }
        if !literal.is_empty() {
            pieces.push(Piece::Literal(literal));
        }
        let names: Vec<&String> = pieces
            .iter()
            .filter_map(|piece| match piece {
                Piece::Capture(Some(name)) => Some(name),
                _ => None,
            })
            .collect();
        if names.is_empty() {
            return Err(PatternError::NoCapture);
        }
        for (at, name) in names.iter().enumerate() {
            if names[..at].contains(name) {
                return Err(PatternError::Duplicate((*name).clone()));
            }
        }
        Ok(Pattern { pieces })
    }

    /// The captures `line` gives, by name, in the pattern's order; none when a leading literal
    /// does not start the line.
    pub(crate) fn captures<'a>(&'a self, line: &'a str) -> Vec<(&'a str, &'a str)> {
        let mut found = Vec::new();
        if line.is_empty() {
            return found;
        }
        let mut pieces = self.pieces.as_slice();
        let mut rest = line;
        if let Some((Piece::Literal(first), after)) = pieces.split_first() {
            if rest.find(first.as_str()) != Some(0) {
                return found;
            }
            rest = &rest[first.len()..];
            pieces = after;
        }
        // From here the pieces alternate: capture, literal, capture…
        while let Some((Piece::Capture(name), after)) = pieces.split_first() {
            let Some((Piece::Literal(literal), after)) = after.split_first() else {
                if let Some(name) = name {
                    found.push((name.as_str(), rest));
                }
                return found;
            };
            let Some(end) = rest.find(literal.as_str()) else {
                if let Some(name) = name {
                    found.push((name.as_str(), rest));
                }
                return found;
            };
            if let Some(name) = name {
                found.push((name.as_str(), &rest[..end]));
            }
            rest = &rest[end + literal.len()..];
            pieces = after;
        }
        found
    }
}

/// The name of the capture `text` starts with, if it starts with one.
fn capture_at(text: &str) -> Option<&str> {
    let inner = text.strip_prefix('<')?;
    let end = inner.find('>')?;
    let name = &inner[..end];
    let mut chars = name.chars();
    let first = chars.next()?;
    let valid = (first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captures(pattern: &str, line: &str) -> Vec<(String, String)> {
        Pattern::parse(pattern)
            .unwrap()
            .captures(line)
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect()
    }

    fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Loki 3.7.6's labels for these lines.
    #[test]
    fn captures_are_what_loki_takes() {
        let p = "<_> <ip> <rest>";
        assert_eq!(
            captures(p, "addr=192.168.0.10 end"),
            pairs(&[("ip", "end")])
        );
        assert_eq!(
            captures(p, "client 10.0.1.5 ok"),
            pairs(&[("ip", "10.0.1.5"), ("rest", "ok")])
        );
        assert_eq!(captures(p, "1.2.3.4.5"), pairs(&[]));
        assert_eq!(
            captures("<a>.<b>", "none here"),
            pairs(&[("a", "none here")])
        );
        assert_eq!(
            captures("<a>.<b>", "1.2.3.4.5"),
            pairs(&[("a", "1"), ("b", "2.3.4.5")])
        );
        let v6 = "v6<x> <_> <y>";
        assert_eq!(
            captures(v6, "v6 2001:db8::1 y"),
            pairs(&[("x", ""), ("y", "y")])
        );
        assert_eq!(captures(v6, "v6b ::1 z"), pairs(&[("x", "b"), ("y", "z")]));
        assert_eq!(captures(v6, "bad 010.0.1.5 q"), pairs(&[]));
        assert_eq!(
            captures("<a>a<b>", "alpha beta"),
            pairs(&[("a", ""), ("b", "lpha beta")])
        );
    }

    #[test]
    fn patterns_need_separated_distinct_captures() {
        assert_eq!(Pattern::parse("b"), Err(PatternError::NoCapture));
        assert_eq!(Pattern::parse("<_> x"), Err(PatternError::NoCapture));
        assert!(matches!(
            Pattern::parse("<a><b>"),
            Err(PatternError::Consecutive(_))
        ));
        assert!(matches!(
            Pattern::parse("<a> <a>"),
            Err(PatternError::Duplicate(_))
        ));
        // A `<` that starts no capture is text.
        assert_eq!(captures("<1> <x>", "<1> y"), pairs(&[("x", "y")]));
    }
}
