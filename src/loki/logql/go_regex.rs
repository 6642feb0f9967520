//! Why a regular expression does not compile, in the words of Go's `regexp`, which Loki's
//! messages quote: `error parsing regexp: missing closing ): `(``.

use regex_syntax::ast::{parse::Parser, Ast, ErrorKind};

/// Go's message for `pattern` where it does not parse, or `None` where it does. A mistake Go
/// has no words for here is named in the parser's own.
pub(crate) fn error(pattern: &str) -> Option<String> {
    let err = match Parser::new().parse(pattern) {
        Ok(ast) => return nested_repetition(pattern, &ast),
        Err(err) => err,
    };
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
        ErrorKind::UnsupportedLookAround => ("invalid or unsupported Perl syntax", piece),
        other => return Some(format!("error parsing regexp: {other}")),
    };
    Some(format!("error parsing regexp: {code}: `{expr}`"))
}

/// Go refuses a repetition of a repetition (`a**`, `a+{2}`), which Rust reads as nested.
fn nested_repetition(pattern: &str, ast: &Ast) -> Option<String> {
    let mut found = None;
    visit(ast, &mut |node| {
        if let Ast::Repetition(outer) = node {
            if let Ast::Repetition(inner) = outer.ast.as_ref() {
                let text = pattern.get(inner.op.span.start.offset..outer.op.span.end.offset);
                found.get_or_insert_with(|| {
                    format!(
                        "error parsing regexp: invalid nested repetition operator: `{}`",
                        text.unwrap_or("")
                    )
                });
            }
        }
    });
    found
}

/// Calls `each` on `ast` and every expression within it.
fn visit(ast: &Ast, each: &mut impl FnMut(&Ast)) {
    each(ast);
    match ast {
        Ast::Repetition(repetition) => visit(&repetition.ast, each),
        Ast::Group(group) => visit(&group.ast, each),
        Ast::Alternation(alternation) => alternation.asts.iter().for_each(|ast| visit(ast, each)),
        Ast::Concat(concat) => concat.asts.iter().for_each(|ast| visit(ast, each)),
        _ => {}
    }
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
            ("a**", "invalid nested repetition operator: `**`"),
            ("(a+){2}?x+*", "invalid nested repetition operator: `+*`"),
            ("(?=x)", "invalid or unsupported Perl syntax: `(?=`"),
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
