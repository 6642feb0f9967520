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
    /// `|= "text"`, `!= "text"`, `|~ "re"`, `!~ "re"`, `|> "<_> pattern"`, `!> "…"`,
    /// `|= ip("10.0.0.0/8")`, and
    /// `|= "a" or "b"` (a negated filter with `or` is parsed as one filter per alternative, as
    /// Loki reads it: none of them).
    LineFilter {
        /// Which of the six.
        op: LineOp,
        /// The text, regular expression, pattern or IP pattern.
        pattern: LinePattern,
        /// The alternatives after `or`, for `|=`, `|~` and `|>`.
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
    /// `|>`: the line has the pattern's shape (`"<_> error <_>"`).
    PatternMatches,
    /// `!>`: it does not.
    NotPatternMatches,
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
    /// `count_over_time({…} | … [5m])`, `quantile_over_time(0.9, {…} | unwrap x [5m]) by (a)`.
    Range(RangeExpr),
    /// `sum by (level) (…)`, `topk(5, …)`, `sort_desc(…)`.
    Aggregate {
        /// Which aggregation.
        op: AggregateOp,
        /// `by (…)` or `without (…)`; `None`: everything into one series.
        grouping: Option<Grouping>,
        /// `topk`'s and `bottomk`'s k.
        parameter: Option<f64>,
        /// What is aggregated.
        inner: Box<MetricExpr>,
    },
    /// `a + b`, `a * 2`, `a > bool 3`, `a and on (x) b`.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// `bool`, `on`/`ignoring`, `group_left`/`group_right`.
        modifier: BinaryModifier,
        /// Left operand.
        left: Box<MetricExpr>,
        /// Right operand.
        right: Box<MetricExpr>,
    },
    /// A number on its own: `2` in `rate(…) * 2`.
    Number(f64),
    /// `vector(1)`: one series without labels, this value at every step.
    Vector(f64),
    /// `label_replace(…, "dst", "$1", "src", "(.*)")`.
    LabelReplace(LabelReplace),
}

/// A range function over the lines (or the values unwrapped from them) of a log query.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeExpr {
    /// Which function of the range.
    pub function: RangeFunction,
    /// The log query whose lines it reads.
    pub query: LogQuery,
    /// The range, `[5m]`.
    pub range: Duration,
    /// `offset 10m`: each step reads the range that ends this long before it.
    pub offset: Duration,
    /// `| unwrap label`: the number each line gives, for the functions of values.
    pub unwrap: Option<Unwrap>,
    /// `quantile_over_time`'s quantile.
    pub parameter: Option<f64>,
    /// `… by (a)` after the function: the lines of a group make one series.
    pub grouping: Option<Grouping>,
}

/// `| unwrap name`, `| unwrap duration(name)`, `| unwrap bytes(name)`, and the label filters
/// after it.
#[derive(Clone, Debug, PartialEq)]
pub struct Unwrap {
    /// The label whose value is the sample.
    pub label: String,
    /// How its text becomes a number.
    pub conversion: Conversion,
    /// `| __error__=""` and other label filters after the unwrap.
    pub filters: Vec<LabelFilter>,
}

/// How an unwrapped label's text is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conversion {
    /// A plain number.
    Number,
    /// `duration(…)`: a duration such as `250ms`, in seconds.
    Duration,
    /// `duration_seconds(…)`: the same.
    DurationSeconds,
    /// `bytes(…)`: a size such as `10KB`, in bytes.
    Bytes,
}

/// A function over a range of log lines, or of the values unwrapped from them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeFunction {
    /// Lines in the range.
    CountOverTime,
    /// Lines (or unwrapped values) per second over the range.
    Rate,
    /// Bytes of the lines in the range.
    BytesOverTime,
    /// Bytes per second over the range.
    BytesRate,
    /// 1 where the range has no line, nothing where it has one.
    AbsentOverTime,
    /// The sum of the values.
    SumOverTime,
    /// Their mean.
    AvgOverTime,
    /// The smallest.
    MinOverTime,
    /// The largest.
    MaxOverTime,
    /// The earliest.
    FirstOverTime,
    /// The latest.
    LastOverTime,
    /// Their population standard deviation.
    StddevOverTime,
    /// Their population variance.
    StdvarOverTime,
    /// Their φ-quantile.
    QuantileOverTime,
    /// Their per-second rate as a counter's, with resets.
    RateCounter,
}

