//! A recursive-descent parser for LogQL's subset: a log query or a metric query, with errors that
//! say where and what, as Loki's do, and limits on size and nesting that no real query reaches.

use std::time::Duration;

use super::ast::*;
use super::lexer::{self, Token};
use super::ParseError;

/// Longest query text accepted.
pub(crate) const MAX_QUERY_BYTES: usize = 16 * 1024;
/// Deepest nesting of parentheses and aggregations accepted.
pub(crate) const MAX_DEPTH: usize = 32;
/// Longest range of a range function (`[…]`) accepted.
pub(crate) const MAX_RANGE: Duration = Duration::from_secs(30 * 86_400);

/// Parses a whole query.
pub fn parse(text: &str) -> Result<Query, ParseError> {
    parse_query(text).map_err(|err| err.in_text(text))
}

fn parse_query(text: &str) -> Result<Query, ParseError> {
    if text.len() > MAX_QUERY_BYTES {
        return Err(ParseError::at(
            0,
            format!(
                "the query is {} bytes; at most {MAX_QUERY_BYTES} are accepted",
                text.len()
            ),
        ));
    }
    let tokens = lexer::tokenize(text);
    let mut parser = Parser {
        tokens,
        next: 0,
        end: text.len(),
        depth: 0,
    };
    let query = if parser.peek() == Some(&Token::LBrace) {
        let query = parser.log_query()?;
        if parser.at_unwrap() {
            // Loki's grammar has `| unwrap` in range functions only: the word is unexpected.
            parser.next += 1;
        }
        parser.log_query_operand(&query)?;
        Query::Log(query)
    } else {
        Query::Metric(parser.metric(0)?)
    };
    if parser.peek().is_some() {
        return Err(parser.unexpected(&[]));
    }
    super::validate::check(&query)?;
    Ok(query)
}

