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
    let tokens = lexer::tokenize(text)?;
    let mut parser = Parser {
        tokens,
        next: 0,
        end: text.len(),
        depth: 0,
    };
    let query = if parser.peek() == Some(&Token::LBrace) {
        Query::Log(parser.log_query()?)
    } else {
        Query::Metric(parser.metric(0)?)
    };
    match parser.peek_at() {
        None => Ok(query),
        Some((at, Token::Ident(word)))
            if matches!(query, Query::Log(_)) && matches!(word.as_str(), "or" | "and" | "unless") =>
        {
            Err(ParseError::at(
                at,
                format!(
                    "{word} combines metric queries, not log queries; for lines with either text, write |= \"a\" or \"b\""
                ),
            ))
        }
        Some((at, token)) => Err(ParseError::at(
            at,
            format!("syntax error: unexpected {}", token.describe()),
        )),
    }
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

    fn peek_at(&self) -> Option<(usize, &Token)> {
        self.tokens.get(self.next).map(|(at, token)| (*at, token))
    }

    fn position(&self) -> usize {
        self.tokens.get(self.next).map_or(self.end, |(at, _)| *at)
    }

    fn advance(&mut self) -> Option<(usize, Token)> {
        let token = self.tokens.get(self.next).cloned();
        self.next += usize::from(token.is_some());
        token
    }

    fn unexpected(&self, wanted: &str) -> ParseError {
        match self.peek_at() {
            Some((at, token)) => ParseError::at(
                at,
                format!(
                    "syntax error: unexpected {}, expecting {wanted}",
                    token.describe()
                ),
            ),
            None => ParseError::at(
                self.end,
                format!("syntax error: unexpected end of query, expecting {wanted}"),
            ),
        }
    }

    fn expect(&mut self, token: Token, wanted: &str) -> Result<(), ParseError> {
        if self.peek() == Some(&token) {
            self.next += 1;
            Ok(())
        } else {
            Err(self.unexpected(wanted))
        }
    }

    fn ident(&mut self, wanted: &str) -> Result<String, ParseError> {
        match self.peek() {
            Some(Token::Ident(name)) => {
                let name = name.clone();
                self.next += 1;
                Ok(name)
            }
            _ => Err(self.unexpected(wanted)),
        }
    }

    fn string(&mut self, wanted: &str) -> Result<String, ParseError> {
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
        let open = self.position();
        self.expect(Token::LBrace, "{")?;
        let mut matchers = Vec::new();
        while self.peek() != Some(&Token::RBrace) {
            if !matchers.is_empty() {
                self.expect(Token::Comma, ", or }")?;
            }
            let label = self.ident("a label name")?;
            let op = match self.advance() {
                Some((_, Token::Eq)) => MatchOp::Eq,
                Some((_, Token::Ne)) => MatchOp::Ne,
                Some((_, Token::Re)) => MatchOp::Re,
                Some((_, Token::NotRe)) => MatchOp::NotRe,
                _ => {
                    self.next -= 1;
                    return Err(self.unexpected("=, !=, =~ or !~"));
                }
            };
            let value = self.string("a quoted label value")?;
            matchers.push(Matcher { label, op, value });
        }
        self.expect(Token::RBrace, "}")?;
        // Loki refuses a selector that matches everything: it would read every stream.
        let narrows = matchers.iter().any(|matcher| match matcher.op {
            MatchOp::Eq => !matcher.value.is_empty(),
            MatchOp::Re => !matches!(matcher.value.as_str(), "" | ".*"),
            MatchOp::Ne | MatchOp::NotRe => false,
        });
        if !narrows {
            return Err(ParseError::at(
                open,
                "queries require at least one label matcher that is not empty-compatible, like {service_name=\"api\"}",
            ));
        }
        Ok(matchers)
    }

    /// The next pipeline stage, or `None` where the pipeline ends. A negated line filter with
    /// `or` is one stage per alternative, as Loki reads it (`!= "a" or "b"`: neither).
    fn stage(&mut self) -> Result<Option<Vec<Stage>>, ParseError> {
        let op = match self.peek() {
            Some(Token::PipeEq) => LineOp::Contains,
            Some(Token::Ne) => LineOp::NotContains,
            Some(Token::PipeTilde) => LineOp::Matches,
            Some(Token::NotRe) => LineOp::NotMatches,
            Some(Token::Pipe) => {
                self.next += 1;
                return self.pipe_stage().map(|stage| Some(vec![stage]));
            }
            _ => return Ok(None),
        };
        self.next += 1;
        let pattern = self.line_pattern()?;
        let mut or = Vec::new();
        while self.peek() == Some(&Token::Ident("or".into())) {
            self.next += 1;
            or.push(self.line_pattern()?);
        }
        if matches!(op, LineOp::NotContains | LineOp::NotMatches) {
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
        if matches!(self.peek(), Some(Token::Ident(word)) if word == "ip") {
            self.next += 1;
            return Ok(LinePattern::Ip(self.ip_call()?));
        }
        Ok(LinePattern::Text(
            self.string("a quoted line filter or ip(\"…\")")?,
        ))
    }

    /// `("pattern")` after `ip`.
    fn ip_call(&mut self) -> Result<String, ParseError> {
        self.expect(Token::LParen, "( after ip")?;
        let pattern = self.string("a quoted IP, CIDR range or from-to range")?;
        self.expect(Token::RParen, ")")?;
        Ok(pattern)
    }

    /// What follows a `|`: a parser, a formatting stage or a label filter.
    fn pipe_stage(&mut self) -> Result<Stage, ParseError> {
        if self.peek() == Some(&Token::LParen) {
            return Ok(Stage::LabelFilter(self.label_filter_or()?));
        }
        let at = self.position();
        let name = self.ident("a parser, line_format, drop, keep or a label filter")?;
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
        let stage =
            match name.as_str() {
                _ if compared => None,
                "json" if matches!(self.peek(), Some(Token::Ident(_))) => {
                    Some(Stage::JsonFields(self.extractions()?))
                }
                "json" => {
                    if self.peek() == Some(&Token::Minus) {
                        return Err(ParseError::at(
                            self.position(),
                            "| json takes no flags; --strict and --keep-empty are logfmt's",
                        ));
                    }
                    Some(Stage::Parser(ParserKind::Json))
                }
                "logfmt" => Some(self.logfmt()?),
                "regexp" => Some(Stage::Regexp(self.string("a quoted regular expression")?)),
                "pattern" => Some(Stage::Pattern(self.string("a quoted pattern")?)),
                "unpack" => Some(Stage::Unpack),
                "decolorize" => Some(Stage::Decolorize),
                "line_format" => Some(Stage::LineFormat(self.string("a quoted template")?)),
                "label_format" => Some(Stage::LabelFormat(self.label_formats()?)),
                "drop" => Some(Stage::Drop(self.named_labels()?)),
                "keep" => Some(Stage::Keep(self.named_labels()?)),
                "unwrap" => return Err(ParseError::at(
                    at,
                    "| unwrap is not supported; it takes a range function such as sum_over_time",
                )),
                "xml" => {
                    return Err(ParseError::at(at, "| xml is not supported"));
                }
                _ => None,
            };
        if let Some(stage) = stage {
            return Ok(stage);
        }
        self.next -= 1;
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
        let fields = if matches!(self.peek(), Some(Token::Ident(_))) {
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
            let label = self.ident("a label name")?;
            let path = if self.peek() == Some(&Token::Eq) {
                self.next += 1;
                self.string("a quoted path")?
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
            let label = self.ident("a label name")?;
            self.expect(Token::Eq, "=")?;
            let (rename, value) = match self.advance() {
                Some((_, Token::Ident(source))) => (true, source),
                Some((_, Token::Str(template))) => (false, template),
                _ => {
                    self.next -= 1;
                    return Err(self.unexpected("a label name or a quoted template"));
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
            let label = self.ident("a label name")?;
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
                    let value = self.string("a quoted label value")?;
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
                Some(Token::Ident(word)) if word != "or" => {}
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
            self.expect(Token::RParen, ")")?;
            return Ok(inner);
        }
        let label = self.ident("a label name")?;
        let op = match self.advance() {
            Some((_, Token::Eq | Token::EqEq)) => CompareOp::Eq,
            Some((_, Token::Ne)) => CompareOp::Ne,
            Some((_, Token::Re)) => CompareOp::Re,
            Some((_, Token::NotRe)) => CompareOp::NotRe,
            Some((_, Token::Gt)) => CompareOp::Gt,
            Some((_, Token::Ge)) => CompareOp::Ge,
            Some((_, Token::Lt)) => CompareOp::Lt,
            Some((_, Token::Le)) => CompareOp::Le,
            _ => {
                self.next -= 1;
                return Err(self.unexpected("a comparison (=, !=, =~, !~, >, >=, <, <=)"));
            }
        };
        if matches!(op, CompareOp::Eq | CompareOp::Ne)
            && matches!(self.peek(), Some(Token::Ident(word)) if word == "ip")
        {
            let at = self.position();
            if matches!(self.tokens.get(self.next - 1), Some((_, Token::EqEq))) {
                return Err(ParseError::at(
                    at,
                    "syntax error: unexpected ip; write = ip(\"…\")",
                ));
            }
            self.next += 1;
            return Ok(LabelFilter::Ip {
                label,
                negated: op == CompareOp::Ne,
                pattern: self.ip_call()?,
            });
        }
        let at = self.position();
        let value = match self.advance() {
            Some((_, Token::Str(text))) => LabelValue::Text(text),
            Some((_, Token::Number(value))) => LabelValue::Number(value),
            Some((_, Token::Minus)) => match self.advance() {
                Some((_, Token::Number(value))) => LabelValue::Number(-value),
                _ => {
                    return Err(ParseError::at(
                        at,
                        "syntax error: expecting a number after -",
                    ))
                }
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
            _ => {
                self.next -= 1;
                return Err(self.unexpected("a string, number, duration or size"));
            }
        };
        let textual = matches!(value, LabelValue::Text(_));
        let ordered = matches!(
            op,
            CompareOp::Gt | CompareOp::Ge | CompareOp::Lt | CompareOp::Le
        );
        if ordered && textual {
            return Err(ParseError::at(
                at,
                "a string cannot be compared with >, >=, < or <=; compare with a number, duration or size",
            ));
        }
        if matches!(op, CompareOp::Re | CompareOp::NotRe) && !textual {
            return Err(ParseError::at(
                at,
                "=~ and !~ take a quoted regular expression",
            ));
        }
        Ok(LabelFilter::Compare { label, op, value })
    }

    // ---- metric queries

    /// A metric expression whose binary operators bind at least as tightly as `min_precedence`.
    fn metric(&mut self, min_precedence: u8) -> Result<MetricExpr, ParseError> {
        let mut left = self.metric_operand()?;
        loop {
            let (op, precedence) = match self.peek() {
                Some(Token::Plus) => (BinaryOp::Add, 1),
                Some(Token::Minus) => (BinaryOp::Sub, 1),
                Some(Token::Star) => (BinaryOp::Mul, 2),
                Some(Token::Slash) => (BinaryOp::Div, 2),
                Some(Token::Gt | Token::Ge | Token::Lt | Token::Le | Token::EqEq | Token::Ne) => {
                    return Err(ParseError::at(
                        self.position(),
                        "comparison operators between metric expressions are not supported; + - * / are",
                    ))
                }
                _ => return Ok(left),
            };
            if precedence < min_precedence {
                return Ok(left);
            }
            self.next += 1;
            let right = self.nested(|parser| parser.metric(precedence + 1))?;
            left = MetricExpr::Binary {
                op,
                left: Box::new(left),
                right: Box::new(right),
            };
        }
    }

    fn metric_operand(&mut self) -> Result<MetricExpr, ParseError> {
        let at = self.position();
        match self.advance() {
            Some((_, Token::Number(value))) => Ok(MetricExpr::Number(value)),
            Some((_, Token::Minus)) => match self.advance() {
                Some((_, Token::Number(value))) => Ok(MetricExpr::Number(-value)),
                _ => Err(ParseError::at(at, "syntax error: expecting a number after -")),
            },
            Some((_, Token::LParen)) => {
                let inner = self.nested(|parser| parser.metric(0))?;
                self.expect(Token::RParen, ")")?;
                Ok(inner)
            }
            Some((_, Token::Ident(name))) => self.function(at, &name),
            Some((_, Token::LBrace)) => Err(ParseError::at(
                at,
                "a log query cannot be combined here; wrap it in a range function like count_over_time({…}[5m])",
            )),
            _ => {
                self.next = self.next.saturating_sub(1);
                Err(self.unexpected("a metric expression"))
            }
        }
    }

    fn function(&mut self, at: usize, name: &str) -> Result<MetricExpr, ParseError> {
        let range = match name {
            "count_over_time" => Some(RangeFunction::CountOverTime),
            "rate" => Some(RangeFunction::Rate),
            "bytes_over_time" => Some(RangeFunction::BytesOverTime),
            "bytes_rate" => Some(RangeFunction::BytesRate),
            _ => None,
        };
        if let Some(function) = range {
            return self.nested(|parser| parser.range_function(function));
        }
        let aggregate = match name {
            "sum" => Some(AggregateOp::Sum),
            "count" => Some(AggregateOp::Count),
            "avg" => Some(AggregateOp::Avg),
            "min" => Some(AggregateOp::Min),
            "max" => Some(AggregateOp::Max),
            "topk" => Some(AggregateOp::Topk),
            _ => None,
        };
        if let Some(op) = aggregate {
            return self.nested(|parser| parser.aggregation(op));
        }
        if name == "vector" {
            self.expect(Token::LParen, "(")?;
            let value = match self.advance() {
                Some((_, Token::Number(value))) => value,
                _ => {
                    self.next = self.next.saturating_sub(1);
                    return Err(self.unexpected("a number"));
                }
            };
            self.expect(Token::RParen, ")")?;
            return Ok(MetricExpr::Vector(value));
        }
        Err(ParseError::at(
            at,
            format!(
                "{name} is not supported; supported: count_over_time, rate, bytes_over_time, bytes_rate, \
                 sum, count, avg, min, max, topk, vector"
            ),
        ))
    }

    fn range_function(&mut self, function: RangeFunction) -> Result<MetricExpr, ParseError> {
        self.expect(Token::LParen, "(")?;
        let query = self.log_query()?;
        self.expect(Token::LBracket, "[ and a range like [5m]")?;
        let at = self.position();
        let range = match self.advance() {
            Some((_, Token::Unit(text))) => lexer::duration(&text)
                .filter(|range| !range.is_zero())
                .ok_or_else(|| ParseError::at(at, format!("{text:?} is not a range like 5m")))?,
            _ => {
                self.next = self.next.saturating_sub(1);
                return Err(self.unexpected("a range like 5m"));
            }
        };
        if range > MAX_RANGE {
            return Err(ParseError::at(
                at,
                format!(
                    "the range is longer than {} days",
                    MAX_RANGE.as_secs() / 86_400
                ),
            ));
        }
        self.expect(Token::RBracket, "]")?;
        if matches!(self.peek(), Some(Token::Ident(word)) if word == "offset") {
            return Err(ParseError::at(self.position(), "offset is not supported"));
        }
        self.expect(Token::RParen, ")")?;
        Ok(MetricExpr::Range {
            function,
            query,
            range,
        })
    }

    fn aggregation(&mut self, op: AggregateOp) -> Result<MetricExpr, ParseError> {
        // The grouping may come before the arguments or after them.
        let mut grouping = self.grouping()?;
        self.expect(Token::LParen, "(")?;
        let parameter = if op == AggregateOp::Topk {
            let at = self.position();
            let k = match self.advance() {
                Some((_, Token::Number(k))) if k >= 1.0 && k.fract() == 0.0 => k,
                _ => {
                    return Err(ParseError::at(
                        at,
                        "topk takes a whole number k first: topk(5, …)",
                    ))
                }
            };
            self.expect(Token::Comma, ",")?;
            Some(k)
        } else {
            None
        };
        let inner = self.metric(0)?;
        self.expect(Token::RParen, ")")?;
        if let Some(after) = self.grouping()? {
            if grouping.is_some() {
                return Err(ParseError::at(
                    self.position(),
                    "the grouping is given twice",
                ));
            }
            grouping = Some(after);
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
        self.expect(Token::LParen, "(")?;
        let mut labels = Vec::new();
        while self.peek() != Some(&Token::RParen) {
            if !labels.is_empty() {
                self.expect(Token::Comma, ", or )")?;
            }
            labels.push(self.ident("a label name")?);
        }
        self.expect(Token::RParen, ")")?;
        Ok(Some(Grouping { without, labels }))
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
        // A stage's name followed by a comparison is a label filter.
        assert!(matches!(
            log(r#"{app="a"} | pattern="x""#).pipeline[0],
            Stage::LabelFilter(_)
        ));
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
            MetricExpr::Range {
                function: RangeFunction::CountOverTime,
                range,
                ..
            } if range == Duration::from_secs(60)
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
        assert!(unclosed.message.contains("end of query"), "{unclosed}");
        assert_eq!(
            unclosed.to_string(),
            "parse error at line 1, col 9: syntax error: unexpected end of query, expecting , or }"
        );
        let everything = error(r#"{app=~".*"}"#);
        assert!(
            everything.message.contains("at least one label matcher"),
            "{everything}"
        );
        let second_line = error("{app=\"a\"}\n  |= 42");
        assert_eq!(
            (second_line.line, second_line.column),
            (2, 6),
            "{second_line}"
        );
        let unknown = error(r#"quantile_over_time(0.9, {app="a"} | unwrap x [5m])"#);
        assert!(
            unknown
                .message
                .contains("quantile_over_time is not supported"),
            "{unknown}"
        );
        assert_eq!(unknown.position, 0);
        let stage = error(r#"{app="a"} | xml"#);
        assert!(stage.message.contains("| xml is not supported"), "{stage}");
        let combined = error(r#"{app="a"} or {app="b"}"#);
        assert!(
            combined.message.contains("or combines metric queries"),
            "{combined}"
        );
        let pattern_filter = error(r#"{app="a"} |> "<_> x""#);
        assert!(
            pattern_filter.message.contains("|> and !>"),
            "{pattern_filter}"
        );
        let flag = error(r#"{app="a"} | logfmt --lenient"#);
        assert!(flag.message.contains("unknown logfmt flag"), "{flag}");
        let compare = error(r#"{app="a"} | status > "500""#);
        assert!(compare.message.contains("cannot be compared"), "{compare}");
        let range = error(r#"rate({app="a"}[400d])"#);
        assert!(range.message.contains("longer than 30 days"), "{range}");
        assert!(error(r#"{app="a"} extra"#)
            .message
            .contains("unexpected \"extra\""));
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
