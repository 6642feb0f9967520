//! LogQL's tokens, each with the byte offset where it starts, so an error can say where.

use super::ParseError;

/// One token.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Token {
    /// `{`
    LBrace,
    /// `}`
    RBrace,
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `[5m]`: a range, read whole as Loki's lexer reads it.
    Range(std::time::Duration),
    /// `]` on its own.
    RBracket,
    /// `,`
    Comma,
    /// `|`
    Pipe,
    /// `|=`
    PipeEq,
    /// `|~`
    PipeTilde,
    /// `|>`
    PipeGt,
    /// `=`
    Eq,
    /// `==`
    EqEq,
    /// `!=`
    Ne,
    /// `=~`
    Re,
    /// `!~`
    NotRe,
    /// `!>`
    NotGt,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `+`
    Plus,
    /// `-`
    Minus,
    /// `*`
    Star,
    /// `/`
    Slash,
    /// `%`
    Percent,
    /// `^`
    Caret,
    /// A name: a label, a function, a keyword.
    Ident(String),
    /// A quoted string, unescaped.
    Str(String),
    /// A number.
    Number(f64),
    /// A number with a unit of time or size (`5m`, `1h30m`, `10KB`), as written.
    Unit(String),
    /// What the lexer could not read, and why: the parser reports it when it gets this far, as
    /// Loki's parser, which reads tokens as it needs them, does.
    Invalid(ParseError),
}

impl Token {
    /// How the token reads in an error message.
    pub(crate) fn describe(&self) -> String {
        let symbol = match self {
            Token::Ident(name) => return format!("{name:?}"),
            Token::Str(text) => return format!("string {text:?}"),
            Token::Number(value) => return format!("number {value}"),
            Token::Unit(text) => return text.clone(),
            Token::LBrace => "{",
            Token::RBrace => "}",
            Token::LParen => "(",
            Token::RParen => ")",
            Token::Range(_) => "[",
            Token::Invalid(_) => "?",
            Token::RBracket => "]",
            Token::Comma => ",",
            Token::Pipe => "|",
            Token::PipeEq => "|=",
            Token::PipeTilde => "|~",
            Token::PipeGt => "|>",
            Token::Eq => "=",
            Token::EqEq => "==",
            Token::Ne => "!=",
            Token::Re => "=~",
            Token::NotRe => "!~",
            Token::NotGt => "!>",
            Token::Gt => ">",
            Token::Ge => ">=",
            Token::Lt => "<",
            Token::Le => "<=",
            Token::Plus => "+",
            Token::Minus => "-",
            Token::Star => "*",
            Token::Slash => "/",
            Token::Percent => "%",
            Token::Caret => "^",
        };
        format!("{symbol:?}")
    }
}

/// Words that Loki's lexer reads as keywords, named by their text in its messages.
const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "bool",
    "label_replace",
    "offset",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "or",
    "and",
    "unless",
    "json",
    "regexp",
    "logfmt",
    "unpack",
    "pattern",
    "label_format",
    "line_format",
    "ip",
    "decolorize",
    "drop",
    "keep",
    "unwrap",
    "variants",
    "of",
];

/// Words that Loki's lexer reads as functions when `(` (or `by (`, `without (`) follows.
const FUNCTIONS: &[&str] = &[
    "rate",
    "rate_counter",
    "count_over_time",
    "bytes_rate",
    "bytes_over_time",
    "avg_over_time",
    "sum_over_time",
    "min_over_time",
    "max_over_time",
    "stdvar_over_time",
    "stddev_over_time",
    "quantile_over_time",
    "first_over_time",
    "last_over_time",
    "absent_over_time",
    "vector",
    "sum",
    "avg",
    "max",
    "min",
    "count",
    "stddev",
    "stdvar",
    "bottomk",
    "topk",
    "sort",
    "sort_desc",
    "approx_topk",
    "bytes",
    "duration",
    "duration_seconds",
];

