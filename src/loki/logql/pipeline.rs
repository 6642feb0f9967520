//! A log query made runnable: its selector's matchers and its stages, with every regular
//! expression compiled once (under a size limit), applied to each stored row in turn. This is the
//! authority on what matches: the database's conditions only narrow what it sends.

use std::borrow::Cow;
use std::hash::BuildHasher;

use regex::{Regex, RegexBuilder};

use super::ast::*;
use super::extract;
use super::format::Quoted;
use super::go_numbers;
use super::hints;
use super::ip::IpPattern;
use super::json_object::{JsonObject, JsonValue};
use super::labels::{self, Labels};
use super::lexer;
use super::logfmt::{Decoder, Scan};
use super::pattern::Pattern;
use super::template::{Context, Template};
use crate::storage::StoredRow;

/// The most memory one compiled regular expression may take; a pattern that needs more is
/// refused rather than allowed to take the service's memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Loki's label for a stage that could not do its work on a line.
pub(crate) const ERROR_LABEL: &str = "__error__";
/// The details of that error.
pub(crate) const ERROR_DETAILS_LABEL: &str = "__error_details__";
/// The error `| json` and `| unpack` give a line that is no JSON object.
pub(crate) const JSON_ERROR: &str = "JSONParserErr";

/// A label as Loki's stages look one up by name: the error and its details are kept beside the
/// labels there, so a rename, a `line_format` of one label and a label filter on the details
/// do not see them (a label filter on `__error__` does: it asks for the error itself).
fn looked_up<'a>(labels: &'a Labels, name: &str) -> Option<&'a String> {
    match name {
        ERROR_LABEL | ERROR_DETAILS_LABEL => None,
        _ => labels.get(name),
    }
}

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
    Line(LineTest),
    Json,
    JsonFields(Vec<(String, Vec<extract::Step>)>),
    Logfmt {
        strict: bool,
        keep_empty: bool,
    },
    LogfmtFields {
        strict: bool,
        fields: Vec<Extraction>,
    },
    Regexp(Regex),
    Pattern(Pattern),
    Unpack,
    Decolorize,
    Filter(Condition),
    Format(Template),
    LabelFormat(Vec<(String, LabelSource)>),
    Drop(Vec<NamedTest>),
    Keep(Vec<NamedTest>),
}

impl Step {
    /// True for a stage that sets labels from the line.
    fn parses(&self) -> bool {
        matches!(
            self,
            Step::Json
                | Step::JsonFields(_)
                | Step::Logfmt { .. }
                | Step::LogfmtFields { .. }
                | Step::Regexp(_)
                | Step::Pattern(_)
                | Step::Unpack
        )
    }
}

/// The names of the labels a line came with (its stream's and its structured metadata), and of
/// those a stage set and a later one removed. As in Loki, a parser extracts a key of one of the
/// first as `NAME_extracted`, and leaves a label an earlier stage or an earlier key of the line
/// set as it is, even once it is dropped. Held as hashes: noting them costs no allocation per
/// line.
#[derive(Default)]
struct OwnNames {
    hashes: [u64; OWN_NAMES_HELD],
    held: usize,
    /// Those past the first [`OWN_NAMES_HELD`].
    more: Vec<u64>,
    /// Labels a stage set and a later one removed (`drop`, `keep`, a rename).
    removed: Vec<u64>,
    /// Whether a parser follows a stage that removes labels: only then is what was removed
    /// noted, so that other pipelines pay nothing per line for it.
    tracking: bool,
}

/// Names an [`OwnNames`] holds without allocating.
const OWN_NAMES_HELD: usize = 32;

impl OwnNames {
    fn of(labels: &Labels, tracking: bool) -> Self {
        let mut own = OwnNames {
            tracking,
            ..OwnNames::default()
        };
        for name in labels.keys() {
            let hash = Self::hash(name);
            if own.held < OWN_NAMES_HELD {
                own.hashes[own.held] = hash;
                own.held += 1;
            } else {
                own.more.push(hash);
            }
        }
        own
    }

    fn hash(name: &str) -> u64 {
        foldhash::fast::FixedState::with_seed(0).hash_one(name)
    }

    fn has(&self, name: &str) -> bool {
        let hash = Self::hash(name);
        self.hashes[..self.held].contains(&hash) || self.more.contains(&hash)
    }

    /// Notes that a stage removed `name`, where an earlier one had set it.
    fn removed(&mut self, name: &str) {
        if self.tracking && !self.has(name) {
            self.removed.push(Self::hash(name));
        }
    }

    /// True when a stage set `name` on this line, whether it is still there or not.
    fn set_by_stage(&self, labels: &Labels, name: &str) -> bool {
        (labels.contains_key(name) && !self.has(name))
            || (!self.removed.is_empty() && self.removed.contains(&Self::hash(name)))
    }
}

/// A compiled line filter.
#[derive(Clone, Debug)]
enum LineTest {
    /// Any of the texts is in the line.
    Contains(Vec<String>),
    NotContains(String),
    /// Any of the expressions matches.
    Matches(Vec<Regex>),
    NotMatches(Regex),
    /// Any of the patterns gives the line's shape.
    Shapes(Vec<Pattern>),
    NotShapes(Pattern),
    Ip {
        pattern: IpPattern,
        negated: bool,
    },
}

impl LineTest {
    fn holds(&self, line: &str) -> bool {
        match self {
            LineTest::Contains(texts) => texts.iter().any(|text| line.contains(text.as_str())),
            LineTest::NotContains(text) => !line.contains(text.as_str()),
            LineTest::Matches(res) => res.iter().any(|re| re.is_match(line)),
            LineTest::NotMatches(re) => !re.is_match(line),
            LineTest::Shapes(patterns) => patterns.iter().any(|pattern| pattern.shapes(line)),
            LineTest::NotShapes(pattern) => !pattern.shapes(line),
            LineTest::Ip { pattern, negated } => pattern.found_in(line) != *negated,
        }
    }
}

/// Where `label_format` takes a label's value from.
#[derive(Clone, Debug)]
enum LabelSource {
    Rename(String),
    Template(Template),
}

/// A label of `drop` or `keep`: by name, or by name and value.
#[derive(Clone, Debug)]
struct NamedTest {
    name: String,
    test: Option<TextTest>,
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
    Ip {
        label: String,
        pattern: IpPattern,
        negated: bool,
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
            NumberKind::Plain => go_numbers::parse_float(text),
            NumberKind::Duration => lexer::duration(text)
                .map(|d| d.as_secs_f64())
                .ok_or_else(|| go_duration_error(text)),
            NumberKind::Bytes => go_numbers::parse_bytes(text).map(|bytes| bytes as f64),
        }
    }
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

