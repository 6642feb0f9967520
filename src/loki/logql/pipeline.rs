//! A log query made runnable: its selector's matchers and its stages, with every regular
//! expression compiled once (under a size limit), applied to each stored row in turn. This is the
//! authority on what matches: the database's conditions only narrow what it sends.

use regex::{Regex, RegexBuilder};

use super::ast::*;
use super::format::Quoted;
use super::labels::{self, Labels};
use super::lexer;
use crate::storage::StoredRow;

/// The most memory one compiled regular expression may take; a pattern that needs more is
/// refused rather than allowed to take the service's memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Loki's label for a stage that could not do its work on a line.
pub(crate) const ERROR_LABEL: &str = "__error__";
/// The details of that error.
pub(crate) const ERROR_DETAILS_LABEL: &str = "__error_details__";

/// Why a parsed query cannot run: a regular expression or a template it cannot use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CompileError(pub String);

/// Compiles a regular expression of the query, anchored to the whole value if `whole`.
pub(crate) fn regex(pattern: &str, whole: bool) -> Result<Regex, CompileError> {
    let source = if whole {
        format!("^(?:{pattern})$")
    } else {
        pattern.to_owned()
    };
    RegexBuilder::new(&source)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|err| match err {
            regex::Error::CompiledTooBig(_) => CompileError(format!(
                "the regular expression {pattern:?} is too large (limit {} KiB compiled)",
                REGEX_SIZE_LIMIT >> 10
            )),
            other => CompileError(format!("invalid regular expression {pattern:?}: {other}")),
        })
}

/// A selector matcher, ready to test a label set.
#[derive(Clone, Debug)]
struct LabelMatcher {
    label: String,
    test: TextTest,
}

#[derive(Clone, Debug)]
enum TextTest {
    Eq(String),
    Ne(String),
    Re(Regex),
    NotRe(Regex),
}

impl TextTest {
    fn new(op: MatchOp, value: &str) -> Result<Self, CompileError> {
        Ok(match op {
            MatchOp::Eq => TextTest::Eq(value.to_owned()),
            MatchOp::Ne => TextTest::Ne(value.to_owned()),
            MatchOp::Re => TextTest::Re(regex(value, true)?),
            MatchOp::NotRe => TextTest::NotRe(regex(value, true)?),
        })
    }

    fn holds(&self, value: &str) -> bool {
        match self {
            TextTest::Eq(text) => value == text,
            TextTest::Ne(text) => value != text,
            TextTest::Re(re) => re.is_match(value),
            TextTest::NotRe(re) => !re.is_match(value),
        }
    }
}

/// One runnable stage.
#[derive(Clone, Debug)]
enum Step {
    Contains(String),
    NotContains(String),
    Matches(Regex),
    NotMatches(Regex),
    Json,
    Logfmt,
    Filter(Condition),
    Format(Vec<Piece>),
    Drop(Vec<String>),
    Keep(Vec<String>),
}

/// A compiled label filter.
#[derive(Clone, Debug)]
enum Condition {
    Text {
        label: String,
        test: TextTest,
    },
    Number {
        label: String,
        op: CompareOp,
        value: f64,
        kind: NumberKind,
    },
    And(Box<Condition>, Box<Condition>),
    Or(Box<Condition>, Box<Condition>),
}

/// How a label's text becomes a number for a comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NumberKind {
    Plain,
    Duration,
    Bytes,
}

impl NumberKind {
    /// The number a label's text stands for, or why it stands for none in the words of the Go
    /// functions Loki reads it with (its `__error_details__`).
    fn parse(self, text: &str) -> Result<f64, String> {
        match self {
            NumberKind::Plain => go_float(text),
            NumberKind::Duration => lexer::duration(text)
                .map(|d| d.as_secs_f64())
                .ok_or_else(|| go_duration_error(text)),
            // A bare number is bytes, as `humanize.ParseBytes` reads it.
            NumberKind::Bytes => match lexer::bytes(text) {
                Some(bytes) => Ok(bytes as f64),
                None => {
                    let digits = text
                        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                        .unwrap_or(text.len());
                    let (number, unit) = text.split_at(digits);
                    match go_float(number) {
                        Ok(value) if unit.trim().is_empty() => Ok(value),
                        Ok(_) => Err(format!("unhandled size name: {}", unit.trim())),
                        Err(err) => Err(err),
                    }
                }
            },
        }
    }
}