/// True when `word`, followed by `rest`, is a function as Loki's lexer tells one from a label
/// name: `(` follows, or `by (`, `without (`.
pub(crate) fn is_function(word: &str, rest: &[(usize, Token)]) -> bool {
    let word = word.to_ascii_lowercase();
    if !FUNCTIONS.contains(&word.as_str()) && !matches!(word.as_str(), "label_replace" | "ip") {
        return false;
    }
    match rest {
        [(_, Token::LParen), ..] => true,
        [(_, Token::Ident(next)), (_, Token::LParen), ..] => {
            matches!(next.to_ascii_lowercase().as_str(), "by" | "without")
        }
        _ => false,
    }
}

impl Token {
    /// The token's name in Loki's syntax errors (`unexpected IDENTIFIER`, `unexpected }`), where
    /// `rest` is what follows it.
    pub(crate) fn loki_name(&self, rest: &[(usize, Token)]) -> String {
        let symbol = match self {
            Token::Ident(word) => {
                let lower = word.to_ascii_lowercase();
                let function = FUNCTIONS.contains(&lower.as_str())
                    || matches!(lower.as_str(), "label_replace" | "ip");
                if function && !is_function(word, rest) {
                    // A function's name without its `(` is a name like any other.
                    return "IDENTIFIER".into();
                }
                if is_function(word, rest) {
                    // `label_replace` and `ip` are also keywords, named by their text.
                    if matches!(lower.as_str(), "label_replace" | "ip") {
                        return lower;
                    }
                    return match lower.as_str() {
                        "bytes" => "BYTES_CONV".into(),
                        "duration" => "DURATION_CONV".into(),
                        "duration_seconds" => "DURATION_SECONDS_CONV".into(),
                        _ => lower.to_ascii_uppercase(),
                    };
                }
                if KEYWORDS.contains(&lower.as_str()) {
                    return lower;
                }
                return "IDENTIFIER".into();
            }
            Token::Str(_) => "STRING",
            Token::Number(_) => "NUMBER",
            Token::Unit(text) if duration(text).is_some() => "DURATION",
            Token::Unit(_) => "BYTES",
            Token::Range(_) => "RANGE",
            Token::Invalid(_) => "$end",
            other => return other.describe().trim_matches('"').to_owned(),
        };
        symbol.to_owned()
    }

    /// True for `+ - * / % ^ == != > >= < <=`.
    pub(crate) fn is_binary_operator(&self) -> bool {
        matches!(
            self,
            Token::Plus
                | Token::Minus
                | Token::Star
                | Token::Slash
                | Token::Percent
                | Token::Caret
                | Token::EqEq
                | Token::Ne
                | Token::Gt
                | Token::Ge
                | Token::Lt
                | Token::Le
        )
    }

    /// True for the tokens Loki's lexer completes by reading ahead, after which its position
    /// has no line: its messages about them say `line 0`.
    pub(crate) fn read_ahead(&self) -> bool {
        matches!(
            self,
            Token::PipeEq
                | Token::PipeTilde
                | Token::PipeGt
                | Token::EqEq
                | Token::Re
                | Token::Ne
                | Token::NotRe
                | Token::NotGt
                | Token::Ge
                | Token::Le
                | Token::Range(_)
                | Token::Unit(_)
        )
    }
}

/// Splits `text` into tokens with their byte offsets. What cannot be read ends the tokens as
/// [`Token::Invalid`].
pub(crate) fn tokenize(text: &str) -> Vec<(usize, Token)> {
    let mut tokens = Vec::new();
    if let Err(err) = read_tokens(text, &mut tokens) {
        tokens.push((err.position, Token::Invalid(err)));
    }
    tokens
}