/// A log query's matchers and stages, compiled.
#[derive(Clone, Debug)]
pub(crate) struct Pipeline {
    matchers: Vec<LabelMatcher>,
    steps: Vec<Step>,
    /// The labels `| json` and `| logfmt` extract ([`super::hints`]); `None` for all.
    hints: Option<Vec<String>>,
    /// Whether a stage parses the line, so that the line's own labels are noted before the
    /// stages run ([`OwnNames`]).
    parses: bool,
    /// Whether a parser follows a `drop`, a `keep` or a `label_format`, so that the labels they
    /// remove are noted ([`OwnNames::removed`]).
    reparses: bool,
    /// Whether a line that is no JSON object is dropped whatever its labels: `| json` is the
    /// first stage that is not a line filter, and the next such stage refuses its error.
    drops_non_objects: bool,
}

/// A row that went through the pipeline: its line and labels as the stages left them. The line
/// is the row's own until a stage rewrites it: a metric query reads most lines only to count
/// them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Output<'a> {
    /// The line.
    pub line: Cow<'a, str>,
    /// Its labels.
    pub labels: Labels,
    /// Its stream's [`labels::stream_hash`], by which Loki orders the lines of one instant.
    pub stream: u64,
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
        let steps: Vec<Step> = query
            .pipeline
            .iter()
            .map(compile_stage)
            .collect::<Result<_, _>>()?;
        let parses = steps.iter().any(Step::parses);
        let removes =
            |step: &Step| matches!(step, Step::Drop(_) | Step::Keep(_) | Step::LabelFormat(_));
        let reparses = steps
            .iter()
            .position(removes)
            .is_some_and(|at| steps[at..].iter().any(Step::parses));
        let drops_non_objects = drops_non_objects(&query.pipeline);
        Ok(Pipeline {
            matchers,
            steps,
            hints: None,
            parses,
            reparses,
            drops_non_objects,
        })
    }

    /// The same, its plain parsers extracting only the labels `hints` names (all with `None`).
    pub(crate) fn with_hints(mut self, hints: Option<Vec<String>>) -> Self {
        self.hints = hints;
        self
    }

    /// True when `labels` satisfy the selector (the stages are not run).
    pub(crate) fn selects(&self, labels: &Labels) -> bool {
        self.matchers.iter().all(|matcher| {
            let value = labels.get(&matcher.label).map_or("", String::as_str);
            matcher.test.holds(value)
        })
    }

    /// The row's line and labels after the stages; `None` when the row does not match. The
    /// stream labels of a read's rows are kept in `streams` from one row to the next.
    pub(crate) fn process_in<'a>(
        &self,
        row: &'a StoredRow,
        streams: &mut labels::StreamLabelCache,
    ) -> Option<Output<'a>> {
        if self.drops_unread(row) {
            return None;
        }
        // The selector sees the stream's labels; the stages see its structured metadata too.
        let (stream, hash) = streams.selected(row, |stream| self.selects(stream))?;
        self.run(row, labels::with_metadata(stream.clone(), row), hash)
    }

    /// True when the stages would drop the row whatever its labels: Grafana's `| json |
    /// __error__=""` over a stream of mixed lines drops those the parser cannot read before their
    /// labels are made.
    fn drops_unread(&self, row: &StoredRow) -> bool {
        self.drops_non_objects && !row.message.trim_start().starts_with('{')
    }

    /// [`Pipeline::process_in`] for one row alone.
    #[cfg(test)]
    pub(crate) fn process(&self, row: &StoredRow) -> Option<Output<'static>> {
        let output = self.process_in(row, &mut labels::StreamLabelCache::default())?;
        Some(Output {
            line: Cow::Owned(output.line.into_owned()),
            labels: output.labels,
            stream: output.stream,
        })
    }

    /// [`Pipeline::process_in`] for one row alone, and the structured metadata the row's labels
    /// started with (the labels that were not its stream's), for a reader that sends lines
    /// without it.
    pub(crate) fn process_with_metadata<'a>(
        &self,
        row: &'a StoredRow,
    ) -> Option<(Output<'a>, Vec<(String, String)>)> {
        if self.drops_unread(row) {
            return None;
        }
        let stream = labels::row_stream_labels(row);
        if !self.selects(&stream) {
            return None;
        }
        let hash = labels::stream_hash(&stream);
        let labels = labels::with_metadata(stream.clone(), row);
        let metadata = labels
            .iter()
            .filter(|(name, _)| !stream.contains_key(*name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        Some((self.run(row, labels, hash)?, metadata))
    }

    /// The stages, on the row's line and `labels`; `stream` is its stream's hash.
    fn run<'a>(&self, row: &'a StoredRow, mut labels: Labels, stream: u64) -> Option<Output<'a>> {
        let mut line = Cow::Borrowed(row.message.as_str());
        let timestamp = row.ts.timestamp_micros().saturating_mul(1000);
        let mut own = if self.parses {
            OwnNames::of(&labels, self.reparses)
        } else {
            OwnNames::default()
        };
        for step in &self.steps {
            match step {
                Step::Line(test) => {
                    if !test.holds(&line) {
                        return None;
                    }
                }
                Step::Json => parse_json(&line, self.hints.as_deref(), &own, &mut labels),
                Step::JsonFields(fields) => json_fields_stage(&line, fields, &own, &mut labels),
                Step::Logfmt { strict, keep_empty } => logfmt_stage(
                    &line,
                    (*strict, *keep_empty),
                    (self.hints.as_deref(), &own),
                    &mut labels,
                ),
                Step::LogfmtFields { strict, fields } => {
                    logfmt_fields_stage(&line, *strict, fields, &own, &mut labels)
                }
                Step::Regexp(regex) => {
                    for (name, value) in extract::captures(regex, &line) {
                        extracted(&mut labels, &own, name.to_owned(), value.to_owned());
                    }
                }
                Step::Pattern(pattern) => {
                    for (name, value) in pattern.captures(&line) {
                        extracted(&mut labels, &own, name.to_owned(), value.to_owned());
                    }
                }
                Step::Unpack => match extract::unpack(&line) {
                    extract::Unpacked::NotPacked => {}
                    extract::Unpacked::Packed(entry, pairs) => {
                        for (key, value) in pairs {
                            extracted(&mut labels, &own, labels::label_name(&key), value);
                        }
                        line = Cow::Owned(entry);
                    }
                    extract::Unpacked::Error(details) => {
                        labels.insert(ERROR_LABEL.into(), JSON_ERROR.into());
                        labels.insert(ERROR_DETAILS_LABEL.into(), details.into());
                    }
                },
                Step::Decolorize => line = Cow::Owned(extract::decolorize(&line).into_owned()),
                // A line a parser failed on is filtered like any other, as Loki does: a label it
                // lacks matches only as the empty string, and `__error__` is a label like the rest,
                // so `| json | __error__=""` drops it.
                Step::Filter(condition) => {
                    if !condition.holds(&mut labels) {
                        return None;
                    }
                }
                Step::Format(template) => {
                    if let Some(name) = template.single_label() {
                        line = Cow::Owned(looked_up(&labels, name).cloned().unwrap_or_default());
                        continue;
                    }
                    let context = Context {
                        labels: &labels,
                        line: &line,
                        timestamp,
                    };
                    match template.render(&context) {
                        Ok(text) => line = Cow::Owned(text),
                        Err(details) => template_error(&mut labels, details),
                    }
                }
                Step::LabelFormat(formats) => {
                    label_format(formats, &line, timestamp, &mut labels, &mut own)
                }
                Step::Drop(named) => {
                    for label in named {
                        let drops = match &label.test {
                            None => true,
                            Some(test) => {
                                test.holds(labels.get(&label.name).map_or("", String::as_str))
                            }
                        };
                        if drops && labels.remove(&label.name).is_some() {
                            own.removed(&label.name);
                        }
                    }
                }
                // Loki keeps the error labels whatever `keep` names.
                Step::Keep(named) => labels.retain(|name, value| {
                    let kept = name == ERROR_LABEL
                        || name == ERROR_DETAILS_LABEL
                        || named.iter().any(|label| {
                            label.name == *name
                                && label.test.as_ref().is_none_or(|test| test.holds(value))
                        });
                    if !kept {
                        own.removed(name);
                    }
                    kept
                }),
            }
        }
        Some(Output {
            line,
            labels,
            stream,
        })
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
        Stage::LineFilter { op, pattern, or } => Step::Line(compile_line_filter(*op, pattern, or)?),
        Stage::Parser(ParserKind::Json) => Step::Json,
        Stage::Parser(ParserKind::Logfmt) => Step::Logfmt {
            strict: false,
            keep_empty: false,
        },
        Stage::JsonFields(fields) => Step::JsonFields(
            fields
                .iter()
                .map(|field| {
                    check_label_name(&field.label, "extracted")?;
                    let path = extract::json_path(&field.path).map_err(CompileError)?;
                    Ok((field.label.clone(), path))
                })
                .collect::<Result<_, CompileError>>()?,
        ),
        Stage::LogfmtWith {
            strict,
            keep_empty,
            fields,
        } if fields.is_empty() => Step::Logfmt {
            strict: *strict,
            keep_empty: *keep_empty,
        },
        Stage::LogfmtWith { strict, fields, .. } => {
            for field in fields {
                check_label_name(&field.label, "extracted")?;
            }
            Step::LogfmtFields {
                strict: *strict,
                fields: fields.clone(),
            }
        }
        Stage::Regexp(pattern) => {
            Step::Regexp(extract::capture_regex(pattern).map_err(CompileError)?)
        }
        Stage::Pattern(text) => Step::Pattern(
            Pattern::parse(text)
                .map_err(|err| CompileError(format!("invalid pattern parser: {err}")))?,
        ),
        Stage::Unpack => Step::Unpack,
        Stage::Decolorize => Step::Decolorize,
        Stage::LabelFilter(filter) => Step::Filter(compile_condition(filter)?),
        Stage::LineFormat(template) => Step::Format(
            Template::parse("line", template)
                .map_err(|err| CompileError(format!("invalid line template: {err}")))?,
        ),
        Stage::LabelFormat(formats) => {
            let mut compiled = Vec::with_capacity(formats.len());
            for (at, format) in formats.iter().enumerate() {
                if format.label == ERROR_LABEL {
                    return Err(CompileError(format!("{ERROR_LABEL} cannot be formatted")));
                }
                if formats[..at]
                    .iter()
                    .any(|before| before.label == format.label)
                {
                    return Err(CompileError(format!(
                        "multiple label name '{}' not allowed in a single format operation",
                        format.label
                    )));
                }
                let source = if format.rename {
                    LabelSource::Rename(format.value.clone())
                } else {
                    LabelSource::Template(Template::parse("label", &format.value).map_err(
                        |err| {
                            CompileError(format!(
                                "invalid template for label '{}': {err}",
                                format.label
                            ))
                        },
                    )?)
                };
                compiled.push((format.label.clone(), source));
            }
            Step::LabelFormat(compiled)
        }
        Stage::Drop(named) => Step::Drop(compile_named(named)?),
        Stage::Keep(named) => Step::Keep(compile_named(named)?),
    })
}