/// `strconv.ParseFloat` as Go answers it: the number, or its error text.
fn go_float(text: &str) -> Result<f64, String> {
    let invalid = || {
        format!(
            "strconv.ParseFloat: parsing {}: invalid syntax",
            Quoted(text)
        )
    };
    let value: f64 = text.parse().map_err(|_| invalid())?;
    let spelled_infinite = text.to_ascii_lowercase().contains("inf");
    if value.is_infinite() && !spelled_infinite {
        return Err(format!(
            "strconv.ParseFloat: parsing {}: value out of range",
            Quoted(text)
        ));
    }
    Ok(value)
}

/// Why `time.ParseDuration` refuses `text`, in its words.
fn go_duration_error(text: &str) -> String {
    let digits = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, rest) = text.split_at(digits);
    let unit_len = rest
        .find(|c: char| c.is_ascii_digit() || c == '.')
        .unwrap_or(rest.len());
    if number.is_empty() || number == "." {
        format!("time: invalid duration {}", Quoted(text))
    } else if rest.is_empty() {
        format!("time: missing unit in duration {}", Quoted(text))
    } else {
        format!(
            "time: unknown unit {} in duration {}",
            Quoted(&rest[..unit_len]),
            Quoted(text)
        )
    }
}

/// A piece of a `line_format` template.
#[derive(Clone, Debug, PartialEq)]
enum Piece {
    Text(String),
    Label(String),
    Line,
}

/// A log query's matchers and stages, compiled.
#[derive(Clone, Debug)]
pub(crate) struct Pipeline {
    matchers: Vec<LabelMatcher>,
    steps: Vec<Step>,
}

/// A row that went through the pipeline: its line and labels as the stages left them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Output {
    /// The line.
    pub line: String,
    /// Its labels.
    pub labels: Labels,
}

impl Pipeline {
    /// Compiles `query`.
    pub(crate) fn compile(query: &LogQuery) -> Result<Self, CompileError> {
        let matchers = query
            .selector
            .iter()
            .map(|matcher| {
                Ok(LabelMatcher {
                    label: matcher.label.clone(),
                    test: TextTest::new(matcher.op, &matcher.value)?,
                })
            })
            .collect::<Result<_, CompileError>>()?;
        let steps = query
            .pipeline
            .iter()
            .map(compile_stage)
            .collect::<Result<_, _>>()?;
        Ok(Pipeline { matchers, steps })
    }

    /// True when `labels` satisfy the selector (the stages are not run).
    pub(crate) fn selects(&self, labels: &Labels) -> bool {
        self.matchers.iter().all(|matcher| {
            let value = labels.get(&matcher.label).map_or("", String::as_str);
            matcher.test.holds(value)
        })
    }

    /// The row's line and labels after the stages; `None` when the row does not match.
    pub(crate) fn process(&self, row: &StoredRow) -> Option<Output> {
        let mut labels = labels::row_labels(row);
        if !self.selects(&labels) {
            return None;
        }
        let mut line = row.message.clone();
        for step in &self.steps {
            match step {
                Step::Contains(text) => {
                    if !line.contains(text.as_str()) {
                        return None;
                    }
                }
                Step::NotContains(text) => {
                    if line.contains(text.as_str()) {
                        return None;
                    }
                }
                Step::Matches(re) => {
                    if !re.is_match(&line) {
                        return None;
                    }
                }
                Step::NotMatches(re) => {
                    if re.is_match(&line) {
                        return None;
                    }
                }
                Step::Json => parse_json(&line, &mut labels),
                Step::Logfmt => parse_logfmt(&line, &mut labels),
                // A line a parser failed on is filtered like any other, as Loki does: a label it
                // lacks matches only as the empty string, and `__error__` is a label like the rest,
                // so `| json | __error__=""` drops it.
                Step::Filter(condition) => {
                    if !condition.holds(&mut labels) {
                        return None;
                    }
                }
                Step::Format(pieces) => line = format_line(pieces, &line, &labels),
                Step::Drop(names) => {
                    for name in names {
                        labels.remove(name);
                    }
                }
                Step::Keep(names) => labels.retain(|name, _| names.contains(name)),
            }
        }
        Some(Output { line, labels })
    }
}

/// A label filter on its own, as `| unwrap`'s filters run it.
#[derive(Clone, Debug)]
pub(crate) struct LabelCheck(Condition);

