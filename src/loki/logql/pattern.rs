//! `| pattern "<ip> - <_> <method> …"`: literals and captures, matched the way Loki's pattern
//! parser matches them. A leading literal must start the line; each capture takes the text up
//! to the next occurrence of the literal after it, and a capture whose literal is not found takes
//! the rest of the line and ends the match.
//!
//! The same patterns, with `<_>` only, filter lines (`|> "<_> error <_>"`): there a line must
//! have the pattern's whole shape, as Loki's matcher tests it.

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
    #[error("found consecutive capture '{0}': invalid expression")]
    Consecutive(String),
    /// `<name>` in a line filter, which keeps nothing.
    #[error("named captures are not allowed: found '{0}'")]
    Named(String),
    /// The same name twice.
    #[error("duplicate capture name ({0})")]
    Duplicate(String),
}

impl Pattern {
    /// Reads the pattern of `| pattern`: at least one named capture, each name once.
    pub(crate) fn parse(text: &str) -> Result<Self, PatternError> {
        let pieces = pieces(text)?;
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

    /// Reads the pattern of a line filter (`|> "…"`): its captures are all `<_>`.
    pub(crate) fn parse_line_filter(text: &str) -> Result<Self, PatternError> {
        let pieces = pieces(text)?;
        if let Some(Piece::Capture(Some(name))) = pieces
            .iter()
            .find(|piece| matches!(piece, Piece::Capture(Some(_))))
        {
            return Err(PatternError::Named(format!("<{name}>")));
        }
        Ok(Pattern { pieces })
    }

    /// True when `line` has the pattern's shape, as Loki's line filter tests it: each literal
    /// found after the one before, a `<_>` between two literals never empty, the line ending
    /// with the last literal or, after a last `<_>`, with some text. The first literal may be
    /// found anywhere, as in Loki. An empty line has only the empty pattern's shape.
    pub(crate) fn shapes(&self, line: &str) -> bool {
        if line.is_empty() || self.pieces.is_empty() {
            return line.is_empty() && self.pieces.is_empty();
        }
        let mut at = 0;
        for (index, piece) in self.pieces.iter().enumerate() {
            let Piece::Literal(literal) = piece else {
                continue;
            };
            match line[at..].find(literal.as_str()) {
                None => return false,
                // A `<_>` before the literal took nothing.
                Some(0) if index != 0 => return false,
                Some(found) => at += found + literal.len(),
            }
        }
        let ends_on_capture = matches!(self.pieces.last(), Some(Piece::Capture(_)));
        ends_on_capture == (at != line.len())
    }

    /// The literal texts, in order.
    pub(crate) fn literals(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|piece| match piece {
            Piece::Literal(literal) => Some(literal.as_str()),
            Piece::Capture(_) => None,
        })
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

/// The pieces of `text`: `<name>` (a letter or `_`, then letters, digits and `_`) is a capture,
/// and everything else, a `<` that starts no capture included, literal text.
fn pieces(text: &str) -> Result<Vec<Piece>, PatternError> {
    let mut pieces: Vec<Piece> = Vec::new();
    let mut rest = text;
    let mut literal = String::new();
    while !rest.is_empty() {
        if let Some(name) = capture_at(rest) {
            if !literal.is_empty() {
                pieces.push(Piece::Literal(std::mem::take(&mut literal)));
            }
            if let Some(Piece::Capture(before)) = pieces.last() {
                let before = before.as_deref().unwrap_or("_");
                return Err(PatternError::Consecutive(format!("<{before}><{name}>")));
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
    Ok(pieces)
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

    /// The lines Loki 3.7.6 keeps for `|> "…"` among these; the empty line, which Loki does not
    /// store, as its matcher's source decides it.
    #[test]
    fn line_filters_keep_what_loki_keeps() {
        let lines = [
            "foo bar baz",
            "xx foo bar",
            " bar ",
            "a bar b",
            "foo",
            "foofoo bar",
            "bar bar",
            "x  bar y",
            "GET /api 200",
            "",
        ];
        let kept = |pattern: &str| -> Vec<&str> {
            let pattern = Pattern::parse_line_filter(pattern).unwrap();
            lines
                .into_iter()
                .filter(|line| pattern.shapes(line))
                .collect()
        };
        assert_eq!(kept("foo <_>"), ["foo bar baz", "xx foo bar", "foofoo bar"]);
        assert_eq!(kept("<_> bar <_>"), ["foo bar baz", "a bar b", "x  bar y"]);
        assert_eq!(
            kept("<_>bar<_>"),
            ["foo bar baz", " bar ", "a bar b", "x  bar y"]
        );
        assert_eq!(kept("<_> bar"), ["xx foo bar", "foofoo bar", "bar bar"]);
        assert_eq!(kept("foo"), ["foo"]);
        assert_eq!(kept("<_> /api <_>"), ["GET /api 200"]);
        assert_eq!(kept(""), [""]);
        assert_eq!(kept("<_>").len(), lines.len() - 1);
    }

    #[test]
    fn line_filters_take_unnamed_separated_captures() {
        assert_eq!(
            Pattern::parse_line_filter("<x> bar")
                .unwrap_err()
                .to_string(),
            "named captures are not allowed: found '<x>'"
        );
        assert_eq!(
            Pattern::parse_line_filter("x <_><_><_> y")
                .unwrap_err()
                .to_string(),
            "found consecutive capture '<_><_>': invalid expression"
        );
        assert_eq!(
            Pattern::parse("x <a><_> y").unwrap_err().to_string(),
            "found consecutive capture '<a><_>': invalid expression"
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