fn read_tokens(text: &str, tokens: &mut Vec<(usize, Token)>) -> Result<(), ParseError> {
    let bytes = text.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let start = at;
        let byte = bytes[at];
        if byte.is_ascii_whitespace() {
            at += 1;
            continue;
        }
        let two = bytes.get(at + 1).copied();
        let (token, width) = match (byte, two) {
            (b'|', Some(b'=')) => (Token::PipeEq, 2),
            (b'|', Some(b'~')) => (Token::PipeTilde, 2),
            (b'|', Some(b'>')) => (Token::PipeGt, 2),
            (b'|', _) => (Token::Pipe, 1),
            (b'=', Some(b'=')) => (Token::EqEq, 2),
            (b'=', Some(b'~')) => (Token::Re, 2),
            (b'=', _) => (Token::Eq, 1),
            (b'!', Some(b'=')) => (Token::Ne, 2),
            (b'!', Some(b'~')) => (Token::NotRe, 2),
            (b'!', Some(b'>')) => (Token::NotGt, 2),
            (b'>', Some(b'=')) => (Token::Ge, 2),
            (b'>', _) => (Token::Gt, 1),
            (b'<', Some(b'=')) => (Token::Le, 2),
            (b'<', _) => (Token::Lt, 1),
            (b'{', _) => (Token::LBrace, 1),
            (b'}', _) => (Token::RBrace, 1),
            (b'(', _) => (Token::LParen, 1),
            (b')', _) => (Token::RParen, 1),
            (b'[', _) => {
                let (range, end) = range(text, at)?;
                tokens.push((start, Token::Range(range)));
                at = end;
                continue;
            }
            (b']', _) => (Token::RBracket, 1),
            (b',', _) => (Token::Comma, 1),
            (b'+', _) => (Token::Plus, 1),
            (b'-', _) => (Token::Minus, 1),
            (b'*', _) => (Token::Star, 1),
            (b'/', _) => (Token::Slash, 1),
            (b'%', _) => (Token::Percent, 1),
            (b'^', _) => (Token::Caret, 1),
            (b'"', _) => {
                let (value, end) = quoted(text, at)?;
                tokens.push((start, Token::Str(value)));
                at = end;
                continue;
            }
            (b'`', _) => {
                let close = text[at + 1..]
                    .find('`')
                    .ok_or_else(|| ParseError::at(start, "literal not terminated"))?;
                tokens.push((start, Token::Str(text[at + 1..at + 1 + close].to_owned())));
                at += close + 2;
                continue;
            }
            (b'0'..=b'9', _) | (b'.', Some(b'0'..=b'9')) => {
                let (token, end) = number(text, at)?;
                tokens.push((start, token));
                at = end;
                continue;
            }
            (b'a'..=b'z' | b'A'..=b'Z' | b'_', _) => {
                let end = at
                    + text[at..]
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(text.len() - at);
                tokens.push((start, Token::Ident(text[at..end].to_owned())));
                at = end;
                continue;
            }
            (b'#', _) => {
                // A comment, to the end of the line.
                at = text[at..].find('\n').map_or(text.len(), |end| at + end);
                continue;
            }
            _ => {
                // Loki's lexer reads any other character as a name, which its grammar then
                // finds unexpected.
                let shown = text[at..].chars().next().unwrap_or('?');
                tokens.push((start, Token::Ident(shown.to_string())));
                at += shown.len_utf8();
                continue;
            }
        };
        tokens.push((start, token));
        at += width;
    }
    Ok(())
}

/// `[5m]` at `start`, read as Loki reads it: everything up to `]` is a Prometheus duration.
fn range(text: &str, start: usize) -> Result<(std::time::Duration, usize), ParseError> {
    let lost = |message: String| Err(ParseError::at(start, message).line_lost());
    let Some(close) = text[start + 1..].find(']') else {
        return lost("missing closing ']' in duration".into());
    };
    let written = &text[start + 1..start + 1 + close];
    match prometheus_duration(written) {
        Ok(range) => Ok((range, start + close + 2)),
        Err(message) => lost(message),
    }
}