impl LabelCheck {
    /// Compiles `filter`.
    pub(crate) fn compile(filter: &LabelFilter) -> Result<Self, CompileError> {
        compile_condition(filter).map(LabelCheck)
    }

    /// Whether `labels` pass, as a pipeline's filter stage decides (which may set `__error__`).
    pub(crate) fn holds(&self, labels: &mut Labels) -> bool {
        self.0.holds(labels)
    }
}

fn compile_stage(stage: &Stage) -> Result<Step, CompileError> {
    Ok(match stage {
        Stage::LineFilter { op, pattern } => match op {
            LineOp::Contains => Step::Contains(pattern.clone()),
            LineOp::NotContains => Step::NotContains(pattern.clone()),
            LineOp::Matches => Step::Matches(regex(pattern, false)?),
            LineOp::NotMatches => Step::NotMatches(regex(pattern, false)?),
        },
        Stage::Parser(ParserKind::Json) => Step::Json,
        Stage::Parser(ParserKind::Logfmt) => Step::Logfmt,
        Stage::LabelFilter(filter) => Step::Filter(compile_condition(filter)?),
        Stage::LineFormat(template) => Step::Format(compile_template(template)?),
        Stage::Drop(names) => Step::Drop(names.clone()),
        Stage::Keep(names) => Step::Keep(names.clone()),
    })
}

fn compile_condition(filter: &LabelFilter) -> Result<Condition, CompileError> {
    Ok(match filter {
        LabelFilter::And(left, right) => Condition::And(
            Box::new(compile_condition(left)?),
            Box::new(compile_condition(right)?),
        ),
        LabelFilter::Or(left, right) => Condition::Or(
            Box::new(compile_condition(left)?),
            Box::new(compile_condition(right)?),
        ),
        LabelFilter::Compare { label, op, value } => {
            let number = |value: f64, kind| Condition::Number {
                label: label.clone(),
                op: *op,
                value,
                kind,
            };
            match value {
                LabelValue::Text(text) => {
                    let op = match op {
                        CompareOp::Eq => MatchOp::Eq,
                        CompareOp::Ne => MatchOp::Ne,
                        CompareOp::Re => MatchOp::Re,
                        CompareOp::NotRe => MatchOp::NotRe,
                        _ => {
                            return Err(CompileError(format!(
                                "label {label}: >, >=, < and <= compare numbers, durations or sizes, not the string {text:?}"
                            )))
                        }
                    };
                    Condition::Text {
                        label: label.clone(),
                        test: TextTest::new(op, text)?,
                    }
                }
                _ if matches!(op, CompareOp::Re | CompareOp::NotRe) => {
                    return Err(CompileError(format!(
                        "label {label}: =~ and !~ take a quoted regular expression"
                    )))
                }
                LabelValue::Number(value) => number(*value, NumberKind::Plain),
                LabelValue::Duration(duration) => {
                    number(duration.as_secs_f64(), NumberKind::Duration)
                }
                LabelValue::Bytes(bytes) => number(*bytes as f64, NumberKind::Bytes),
            }
        }
    })
}

impl Condition {
    /// Whether the labels pass; a label that is there but is no number of the right kind
    /// passes with `__error__` set, as in Loki.
    fn holds(&self, labels: &mut Labels) -> bool {
        match self {
            Condition::And(left, right) => left.holds(labels) && right.holds(labels),
            Condition::Or(left, right) => left.holds(labels) || right.holds(labels),
            Condition::Text { label, test } => {
                test.holds(labels.get(label).map_or("", String::as_str))
            }
            Condition::Number {
                label,
                op,
                value,
                kind,
            } => {
                // An empty label is no label, as in Loki: it matches no comparison.
                let Some(text) = labels.get(label).filter(|text| !text.is_empty()) else {
                    return false;
                };
                let actual = match kind.parse(text) {
                    Ok(actual) => actual,
                    Err(details) => {
                        labels.insert(ERROR_LABEL.into(), "LabelFilterErr".into());
                        labels.insert(ERROR_DETAILS_LABEL.into(), details);
                        return true;
                    }
                };
                match op {
                    CompareOp::Eq => actual == *value,
                    CompareOp::Ne => actual != *value,
                    CompareOp::Gt => actual > *value,
                    CompareOp::Ge => actual >= *value,
                    CompareOp::Lt => actual < *value,
                    CompareOp::Le => actual <= *value,
                    CompareOp::Re | CompareOp::NotRe => false,
                }
            }
        }
    }
}