fn compile_line_filter(
    op: LineOp,
    pattern: &LinePattern,
    or: &[LinePattern],
) -> Result<LineTest, CompileError> {
    // With `or`, Loki reads an `ip("…")` alternative as its text.
    let text = |pattern: &LinePattern| match pattern {
        LinePattern::Text(text) | LinePattern::Ip(text) => text.clone(),
    };
    if let (LinePattern::Ip(ip), true) = (pattern, or.is_empty()) {
        let negated = match op {
            LineOp::Contains => false,
            LineOp::NotContains => true,
            LineOp::Matches
            | LineOp::NotMatches
            | LineOp::PatternMatches
            | LineOp::NotPatternMatches => {
                return Err(CompileError(format!(
                    "ip(\"{ip}\"): ip: invalid operation; ip() filters with |= and != only"
                )))
            }
        };
        let pattern = IpPattern::parse(ip).map_err(|err| CompileError(err.to_string()))?;
        return Ok(LineTest::Ip { pattern, negated });
    }
    let all = std::iter::once(pattern).chain(or);
    Ok(match op {
        LineOp::Contains => LineTest::Contains(all.map(text).collect()),
        LineOp::NotContains => LineTest::NotContains(text(pattern)),
        LineOp::Matches => LineTest::Matches(
            all.map(|pattern| regex(&text(pattern), false))
                .collect::<Result<_, _>>()?,
        ),
        LineOp::NotMatches => LineTest::NotMatches(regex(&text(pattern), false)?),
        LineOp::PatternMatches => LineTest::Shapes(
            all.map(|pattern| line_pattern(&text(pattern)))
                .collect::<Result<_, _>>()?,
        ),
        LineOp::NotPatternMatches => LineTest::NotShapes(line_pattern(&text(pattern))?),
    })
}

/// The pattern of a `|>` or `!>` filter.
fn line_pattern(text: &str) -> Result<Pattern, CompileError> {
    Pattern::parse_line_filter(text).map_err(|err| CompileError(err.to_string()))
}

fn compile_named(named: &[NamedLabel]) -> Result<Vec<NamedTest>, CompileError> {
    named
        .iter()
        .map(|label| {
            Ok(match label {
                NamedLabel::Name(name) => NamedTest {
                    name: name.clone(),
                    test: None,
                },
                NamedLabel::Matching(matcher) => NamedTest {
                    name: matcher.label.clone(),
                    test: Some(TextTest::new(matcher.op, &matcher.value)?),
                },
            })
        })
        .collect()
}

/// A label name a stage makes must be one Prometheus takes.
fn check_label_name(name: &str, what: &str) -> Result<(), CompileError> {
    let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(())
    } else {
        Err(CompileError(format!("invalid {what} label name '{name}'")))
    }
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
        LabelFilter::Ip {
            label,
            negated,
            pattern,
        } => Condition::Ip {
            label: label.clone(),
            pattern: IpPattern::parse(pattern).map_err(|err| CompileError(err.to_string()))?,
            negated: *negated,
        },
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