/// A duration as Prometheus's `model.ParseDuration` reads it (`1h30m`, `2d`, `100ms`: whole
/// numbers of units from years down, each at most once), or its error message.
pub(crate) fn prometheus_duration(text: &str) -> Result<std::time::Duration, String> {
    if text.is_empty() {
        return Err("empty duration string".into());
    }
    if text == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    let invalid = || format!("not a valid duration string: {text:?}");
    const UNITS: [(&str, u64); 7] = [
        ("y", 365 * 86_400_000),
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ];
    let mut rest = text;
    let mut millis: u64 = 0;
    let mut next_unit = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(invalid());
        }
        let value: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        let found = UNITS[next_unit..]
            .iter()
            .position(|(name, _)| *name == unit);
        let Some(offset) = found else {
            return Err(invalid());
        };
        let size = UNITS[next_unit + offset].1;
        next_unit += offset + 1;
        millis = value
            .checked_mul(size)
            .and_then(|part| millis.checked_add(part))
            .ok_or_else(|| "duration out of range".to_owned())?;
        rest = &rest[unit_len..];
    }
    Ok(std::time::Duration::from_millis(millis))
}

/// A double-quoted string starting at `start`: its value and the offset after its closing quote.
fn quoted(text: &str, start: usize) -> Result<(String, usize), ParseError> {
    let mut value = String::new();
    let mut chars = text[start + 1..].char_indices();
    while let Some((offset, c)) = chars.next() {
        match c {
            '"' => return Ok((value, start + 1 + offset + 1)),
            '\\' => {
                let Some((_, escaped)) = chars.next() else {
                    break;
                };
                match escaped {
                    'n' => value.push('\n'),
                    't' => value.push('\t'),
                    'r' => value.push('\r'),
                    'a' => value.push('\u{7}'),
                    'f' => value.push('\u{c}'),
                    'v' => value.push('\u{b}'),
                    '"' => value.push('"'),
                    '\\' => value.push('\\'),
                    // Go's byte and code point escapes, as Loki unquotes them.
                    'x' | 'u' | 'U' => {
                        let digits = match escaped {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let hex: String = chars.clone().take(digits).map(|(_, c)| c).collect();
                        let code = u32::from_str_radix(&hex, 16)
                            .ok()
                            .filter(|_| hex.len() == digits)
                            .and_then(char::from_u32);
                        match code {
                            Some(c) => {
                                value.push(c);
                                for _ in 0..digits {
                                    chars.next();
                                }
                            }
                            None => {
                                value.push('\\');
                                value.push(escaped);
                            }
                        }
                    }
                    // Regular expressions keep their own escapes: `"\\d+"` and `"\d+"` alike.
                    other => {
                        value.push('\\');
                        value.push(other);
                    }
                }
            }
            c => value.push(c),
        }
    }
    Err(ParseError::at(start, "literal not terminated"))
}

/// A number at `start`, with the unit that may follow it (`5m`, `1h30m`, `10KB`).
fn number(text: &str, start: usize) -> Result<(Token, usize), ParseError> {
    let rest = &text[start..];
    let digits = |from: usize| {
        from + rest[from..]
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len() - from)
    };
    let mut end = digits(0);
    // An exponent, `1e21`, `1e+21` or `1.5e-05`, as Loki writes numbers back.
    if rest[end..].starts_with(['e', 'E']) {
        let sign = usize::from(rest[end + 1..].starts_with(['+', '-']));
        if !rest[end + 1 + sign..].starts_with(|c: char| c.is_ascii_digit()) {
            // Go's scanner reads `5e` as a number that is missing its exponent.
            return Err(ParseError::at(start, "exponent has no digits"));
        }
        end = digits(end + 1 + sign);
    }
    // As Loki's lexer: a unit of time, or else of size, that follows and makes a duration or a
    // size with the number; else the number alone, and what follows is the next token.
    let run = |unit: fn(char) -> bool| {
        end + rest[end..]
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || unit(c)))
            .unwrap_or(rest.len() - end)
    };
    let time = run(|c| "nuµmshdwy".contains(c));
    if time > end && duration(&rest[..time]).is_some() {
        return Ok((Token::Unit(rest[..time].to_owned()), start + time));
    }
    let size = run(|c| "BikKMGTP".contains(c));
    if size > end && bytes(&rest[..size]).is_some() {
        return Ok((Token::Unit(rest[..size].to_owned()), start + size));
    }
    let written = &rest[..end];
    match written.parse::<f64>() {
        Ok(value) => Ok((Token::Number(value), start + end)),
        Err(_) => Err(ParseError::at(
            start,
            format!("{written:?} is not a number"),
        )),
    }
}