/// `line_format`'s templates, in the subset that names labels: `{{.name}}` (spaces allowed
/// inside the braces) and `{{__line__}}`.
fn compile_template(template: &str) -> Result<Vec<Piece>, CompileError> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_owned()));
        }
        let after = &rest[open + 2..];
        let close = after.find("}}").ok_or_else(|| {
            CompileError(format!("line_format {template:?}: a {{{{ is not closed"))
        })?;
        let action = after[..close].trim();
        let piece = if action == "__line__" {
            Piece::Line
        } else if let Some(name) = action.strip_prefix('.').filter(|name| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }) {
            Piece::Label(name.to_owned())
        } else {
            return Err(CompileError(format!(
                "line_format: {{{{{action}}}}} is not supported; templates may use {{{{.label}}}} and {{{{__line__}}}}"
            )));
        };
        pieces.push(piece);
        rest = &after[close + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_owned()));
    }
    Ok(pieces)
}

fn format_line(pieces: &[Piece], line: &str, labels: &Labels) -> String {
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Label(name) => out.push_str(labels.get(name).map_or("", String::as_str)),
            Piece::Line => out.push_str(line),
        }
    }
    out
}

/// Adds an extracted label; one whose name is taken gets `_extracted` after it, as in Loki.
fn extracted(labels: &mut Labels, name: String, value: String) {
    if labels.contains_key(&name) {
        labels.insert(format!("{name}_extracted"), value);
    } else {
        labels.insert(name, value);
    }
}

/// `| json`: each field of the line's object a label, nested objects joined with `_`.
fn parse_json(line: &str, labels: &mut Labels) {
    let parsed = json_fields(line, &mut |name, value, _| {
        let value = match value {
            serde_json::Value::Null => String::new(),
            other => labels::label_value(other),
        };
        extracted(labels, name, value);
    });
    if let Err(err) = parsed {
        labels.insert(ERROR_LABEL.into(), "JSONParserErr".into());
        labels.insert(ERROR_DETAILS_LABEL.into(), json_error_details(line, &err));
    }
}

/// Gives `each` the fields of a JSON object line as `| json` reads them: the label name (nested
/// objects' keys joined with `_`), the value, and the keys that lead to it. Arrays and empty
/// objects give none, as in Loki. An error when the line does not start with a JSON object;
/// what follows the object is ignored, as Loki's parser ignores it.
pub(crate) fn json_fields(
    line: &str,
    each: &mut dyn FnMut(String, &serde_json::Value, &[&str]),
) -> Result<(), serde_json::Error> {
    use serde::Deserialize;
    let mut reader = serde_json::Deserializer::from_str(line);
    let object = serde_json::Map::<String, serde_json::Value>::deserialize(&mut reader)?;
    walk(&object, "", &mut Vec::new(), each);
    Ok(())
}

/// Why a line is not a JSON object, in the words of the parser Loki uses (`jsonparser`): every
/// line that is not an object says it cannot find its closing `}`.
fn json_error_details(line: &str, err: &serde_json::Error) -> String {
    const NOT_AN_OBJECT: &str = "Value looks like object, but can't find closing '}' symbol";
    if !line.trim_start().starts_with('{') {
        return NOT_AN_OBJECT.into();
    }
    let said = err.to_string();
    if err.is_eof() {
        if said.starts_with("EOF while parsing an object") {
            "Value is array, but can't find closing ']' symbol".into()
        } else {
            "Malformed JSON error".into()
        }
    } else if said.starts_with("expected ident") || said.starts_with("expected value") {
        "Unknown value type".into()
    } else {
        NOT_AN_OBJECT.into()
    }
}

fn walk<'a>(
    object: &'a serde_json::Map<String, serde_json::Value>,
    prefix: &str,
    path: &mut Vec<&'a str>,
    each: &mut dyn FnMut(String, &serde_json::Value, &[&str]),
) {
    for (key, value) in object {
        let name = format!("{prefix}{}", labels::label_name(key));
        path.push(key);
        match value {
            serde_json::Value::Object(inner) => walk(inner, &format!("{name}_"), path, each),
            // Loki leaves arrays out.
            serde_json::Value::Array(_) => {}
            other => each(name, other, path),
        }
        path.pop();
    }
}