impl RangeFunction {
    /// Its name in LogQL.
    pub fn name(self) -> &'static str {
        match self {
            RangeFunction::CountOverTime => "count_over_time",
            RangeFunction::Rate => "rate",
            RangeFunction::BytesOverTime => "bytes_over_time",
            RangeFunction::BytesRate => "bytes_rate",
            RangeFunction::AbsentOverTime => "absent_over_time",
            RangeFunction::SumOverTime => "sum_over_time",
            RangeFunction::AvgOverTime => "avg_over_time",
            RangeFunction::MinOverTime => "min_over_time",
            RangeFunction::MaxOverTime => "max_over_time",
            RangeFunction::FirstOverTime => "first_over_time",
            RangeFunction::LastOverTime => "last_over_time",
            RangeFunction::StddevOverTime => "stddev_over_time",
            RangeFunction::StdvarOverTime => "stdvar_over_time",
            RangeFunction::QuantileOverTime => "quantile_over_time",
            RangeFunction::RateCounter => "rate_counter",
        }
    }

    /// True for the functions that read an unwrapped value, never the lines alone.
    pub fn needs_unwrap(self) -> bool {
        !matches!(
            self,
            RangeFunction::CountOverTime
                | RangeFunction::Rate
                | RangeFunction::BytesOverTime
                | RangeFunction::BytesRate
                | RangeFunction::AbsentOverTime
        )
    }
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
    /// `bottomk(k, …)`
    Bottomk,
    /// `sort(…)`: ascending by value.
    Sort,
    /// `sort_desc(…)`
    SortDesc,
}

/// `by (a, b)` or `without (a, b)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Grouping {
    /// `without`: every label but these; else only these.
    pub without: bool,
    /// The labels.
    pub labels: Vec<String>,
}

/// A binary operator between metric expressions.
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
    /// `%`: the remainder, with the sign of the left side.
    Mod,
    /// `^`: the left side to the power of the right.
    Pow,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `and`: the left series that have a match on the right.
    And,
    /// `or`: the left series, and the right ones without a match on the left.
    Or,
    /// `unless`: the left series without a match on the right.
    Unless,
}

impl BinaryOp {
    /// True for `==`, `!=`, `>`, `>=`, `<`, `<=`.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Lt | BinaryOp::Le
        )
    }

    /// True for `and`, `or`, `unless`.
    pub fn is_set(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or | BinaryOp::Unless)
    }
}

/// What may follow a binary operator: `bool`, then `on (…)` or `ignoring (…)`, then
/// `group_left (…)` or `group_right (…)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BinaryModifier {
    /// `bool`: a comparison gives 0 or 1 instead of filtering.
    pub return_bool: bool,
    /// `on (…)`: match on these labels only; else on all labels but `labels`.
    pub on: bool,
    /// The labels of `on` or `ignoring`; `None` when neither is written.
    pub labels: Option<Vec<String>>,
    /// `group_left`/`group_right`: which side may have many series for one of the other.
    pub group: Option<Group>,
}

/// `group_left (…)` or `group_right (…)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// `group_right`: the right side is the "many" side.
    pub right: bool,
    /// Labels copied from the "one" side.
    pub include: Vec<String>,
}

/// `label_replace(inner, "dst", "replacement", "src", "regex")`.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelReplace {
    /// The series whose labels change.
    pub inner: Box<MetricExpr>,
    /// The label written.
    pub dst: String,
    /// Its value, with `$1`, `${name}` for the regular expression's groups.
    pub replacement: String,
    /// The label the regular expression matches.
    pub src: String,
    /// The regular expression, matched against the whole value.
    pub regex: String,
}

impl MetricExpr {
    /// This expression when it is a `sum` (by or without labels, or of everything) of a range
    /// function that lets Loki count each line straight into its group (no grouping of its own,
    /// and a function that sums): the sum's grouping and the range function.
    pub fn sum_of_range(&self) -> Option<(&Option<Grouping>, &RangeExpr)> {
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
            MetricExpr::Range(range)
                if range.grouping.is_none()
                    && matches!(
                        range.function,
                        RangeFunction::CountOverTime
                            | RangeFunction::Rate
                            | RangeFunction::BytesOverTime
                            | RangeFunction::BytesRate
                            | RangeFunction::SumOverTime
                    ) =>
            {
                Some((grouping, range))
            }
            _ => None,
        }
    }
}