/// `5m`, `1h30m`, `250ms`, `1.5s` as a duration; `None` when it is not one.
pub(crate) fn duration(text: &str) -> Option<std::time::Duration> {
    let mut total = 0f64;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&at| at > 0)?;
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            "w" => 604_800.0,
            "y" => 31_536_000.0,
            _ => return None,
        };
        total += value * seconds;
        rest = &rest[unit_len..];
    }
    // A duration longer than a Duration holds is no duration, not a panic.
    std::time::Duration::try_from_secs_f64(total).ok()
}

/// `10KB`, `1MiB`, `512B` as bytes; `None` when it is not a size.
pub(crate) fn bytes(text: &str) -> Option<u64> {
    let digits = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let value: f64 = text[..digits].parse().ok()?;
    let scale = match text[digits..].to_ascii_uppercase().as_str() {
        "B" => 1.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        "KIB" => 1024.0,
        "MIB" => 1024.0 * 1024.0,
        "GIB" => 1024.0 * 1024.0 * 1024.0,
        "TIB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let total = value * scale;
    (total.is_finite() && total >= 0.0 && total < u64::MAX as f64).then_some(total as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn operators_strings_and_units_are_tokens_with_their_offsets() {
        let tokens = tokenize(r#"{app="a\"b"} |= `raw\d` != "x" | n >= 1.5 [5m]"#);
        let kinds: Vec<Token> = tokens.into_iter().map(|(_, token)| token).collect();
        assert_eq!(
            kinds,
            [
                Token::LBrace,
                Token::Ident("app".into()),
                Token::Eq,
                Token::Str("a\"b".into()),
                Token::RBrace,
                Token::PipeEq,
                Token::Str("raw\\d".into()),
                Token::Ne,
                Token::Str("x".into()),
                Token::Pipe,
                Token::Ident("n".into()),
                Token::Ge,
                Token::Number(1.5),
                Token::Range(Duration::from_secs(300)),
            ]
        );
        let Some((3, Token::Invalid(error))) = tokenize("{a=\"open}").pop() else {
            panic!("an unclosed string ends the tokens");
        };
        assert_eq!(error.message, "literal not terminated");
        assert_eq!(tokenize("{a=1} # x").len(), 5);
    }

    #[test]
    fn durations_and_sizes_read_as_loki_writes_them() {
        assert_eq!(duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(duration("5"), None);
        assert_eq!(duration("5q"), None);
        assert_eq!(duration(&format!("{}s", "1".repeat(400))), None);
        assert_eq!(bytes("10KB"), Some(10_000));
        assert_eq!(bytes("1MiB"), Some(1_048_576));
        assert_eq!(bytes("10"), None);
    }

    #[test]
    fn ranges_read_as_prometheus_durations() {
        assert_eq!(prometheus_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(
            prometheus_duration("1s500ms"),
            Ok(Duration::from_millis(1500))
        );
        assert_eq!(prometheus_duration("2d"), Ok(Duration::from_secs(172_800)));
        let invalid = |text: &str| Err(format!("not a valid duration string: {text:?}"));
        assert_eq!(prometheus_duration("5"), invalid("5"));
        assert_eq!(prometheus_duration("1.5s"), invalid("1.5s"));
        assert_eq!(prometheus_duration("30m1h"), invalid("30m1h"));
        assert_eq!(prometheus_duration(""), Err("empty duration string".into()));
        let Some((2, Token::Invalid(error))) = tokenize("a [5m:1m]").pop() else {
            panic!("a range that is no duration ends the tokens");
        };
        assert_eq!(
            error.to_string(),
            r#"parse error at line 0, col 3: not a valid duration string: "5m:1m""#
        );
    }
}