/// True when `stages` drop every line that is no JSON object, whatever its labels: the first
/// stage that is not a line filter is `| json`, and the next one a label filter that refuses
/// `| json`'s error (Grafana's `| json | __error__=""`). A line filter passes the same lines
/// before a label filter as after it.
pub(crate) fn drops_non_objects(stages: &[Stage]) -> bool {
    let mut stages = stages
        .iter()
        .filter(|stage| !matches!(stage, Stage::LineFilter { .. }));
    matches!(
        (stages.next(), stages.next()),
        (Some(Stage::Parser(ParserKind::Json)), Some(Stage::LabelFilter(filter)))
            if refuses_error(filter, JSON_ERROR)
    )
}

/// True when `filter` cannot pass a line whose `__error__` is `kind`, whatever its other labels.
fn refuses_error(filter: &LabelFilter, kind: &str) -> bool {
    match filter {
        LabelFilter::And(left, right) => refuses_error(left, kind) || refuses_error(right, kind),
        LabelFilter::Or(left, right) => refuses_error(left, kind) && refuses_error(right, kind),
        LabelFilter::Compare {
            label,
            op,
            value: LabelValue::Text(text),
        } if label == ERROR_LABEL => match op {
            CompareOp::Eq => text != kind,
            CompareOp::Ne => text == kind,
            _ => false,
        },
        _ => false,
    }
}

