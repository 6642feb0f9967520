//! What a LogQL query says, once parsed: the subset Grafana's Loki data source and people use.

use std::time::Duration;

/// A whole query: log lines, or numbers over time.
#[derive(Clone, Debug, PartialEq)]
pub enum Query {
    /// `{selector} | pipeline`: matching records.
    Log(LogQuery),
    /// `count_over_time(…)`, `sum by (…) (…)`, `vector(1) + vector(1)`…
    Metric(MetricExpr),
}

/// A stream selector and the stages each matching line goes through (by default none: every
/// row, as the label endpoints read).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogQuery {
    /// `{service_name="checkout", level=~"error|warn"}`: every one must match.
    pub selector: Vec<Matcher>,
    /// Line filters, parsers, label filters and formatting, in order.
    pub pipeline: Vec<Stage>,
}

/// One matcher of a stream selector.
#[derive(Clone, Debug, PartialEq)]
pub struct Matcher {
    /// The label's name.
    pub label: String,
    /// How the value is compared.
    pub op: MatchOp,
    /// The text or regular expression.
    pub value: String,
}

/// How a selector's label is matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchOp {
    /// `=`
    Eq,
    /// `!=`
    Ne,
    /// `=~`: the whole value matches the regular expression.
    Re,
    /// `!~`
    NotRe,
}

/// One stage of a log pipeline.
#[derive(Clone, Debug, PartialEq)]
pub enum Stage {
    /// `|= "text"`, `!= "text"`, `|~ "re"`, `!~ "re"`, `|= ip("10.0.0.0/8")`, and
    /// `|= "a" or "b"` (a negated filter with `or` is parsed as one filter per alternative, as
    /// Loki reads it: none of them).
    LineFilter {
        /// Which of the four.
        op: LineOp,
        /// The text, regular expression or IP pattern.
        pattern: LinePattern,
        /// The alternatives after `or`, for `|=` and `|~`.
        or: Vec<LinePattern>,
    },
    /// `| json` or `| logfmt`: fields of the line become labels.
    Parser(ParserKind),
    /// `| json a="b.c", d="e[0]"`: only these fields, by path.
    JsonFields(Vec<Extraction>),
    /// `| logfmt --strict --keep-empty a, b="c"`: logfmt with flags, or only some keys.
    LogfmtWith {
        /// `--strict`: stop at the first pair that cannot be read, with an error.
        strict: bool,
        /// `--keep-empty`: keys without a value become labels too.
        keep_empty: bool,
        /// The keys to extract (every key when empty).
        fields: Vec<Extraction>,
    },
    /// `| regexp "(?P<name>re)"`: named captures become labels.
    Regexp(String),
    /// `| pattern "<ip> - <_> <method>"`: captures become labels.
    Pattern(String),
    /// `| unpack`: a packed JSON line's `_entry` becomes the line, its other keys labels.
    Unpack,
    /// `| decolorize`: ANSI color codes removed from the line.
    Decolorize,
    /// `| status >= 500`, `| level = "error" or duration > 1s`.
    LabelFilter(LabelFilter),
    /// `| line_format "{{.status}} {{.path}}"`.
    LineFormat(String),
    /// `| label_format dst=src, name="{{.a}}-{{.b}}"`.
    LabelFormat(Vec<LabelFormat>),
    /// `| drop a, b, c="v"`: labels removed.
    Drop(Vec<NamedLabel>),
    /// `| keep a, b, c="v"`: only these labels stay.
    Keep(Vec<NamedLabel>),
}

/// One alternative of a line filter.
#[derive(Clone, Debug, PartialEq)]
pub enum LinePattern {
    /// `"text"`: a text or a regular expression, as the operator says.
    Text(String),
    /// `ip("192.168.0.0/16")`: an address, a CIDR range or `from-to`.
    Ip(String),
}

/// `name="path"` of a parser that extracts only some fields (`| json`, `| logfmt`).
#[derive(Clone, Debug, PartialEq)]
pub struct Extraction {
    /// The label made.
    pub label: String,
    /// Where its value is: a JSON path (`a.b[0]`) or a logfmt key.
    pub path: String,
}

/// One label of `label_format`.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelFormat {
    /// The label set.
    pub label: String,
    /// `dst=src`: the label `src` renamed, else a template.
    pub rename: bool,
    /// The source label or the template.
    pub value: String,
}

/// A label of `drop` or `keep`: by name, or by name and value.
#[derive(Clone, Debug, PartialEq)]
pub enum NamedLabel {
    /// `name`
    Name(String),
    /// `name="value"`, `name=~"re"`…
    Matching(Matcher),
}

impl NamedLabel {
    /// The label's name.
    pub fn name(&self) -> &str {
        match self {
            NamedLabel::Name(name) => name,
            NamedLabel::Matching(matcher) => &matcher.label,
        }
    }
}

