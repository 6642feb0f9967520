//! Why a regular expression does not compile, in the words of Go's `regexp`, which Loki's
//! messages quote: `error parsing regexp: missing closing ): `(``.

use regex_syntax::ast::{parse::Parser, ErrorKind};

/// Go's message for `pattern` where it does not parse, or `None` where it does. A mistake Go
/// has no words for here is named in the parser's own.
pub(crate) fn error(pattern: &str) -> Option<String> {
    let err = Parser::new().parse(pattern).err()?;
    let span = err.span();
    let piece = pattern
        .get(span.start.offset..span.end.offset)
        .unwrap_or("");
    let (code, expr) = match err.kind() {
        ErrorKind::GroupUnclosed => ("missing closing )", pattern),
        ErrorKind::GroupUnopened => ("unexpected )", pattern),
        ErrorKind::ClassUnclosed => (
            "missing closing ]",
            pattern.get(span.start.offset..).unwrap_or(""),
        ),
        ErrorKind::EscapeUnexpectedEof => ("trailing backslash at end of expression", ""),
        ErrorKind::RepetitionMissing => {
            // The span is where the missing expression would be; Go quotes the operator.
            let operator = pattern.get(span.end.offset..).unwrap_or("");
            let width = match operator.chars().next() {
                Some('{') => operator.find('}').map_or(operator.len(), |at| at + 1),
                Some(c) => c.len_utf8(),
                None => 0,
            };
            (
                "missing argument to repetition operator",
                &operator[..width],
            )
        }
        ErrorKind::EscapeUnrecognized => ("invalid escape sequence", piece),
        ErrorKind::ClassRangeInvalid => ("invalid character class range", piece),
        ErrorKind::RepetitionCountInvalid => ("invalid repeat count", piece),
        other => return Some(format!("error parsing regexp: {other}")),
    };
    Some(format!("error parsing regexp: {code}: `{expr}`"))
}

#[cfg(test)]
mod tests {
    use super::error;

    /// Patterns and what Go's `regexp` says of them.
    #[test]
    fn mistakes_are_named_as_go_names_them() {
        let cases = [
            ("(", "missing closing ): `(`"),
            ("a(b", "missing closing ): `a(b`"),
            ("a)", "unexpected ): `a)`"),
            ("x[ab", "missing closing ]: `[ab`"),
            ("ab\\", "trailing backslash at end of expression: ``"),
            ("*a", "missing argument to repetition operator: `*`"),
            ("[z-a]", "invalid character class range: `z-a`"),
        ];
        for (pattern, want) in cases {
            assert_eq!(
                error(pattern),
                Some(format!("error parsing regexp: {want}")),
                "{pattern}"
            );
        }
        assert_eq!(error("a.*b"), None);
    }
}