impl Condition {
    /// Whether the labels pass; a label that is there but is no number of the right kind
    /// passes with `__error__` set, as in Loki.
    fn holds(&self, labels: &mut Labels) -> bool {
        match self {
            Condition::And(left, right) => left.holds(labels) && right.holds(labels),
            Condition::Or(left, right) => left.holds(labels) || right.holds(labels),
            Condition::Text { label, test } => {
                let value = match label.as_str() {
                    ERROR_LABEL => labels.get(label),
                    _ => looked_up(labels, label),
                };
                test.holds(value.map_or("", String::as_str))
            }
            // As in Loki, a line with an error passes, and one without the label does not.
            Condition::Ip {
                label,
                pattern,
                negated,
            } => {
                if labels.contains_key(ERROR_LABEL) {
                    return true;
                }
                labels
                    .get(label)
                    .is_some_and(|value| pattern.found_in(value) != *negated)
            }
            Condition::Number {
                label,
                op,
                value,
                kind,
            } => {
                // As in Loki: a line without the label does not pass, one a stage already
                // failed on passes as it is, and an empty label is a text that is no number.
                let Some(text) = labels.get(label) else {
                    return false;
                };
                if labels.contains_key(ERROR_LABEL) {
                    return true;
                }
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

/// Adds an extracted label as Loki does: as `NAME_extracted` when the line came with a label of
/// its name (`taken`), and not over a label already set, nor one a stage set and removed.
fn extracted(labels: &mut Labels, taken: &OwnNames, name: String, value: String) {
    let name = if taken.has(&name) {
        format!("{name}_extracted")
    } else {
        name
    };
    if !taken.removed.is_empty() && taken.set_by_stage(labels, &name) {
        return;
    }
    labels.entry(name).or_insert(value);
}

/// `| json`: each field of the line's object a label, nested objects joined with `_`; only
/// those `hints` names, when it names some.
fn parse_json(line: &str, hints: Option<&[String]>, taken: &OwnNames, labels: &mut Labels) {
    let parsed = json_fields(line, &mut |name, value, _| {
        // Loki sets no label for a `null`; a field the query does not read is not copied.
        if hints::extracts(hints, name) {
            if let Some(value) = value.label_value() {
                extracted(labels, taken, name.to_owned(), value);
            }
        }
    });
    if let Err(err) = parsed {
        labels.insert(ERROR_LABEL.into(), JSON_ERROR.into());
        labels.insert(ERROR_DETAILS_LABEL.into(), json_error_details(line, &err));
    }
}

/// Gives `each` the fields of a JSON object line as `| json` reads them: the label name (nested
/// objects' keys joined with `_`), the value, and the keys that lead to it. Arrays and empty
/// objects give none, as in Loki. An error when the line does not start with a JSON object;
/// what follows the object is ignored, as Loki's parser ignores it.
pub(crate) fn json_fields(
    line: &str,
    each: &mut dyn FnMut(&str, &JsonValue, &[&str]),
) -> Result<(), serde_json::Error> {
    let object = JsonObject::parse(line)?;
    walk(&object, &mut String::new(), &mut Vec::new(), each);
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

/// `name` holds the names of the keys that lead to `object`, each followed by `_`; one buffer
/// serves every field, as most are read and dropped.
fn walk<'a>(
    object: &'a JsonObject<'_>,
    name: &mut String,
    path: &mut Vec<&'a str>,
    each: &mut dyn FnMut(&str, &JsonValue, &[&str]),
) {
    let prefix = name.len();
    for (key, value) in object.members() {
        name.truncate(prefix);
        labels::push_label_name(name, key);
        path.push(key);
        match value {
            JsonValue::Object(inner) => {
                name.push('_');
                walk(inner, name, path, each);
            }
            // Loki leaves arrays out.
            JsonValue::Array => {}
            other => each(name, other, path),
        }
        path.pop();
    }
    name.truncate(prefix);
}

/// `| json a="b.c"`: each label from its path, over what an earlier stage set, and the empty
/// string when the path leads nowhere and the label is not there yet, as Loki does. A line
/// that does not start like JSON is an error, and gets no labels.
fn json_fields_stage(
    line: &str,
    fields: &[(String, Vec<extract::Step>)],
    taken: &OwnNames,
    labels: &mut Labels,
) {
    if line.is_empty() {
        return;
    }
    if !line.starts_with(['{', '[', '"']) {
        labels.insert(ERROR_LABEL.into(), JSON_ERROR.into());
        return;
    }
    let document = extract::json_document(line);
    for (label, path) in fields {
        match document.and_then(|document| extract::json_value(document, path)) {
            Some(value) => {
                let name = if taken.has(label) {
                    format!("{label}_extracted")
                } else {
                    label.clone()
                };
                labels.insert(name, value);
            }
            None => {
                labels.entry(label.clone()).or_default();
            }
        }
    }
}

/// `| logfmt` with its flags (`--strict`, `--keep-empty`): without `--keep-empty` a key without a
/// value is no label; with `--strict` the first pair that cannot be read ends the line, with an
/// error. Only the labels `hints` names, when it names some.
fn logfmt_stage(
    line: &str,
    (strict, keep_empty): (bool, bool),
    (hints, taken): (Option<&[String]>, &OwnNames),
    labels: &mut Labels,
) {
    let mut decoder = Decoder::new(line);
    let mut error = None;
    // Most pairs of a line are read and dropped (a metric query extracts the labels it uses):
    // their names are made in one buffer, and only a pair that is kept is copied.
    let mut name = String::new();
    while !decoder.at_end() {
        match decoder.next_pair() {
            Scan::Pair(key, value) => {
                name.clear();
                labels::push_label_name(&mut name, key);
                let kept = value.as_deref().is_some_and(|v| !v.is_empty()) || keep_empty;
                if kept && hints::extracts(hints, &name) {
                    let value = value.map_or_else(String::new, |value| {
                        if value.contains('\u{fffd}') {
                            value.replace('\u{fffd}', " ")
                        } else {
                            value.into_owned()
                        }
                    });
                    extracted(labels, taken, name.clone(), value);
                }
            }
            Scan::Skipped(why) => {
                if why.is_some() {
                    error = why;
                }
                if strict {
                    break;
                }
            }
        }
    }
    if let (true, Some(details)) = (strict, error) {
        labels.insert(ERROR_LABEL.into(), "LogfmtParserErr".into());
        labels.insert(ERROR_DETAILS_LABEL.into(), details);
    }
}

/// `| logfmt a, b="c"`: only these keys, each label there (empty when its key is not). As in
/// Loki, a key named like one of the labels also sets it.
fn logfmt_fields_stage(
    line: &str,
    strict: bool,
    fields: &[Extraction],
    own: &OwnNames,
    labels: &mut Labels,
) {
    // As Loki's expression parser: each label starts empty, over what an earlier stage set; a
    // label the line came with is set as `NAME_extracted`, as the other parsers do.
    for field in fields {
        if !own.has(&field.label) {
            labels.insert(field.label.clone(), String::new());
        }
    }
    let mut decoder = Decoder::new(line);
    let mut error = None;
    let mut name = String::new();
    while !decoder.at_end() {
        match decoder.next_pair() {
            Scan::Pair(key, value) => {
                name.clear();
                labels::push_label_name(&mut name, key);
                let key = name.as_str();
                // A key that is no label's name is read only where no stage set a label of its
                // name, as Loki's parser hints have it.
                let named = fields.iter().any(|field| field.label == key);
                if !named && own.set_by_stage(labels, key) {
                    continue;
                }
                let Some(field) = fields
                    .iter()
                    .find(|field| field.path == key)
                    .or_else(|| fields.iter().find(|field| field.label == key))
                else {
                    continue;
                };
                let name = if own.has(&field.label) {
                    let name = format!("{}_extracted", field.label);
                    // Loki stops reading the line at a label it already set this way.
                    if own.set_by_stage(labels, &name) {
                        break;
                    }
                    name
                } else {
                    field.label.clone()
                };
                labels.insert(name, value.map(|v| v.into_owned()).unwrap_or_default());
            }
            Scan::Skipped(why) => {
                if why.is_some() {
                    error = why;
                }
                if strict {
                    break;
                }
            }
        }
    }
    if let (true, Some(details)) = (strict, error) {
        labels.insert(ERROR_LABEL.into(), "LogfmtParserErr".into());
        labels.insert(ERROR_DETAILS_LABEL.into(), details);
    }
}

/// A template that failed on this line: the line or label stays, with Loki's error.
fn template_error(labels: &mut Labels, details: String) {
    labels.insert(ERROR_LABEL.into(), "TemplateFormatErr".into());
    labels.insert(ERROR_DETAILS_LABEL.into(), details);
}

/// `| label_format`: in order, each rename moves a label that is there, and each template sets
/// its label. The templates see the labels as they were at the first of them, as in Loki.
fn label_format(
    formats: &[(String, LabelSource)],
    line: &str,
    timestamp: i64,
    labels: &mut Labels,
    own: &mut OwnNames,
) {
    let mut seen: Option<Labels> = None;
    for (label, source) in formats {
        match source {
            LabelSource::Rename(from) => {
                if let Some(value) = looked_up(labels, from).cloned() {
                    labels.insert(label.clone(), value);
                    labels.remove(from);
                    own.removed(from);
                }
            }
            LabelSource::Template(template) => {
                let seen = seen.get_or_insert_with(|| labels.clone());
                let context = Context {
                    labels: seen,
                    line,
                    timestamp,
                };
                match template.render(&context) {
                    Ok(value) => {
                        labels.insert(label.clone(), value);
                    }
                    Err(details) => template_error(labels, details),
                }
            }
        }
    }
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
            labels: "{}".into(),
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
    fn only_a_filter_that_refuses_the_json_error_drops_lines_before_the_stages() {
        for (query, drops) in [
            (r#"{service_name="api"} | json | __error__="""#, true),
            (
                r#"{service_name="api"} |= "a" | json |= "b" | __error__="""#,
                true,
            ),
            (
                r#"{service_name="api"} | json | __error__!="JSONParserErr""#,
                true,
            ),
            (
                r#"{service_name="api"} | json | __error__="" and user="u1""#,
                true,
            ),
            (
                r#"{service_name="api"} | json | user="u1", __error__="""#,
                true,
            ),
            (
                r#"{service_name="api"} | json | __error__="" or user="u1""#,
                false,
            ),
            (
                r#"{service_name="api"} | json | __error__=~"JSON.*""#,
                false,
            ),
            (
                r#"{service_name="api"} | json | user="u1" | __error__="""#,
                false,
            ),
            (
                r#"{service_name="api"} | json | status > 400, __error__="""#,
                true,
            ),
            (r#"{service_name="api"} | json"#, false),
            (r#"{service_name="api"} | logfmt | __error__="""#, false),
            (
                r#"{service_name="api"} | json user="u" | __error__="""#,
                false,
            ),
            (
                r#"{service_name="api"} | line_format "{{.x}}" | json | __error__="""#,
                false,
            ),
        ] {
            assert_eq!(pipeline(query).drops_non_objects, drops, "{query}");
        }
    }

    #[test]
    fn lines_dropped_before_the_stages_are_those_the_stages_drop() {
        for query in [
            r#"{service_name="api"} | json | __error__="""#,
            r#"{service_name="api"} | json | __error__!="JSONParserErr" |= "u""#,
        ] {
            let fast = pipeline(query);
            assert!(fast.drops_non_objects, "{query}");
            let slow = Pipeline {
                drops_non_objects: false,
                ..fast.clone()
            };
            for line in [
                r#"{"user":"u1"}"#,
                r#"  {"user":"u2"} trailing"#,
                "\u{2003}{\"user\":\"u3\"}",
                r#"{"user":"#,
                "[1, 2]",
                "user=u4",
                "",
                "   ",
                "\"u5\"",
            ] {
                let row = row("api", 9, line, "{}");
                assert_eq!(
                    fast.process(&row),
                    slow.process(&row),
                    "{query} on {line:?}"
                );
            }
        }
    }

    #[test]
    fn selectors_and_line_filters_chain() {
        let p = pipeline(
            r#"{service_name="api", level=~"error|warn"} |= "timeout" != "retry" |~ "(?i)DB""#,
        );
        let sent = |service: &str, level: &str, message: &str| StoredRow {
            labels: format!(r#"{{"level":"{level}"}}"#),
            ..row(service, 0, message, "{}")
        };
        assert!(p.process(&sent("api", "error", "db timeout")).is_some());
        assert!(p
            .process(&sent("api", "error", "db timeout, retry"))
            .is_none());
        assert!(p.process(&sent("api", "info", "db timeout")).is_none());
        assert!(p.process(&sent("web", "warn", "DB timeout")).is_none());
        assert!(p.process(&sent("api", "warn", "cache timeout")).is_none());
        assert!(
            p.process(&row("api", 17, "db timeout", "{}")).is_none(),
            "a severity is no level label"
        );
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
        // A key without a value is no label, as in Loki (unless `--keep-empty`).
        assert!(!out.labels.contains_key("flag"));
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
        // An empty label is there, and no number (Loki 3.7.6).
        let empty = pipeline(r#"{service_name="api"} | logfmt --keep-empty | e > 1"#)
            .process(&row("api", 9, line, "{}"))
            .unwrap();
        assert_eq!(
            empty.labels[ERROR_DETAILS_LABEL],
            r#"strconv.ParseFloat: parsing "": invalid syntax"#
        );
        // A line a stage already failed on passes with its own error.
        let failed = pipeline(r#"{service_name="api"} | json | label_format x="y" | x > 1"#)
            .process(&row("api", 9, line, "{}"))
            .unwrap();
        assert_eq!(failed.labels[ERROR_LABEL], "JSONParserErr");
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
            pairs(&[("a", "1"), ("msg", r#"x = "y""#)])
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

    /// Lines and labels a query keeps of `lines` (labels of the stream left out).
    fn kept(query: &str, lines: &[&str]) -> Vec<(String, Labels)> {
        let p = pipeline(query);
        lines
            .iter()
            .filter_map(|line| p.process(&row("api", 9, line, "{}")))
            .map(|mut out| {
                out.labels.retain(|name, _| {
                    !matches!(name.as_str(), "service_name" | "level" | "detected_level")
                });
                (out.line.into_owned(), out.labels)
            })
            .collect()
    }

    fn lines_of(kept: &[(String, Labels)]) -> Vec<&str> {
        kept.iter().map(|(line, _)| line.as_str()).collect()
    }

    fn labels_of(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Loki 3.7.6's labels when a parser meets names already set: a label the line came with
    /// (its stream's, its structured metadata) makes it write `NAME_extracted`, even once dropped;
    /// a label an earlier stage or an earlier key of the same line set is left as it is.
    #[test]
    fn a_parser_suffixes_the_lines_own_labels_and_leaves_what_was_set_before() {
        let json = r#"{"method":"GET","service_name":"x","n":"1"}"#;
        let found = kept(r#"{service_name="api"} | json | json"#, &[json]);
        assert_eq!(
            found[0].1,
            labels_of(&[
                ("method", "GET"),
                ("n", "1"),
                ("service_name_extracted", "x")
            ])
        );
        let found = kept(
            r#"{service_name="api"} | json | label_format n="{{.method}}" | json"#,
            &[json],
        );
        assert_eq!(found[0].1["n"], "GET", "{found:?}");
        assert!(!found[0].1.contains_key("n_extracted"), "{found:?}");
        let found = kept(
            r#"{service_name="api"} | logfmt | regexp "m=(?P<method>\\w+)""#,
            &["method=PUT m=POST"],
        );
        assert_eq!(found[0].1["method"], "PUT", "{found:?}");
        let found = kept(
            r#"{service_name="api"} | drop service_name | logfmt"#,
            &["method=PUT service_name=y"],
        );
        assert_eq!(found[0].1["service_name_extracted"], "y", "{found:?}");
        // Of a key twice in one line, the first.
        let found = kept(
            r#"{service_name="api"} | logfmt"#,
            &["a=1 a=2 service_name=y service_name=z"],
        );
        assert_eq!(
            found[0].1,
            labels_of(&[("a", "1"), ("service_name_extracted", "y")])
        );
    }

    /// Loki 3.7.6's labels where a parser meets a label a stage set and another removed, and
    /// where a parser that takes some keys follows one that took them all: its labels start
    /// empty, a key no stage took yet is read, and a label the line came with, already taken
    /// as `NAME_extracted`, ends the reading of the line.
    #[test]
    fn parsers_after_parsers_and_drops() {
        let line = "service_name=w method=GET path=/x status=200";
        let q = |query: &str| {
            kept(&format!(r#"{{service_name="api"}} {query}"#), &[line])
                .remove(0)
                .1
        };
        assert_eq!(
            q("| logfmt | drop method | logfmt"),
            labels_of(&[
                ("service_name_extracted", "w"),
                ("path", "/x"),
                ("status", "200")
            ])
        );
        assert_eq!(
            q("| logfmt | keep method | logfmt"),
            labels_of(&[("method", "GET")])
        );
        assert_eq!(
            q("| logfmt | label_format m=method | logfmt")["m"],
            "GET",
            "a rename removes the label it moves"
        );
        assert!(!q("| logfmt | label_format m=method | logfmt").contains_key("method"));
        let after = |fields: &str| q(&format!("| logfmt | logfmt {fields}"));
        assert_eq!(after("service_name, method")["method"], "");
        assert_eq!(after("path, service_name")["path"], "");
        assert_eq!(after("status, method")["status"], "200");
        let taken = after(r#"service_name_extracted="method", status"#);
        assert_eq!(
            (
                taken["service_name_extracted"].as_str(),
                taken["status"].as_str()
            ),
            ("", "200")
        );
        assert_eq!(q(r#"| logfmt m="method" | logfmt m="nope""#)["m"], "");
        assert_eq!(
            q(r#"| logfmt method | logfmt method, service_name"#)["service_name_extracted"],
            "w"
        );
        // Only a parser after a removal makes the pipeline note what was removed, line by line.
        assert!(pipeline(r#"{service_name="api"} | logfmt | keep a | json"#).reparses);
        assert!(!pipeline(r#"{service_name="api"} | logfmt | keep a | drop b"#).reparses);
        assert!(pipeline(r#"{service_name="api"} | label_format a=b | json"#).reparses);
        // `| json a="b"` sets its label over what an earlier stage set.
        let json = r#"{"a":"1","a":{"b":2}}"#;
        let found = kept(r#"{service_name="api"} | json | json a_b="a""#, &[json]);
        assert_eq!(found[0].1["a_b"], "1");
    }

    /// Loki 3.7.6's answers: `or` is any of them for `|=` and `|~`, none of them for `!=`.
    #[test]
    fn line_filters_with_or() {
        let lines = ["alpha beta", "gamma", "delta alpha", "epsilon"];
        let q = |filter: &str| {
            lines_of(&kept(
                &format!(r#"{{service_name="api"}} {filter}"#),
                &lines,
            ))
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
        };
        assert_eq!(
            q(r#"|= "alpha" or "gamma""#),
            ["alpha beta", "gamma", "delta alpha"]
        );
        assert_eq!(q(r#"!= "alpha" or "gamma""#), ["epsilon"]);
        assert_eq!(q(r#"|~ "^alp" or "ilon$""#), ["alpha beta", "epsilon"]);
        assert_eq!(q(r#"!~ "^alp" or "ilon$""#), ["gamma", "delta alpha"]);
    }

    /// Loki 3.7.6's answers, its quirk included: with `or`, `ip("…")` is matched as text.
    #[test]
    fn ip_filters_on_lines_and_labels() {
        let lines = [
            "client 10.0.1.5 ok",
            "from 192.168.0.3 x",
            "bad 010.0.1.5 q",
            "none here",
            "addr=192.168.0.10 end",
        ];
        let q = |query: &str| lines_of(&kept(query, &lines)).join("|");
        assert_eq!(
            q(r#"{service_name="api"} |= ip("10.0.1.0/24")"#),
            "client 10.0.1.5 ok"
        );
        assert_eq!(
            q(r#"{service_name="api"} != ip("192.168.0.0/16")"#),
            "client 10.0.1.5 ok|bad 010.0.1.5 q|none here"
        );
        assert_eq!(
            q(r#"{service_name="api"} |= "zzz" or ip("10.0.1.5")"#),
            "client 10.0.1.5 ok|bad 010.0.1.5 q"
        );
        assert_eq!(
            q(r#"{service_name="api"} |= ip("192.168.0.0/16") or "none""#),
            "none here"
        );
        assert_eq!(
            q(r#"{service_name="api"} | logfmt | addr = ip("192.168.0.0/24")"#),
            "addr=192.168.0.10 end"
        );
        assert_eq!(
            q(r#"{service_name="api"} | logfmt | addr != ip("192.168.0.0/24")"#),
            ""
        );
    }

    /// Loki 3.7.6's labels for `| json x="a.b", …`.
    #[test]
    fn json_parameters() {
        let lines = [
            r#"{"a":{"b":"x","c":[1,2]},"n":null}"#,
            "plain",
            "{bad",
            r#""str""#,
        ];
        let found = kept(
            r#"{service_name="api"} | json x="a.b", y="a.c[1]", u="n", m="missing""#,
            &lines,
        );
        let all_empty = labels_of(&[("m", ""), ("u", ""), ("x", ""), ("y", "")]);
        assert_eq!(
            found[0].1,
            labels_of(&[("m", ""), ("u", ""), ("x", "x"), ("y", "2")])
        );
        assert_eq!(found[1].1, labels_of(&[(ERROR_LABEL, "JSONParserErr")]));
        assert_eq!(found[2].1, all_empty);
        assert_eq!(found[3].1, all_empty);
        // A stream label of the same name is not overwritten.
        let found = kept(r#"{service_name="api"} | json service_name="a.b""#, &lines);
        assert_eq!(found[0].1, labels_of(&[("service_name_extracted", "x")]));
        // Without parameters, a `null` gives no label.
        let found = kept(r#"{service_name="api"} | json"#, &[lines[0]]);
        assert_eq!(found[0].1, labels_of(&[("a_b", "x")]));
    }

    /// A key that is not a label name is made one; a character the decoder could not read is a
    /// space in the value, as Loki writes it.
    #[test]
    fn logfmt_names_keys_and_spaces_unreadable_characters() {
        let got = kept(
            r#"{service_name="api"} | logfmt"#,
            &[r#"http.status=200 _ok=1 msg="a\ud800b" 2xx=yes"#],
        );
        assert_eq!(
            got[0].1,
            labels_of(&[
                ("http_status", "200"),
                ("_ok", "1"),
                ("msg", "a b"),
                ("_2xx", "yes")
            ])
        );
    }

    /// Loki 3.7.6's labels for `| logfmt` with flags and keys.
    #[test]
    fn logfmt_flags_and_keys() {
        let lines = [
            r#"a=1 b= c flag d="x y""#,
            r#"a=2 bro"ken=3 e=4"#,
            r#"a=3 f="unterminated"#,
            "x=1 y=2 z=3",
        ];
        let q = |query: &str| {
            kept(
                &format!(r#"{{service_name="api"}} | logfmt {query}"#),
                &lines,
            )
            .into_iter()
            .map(|(_, labels)| labels)
            .collect::<Vec<_>>()
        };
        let strict = q("--strict");
        assert_eq!(strict[0], labels_of(&[("a", "1"), ("d", "x y")]));
        assert_eq!(
            strict[1],
            labels_of(&[
                ("a", "2"),
                (ERROR_LABEL, "LogfmtParserErr"),
                (
                    ERROR_DETAILS_LABEL,
                    r#"logfmt syntax error at pos 8 : unexpected '"'"#
                )
            ])
        );
        assert_eq!(
            strict[2][ERROR_DETAILS_LABEL],
            "logfmt syntax error at pos 20 : unterminated quoted value"
        );
        let keep_empty = q("--keep-empty");
        assert_eq!(
            keep_empty[0],
            labels_of(&[("a", "1"), ("b", ""), ("c", ""), ("d", "x y"), ("flag", "")])
        );
        assert_eq!(keep_empty[1], labels_of(&[("a", "2"), ("e", "4")]));
        let keys = q(r#"a, g="d""#);
        assert_eq!(keys[0], labels_of(&[("a", "1"), ("g", "x y")]));
        assert_eq!(keys[3], labels_of(&[("a", ""), ("g", "")]));
        // A key named like a label sets it too; the last one read wins.
        let quirk = q(r#"y, x="z""#);
        assert_eq!(quirk[3], labels_of(&[("x", "3"), ("y", "2")]));
        let strict_keys = q("--strict a, e");
        assert_eq!(strict_keys[1]["e"], "");
        assert_eq!(strict_keys[1][ERROR_LABEL], "LogfmtParserErr");
    }

    /// Loki 3.7.6's labels for `| regexp` and `| pattern`.
    #[test]
    fn regexp_and_pattern_captures_become_labels() {
        let lines = ["alpha beta", "gamma"];
        let found = kept(
            r#"{service_name="api"} | regexp "(?P<first>\w+)(?: (?P<second>\w+))?""#,
            &lines,
        );
        assert_eq!(found[1].1, labels_of(&[("first", "gamma"), ("second", "")]));
        let found = kept(r#"{service_name="api"} | regexp "^(?P<x>a\w+)""#, &lines);
        assert_eq!(found[0].1, labels_of(&[("x", "alpha")]));
        assert_eq!(found[1].1, labels_of(&[]), "no match, no label");
        let found = kept(
            r#"{service_name="api"} | regexp "(?P<service_name>\w+)""#,
            &lines,
        );
        assert_eq!(
            found[0].1,
            labels_of(&[("service_name_extracted", "alpha")])
        );
        let found = kept(r#"{service_name="api"} | pattern "<a> <b>""#, &lines);
        assert_eq!(found[0].1, labels_of(&[("a", "alpha"), ("b", "beta")]));
        assert_eq!(found[1].1, labels_of(&[("a", "gamma")]));
    }

    /// Loki 3.7.6's labels for `label_format`: a rename moves the label, and the templates see
    /// the labels as they were at the first template.
    #[test]
    fn label_format_renames_and_templates() {
        let line = r#"sev=error msg="Hello World" n=42"#;
        let q = |query: &str| {
            kept(
                &format!(r#"{{service_name="api"}} | logfmt | label_format {query}"#),
                &[line],
            )
            .remove(0)
            .1
        };
        let found = q(r#"lvl=sev, both="{{.sev}}-{{.n}}", miss=nothere, m2="{{.nothere}}""#);
        assert_eq!(found["lvl"], "error");
        assert_eq!(found["both"], "-42");
        assert_eq!(found["m2"], "");
        assert!(!found.contains_key("miss"));
        let found = q(r#"sev="x", copy="{{.sev}}""#);
        assert_eq!(
            (found["sev"].as_str(), found["copy"].as_str()),
            ("x", "error")
        );
        let found = q(r#"a=msg, b=msg"#);
        assert_eq!(found["a"], "Hello World");
        assert!(!found.contains_key("b") && !found.contains_key("msg"));
        let failed = q(r#"x="{{ substr 1 4 .none }}""#);
        assert_eq!(failed[ERROR_LABEL], "TemplateFormatErr");
    }

    #[test]
    fn line_format_runs_functions_and_keeps_the_line_when_one_fails() {
        let line = r#"method=GET msg="Hello World""#;
        let q = |template: &str| {
            kept(
                &format!(r#"{{service_name="api"}} | logfmt | line_format `{template}`"#),
                &[line],
            )
            .remove(0)
        };
        assert_eq!(
            q("{{ .method | ToLower }} {{ __line__ | trunc 6 }}").0,
            "get method"
        );
        assert_eq!(
            q(r#"{{ if eq .method "GET" }}read{{ else }}write{{ end }}"#).0,
            "read"
        );
        assert_eq!(q("{{ .msg }}").0, "Hello World");
        let (kept_line, labels) = q("{{ substr 1 4 .none }}");
        assert_eq!(kept_line, line);
        assert_eq!(labels[ERROR_LABEL], "TemplateFormatErr");
    }

    /// Loki 3.7.6's lines and labels for `unpack` and `decolorize`.
    #[test]
    fn unpack_and_decolorize_rewrite_the_line() {
        let found = kept(
            r#"{service_name="api"} | unpack"#,
            &[
                r#"{"_entry":"inner line","pod":"p1","n":5}"#,
                r#"{"pod":"p2"}"#,
                "not json",
            ],
        );
        assert_eq!(found[0], ("inner line".into(), labels_of(&[("pod", "p1")])));
        assert_eq!(found[1], (r#"{"pod":"p2"}"#.into(), labels_of(&[])));
        assert_eq!(found[2].1[ERROR_LABEL], "JSONParserErr");
        let found = kept(
            r#"{service_name="api"} | decolorize |= "red text""#,
            &["\u{1b}[31mred\u{1b}[0m text"],
        );
        assert_eq!(lines_of(&found), ["red text"]);
    }

    #[test]
    fn drop_and_keep_by_value() {
        let line = "method=GET path=/a status=200";
        let q = |stage: &str| {
            kept(
                &format!(r#"{{service_name="api"}} | logfmt | {stage}"#),
                &[line],
            )
            .remove(0)
            .1
        };
        assert_eq!(
            q(r#"drop method="GET", path"#),
            labels_of(&[("status", "200")])
        );
        assert_eq!(
            q(r#"drop method="POST""#),
            labels_of(&[("method", "GET"), ("path", "/a"), ("status", "200")])
        );
        assert_eq!(
            q(r#"keep method=~"G.*", status="500""#),
            labels_of(&[("method", "GET")])
        );
        // Loki keeps the error labels whatever `keep` names.
        let errors = kept(r#"{service_name="api"} | json | keep status"#, &["plain"]);
        assert_eq!(errors[0].1[ERROR_LABEL], "JSONParserErr");
    }

    #[test]
    fn attributes_are_labels_and_drop_keep_shape_them() {
        let p = pipeline(
            r#"{service_name="api", k8s_pod="p1"} | http_method="GET" | keep service_name, http_method"#,
        );
        let in_pod = |attributes: &str| StoredRow {
            labels: r#"{"k8s.pod":"p1"}"#.into(),
            ..row("api", 9, "m", attributes)
        };
        let out = p
            .process(&in_pod(r#"{"http.method":"GET","user":"x"}"#))
            .unwrap();
        assert_eq!(out.labels.len(), 2);
        assert!(p.process(&in_pod(r#"{"http.method":"POST"}"#)).is_none());
        assert!(
            p.process(&row(
                "api",
                9,
                "m",
                r#"{"http.method":"GET","k8s.pod":"p1"}"#
            ))
            .is_none(),
            "a selector does not see structured metadata"
        );
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
            pattern: LinePattern::Text("(".into()),
            or: Vec::new(),
        });
        let err = Pipeline::compile(&unclosed).unwrap_err();
        assert!(err.0.contains("invalid regular expression"), "{err}");
        let giant = format!(r#"{{service_name="a"}} |~ "{}""#, "(a|b|c){1000}".repeat(8));
        let err = Pipeline::compile(&log(&giant)).unwrap_err();
        assert!(err.0.contains("too large"), "{err}");
        let err =
            Pipeline::compile(&log(r#"{service_name="a"} | line_format "{{if .x}}""#)).unwrap_err();
        assert!(err.0.contains("without {{end}}"), "{err}");
        let err = Pipeline::compile(&log(
            r#"{service_name="a"} | label_format x="{{ fromJson .y }}""#,
        ))
        .unwrap_err();
        assert!(
            err.0.contains(r#"function "fromJson" is not supported"#),
            "{err}"
        );
        for refused in [
            r#"{service_name="a"} |~ ip("1.2.3.4")"#,
            r#"{service_name="a"} |= ip("10.0.0.0/33")"#,
            r#"{service_name="a"} | x = ip("x")"#,
            r#"{service_name="a"} | regexp "(a)""#,
            r#"{service_name="a"} | pattern "<a><b>""#,
            r#"{service_name="a"} | label_format a=b, a=c"#,
            r#"{service_name="a"} | label_format __error__=b"#,
            r#"{service_name="a"} | json x="a..b""#,
        ] {
            assert!(Pipeline::compile(&log(refused)).is_err(), "{refused}");
        }
    }
}