/// How a line filter matches the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineOp {
    /// `|=`: contains the text.
    Contains,
    /// `!=`: does not contain it.
    NotContains,
    /// `|~`: a match of the regular expression somewhere in the line.
    Matches,
    /// `!~`: no match.
    NotMatches,
}

/// Which parser a `|` stage names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParserKind {
    /// `| json`
    Json,
    /// `| logfmt`
    Logfmt,
}

/// A condition on the labels after the parsers.
#[derive(Clone, Debug, PartialEq)]
pub enum LabelFilter {
    /// `name op value`.
    Compare {
        /// The label.
        label: String,
        /// The comparison.
        op: CompareOp,
        /// What it is compared with.
        value: LabelValue,
    },
    /// `a and b`, also written `a, b` or `a b`.
    And(Box<LabelFilter>, Box<LabelFilter>),
    /// `a or b`.
    Or(Box<LabelFilter>, Box<LabelFilter>),
    /// `addr = ip("10.0.0.0/8")`, `addr != ip("…")`.
    Ip {
        /// The label.
        label: String,
        /// `!=`
        negated: bool,
        /// The address, CIDR range or `from-to`.
        pattern: String,
    },
}

/// A label filter's comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    /// `=` or `==`
    Eq,
    /// `!=`
    Ne,
    /// `=~`
    Re,
    /// `!~`
    NotRe,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
}

/// The right-hand side of a label filter.
#[derive(Clone, Debug, PartialEq)]
pub enum LabelValue {
    /// `"text"`: compared as text (or as a regular expression with `=~`, `!~`).
    Text(String),
    /// `500`, `0.25`.
    Number(f64),
    /// `1s`, `250ms`, `1h30m`.
    Duration(Duration),
    /// `10KB`, `1MiB`.
    Bytes(u64),
}

/// A metric query.
#[derive(Clone, Debug, PartialEq)]
pub enum MetricExpr {
    /// `count_over_time({…} | … [5m])`.
    Range {
        /// Which function of the range.
        function: RangeFunction,
        /// The log query whose lines are counted.
        query: LogQuery,
        /// The range, `[5m]`.
        range: Duration,
    },
    /// `sum by (level) (…)`, `topk(5, …)`.
    Aggregate {
        /// Which aggregation.
        op: AggregateOp,
        /// `by (…)` or `without (…)`; `None`: everything into one series.
        grouping: Option<Grouping>,
        /// `topk`'s k.
        parameter: Option<f64>,
        /// What is aggregated.
        inner: Box<MetricExpr>,
    },
    /// `a + b`, `a * 2`.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// Left operand.
        left: Box<MetricExpr>,
        /// Right operand.
        right: Box<MetricExpr>,
    },
    /// A number on its own: `2` in `rate(…) * 2`.
    Number(f64),
    /// `vector(1)`: one series without labels, this value at every step.
    Vector(f64),
}

/// A function over a range of log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeFunction {
    /// Lines in the range.
    CountOverTime,
    /// Lines per second over the range.
    Rate,
    /// Bytes of the lines in the range.
    BytesOverTime,
    /// Bytes per second over the range.
    BytesRate,
}

/// An aggregation across series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggregateOp {
    /// `sum`
    Sum,
    /// `count`
    Count,
    /// `avg`
    Avg,
    /// `min`
    Min,
    /// `max`
    Max,
    /// `topk(k, …)`
    Topk,
}

/// `by (a, b)` or `without (a, b)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Grouping {
    /// `without`: every label but these; else only these.
    pub without: bool,
    /// The labels.
    pub labels: Vec<String>,
}

/// An arithmetic operator between metric expressions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
}

/// A range function over a log query, such as `count_over_time({…} |= "x" [5m])`.
#[derive(Clone, Copy, Debug)]
pub struct RangeQuery<'a> {
    /// The function.
    pub function: RangeFunction,
    /// The log query whose lines it counts.
    pub query: &'a LogQuery,
    /// Its range.
    pub range: Duration,
}

impl MetricExpr {
    /// This expression when it is a `sum` (by or without labels, or of everything) of a range
    /// function: the sum's grouping and the range function.
    pub fn sum_of_range(&self) -> Option<(&Option<Grouping>, RangeQuery<'_>)> {
        let MetricExpr::Aggregate {
            op: AggregateOp::Sum,
            grouping,
            parameter: None,
            inner,
        } = self
        else {
            return None;
        };
        match &**inner {
            MetricExpr::Range {
                function,
                query,
                range,
            } => Some((
                grouping,
                RangeQuery {
                    function: *function,
                    query,
                    range: *range,
                },
            )),
            _ => None,
        }
    }
}