/// `| logfmt`: `key=value` pairs, values bare or double-quoted with backslash escapes; a key
/// alone is a label with an empty value. As in Loki, no line is an error: what cannot be read
/// is left out.
fn parse_logfmt(line: &str, labels: &mut Labels) {
    logfmt_pairs(line, &mut |name, value| extracted(labels, name, value));
}

/// Gives `each` the pairs of a logfmt line as `| logfmt` reads them: the label name and the
/// value (empty for a key alone).
pub(crate) fn logfmt_pairs(line: &str, each: &mut dyn FnMut(String, String)) {
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return;
        }
        // As Loki does, a pair its decoder cannot read (a quote in a key, a quote or `=` in an
        // unquoted value) is skipped, with no error, and the pairs after it are read: a JSON line
        // gives no labels at all.
        let mut malformed = false;
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=') {
            malformed |= c == '"';
            key.push(c);
        }
        let mut value = String::new();
        if chars.next_if_eq(&'=').is_some() {
            if !malformed && chars.next_if_eq(&'"').is_some() {
                let mut closed = false;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => {
                            closed = true;
                            break;
                        }
                        '\\' => {
                            if let Some(escaped) = chars.next() {
                                value.push(match escaped {
                                    'n' => '\n',
                                    't' => '\t',
                                    other => other,
                                });
                            }
                        }
                        other => value.push(other),
                    }
                }
                // Loki drops a value whose quote never closes, with no error.
                if !closed {
                    return;
                }
            } else {
                while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                    malformed |= c == '"' || c == '=';
                    value.push(c);
                }
            }
        }
        // So is a pair without a key (`=x`).
        if malformed || key.is_empty() {
            continue;
        }
        each(labels::label_name(&key), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(service: &str, severity: i16, message: &str, attributes: &str) -> StoredRow {
        StoredRow {
            id: 1,
            ts: chrono::DateTime::UNIX_EPOCH,
            received_at: chrono::DateTime::UNIX_EPOCH,
            severity,
            service: service.into(),
            message: message.into(),
            attributes: attributes.into(),
            trace_id: None,
            span_id: None,
        }
    }

    fn pipeline(query: &str) -> Pipeline {
        match super::super::parse(query).unwrap() {
            Query::Log(log) => Pipeline::compile(&log).unwrap(),
            Query::Metric(_) => panic!("not a log query"),
        }
    }

    #[test]
    fn selectors_and_line_filters_chain() {
        let p = pipeline(
            r#"{service_name="api", level=~"error|warn"} |= "timeout" != "retry" |~ "(?i)DB""#,
        );
        assert!(p.process(&row("api", 17, "db timeout", "{}")).is_some());
        assert!(p
            .process(&row("api", 17, "db timeout, retry", "{}"))
            .is_none());
        assert!(p.process(&row("api", 9, "db timeout", "{}")).is_none());
        assert!(p.process(&row("web", 13, "DB timeout", "{}")).is_none());
        assert!(p.process(&row("api", 13, "cache timeout", "{}")).is_none());
    }

    #[test]
    fn json_and_logfmt_feed_label_filters() {
        let p = pipeline(r#"{service_name="api"} | json | status >= 500 and latency > 250ms"#);
        let slow = row(
            "api",
            9,
            r#"{"status":503,"latency":"1.5s","req":{"path":"/x"}}"#,
            "{}",
        );
        let out = p.process(&slow).unwrap();
        assert_eq!(out.labels["req_path"], "/x");
        assert!(p
            .process(&row("api", 9, r#"{"status":200,"latency":"2s"}"#, "{}"))
            .is_none());
        assert!(
            p.process(&row("api", 9, "plain text", "{}")).is_none(),
            "a line the parser failed on has no status to compare"
        );
        let errors_kept = pipeline(r#"{service_name="api"} | json"#);
        let not_json = errors_kept
            .process(&row("api", 9, "plain text", "{}"))
            .unwrap();
        assert_eq!(not_json.labels[ERROR_LABEL], "JSONParserErr");

        let p = pipeline(
            r#"{service_name="api"} | logfmt | method="GET" | line_format "{{.method}} {{ .path }}""#,
        );
        let out = p
            .process(&row("api", 9, r#"method=GET path="/a b" flag"#, "{}"))
            .unwrap();
        assert_eq!(out.line, "GET /a b");
        assert_eq!(out.labels["flag"], "");
        assert!(p
            .process(&row("api", 9, "method=POST path=/", "{}"))
            .is_none());
    }

    /// As Loki reads a size: a bare number is bytes, not a label filter error.
    #[test]
    fn a_bare_number_is_a_size_in_bytes() {
        let line = r#"{"bytes":1023}"#;
        let kept = |query: &str| pipeline(query).process(&row("api", 9, line, "{}"));
        assert!(kept(r#"{service_name="api"} | json | bytes > 20KB"#).is_none());
        let small = kept(r#"{service_name="api"} | json | bytes < 2KB"#).unwrap();
        assert!(
            !small.labels.contains_key(ERROR_LABEL),
            "{:?}",
            small.labels
        );
    }

    /// Loki 3.7.6's `__error_details__` for lines `| json` cannot read, and what it reads past.
    #[test]
    fn json_errors_are_explained_in_lokis_words() {
        let p = pipeline(r#"{service_name="api"} | json"#);
        let details = |line: &str| {
            p.process(&row("api", 9, line, "{}"))
                .unwrap()
                .labels
                .get(ERROR_DETAILS_LABEL)
                .cloned()
        };
        let not_an_object = "Value looks like object, but can't find closing '}' symbol";
        for line in [
            "plain text",
            "10.0",
            "[1,2]",
            r#""str""#,
            "null",
            "true",
            "{bad}",
            " ",
            r#"x{"a":1}"#,
        ] {
            assert_eq!(details(line).as_deref(), Some(not_an_object), "{line}");
        }
        assert_eq!(details(r#"{"a":"#).as_deref(), Some("Malformed JSON error"));
        assert_eq!(
            details(r#"{"a":tru}"#).as_deref(),
            Some("Unknown value type")
        );
        assert_eq!(
            details(r#"{"a":1"#).as_deref(),
            Some("Value is array, but can't find closing ']' symbol")
        );
        for line in [r#"{"a":1}x"#, r#" {"a":1}"#, "{}"] {
            assert_eq!(details(line), None, "{line}");
        }
    }

    /// Loki 3.7.6's `__error_details__` for labels a comparison cannot read, and no error for
    /// an empty or missing label (it matches no comparison).
    #[test]
    fn a_label_that_is_not_a_number_is_explained_in_gos_words() {
        let line = "path=/x d=abc s=xyz n=1.5.2 e= big=1e400 z=12zz w=5 v=1.5MB u=1,5";
        let details = |filter: &str| {
            let query = format!(r#"{{service_name="api"}} | logfmt | {filter}"#);
            pipeline(&query)
                .process(&row("api", 9, line, "{}"))
                .map(|out| out.labels.get(ERROR_DETAILS_LABEL).cloned())
        };
        let said = |text: &str| Some(Some(text.to_owned()));
        assert_eq!(
            details("path > 5"),
            said(r#"strconv.ParseFloat: parsing "/x": invalid syntax"#)
        );
        assert_eq!(details("d > 1s"), said(r#"time: invalid duration "abc""#));
        assert_eq!(
            details("s > 1KB"),
            said(r#"strconv.ParseFloat: parsing "": invalid syntax"#)
        );
        assert_eq!(
            details("n > 1"),
            said(r#"strconv.ParseFloat: parsing "1.5.2": invalid syntax"#)
        );
        assert_eq!(
            details("big > 1"),
            said(r#"strconv.ParseFloat: parsing "1e400": value out of range"#)
        );
        assert_eq!(details("z > 1KB"), said("unhandled size name: zz"));
        assert_eq!(
            details("w > 1s"),
            said(r#"time: missing unit in duration "5""#)
        );
        assert_eq!(
            details("u > 1"),
            said(r#"strconv.ParseFloat: parsing "1,5": invalid syntax"#)
        );
        assert_eq!(details("v > 1KB"), Some(None), "1.5MB is a size");
        for filter in ["e > 1", "e > 1s", "e > 1KB", "missing > 1"] {
            assert_eq!(details(filter), None, "{filter}");
        }
    }

    /// Loki 3.7.6's labels for these lines, asked of the binary itself.
    #[test]
    fn logfmt_skips_the_pairs_lokis_decoder_cannot_read_and_keeps_the_rest() {
        let p = pipeline(r#"{service_name="api"} | logfmt"#);
        let parsed = |line: &str| {
            let mut labels = p.process(&row("api", 9, line, "{}")).unwrap().labels;
            labels.retain(|name, _| {
                !matches!(name.as_str(), "service_name" | "level" | "detected_level")
            });
            labels
        };
        let pairs = |pairs: &[(&str, &str)]| -> Labels {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(parsed(r#"{"user":"u4","status":500}"#), pairs(&[]));
        assert_eq!(parsed("a=1 b=2=3 c=4"), pairs(&[("a", "1"), ("c", "4")]));
        assert_eq!(
            parsed(r#"x="q" k"ey=5 z=6"#),
            pairs(&[("x", "q"), ("z", "6")])
        );
        assert_eq!(
            parsed(r#"p=1 v=ab"c w=7"#),
            pairs(&[("p", "1"), ("w", "7")])
        );
        assert_eq!(parsed(r#"a=1 user="ann"#), pairs(&[("a", "1")]));
        assert_eq!(
            parsed(r#"a=3 msg="x" b="unterminated"#),
            pairs(&[("a", "3"), ("msg", "x")])
        );
        assert_eq!(parsed(r#"a=4 c="d\""#), pairs(&[("a", "4")]));
        assert_eq!(parsed("a=5 =x y=z"), pairs(&[("a", "5"), ("y", "z")]));
        assert_eq!(
            parsed(r#"a=1 msg="x = \"y\"" flag"#),
            pairs(&[("a", "1"), ("flag", ""), ("msg", r#"x = "y""#)])
        );
    }

    /// Loki 3.7.6's answers on a stream of two JSON lines and a plain one.
    #[test]
    fn a_line_the_parser_failed_on_passes_no_filter_it_does_not_meet() {
        let lines = [
            r#"{"user":"u3","status":200}"#,
            "plain text, not json",
            r#"{"user":"u4","status":500}"#,
        ];
        let count = |query: &str| {
            let p = pipeline(query);
            lines
                .iter()
                .filter(|line| p.process(&row("api", 9, line, "{}")).is_some())
                .count()
        };
        assert_eq!(count(r#"{service_name="api"} | json | user="u3""#), 1);
        assert_eq!(count(r#"{service_name="api"} | json | __error__="""#), 2);
        assert_eq!(count(r#"{service_name="api"} | json | status >= 500"#), 1);
        assert_eq!(count(r#"{service_name="api"} | json | user!="u3""#), 2);
        assert_eq!(count(r#"{service_name="api"} | json"#), 3);
    }

    #[test]
    fn attributes_are_labels_and_drop_keep_shape_them() {
        let p =
            pipeline(r#"{service_name="api", http_method="GET"} | keep service_name, http_method"#);
        let out = p
            .process(&row("api", 9, "m", r#"{"http.method":"GET","user":"x"}"#))
            .unwrap();
        assert_eq!(out.labels.len(), 2);
        assert!(p
            .process(&row("api", 9, "m", r#"{"http.method":"POST"}"#))
            .is_none());
        let p = pipeline(r#"{service_name="api"} | drop detected_level, level"#);
        let out = p.process(&row("api", 9, "m", "{}")).unwrap();
        assert_eq!(out.labels.keys().collect::<Vec<_>>(), ["service_name"]);
    }

    #[test]
    fn bad_patterns_and_templates_are_refused() {
        let log = |q: &str| match super::super::parse(q).unwrap() {
            Query::Log(log) => log,
            Query::Metric(_) => unreachable!(),
        };
        // The parser refuses such a pattern first; compiling refuses it too.
        let mut unclosed = log(r#"{service_name="a"}"#);
        unclosed.pipeline.push(Stage::LineFilter {
            op: LineOp::Matches,
            pattern: "(".into(),
        });
        let err = Pipeline::compile(&unclosed).unwrap_err();
        assert!(err.0.contains("invalid regular expression"), "{err}");
        let giant = format!(r#"{{service_name="a"}} |~ "{}""#, "(a|b|c){1000}".repeat(8));
        let err = Pipeline::compile(&log(&giant)).unwrap_err();
        assert!(err.0.contains("too large"), "{err}");
        let err =
            Pipeline::compile(&log(r#"{service_name="a"} | line_format "{{if .x}}""#)).unwrap_err();
        assert!(err.0.contains("not supported"), "{err}");
    }
}