struct Parser {
    tokens: Vec<(usize, Token)>,
    next: usize,
    /// The text's length: where "unexpected end of query" is.
    end: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next).map(|(_, token)| token)
    }

    fn position(&self) -> usize {
        self.tokens.get(self.next).map_or(self.end, |(at, _)| *at)
    }

    fn advance(&mut self) -> Option<(usize, Token)> {
        let token = self.tokens.get(self.next).cloned();
        self.next += usize::from(token.is_some());
        token
    }

    /// Loki's syntax error at the next token: `syntax error: unexpected }, expecting IDENTIFIER`,
    /// with the tokens its grammar takes there when they are few (Loki names at most four), and
    /// Loki's names for the tokens. A token the lexer could not read gives the lexer's error.
    fn unexpected(&self, expecting: &[&str]) -> ParseError {
        let (at, name, line_lost) = match self.tokens.get(self.next) {
            Some((_, Token::Invalid(err))) => return err.clone(),
            Some((at, token)) => (
                *at,
                token.loki_name(&self.tokens[self.next + 1..]),
                token.read_ahead(),
            ),
            None => (self.end, "$end".to_owned(), false),
        };
        let mut message = format!("syntax error: unexpected {name}");
        if !expecting.is_empty() {
            message += ", expecting ";
            message += &expecting.join(" or ");
        }
        if self.end == 0 {
            // Loki's lexer has no position before the first character.
            return ParseError::unplaced(0, message);
        }
        let err = ParseError::at(at, message);
        if line_lost {
            err.line_lost()
        } else {
            err
        }
    }

    fn expect(&mut self, token: Token, expecting: &[&str]) -> Result<(), ParseError> {
        if self.peek() == Some(&token) {
            self.next += 1;
            Ok(())
        } else {
            Err(self.unexpected(expecting))
        }
    }

    /// A name (of a label, say): a word that Loki's lexer does not read as a keyword or a
    /// function.
    fn ident(&mut self, wanted: &[&str]) -> Result<String, ParseError> {
        match self.tokens.get(self.next) {
            Some((_, token @ Token::Ident(_)))
                if token.loki_name(&self.tokens[self.next + 1..]) != "IDENTIFIER" =>
            {
                Err(self.unexpected(wanted))
            }
            _ => self.word(wanted),
        }
    }

    /// Any word, a keyword too.
    fn word(&mut self, wanted: &[&str]) -> Result<String, ParseError> {
        match self.peek() {
            Some(Token::Ident(name)) => {
                let name = name.clone();
                self.next += 1;
                Ok(name)
            }
            _ => Err(self.unexpected(wanted)),
        }
    }

    fn string(&mut self, wanted: &[&str]) -> Result<String, ParseError> {
        match self.peek() {
            Some(Token::Str(text)) => {
                let text = text.clone();
                self.next += 1;
                Ok(text)
            }
            _ => Err(self.unexpected(wanted)),
        }
    }

    fn nested<T>(
        &mut self,
        inner: impl FnOnce(&mut Self) -> Result<T, ParseError>,
    ) -> Result<T, ParseError> {
        if self.depth >= MAX_DEPTH {
            return Err(ParseError::at(
                self.position(),
                format!("the query nests deeper than {MAX_DEPTH} levels"),
            ));
        }
        self.depth += 1;
        let result = inner(self);
        self.depth -= 1;
        result
    }

    // ---- log queries

    fn log_query(&mut self) -> Result<LogQuery, ParseError> {
        let selector = self.selector()?;
        let mut pipeline = Vec::new();
        while let Some(stages) = self.stage()? {
            pipeline.extend(stages);
        }
        Ok(LogQuery { selector, pipeline })
    }

    fn selector(&mut self) -> Result<Vec<Matcher>, ParseError> {
        self.expect(Token::LBrace, &["{"])?;
        let mut matchers = Vec::new();
        if self.peek() != Some(&Token::RBrace) {
            loop {
                let label = self.ident(if matchers.is_empty() {
                    &["IDENTIFIER", "}"]
                } else {
                    &["IDENTIFIER"]
                })?;
                let op = match self.peek() {
                    Some(Token::Eq) => MatchOp::Eq,
                    Some(Token::Ne) => MatchOp::Ne,
                    Some(Token::Re) => MatchOp::Re,
                    Some(Token::NotRe) => MatchOp::NotRe,
                    _ => return Err(self.unexpected(&["=", "=~", "!~", "!="])),
                };
                self.next += 1;
                let at = self.position();
                let value = self.string(&["STRING"])?;
                if matches!(op, MatchOp::Re | MatchOp::NotRe) {
                    // Loki compiles a matcher's expression as it reads it.
                    if let Some(message) = super::go_regex::error(&value) {
                        return Err(ParseError::unplaced(at, message));
                    }
                }
                matchers.push(Matcher { label, op, value });
                match self.peek() {
                    Some(Token::Comma) => self.next += 1,
                    Some(Token::RBrace) => break,
                    _ => return Err(self.unexpected(&["}", ","])),
                }
            }
        }
        self.expect(Token::RBrace, &["}"])?;
        Ok(matchers)
    }

    /// True when the next tokens are `| unwrap`, which ends a log pipeline.
    fn at_unwrap(&self) -> bool {
        self.peek() == Some(&Token::Pipe)
            && matches!(self.tokens.get(self.next + 1), Some((_, Token::Ident(word))) if word == "unwrap")
    }

    /// True when the next token is a name, not a keyword or a function.
    fn at_name(&self) -> bool {
        match self.tokens.get(self.next) {
            Some((_, token @ Token::Ident(_))) => {
                token.loki_name(&self.tokens[self.next + 1..]) == "IDENTIFIER"
            }
            _ => false,
        }
    }

    /// True when the next token is the word `word`.
    fn at_word(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token::Ident(next)) if next == word)
    }

    /// The next pipeline stage, or `None` where the pipeline ends (at `| unwrap` too). A negated
    /// line filter with `or` is one stage per alternative, as Loki reads it (`!= "a" or "b"`:
    /// neither).
    fn stage(&mut self) -> Result<Option<Vec<Stage>>, ParseError> {
        if self.at_unwrap() {
            return Ok(None);
        }
        let op = match self.peek() {
            Some(Token::PipeEq) => LineOp::Contains,
            Some(Token::Ne) => LineOp::NotContains,
            Some(Token::PipeTilde) => LineOp::Matches,
            Some(Token::NotRe) => LineOp::NotMatches,
            Some(Token::PipeGt) => LineOp::PatternMatches,
            Some(Token::NotGt) => LineOp::NotPatternMatches,
            Some(Token::Pipe) => {
                self.next += 1;
                return self.pipe_stage().map(|stage| Some(vec![stage]));
            }
            _ => return Ok(None),
        };
        self.next += 1;
        let pattern = self.line_pattern()?;
        let mut or = Vec::new();
        while self.at_word("or") {
            self.next += 1;
            or.push(self.line_pattern()?);
        }
        if matches!(
            op,
            LineOp::NotContains | LineOp::NotMatches | LineOp::NotPatternMatches
        ) {
            let stages = std::iter::once(pattern)
                .chain(or)
                .map(|pattern| Stage::LineFilter {
                    op,
                    pattern,
                    or: Vec::new(),
                })
                .collect();
            return Ok(Some(stages));
        }
        Ok(Some(vec![Stage::LineFilter { op, pattern, or }]))
    }

    /// A line filter's `"text"` or `ip("…")`.
    fn line_pattern(&mut self) -> Result<LinePattern, ParseError> {
        if self.at_word("ip") {
            self.next += 1;
            return Ok(LinePattern::Ip(self.ip_call()?));
        }
        Ok(LinePattern::Text(self.string(&["STRING", "ip"])?))
    }

    /// `("pattern")` after `ip`.
    fn ip_call(&mut self) -> Result<String, ParseError> {
        self.expect(Token::LParen, &["("])?;
        let pattern = self.string(&["STRING"])?;
        self.expect(Token::RParen, &[")"])?;
        Ok(pattern)
    }

    /// What follows a `|`: a parser, a formatting stage or a label filter.
    fn pipe_stage(&mut self) -> Result<Stage, ParseError> {
        if self.peek() == Some(&Token::LParen) {
            return Ok(Stage::LabelFilter(self.label_filter_or()?));
        }
        let at = self.position();
        let name = self.word(&[])?;
        // A name followed by a comparison is a label filter, whatever the name.
        let compared = matches!(
            self.peek(),
            Some(
                Token::Eq
                    | Token::EqEq
                    | Token::Ne
                    | Token::Re
                    | Token::NotRe
                    | Token::Gt
                    | Token::Ge
                    | Token::Lt
                    | Token::Le
            )
        );
        let stage = match name.as_str() {
            _ if compared => None,
            "json" if self.at_name() => Some(Stage::JsonFields(self.extractions()?)),
            "json" => Some(Stage::Parser(ParserKind::Json)),
            "logfmt" => Some(self.logfmt()?),
            "regexp" => Some(Stage::Regexp(self.string(&["STRING"])?)),
            "pattern" => Some(Stage::Pattern(self.string(&["STRING"])?)),
            "unpack" => Some(Stage::Unpack),
            "decolorize" => Some(Stage::Decolorize),
            "line_format" => Some(Stage::LineFormat(self.string(&["STRING"])?)),
            "label_format" => Some(Stage::LabelFormat(self.label_formats()?)),
            "drop" => Some(Stage::Drop(self.named_labels()?)),
            "keep" => Some(Stage::Keep(self.named_labels()?)),
            "xml" => return Err(ParseError::at(at, "| xml is not supported")),
            _ => None,
        };
        if let Some(stage) = stage {
            return Ok(stage);
        }
        self.next -= 1;
        if !self.at_name() {
            return Err(self.unexpected(&[]));
        }
        Ok(Stage::LabelFilter(self.label_filter_or()?))
    }

    /// `| logfmt`'s flags and keys: `--strict --keep-empty a, b="c"`.
    fn logfmt(&mut self) -> Result<Stage, ParseError> {
        let (mut strict, mut keep_empty) = (false, false);
        while self.peek() == Some(&Token::Minus) {
            let at = self.position();
            self.next += 1;
            let flag = match (self.advance(), self.advance()) {
                (Some((_, Token::Minus)), Some((_, Token::Ident(word)))) => word,
                _ => {
                    return Err(ParseError::at(
                        at,
                        "a logfmt flag: --strict or --keep-empty",
                    ))
                }
            };
            match flag.as_str() {
                "strict" => strict = true,
                "keep"
                    if self.peek() == Some(&Token::Minus)
                        && self.tokens.get(self.next + 1).map(|(_, t)| t)
                            == Some(&Token::Ident("empty".into())) =>
                {
                    self.next += 2;
                    keep_empty = true;
                }
                _ => {
                    return Err(ParseError::at(
                        at,
                        "unknown logfmt flag; logfmt takes --strict and --keep-empty",
                    ))
                }
            }
        }
        let fields = if self.at_name() {
            self.extractions()?
        } else {
            Vec::new()
        };
        if !strict && !keep_empty && fields.is_empty() {
            return Ok(Stage::Parser(ParserKind::Logfmt));
        }
        Ok(Stage::LogfmtWith {
            strict,
            keep_empty,
            fields,
        })
    }

    /// `a, b="c.d"`: labels and where each comes from (its own name when not given).
    fn extractions(&mut self) -> Result<Vec<Extraction>, ParseError> {
        let mut fields = Vec::new();
        loop {
            let label = self.ident(&["IDENTIFIER"])?;
            let path = if self.peek() == Some(&Token::Eq) {
                self.next += 1;
                self.string(&["STRING"])?
            } else {
                label.clone()
            };
            fields.push(Extraction { label, path });
            if self.peek() != Some(&Token::Comma) {
                return Ok(fields);
            }
            self.next += 1;
        }
    }

    /// `dst=src, name="template"`.
    fn label_formats(&mut self) -> Result<Vec<LabelFormat>, ParseError> {
        let mut formats = Vec::new();
        loop {
            let label = self.ident(&["IDENTIFIER"])?;
            self.expect(Token::Eq, &["="])?;
            let (rename, value) = match self.advance() {
                Some((_, Token::Ident(source))) => (true, source),
                Some((_, Token::Str(template))) => (false, template),
                _ => {
                    self.next -= 1;
                    return Err(self.unexpected(&["IDENTIFIER", "STRING"]));
                }
            };
            formats.push(LabelFormat {
                label,
                rename,
                value,
            });
            if self.peek() != Some(&Token::Comma) {
                return Ok(formats);
            }
            self.next += 1;
        }
    }

    /// `drop`'s and `keep`'s labels: names, or names with a matcher (`a, b="v", c=~"x.*"`).
    fn named_labels(&mut self) -> Result<Vec<NamedLabel>, ParseError> {
        let mut labels = Vec::new();
        loop {
            let label = self.ident(&["IDENTIFIER"])?;
            let op = match self.peek() {
                Some(Token::Eq) => Some(MatchOp::Eq),
                Some(Token::Ne) => Some(MatchOp::Ne),
                Some(Token::Re) => Some(MatchOp::Re),
                Some(Token::NotRe) => Some(MatchOp::NotRe),
                _ => None,
            };
            labels.push(match op {
                Some(op) => {
                    self.next += 1;
                    let value = self.string(&["STRING"])?;
                    NamedLabel::Matching(Matcher { label, op, value })
                }
                None => NamedLabel::Name(label),
            });
            if self.peek() != Some(&Token::Comma) {
                return Ok(labels);
            }
            self.next += 1;
        }
    }

    fn label_filter_or(&mut self) -> Result<LabelFilter, ParseError> {
        let mut left = self.label_filter_and()?;
        while self.peek() == Some(&Token::Ident("or".into())) {
            self.next += 1;
            let right = self.label_filter_and()?;
            left = LabelFilter::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn label_filter_and(&mut self) -> Result<LabelFilter, ParseError> {
        let mut left = self.label_filter_primary()?;
        loop {
            match self.peek() {
                Some(Token::Ident(word)) if word == "and" => self.next += 1,
                Some(Token::Comma) => self.next += 1,
                // Loki also reads two filters side by side as both: `a="1" b="2"`.
                Some(Token::Ident(_)) if self.at_name() => {}
                Some(Token::LParen) => {}
                _ => return Ok(left),
            }
            let right = self.label_filter_primary()?;
            left = LabelFilter::And(Box::new(left), Box::new(right));
        }
    }

    fn label_filter_primary(&mut self) -> Result<LabelFilter, ParseError> {
        if self.peek() == Some(&Token::LParen) {
            self.next += 1;
            let inner = self.nested(Self::label_filter_or)?;
            self.expect(Token::RParen, &[])?;
            return Ok(inner);
        }
        let label = self.ident(&["IDENTIFIER", "("])?;
        let op = match self.peek() {
            Some(Token::Eq | Token::EqEq) => CompareOp::Eq,
            Some(Token::Ne) => CompareOp::Ne,
            Some(Token::Re) => CompareOp::Re,
            Some(Token::NotRe) => CompareOp::NotRe,
            Some(Token::Gt) => CompareOp::Gt,
            Some(Token::Ge) => CompareOp::Ge,
            Some(Token::Lt) => CompareOp::Lt,
            Some(Token::Le) => CompareOp::Le,
            _ => return Err(self.unexpected(&[])),
        };
        if matches!(op, CompareOp::Eq | CompareOp::Ne)
            && matches!(self.tokens.get(self.next + 1), Some((_, Token::Ident(word))) if word == "ip")
        {
            if self.peek() == Some(&Token::EqEq) {
                self.next += 1;
                return Err(self.unexpected(&[]));
            }
            self.next += 2;
            return Ok(LabelFilter::Ip {
                label,
                negated: op == CompareOp::Ne,
                pattern: self.ip_call()?,
            });
        }
        let textual_op = matches!(op, CompareOp::Re | CompareOp::NotRe)
            || (self.peek() == Some(&Token::Eq) && op == CompareOp::Eq)
            || op == CompareOp::Ne;
        self.next += 1;
        let at = self.position();
        // Loki's grammar takes a string after `=`, `!=`, `=~` and `!~` only, and only a string
        // after `=~` and `!~`.
        match self.peek() {
            Some(Token::Str(_)) if textual_op => {}
            Some(Token::Str(_)) => return Err(self.unexpected(&[])),
            _ if matches!(op, CompareOp::Re | CompareOp::NotRe) => {
                return Err(self.unexpected(&["STRING"]))
            }
            _ => {}
        }
        if let (Some(Token::Str(pattern)), CompareOp::Re | CompareOp::NotRe) = (self.peek(), op) {
            // Loki compiles a label filter's expression as it reads it.
            if let Some(message) = super::go_regex::error(pattern) {
                return Err(ParseError::unplaced(at, message));
            }
        }
        let value = match self.advance() {
            Some((_, Token::Str(text))) => LabelValue::Text(text),
            Some((_, Token::Number(value))) => LabelValue::Number(value),
            Some((_, sign @ (Token::Minus | Token::Plus))) => match self.peek() {
                Some(Token::Number(value)) => {
                    let value = if sign == Token::Minus {
                        -*value
                    } else {
                        *value
                    };
                    self.next += 1;
                    LabelValue::Number(value)
                }
                _ => return Err(self.unexpected(&["NUMBER"])),
            },
            Some((_, Token::Unit(text))) => {
                if let Some(duration) = lexer::duration(&text) {
                    LabelValue::Duration(duration)
                } else if let Some(bytes) = lexer::bytes(&text) {
                    LabelValue::Bytes(bytes)
                } else {
                    return Err(ParseError::at(
                        at,
                        format!(
                            "{text:?} is neither a duration (5m, 1.5s) nor a size (10KB, 1MiB)"
                        ),
                    ));
                }
            }
            Some(_) => {
                self.next -= 1;
                return Err(self.unexpected(&[]));
            }
            None => return Err(self.unexpected(&[])),
        };
        Ok(LabelFilter::Compare { label, op, value })
    }

    // ---- metric queries

    /// A metric expression whose binary operators bind at least as tightly as `min_precedence`.
    fn metric(&mut self, min_precedence: u8) -> Result<MetricExpr, ParseError> {
        let mut left = self.metric_operand()?;
        loop {
            // Loki's precedence, loosest first: or; and, unless; comparisons; + -; * / %; ^.
            let (op, precedence) = match self.peek() {
                Some(Token::Ident(word)) if word == "or" => (BinaryOp::Or, 1),
                Some(Token::Ident(word)) if word == "and" => (BinaryOp::And, 2),
                Some(Token::Ident(word)) if word == "unless" => (BinaryOp::Unless, 2),
                Some(Token::EqEq) => (BinaryOp::Eq, 3),
                Some(Token::Ne) => (BinaryOp::Ne, 3),
                Some(Token::Gt) => (BinaryOp::Gt, 3),
                Some(Token::Ge) => (BinaryOp::Ge, 3),
                Some(Token::Lt) => (BinaryOp::Lt, 3),
                Some(Token::Le) => (BinaryOp::Le, 3),
                Some(Token::Plus) => (BinaryOp::Add, 4),
                Some(Token::Minus) => (BinaryOp::Sub, 4),
                Some(Token::Star) => (BinaryOp::Mul, 5),
                Some(Token::Slash) => (BinaryOp::Div, 5),
                Some(Token::Percent) => (BinaryOp::Mod, 5),
                Some(Token::Caret) => (BinaryOp::Pow, 6),
                _ => return Ok(left),
            };
            if precedence < min_precedence {
                return Ok(left);
            }
            let at = self.position();
            self.next += 1;
            let modifier = self.binary_modifier()?;
            // `^` groups from the right, as in PromQL: `2 ^ 3 ^ 2` is `2 ^ 9`.
            let tighter = if op == BinaryOp::Pow {
                precedence
            } else {
                precedence + 1
            };
            let right = self.nested(|parser| parser.metric(tighter))?;
            if op.is_set() {
                // As Loki: a number has no labels to match on.
                for (side, operand) in [("left", &left), ("right", &right)] {
                    if let MetricExpr::Number(value) = operand {
                        return Err(ParseError::unplaced(
                            at,
                            format!(
                                "unexpected literal for {side} leg of logical/set binary operation ({}): {value:.6}",
                                set_name(op)
                            ),
                        ));
                    }
                }
            }
            left = MetricExpr::Binary {
                op,
                modifier,
                left: Box::new(left),
                right: Box::new(right),
            };
        }
    }

    /// A log query followed by a binary operator, which Loki's grammar reads as an operand before
    /// it finds that a log query is not one: the operation is read, then refused in its words.
    fn log_query_operand(&mut self, query: &LogQuery) -> Result<(), ParseError> {
        let op = match self.peek() {
            Some(Token::Ident(word)) if matches!(word.as_str(), "or" | "and" | "unless") => {
                word.clone()
            }
            Some(token) if token.is_binary_operator() => token.loki_name(&[]),
            _ => return Ok(()),
        };
        self.next += 1;
        self.binary_modifier()?;
        if self.peek() == Some(&Token::LBrace) {
            self.log_query()?;
        } else {
            self.metric(1)?;
        }
        let kind = if query.pipeline.is_empty() {
            "MatchersExpr"
        } else {
            "PipelineExpr"
        };
        Err(ParseError::unplaced(
            0,
            format!("unexpected type for left leg of binary operation ({op}): *syntax.{kind}"),
        ))
    }

    /// `bool`, `on (…)` or `ignoring (…)`, `group_left (…)` or `group_right (…)`, each optional.
    fn binary_modifier(&mut self) -> Result<BinaryModifier, ParseError> {
        let mut modifier = BinaryModifier::default();
        if self.at_word("bool") {
            self.next += 1;
            modifier.return_bool = true;
        }
        let on = match self.peek() {
            Some(Token::Ident(word)) if word == "on" => true,
            Some(Token::Ident(word)) if word == "ignoring" => false,
            _ => return Ok(modifier),
        };
        self.next += 1;
        modifier.on = on;
        modifier.labels = Some(self.label_names()?);
        let right = match self.peek() {
            Some(Token::Ident(word)) if word == "group_left" => false,
            Some(Token::Ident(word)) if word == "group_right" => true,
            _ => return Ok(modifier),
        };
        self.next += 1;
        let include = if self.peek() == Some(&Token::LParen) {
            self.label_names()?
        } else {
            Vec::new()
        };
        modifier.group = Some(Group { right, include });
        Ok(modifier)
    }

    fn metric_operand(&mut self) -> Result<MetricExpr, ParseError> {
        let at = self.position();
        match self.peek() {
            Some(Token::Number(value)) => {
                let value = *value;
                self.next += 1;
                Ok(MetricExpr::Number(value))
            }
            Some(sign @ (Token::Minus | Token::Plus)) => {
                let negative = *sign == Token::Minus;
                self.next += 1;
                match self.peek() {
                    Some(Token::Number(value)) => {
                        let value = if negative { -*value } else { *value };
                        self.next += 1;
                        Ok(MetricExpr::Number(value))
                    }
                    _ => Err(self.unexpected(&["NUMBER"])),
                }
            }
            Some(Token::LParen) => {
                self.next += 1;
                let inner = self.nested(|parser| parser.metric(0))?;
                self.expect(Token::RParen, &[])?;
                Ok(inner)
            }
            Some(Token::Ident(name)) if lexer::is_function(name, &self.tokens[self.next + 1..]) => {
                let name = name.clone();
                self.next += 1;
                self.function(at, &name)
            }
            Some(Token::LBrace) => {
                // Loki's grammar reads a log query here, and then finds a range or an unwrap
                // unexpected.
                self.log_query()?;
                if self.at_unwrap() {
                    self.next += 1;
                    return Err(self.unexpected(&[]));
                }
                if matches!(self.peek(), Some(Token::Range(_))) {
                    return Err(self.unexpected(&[]));
                }
                Err(ParseError::at(
                    at,
                    "a log query cannot be combined here; wrap it in a range function like count_over_time({…}[5m])",
                ))
            }
            _ => Err(self.unexpected(&[])),
        }
    }

    fn function(&mut self, at: usize, name: &str) -> Result<MetricExpr, ParseError> {
        let range = match name {
            "count_over_time" => Some(RangeFunction::CountOverTime),
            "rate" => Some(RangeFunction::Rate),
            "bytes_over_time" => Some(RangeFunction::BytesOverTime),
            "bytes_rate" => Some(RangeFunction::BytesRate),
            "absent_over_time" => Some(RangeFunction::AbsentOverTime),
            "sum_over_time" => Some(RangeFunction::SumOverTime),
            "avg_over_time" => Some(RangeFunction::AvgOverTime),
            "min_over_time" => Some(RangeFunction::MinOverTime),
            "max_over_time" => Some(RangeFunction::MaxOverTime),
            "first_over_time" => Some(RangeFunction::FirstOverTime),
            "last_over_time" => Some(RangeFunction::LastOverTime),
            "stddev_over_time" => Some(RangeFunction::StddevOverTime),
            "stdvar_over_time" => Some(RangeFunction::StdvarOverTime),
            "quantile_over_time" => Some(RangeFunction::QuantileOverTime),
            "rate_counter" => Some(RangeFunction::RateCounter),
            _ => None,
        };
        if let Some(function) = range {
            return self.nested(|parser| parser.range_function(at, function));
        }
        if name == "label_replace" {
            return self.nested(Self::label_replace);
        }
        let aggregate = match name {
            "sum" => Some(AggregateOp::Sum),
            "count" => Some(AggregateOp::Count),
            "avg" => Some(AggregateOp::Avg),
            "min" => Some(AggregateOp::Min),
            "max" => Some(AggregateOp::Max),
            "topk" => Some(AggregateOp::Topk),
            "bottomk" => Some(AggregateOp::Bottomk),
            "sort" => Some(AggregateOp::Sort),
            "sort_desc" => Some(AggregateOp::SortDesc),
            _ => None,
        };
        if let Some(op) = aggregate {
            return self.nested(|parser| parser.aggregation(at, op));
        }
        if name == "vector" {
            self.expect(Token::LParen, &["("])?;
            let value = match self.peek() {
                Some(Token::Number(value)) => *value,
                _ => return Err(self.unexpected(&["NUMBER"])),
            };
            self.next += 1;
            self.expect(Token::RParen, &[")"])?;
            return Ok(MetricExpr::Vector(value));
        }
        if matches!(name, "bytes" | "duration" | "duration_seconds" | "ip") {
            // Conversions of `| unwrap` and the line filter `ip(…)`, which Loki's grammar has
            // nowhere else.
            self.next -= 1;
            return Err(self.unexpected(&[]));
        }
        Err(ParseError::at(
            at,
            format!(
                "{name} is not supported; supported: count_over_time, rate, bytes_over_time, bytes_rate, \
                 absent_over_time, sum_over_time, avg_over_time, min_over_time, max_over_time, \
                 first_over_time, last_over_time, stddev_over_time, stdvar_over_time, \
                 quantile_over_time, rate_counter, sum, count, avg, min, max, topk, bottomk, sort, \
                 sort_desc, label_replace, vector"
            ),
        ))
    }

    fn range_function(
        &mut self,
        at: usize,
        function: RangeFunction,
    ) -> Result<MetricExpr, ParseError> {
        let name = function.name();
        self.expect(Token::LParen, &["("])?;
        let parameter = match self.peek() {
            Some(Token::Number(value)) => {
                let value = *value;
                self.next += 1;
                self.expect(Token::Comma, &[","])?;
                Some(value)
            }
            _ => None,
        };
        if !matches!(self.peek(), Some(Token::LBrace | Token::LParen)) {
            return Err(self.unexpected(if parameter.is_some() {
                &["{", "("]
            } else {
                &["NUMBER", "{", "("]
            }));
        }
        let LogRange {
            query,
            unwrap,
            range,
            offset,
        } = self.nested(Self::log_range)?;
        self.expect(Token::RParen, &[")"])?;
        let grouping = self.grouping()?;
        // Loki's checks, in its words, at the function.
        let refuse = |message: String| Err(ParseError::unplaced(at, message));
        match (function, parameter) {
            (RangeFunction::QuantileOverTime, None) => {
                return refuse(format!("parameter required for operation {name}"))
            }
            (RangeFunction::QuantileOverTime, Some(_)) | (_, None) => {}
            (_, Some(value)) => {
                return refuse(format!(
                    "parameter {value} not supported for operation {name}"
                ))
            }
        }
        let groups = matches!(
            function,
            RangeFunction::AvgOverTime
                | RangeFunction::StddevOverTime
                | RangeFunction::StdvarOverTime
                | RangeFunction::QuantileOverTime
                | RangeFunction::MaxOverTime
                | RangeFunction::MinOverTime
                | RangeFunction::FirstOverTime
                | RangeFunction::LastOverTime
        );
        if grouping.is_some() && !groups {
            return refuse(format!("grouping not allowed for {name} aggregation"));
        }
        let with_unwrap = !matches!(
            function,
            RangeFunction::CountOverTime | RangeFunction::BytesOverTime | RangeFunction::BytesRate
        );
        match &unwrap {
            Some(_) if !with_unwrap => {
                return refuse(format!("invalid aggregation {name} with unwrap"))
            }
            None if function.needs_unwrap() => {
                return refuse(format!("invalid aggregation {name} without unwrap"))
            }
            _ => {}
        }
        Ok(MetricExpr::Range(RangeExpr {
            function,
            query,
            range,
            offset,
            unwrap,
            parameter,
            grouping,
        }))
    }

    /// A range function's lines: `{…} | … [5m] offset 1m`, the pipeline also after the range
    /// (`{…}[5m] | json`), and in parentheses as Loki takes them: `({…} | json)[5m]`,
    /// `({…} | json [5m])`.
    fn log_range(&mut self) -> Result<LogRange, ParseError> {
        if self.peek() == Some(&Token::LParen) {
            self.next += 1;
            if self.peek() == Some(&Token::LParen) {
                let inner = self.nested(Self::log_range)?;
                self.expect(Token::RParen, &[")"])?;
                return Ok(inner);
            }
            if self.peek() != Some(&Token::LBrace) {
                return Err(self.unexpected(&["{", "("]));
            }
            let query = self.log_query()?;
            if self.peek() == Some(&Token::RParen) {
                // `({…} | json)[5m]`: the range after the parentheses.
                self.next += 1;
                if !matches!(self.peek(), Some(Token::Range(_))) {
                    return Err(self.unexpected(&["RANGE"]));
                }
                return self.range_of(query, None);
            }
            let inner = self.range_after(query)?;
            self.expect(Token::RParen, &[")"])?;
            return Ok(inner);
        }
        let query = self.log_query()?;
        self.range_after(query)
    }

    /// What follows a range function's log query: its unwrap, range and offset, and the
    /// pipeline when it comes after the range.
    fn range_after(&mut self, query: LogQuery) -> Result<LogRange, ParseError> {
        let unwrap = if self.at_unwrap() {
            self.next += 2;
            Some(self.unwrap()?)
        } else {
            None
        };
        match self.peek() {
            Some(Token::Range(_)) => {}
            // After `unwrap x` and its filters, Loki's grammar takes the range or a stage only.
            _ if unwrap.is_some() => return Err(self.unexpected(&["RANGE", "|"])),
            _ => return Err(self.unexpected(&[])),
        }
        let mut log = self.range_of(query, unwrap)?;
        if log.query.pipeline.is_empty() && log.unwrap.is_none() {
            // Loki also takes the pipeline after the range: `count_over_time({…}[5m] | json)`.
            while let Some(stages) = self.stage()? {
                log.query.pipeline.extend(stages);
            }
            if self.at_unwrap() {
                self.next += 2;
                log.unwrap = Some(self.unwrap()?);
            }
        }
        Ok(log)
    }

    /// The range token next, and the offset after it.
    fn range_of(
        &mut self,
        query: LogQuery,
        unwrap: Option<Unwrap>,
    ) -> Result<LogRange, ParseError> {
        let Some(Token::Range(range)) = self.peek() else {
            return Err(self.unexpected(&["RANGE"]));
        };
        let range = *range;
        if range.is_zero() {
            return Err(ParseError::at(
                self.position(),
                "the range must be longer than 0s",
            ));
        }
        if range > MAX_RANGE {
            return Err(ParseError::at(
                self.position(),
                format!(
                    "the range is longer than {} days",
                    MAX_RANGE.as_secs() / 86_400
                ),
            ));
        }
        self.next += 1;
        let offset = if self.at_word("offset") {
            self.next += 1;
            self.duration()?
        } else {
            Duration::ZERO
        };
        Ok(LogRange {
            query,
            unwrap,
            range,
            offset,
        })
    }

    /// An offset's duration (`5m`, `1h30m`) that is not zero.
    fn duration(&mut self) -> Result<Duration, ParseError> {
        let at = self.position();
        match self.peek() {
            Some(Token::Unit(text)) if lexer::duration(text).is_some() => {
                let text = text.clone();
                self.next += 1;
                lexer::duration(&text)
                    .filter(|range| !range.is_zero())
                    .ok_or_else(|| {
                        ParseError::at(at, format!("{text:?} is not an offset like 10m"))
                    })
            }
            _ => Err(self.unexpected(&["DURATION"])),
        }
    }

    /// What follows `| unwrap`: `name`, `duration(name)`, `duration_seconds(name)` or
    /// `bytes(name)`, then label filters.
    fn unwrap(&mut self) -> Result<Unwrap, ParseError> {
        let conversion = matches!(self.peek(), Some(Token::Ident(word)) if matches!(word.as_str(), "duration" | "duration_seconds" | "bytes"))
            && self.tokens.get(self.next + 1).map(|(_, token)| token) == Some(&Token::LParen);
        let first = if conversion {
            self.word(&[])?
        } else {
            self.ident(&[
                "IDENTIFIER",
                "BYTES_CONV",
                "DURATION_CONV",
                "DURATION_SECONDS_CONV",
            ])?
        };
        let (label, conversion) = if self.peek() == Some(&Token::LParen) {
            let conversion = match first.as_str() {
                "duration" => Conversion::Duration,
                "duration_seconds" => Conversion::DurationSeconds,
                "bytes" => Conversion::Bytes,
                _ => return Err(self.unexpected(&["RANGE", "|"])),
            };
            self.next += 1;
            let label = self.ident(&["IDENTIFIER"])?;
            self.expect(Token::RParen, &[")"])?;
            (label, conversion)
        } else {
            (first, Conversion::Number)
        };
        let mut filters = Vec::new();
        while self.peek() == Some(&Token::Pipe) {
            self.next += 1;
            filters.push(self.label_filter_or()?);
        }
        Ok(Unwrap {
            label,
            conversion,
            filters,
        })
    }

    /// `label_replace(expr, "dst", "replacement", "src", "regex")`, after its name.
    fn label_replace(&mut self) -> Result<MetricExpr, ParseError> {
        self.expect(Token::LParen, &["("])?;
        let inner = self.metric(0)?;
        let mut texts = Vec::with_capacity(4);
        for at in 0..4 {
            // After the expression, an operator could go on with it: Loki names no token.
            self.expect(Token::Comma, if at == 0 { &[] } else { &[","] })?;
            texts.push(self.string(&["STRING"])?);
        }
        let at = self.position();
        self.expect(Token::RParen, &[")"])?;
        let [dst, replacement, src, regex]: [String; 4] =
            texts.try_into().expect("four texts were read");
        // Loki compiles the expression anchored, and quotes it so.
        if let Some(err) = super::go_regex::error(&format!("^(?:{regex})$")) {
            return Err(ParseError::unplaced(
                at,
                format!("invalid regex in label_replace: {err}"),
            ));
        }
        Ok(MetricExpr::LabelReplace(LabelReplace {
            inner: Box::new(inner),
            dst,
            replacement,
            src,
            regex,
        }))
    }

    fn aggregation(&mut self, at: usize, op: AggregateOp) -> Result<MetricExpr, ParseError> {
        // The grouping may come before the arguments or after them.
        let mut grouping = self.grouping()?;
        self.expect(Token::LParen, &["("])?;
        let parameter = if matches!(op, AggregateOp::Topk | AggregateOp::Bottomk) {
            let name = op.name();
            let after = self.tokens.get(self.next + 1).map(|(_, token)| token);
            let k = match self.peek() {
                Some(Token::Number(k)) if after == Some(&Token::Comma) => *k,
                _ => {
                    // Loki reads the rest, then finds the parameter missing: unless what
                    // follows cannot go on, where its grammar stops first.
                    self.metric(0)?;
                    self.expect(Token::RParen, &[])?;
                    if grouping.is_none() {
                        self.grouping()?;
                    }
                    let goes_on = match self.peek() {
                        None | Some(Token::RParen | Token::Comma) => true,
                        Some(Token::Ident(word)) => {
                            matches!(word.as_str(), "or" | "and" | "unless")
                        }
                        Some(token) => token.is_binary_operator(),
                    };
                    if !goes_on {
                        return Err(self.unexpected(&[]));
                    }
                    return Err(ParseError::unplaced(
                        at,
                        format!("parameter required for operation {name}"),
                    ));
                }
            };
            self.next += 1;
            // `topk(2` may go on as an expression, `topk(2 + 1, …)`: Loki names no token.
            self.expect(Token::Comma, &[])?;
            if k < 1.0 || k.fract() != 0.0 {
                return Err(ParseError::unplaced(
                    at,
                    format!("invalid parameter {name}({k},"),
                ));
            }
            Some(k)
        } else {
            None
        };
        let inner = self.metric(0)?;
        self.expect(Token::RParen, &[])?;
        if grouping.is_none() {
            grouping = self.grouping()?;
        }
        if grouping.is_some() && matches!(op, AggregateOp::Sort | AggregateOp::SortDesc) {
            return Err(ParseError::unplaced(
                at,
                "sort and sort_desc doesn't allow grouping by ",
            ));
        }
        Ok(MetricExpr::Aggregate {
            op,
            grouping,
            parameter,
            inner: Box::new(inner),
        })
    }

    fn grouping(&mut self) -> Result<Option<Grouping>, ParseError> {
        let without = match self.peek() {
            Some(Token::Ident(word)) if word == "by" => false,
            Some(Token::Ident(word)) if word == "without" => true,
            _ => return Ok(None),
        };
        self.next += 1;
        let labels = self.label_names()?;
        Ok(Some(Grouping { without, labels }))
    }

    /// `(a, b)`: label names in parentheses, maybe none.
    fn label_names(&mut self) -> Result<Vec<String>, ParseError> {
        self.expect(Token::LParen, &["("])?;
        let mut labels = Vec::new();
        if self.peek() != Some(&Token::RParen) {
            labels.push(self.ident(&["IDENTIFIER", ")"])?);
            while self.peek() == Some(&Token::Comma) {
                self.next += 1;
                labels.push(self.ident(&["IDENTIFIER"])?);
            }
        }
        self.expect(Token::RParen, &[",", ")"])?;
        Ok(labels)
    }
}

/// The lines a range function reads: its log query, unwrap, range and offset.
struct LogRange {
    query: LogQuery,
    unwrap: Option<Unwrap>,
    range: Duration,
    offset: Duration,
}

/// A set operator's name, as Loki's messages write it.
fn set_name(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::And => "and",
        BinaryOp::Or => "or",
        _ => "unless",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(text: &str) -> LogQuery {
        match parse(text).unwrap() {
            Query::Log(query) => query,
            other => panic!("not a log query: {other:?}"),
        }
    }

    fn metric(text: &str) -> MetricExpr {
        match parse(text).unwrap() {
            Query::Metric(expr) => expr,
            other => panic!("not a metric query: {other:?}"),
        }
    }

    fn error(text: &str) -> ParseError {
        parse(text).unwrap_err()
    }

    #[test]
    fn selectors_take_the_four_matchers() {
        let query =
            log(r#"{service_name="checkout", level=~"error|warn", env!="dev", pod!~"x.*"}"#);
        let ops: Vec<MatchOp> = query.selector.iter().map(|m| m.op).collect();
        assert_eq!(ops, [MatchOp::Eq, MatchOp::Re, MatchOp::Ne, MatchOp::NotRe]);
        assert_eq!(query.selector[1].value, "error|warn");
        assert!(query.pipeline.is_empty());
    }

    #[test]
    fn pipelines_chain_filters_parsers_and_formatting() {
        let query = log(
            r#"{app="api"} |= "GET" != "health" |~ "(?i)timeout" !~ "retry" | json | status >= 500 and duration > 1.5s or size < 10KB | line_format "{{.status}}" | drop a, b | keep status"#,
        );
        assert_eq!(query.pipeline.len(), 9, "{query:#?}");
        assert_eq!(
            query.pipeline[2],
            Stage::LineFilter {
                op: LineOp::Matches,
                pattern: LinePattern::Text("(?i)timeout".into()),
                or: Vec::new(),
            }
        );
        assert_eq!(query.pipeline[4], Stage::Parser(ParserKind::Json));
        let Stage::LabelFilter(LabelFilter::Or(left, right)) = &query.pipeline[5] else {
            panic!("{:?}", query.pipeline[5]);
        };
        assert!(matches!(**left, LabelFilter::And(_, _)));
        assert_eq!(
            **right,
            LabelFilter::Compare {
                label: "size".into(),
                op: CompareOp::Lt,
                value: LabelValue::Bytes(10_000)
            }
        );
        assert_eq!(query.pipeline[6], Stage::LineFormat("{{.status}}".into()));
        let name = |name: &str| NamedLabel::Name(name.into());
        assert_eq!(query.pipeline[7], Stage::Drop(vec![name("a"), name("b")]));
        assert_eq!(query.pipeline[8], Stage::Keep(vec![name("status")]));
    }

    #[test]
    fn line_filters_take_or_and_ip() {
        let text = |t: &str| LinePattern::Text(t.into());
        let query = log(r#"{app="a"} |= "a" or "b" != "c" or ip("::1") |~ "x" or "y""#);
        assert_eq!(
            query.pipeline,
            [
                Stage::LineFilter {
                    op: LineOp::Contains,
                    pattern: text("a"),
                    or: vec![text("b")],
                },
                Stage::LineFilter {
                    op: LineOp::NotContains,
                    pattern: text("c"),
                    or: Vec::new(),
                },
                Stage::LineFilter {
                    op: LineOp::NotContains,
                    pattern: LinePattern::Ip("::1".into()),
                    or: Vec::new(),
                },
                Stage::LineFilter {
                    op: LineOp::Matches,
                    pattern: text("x"),
                    or: vec![text("y")],
                },
            ]
        );
        let query = log(r#"{app="a"} |> "<_> a" or "b <_>" !> "c" or "d""#);
        let pattern = |op, t: &str, or: &[&str]| Stage::LineFilter {
            op,
            pattern: text(t),
            or: or.iter().map(|t| text(t)).collect(),
        };
        assert_eq!(
            query.pipeline,
            [
                pattern(LineOp::PatternMatches, "<_> a", &["b <_>"]),
                pattern(LineOp::NotPatternMatches, "c", &[]),
                pattern(LineOp::NotPatternMatches, "d", &[]),
            ]
        );
        assert_eq!(
            query.to_string(),
            r#"{app="a"} |> "<_> a" or "b <_>" !> "c" !> "d""#
        );
        let query = log(r#"{app="a"} | logfmt | addr != ip("10.0.0.0/8")"#);
        assert_eq!(
            query.pipeline[1],
            Stage::LabelFilter(LabelFilter::Ip {
                label: "addr".into(),
                negated: true,
                pattern: "10.0.0.0/8".into()
            })
        );
        assert!(error(r#"{app="a"} | a == ip("1.2.3.4")"#)
            .message
            .contains("unexpected ip"));
    }

    #[test]
    fn parsers_take_their_arguments_and_formatting_stages_theirs() {
        let query = log(
            r#"{app="a"} | json a="b.c", d | logfmt --strict --keep-empty | logfmt e | regexp "(?P<x>.)" | pattern "<y> z" | unpack | decolorize | label_format n=o, p="{{.q}}" | drop r="s", t | keep u=~"v""#,
        );
        let field = |label: &str, path: &str| Extraction {
            label: label.into(),
            path: path.into(),
        };
        assert_eq!(
            query.pipeline,
            [
                Stage::JsonFields(vec![field("a", "b.c"), field("d", "d")]),
                Stage::LogfmtWith {
                    strict: true,
                    keep_empty: true,
                    fields: Vec::new()
                },
                Stage::LogfmtWith {
                    strict: false,
                    keep_empty: false,
                    fields: vec![field("e", "e")]
                },
                Stage::Regexp("(?P<x>.)".into()),
                Stage::Pattern("<y> z".into()),
                Stage::Unpack,
                Stage::Decolorize,
                Stage::LabelFormat(vec![
                    LabelFormat {
                        label: "n".into(),
                        rename: true,
                        value: "o".into()
                    },
                    LabelFormat {
                        label: "p".into(),
                        rename: false,
                        value: "{{.q}}".into()
                    },
                ]),
                Stage::Drop(vec![
                    NamedLabel::Matching(Matcher {
                        label: "r".into(),
                        op: MatchOp::Eq,
                        value: "s".into()
                    }),
                    NamedLabel::Name("t".into()),
                ]),
                Stage::Keep(vec![NamedLabel::Matching(Matcher {
                    label: "u".into(),
                    op: MatchOp::Re,
                    value: "v".into()
                })]),
            ]
        );
        // A name that is not a keyword, followed by a comparison, is a label filter; a
        // keyword is not a name, as in Loki's lexer.
        assert!(matches!(
            log(r#"{app="a"} | unpacked="x""#).pipeline[0],
            Stage::LabelFilter(_)
        ));
        assert!(parse(r#"{app="a"} | pattern="x""#).is_err());
    }

    #[test]
    fn metric_queries_nest_range_functions_in_aggregations() {
        let expr = metric(r#"sum by (level) (count_over_time({service_name="api"} |= "x" [1m]))"#);
        let MetricExpr::Aggregate {
            op,
            grouping,
            inner,
            ..
        } = expr
        else {
            panic!()
        };
        assert_eq!(op, AggregateOp::Sum);
        assert_eq!(grouping.unwrap().labels, ["level"]);
        assert!(matches!(
            *inner,
            MetricExpr::Range(RangeExpr {
                function: RangeFunction::CountOverTime,
                range,
                ..
            }) if range == Duration::from_secs(60)
        ));
        // The grouping after the arguments, topk's k, and arithmetic with precedence.
        let after = metric(r#"topk(3, sum(rate({app="a"}[5m])) without (pod))"#);
        assert!(
            matches!(after, MetricExpr::Aggregate { op: AggregateOp::Topk, parameter: Some(k), .. } if k == 3.0)
        );
        let sum = metric("vector(1)+vector(1) * 2");
        let MetricExpr::Binary { op, right, .. } = sum else {
            panic!()
        };
        assert_eq!(op, BinaryOp::Add);
        assert!(matches!(
            *right,
            MetricExpr::Binary {
                op: BinaryOp::Mul,
                ..
            }
        ));
    }

    #[test]
    fn errors_say_where_and_what() {
        let unclosed = error(r#"{app="a""#);
        assert_eq!(unclosed.position, 8);
        let second_line = error("{app=\"a\"}\n  |= 42");
        assert_eq!(
            (second_line.line, second_line.column),
            (2, 6),
            "{second_line}"
        );
        let unknown = error(r#"stddev(rate({app="a"}[5m]))"#);
        assert!(
            unknown.message.contains("stddev is not supported"),
            "{unknown}"
        );
        let stage = error(r#"{app="a"} | xml"#);
        assert!(stage.message.contains("| xml is not supported"), "{stage}");
        let flag = error(r#"{app="a"} | logfmt --lenient"#);
        assert!(flag.message.contains("unknown logfmt flag"), "{flag}");
        let range = error(r#"rate({app="a"}[400d])"#);
        assert!(range.message.contains("longer than 30 days"), "{range}");
    }

    /// Syntax errors and what Loki 3.7.6 said of each, word for word: its token names, the
    /// tokens its grammar takes where they are at most four, its places.
    #[test]
    fn syntax_errors_are_lokis() {
        for (query, loki) in [
            ("", "parse error : syntax error: unexpected $end"),
            (" ", "parse error at line 1, col 2: syntax error: unexpected $end"),
            ("{", "parse error at line 1, col 2: syntax error: unexpected $end, expecting IDENTIFIER or }"),
            ("{a", "parse error at line 1, col 3: syntax error: unexpected $end, expecting = or =~ or !~ or !="),
            (r#"{a="b""#, "parse error at line 1, col 7: syntax error: unexpected $end, expecting } or ,"),
            (r#"{a="b" b="c"}"#, "parse error at line 1, col 8: syntax error: unexpected IDENTIFIER, expecting } or ,"),
            ("{a=b}", "parse error at line 1, col 4: syntax error: unexpected IDENTIFIER, expecting STRING"),
            (r#"{a=~"a",b="c",}"#, "parse error at line 1, col 15: syntax error: unexpected }, expecting IDENTIFIER"),
            (r#"{a="b"}}"#, "parse error at line 1, col 8: syntax error: unexpected }"),
            (r#"{a="b"} |= 5"#, "parse error at line 1, col 12: syntax error: unexpected NUMBER, expecting STRING or ip"),
            (r#"{a="b"} | x"#, "parse error at line 1, col 12: syntax error: unexpected $end"),
            (r#"{a="b"} | x > "s""#, "parse error at line 1, col 15: syntax error: unexpected STRING"),
            (r#"{a="b"} | x =~ 5"#, "parse error at line 1, col 16: syntax error: unexpected NUMBER, expecting STRING"),
            (r#"{a="b"} | x="1" or"#, "parse error at line 1, col 19: syntax error: unexpected $end, expecting IDENTIFIER or ("),
            (r#"{a="b"} | drop a,"#, "parse error at line 1, col 18: syntax error: unexpected $end, expecting IDENTIFIER"),
            (r#"{a="b"} [5m]"#, "parse error at line 0, col 9: syntax error: unexpected RANGE"),
            (r#"{a="b"} | json | unwrap x"#, "parse error at line 1, col 18: syntax error: unexpected unwrap"),
            ("rate(", "parse error at line 1, col 6: syntax error: unexpected $end, expecting NUMBER or { or ("),
            (r#"rate({a="b"})"#, "parse error at line 1, col 13: syntax error: unexpected )"),
            (r#"rate({a="b"}[5])"#, r#"parse error at line 0, col 13: not a valid duration string: "5""#),
            (r#"count_over_time({a="b"}[5m)"#, "parse error at line 0, col 24: missing closing ']' in duration"),
            (r#"rate({a="b"}[5m] offset)"#, "parse error at line 1, col 24: syntax error: unexpected ), expecting DURATION"),
            ("sum(", "parse error at line 1, col 5: syntax error: unexpected $end"),
            (r#"sum by (rate({a="b"}[5m]))"#, "parse error at line 1, col 9: syntax error: unexpected RATE, expecting IDENTIFIER or )"),
            (r#"sum by (a,) (rate({a="b"}[5m]))"#, "parse error at line 1, col 11: syntax error: unexpected ), expecting IDENTIFIER"),
            (r#"topk(rate({a="b"}[5m]))"#, "parse error : parameter required for operation topk"),
            ("topk(3) by (a)", "parse error : parameter required for operation topk"),
            ("topk(3) sum(vector(1))", "parse error at line 1, col 9: syntax error: unexpected SUM"),
            (r#"count_over_time({a="b"} | json [5m] | logfmt)"#, "parse error at line 1, col 37: syntax error: unexpected |, expecting )"),
            (r#"count_over_time({a="b"}[5m] | json offset 1h)"#, "parse error at line 1, col 36: syntax error: unexpected offset, expecting )"),
            ("rate(5e", "parse error at line 1, col 6: exponent has no digits"),
            ("+(rate({a=\"b\"}[1m]))", "parse error at line 1, col 2: syntax error: unexpected (, expecting NUMBER"),
            (r#"{a="b"} or {c="d"}"#, "parse error : unexpected type for left leg of binary operation (or): *syntax.MatchersExpr"),
            (r#"{a="b"} | json + 1"#, "parse error : unexpected type for left leg of binary operation (+): *syntax.PipelineExpr"),
            (r#"rate((a="b"}[1m]))"#, "parse error at line 1, col 7: syntax error: unexpected IDENTIFIER, expecting { or ("),
            (r#"count_over_time((({a="b"} |= "x"))[5m])"#, "parse error at line 1, col 34: syntax error: unexpected ), expecting RANGE"),
            (r#"{a="b"} | x > +"#, "parse error at line 1, col 16: syntax error: unexpected $end, expecting NUMBER"),
            (r#"{a="b"} | d >= 1m ( keep a"#, "parse error at line 1, col 21: syntax error: unexpected keep, expecting IDENTIFIER or ("),
            (r#"({a="b"} | logfmt | unwrap x [5m])"#, "parse error at line 1, col 21: syntax error: unexpected unwrap"),
            (r#"sum by (5a) (rate({a="b"}[5m]))"#, "parse error at line 1, col 9: syntax error: unexpected NUMBER, expecting IDENTIFIER or )"),
            (r#"{a="b", c~"d"}"#, "parse error at line 1, col 10: syntax error: unexpected IDENTIFIER, expecting = or =~ or !~ or !="),
            (r#"rate({a="b"}[5m]) + on rate({a="b"}[5m])"#, "parse error at line 1, col 24: syntax error: unexpected RATE, expecting ("),
            (r#"rate({a="b"}[5m]) == == 1"#, "parse error at line 0, col 22: syntax error: unexpected =="),
            (r#"rate({a="b"}[5m]) > bool"#, "parse error at line 1, col 25: syntax error: unexpected $end"),
            ("vector(", "parse error at line 1, col 8: syntax error: unexpected $end, expecting NUMBER"),
            (r#"label_replace(rate({a="b"}[5m]), "a")"#, "parse error at line 1, col 37: syntax error: unexpected ), expecting ,"),
            ("foo(", "parse error at line 1, col 1: syntax error: unexpected IDENTIFIER"),
            ("sum by", "parse error at line 1, col 1: syntax error: unexpected IDENTIFIER"),
            ("- rate({a=\"b\"}[5m])", "parse error at line 1, col 3: syntax error: unexpected RATE, expecting NUMBER"),
            (r#"sum_over_time({a="b"} | unwrap [5m])"#, "parse error at line 0, col 32: syntax error: unexpected RANGE, expecting IDENTIFIER or BYTES_CONV or DURATION_CONV or DURATION_SECONDS_CONV"),
            (r#"sum_over_time({a="b"} | unwrap foo(x) [5m])"#, "parse error at line 1, col 35: syntax error: unexpected (, expecting RANGE or |"),
            (r#"max_over_time(rate({a="b"}[1m])[5m:1m])"#, "parse error at line 1, col 15: syntax error: unexpected RATE, expecting NUMBER or { or ("),
            (r#"{a="b"} |= `x"#, "parse error at line 1, col 12: literal not terminated"),
            (r#"{a=~"("}"#, "parse error : error parsing regexp: missing closing ): `(`"),
            (r#"{a=~"a**"}"#, "parse error : error parsing regexp: invalid nested repetition operator: `**`"),
            (r#"{a="b"} | x =~ "(""#, "parse error : error parsing regexp: missing closing ): `(`"),
            (r#"{a="b"} |= "x" | json |~ "(" | y="1" |~ "z""#, r#"parse error : stage '|= "x" |~ "("' : error parsing regexp: missing closing ): `(`"#),
            (r#"{a="b"} |= "x" | line_format "z" |~ "(""#, r#"parse error : stage '|~ "("' : error parsing regexp: missing closing ): `(`"#),
            (r#"label_replace(rate({a="b"}[5m]), "a", "b", "c", "(")"#, "parse error : invalid regex in label_replace: error parsing regexp: missing closing ): `^(?:()$`"),
            (r#"{a=~".*"}"#, r#"parse error : queries require at least one regexp or equality matcher that does not have an empty-compatible value. For instance, app=~".*" does not meet this requirement, but app=~".+" will"#),
        ] {
            assert_eq!(error(query).to_string(), loki, "{query}");
        }
    }

    #[test]
    fn range_functions_take_unwrap_offset_a_parameter_and_a_grouping() {
        let MetricExpr::Range(range) = metric(
            r#"quantile_over_time(0.9, {app="a"} | logfmt | unwrap duration(took) | __error__="" [10m] offset 5m) by (method)"#,
        ) else {
            panic!()
        };
        assert_eq!(range.function, RangeFunction::QuantileOverTime);
        assert_eq!(range.parameter, Some(0.9));
        assert_eq!(range.offset, Duration::from_secs(300));
        assert_eq!(range.grouping.unwrap().labels, ["method"]);
        let unwrap = range.unwrap.unwrap();
        assert_eq!(
            (
                unwrap.label.as_str(),
                unwrap.conversion,
                unwrap.filters.len()
            ),
            ("took", Conversion::Duration, 1)
        );
        assert_eq!(range.query.pipeline, [Stage::Parser(ParserKind::Logfmt)]);
        // A label called `bytes` is a label, `bytes(…)` a conversion.
        let MetricExpr::Range(bytes) = metric(r#"sum_over_time({app="a"} | unwrap bytes [1m])"#)
        else {
            panic!()
        };
        assert_eq!(bytes.unwrap.unwrap().conversion, Conversion::Number);
        // As Loki: the pipeline may follow the range, and the lines be in parentheses.
        assert_eq!(
            metric(r#"count_over_time(({a="b"} | json)[5m] offset 1m)"#),
            metric(r#"count_over_time((({a="b"}[5m] offset 1m | json)))"#)
        );
        assert_eq!(
            metric(r#"sum_over_time({a="b"}[5m] offset 1m | json | unwrap x | y="1")"#),
            metric(r#"sum_over_time({a="b"} | json | unwrap x | y="1" [5m] offset 1m)"#)
        );
        // Loki 3.7.6's answers, word for word.
        for (query, loki) in [
            (r#"quantile_over_time({a="b"} | unwrap x [5m])"#, "parse error : parameter required for operation quantile_over_time"),
            (r#"sum_over_time(0.5, {a="b"} | unwrap x [5m])"#, "parse error : parameter 0.5 not supported for operation sum_over_time"),
            (r#"sum_over_time({a="b"} [5m])"#, "parse error : invalid aggregation sum_over_time without unwrap"),
            (r#"count_over_time({a="b"} | unwrap x [5m])"#, "parse error : invalid aggregation count_over_time with unwrap"),
            (r#"sum_over_time({a="b"} | unwrap x [5m]) by (a)"#, "parse error : grouping not allowed for sum_over_time aggregation"),
            (r#"rate({a="b"}[5m]) by (a)"#, "parse error : grouping not allowed for rate aggregation"),
            ("vector(1) or 2", "parse error : unexpected literal for right leg of logical/set binary operation (or): 2.000000"),
            ("sort(vector(1)) by (a)", "parse error : sort and sort_desc doesn't allow grouping by "),
        ] {
            assert_eq!(error(query).to_string(), loki, "{query}");
        }
    }

    #[test]
    fn binary_operators_bind_as_in_loki_with_their_modifiers() {
        // or < and, unless < comparisons < + - < * /
        let MetricExpr::Binary { op, right, .. } =
            metric("vector(1) or vector(2) and vector(3) > bool 1 + 2 * 3")
        else {
            panic!()
        };
        assert_eq!(op, BinaryOp::Or);
        let MetricExpr::Binary { op, right, .. } = *right else {
            panic!()
        };
        assert_eq!(op, BinaryOp::And);
        let MetricExpr::Binary { op, modifier, .. } = *right else {
            panic!()
        };
        assert_eq!((op, modifier.return_bool), (BinaryOp::Gt, true));
        let MetricExpr::Binary { modifier, .. } = metric(
            r#"sum by (a, b) (rate({x="y"}[1m])) / on (a) group_left (c) sum by (a, c) (rate({x="y"}[1m]))"#,
        ) else {
            panic!()
        };
        assert!(modifier.on);
        assert_eq!(modifier.labels, Some(vec!["a".to_string()]));
        assert_eq!(
            modifier.group,
            Some(Group {
                right: false,
                include: vec!["c".into()]
            })
        );
        let MetricExpr::Binary { modifier, .. } =
            metric("vector(1) unless ignoring (a) group_right vector(2)")
        else {
            panic!()
        };
        assert!(!modifier.on && modifier.group.unwrap().right);
        let MetricExpr::LabelReplace(replace) =
            metric(r#"label_replace(bottomk(2, vector(1)), "dst", "$1", "src", "(.*)")"#)
        else {
            panic!()
        };
        assert_eq!(
            (replace.dst.as_str(), replace.regex.as_str()),
            ("dst", "(.*)")
        );
        assert!(error(r#"label_replace(vector(1), "a", "b", "c", "(")"#)
            .to_string()
            .starts_with("parse error : invalid regex in label_replace:"));
    }

    #[test]
    fn modulo_binds_as_a_product_and_a_power_tighter_and_from_the_right() {
        let rate = r#"sum(rate({x="y"}[1m]))"#;
        // `a + b % c` is `a + (b % c)`; `a % b * c` is `(a % b) * c`.
        let MetricExpr::Binary { op, right, .. } = metric(&format!("{rate} + {rate} % {rate}"))
        else {
            panic!()
        };
        assert_eq!(op, BinaryOp::Add);
        assert!(matches!(
            *right,
            MetricExpr::Binary {
                op: BinaryOp::Mod,
                ..
            }
        ));
        let MetricExpr::Binary { op, left, .. } = metric(&format!("{rate} % {rate} * {rate}"))
        else {
            panic!()
        };
        assert_eq!(op, BinaryOp::Mul);
        assert!(matches!(
            *left,
            MetricExpr::Binary {
                op: BinaryOp::Mod,
                ..
            }
        ));
        // `a * b ^ c ^ d` is `a * (b ^ (c ^ d))`.
        let MetricExpr::Binary { op, right, .. } =
            metric(&format!("{rate} * {rate} ^ {rate} ^ {rate}"))
        else {
            panic!()
        };
        assert_eq!(op, BinaryOp::Mul);
        let MetricExpr::Binary { op, right, .. } = *right else {
            panic!()
        };
        assert_eq!(op, BinaryOp::Pow);
        assert!(matches!(
            *right,
            MetricExpr::Binary {
                op: BinaryOp::Pow,
                ..
            }
        ));
        // On numbers: 2 ^ (3 ^ 2), and Go's remainder, which keeps the left side's sign.
        let MetricExpr::Binary {
            op, left, right, ..
        } = metric("2 ^ 3 ^ 2")
        else {
            panic!()
        };
        assert_eq!((op, *left), (BinaryOp::Pow, MetricExpr::Number(2.0)));
        assert!(matches!(
            *right,
            MetricExpr::Binary {
                op: BinaryOp::Pow,
                ..
            }
        ));
        assert_eq!(
            BinaryOp::Pow.apply(2.0, BinaryOp::Pow.apply(3.0, 2.0)),
            512.0
        );
        assert_eq!(BinaryOp::Mod.apply(-7.0, 3.0), -1.0);
        assert_eq!(BinaryOp::Mod.apply(7.5, -2.0), 1.5);
        assert!(BinaryOp::Mod.apply(5.0, 0.0).is_nan());
    }

    #[test]
    fn hostile_queries_are_refused_before_they_cost_anything() {
        let deep = format!("{}vector(1){}", "(".repeat(100), ")".repeat(100));
        assert!(error(&deep).message.contains("nests deeper than 32"));
        let aggregations = format!(
            "{}count_over_time({{a=\"b\"}}[1m]){}",
            "sum(".repeat(40),
            ")".repeat(40)
        );
        assert!(error(&aggregations).message.contains("nests deeper"));
        let huge = format!(r#"{{a="{}"}}"#, "x".repeat(MAX_QUERY_BYTES));
        assert!(error(&huge).message.contains("bytes; at most"));
        let filters = format!(
            "{{a=\"b\"}} | {}",
            vec!["(x=1"; 50].join(" and ") + &")".repeat(50)
        );
        assert!(error(&filters).message.contains("nests deeper"));
    }
}
