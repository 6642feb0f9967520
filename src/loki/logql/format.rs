//! A parsed query written back as LogQL text, in the form Loki 3 writes it (its `format_query`
//! endpoint and its error messages): matchers joined by `, `, label filters without spaces around
//! the operator, `and` written `,` and every combination in parentheses, durations as Go and
//! Prometheus print them, sizes as Go's `humanize` does, binary operations in parentheses and
//! operations on two numbers folded into one.

use std::fmt::{self, Display, Formatter, Write};
use std::time::Duration;

use super::ast::*;

impl Display for Query {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Query::Log(query) => query.fmt(f),
            Query::Metric(expr) => expr.fmt(f),
        }
    }
}

/// Past this many bytes, Loki's `format_query` writes a log query one stage a line.
const MAX_CHARS_PER_LINE: usize = 100;

/// One stage of a split pipeline at `level`, as Loki writes it: `| decolorize` without its
/// indent, and a run of line filters longer than a line one filter a line (without their `or`
/// alternatives, as Loki drops them there).
pub(super) fn pretty_stage(stages: &[Stage], level: usize) -> String {
    let indent = "  ".repeat(level);
    match stages {
        [Stage::Decolorize] => Stage::Decolorize.to_string(),
        [Stage::LineFilter { .. }, ..] => {
            let flat = stages
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ");
            if flat.len() <= MAX_CHARS_PER_LINE {
                return format!("{indent}{flat}");
            }
            let (last, before) = stages.split_last().expect("a run has a filter");
            let mut out = String::new();
            if !before.is_empty() {
                out.push_str(&pretty_stage(before, level));
                out.push('\n');
            }
            let alone = match last {
                Stage::LineFilter { op, pattern, .. } => Stage::LineFilter {
                    op: *op,
                    pattern: pattern.clone(),
                    or: Vec::new(),
                },
                other => other.clone(),
            };
            out.push_str(&format!("{indent}{alone}"));
            out
        }
        [stage, ..] => format!("{indent}{stage}"),
        [] => String::new(),
    }
}

impl Display for LogQuery {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_char('{')?;
        for (at, matcher) in self.selector.iter().enumerate() {
            if at > 0 {
                f.write_str(", ")?;
            }
            write!(
                f,
                "{}{}{}",
                matcher.label,
                matcher.op,
                Quoted(&matcher.value)
            )?;
        }
        f.write_char('}')?;
        for stage in &self.pipeline {
            f.write_char(' ')?;
            stage.fmt(f)?;
        }
        Ok(())
    }
}

impl Display for Stage {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Stage::LineFilter { op, pattern, or } => {
                let op = match op {
                    LineOp::Contains => "|=",
                    LineOp::NotContains => "!=",
                    LineOp::Matches => "|~",
                    LineOp::NotMatches => "!~",
                    LineOp::PatternMatches => "|>",
                    LineOp::NotPatternMatches => "!>",
                };
                write!(f, "{op} {pattern}")?;
                for alternative in or {
                    write!(f, " or {alternative}")?;
                }
                Ok(())
            }
            Stage::Parser(ParserKind::Json) => f.write_str("| json"),
            Stage::Parser(ParserKind::Logfmt) => f.write_str("| logfmt"),
            Stage::JsonFields(fields) => write!(f, "| json {}", Extractions(fields)),
            Stage::LogfmtWith {
                strict,
                keep_empty,
                fields,
            } => {
                f.write_str("| logfmt")?;
                if *strict {
                    f.write_str(" --strict")?;
                }
                if *keep_empty {
                    f.write_str(" --keep-empty")?;
                }
                if !fields.is_empty() {
                    write!(f, " {}", Extractions(fields))?;
                }
                Ok(())
            }
            Stage::Regexp(regex) => write!(f, "| regexp {}", Quoted(regex)),
            Stage::Pattern(pattern) => write!(f, "| pattern {}", Quoted(pattern)),
            Stage::Unpack => f.write_str("| unpack"),
            Stage::Decolorize => f.write_str("| decolorize"),
            Stage::LabelFilter(filter) => write!(f, "| {filter}"),
            Stage::LineFormat(template) => write!(f, "| line_format {}", Quoted(template)),
            Stage::LabelFormat(formats) => {
                f.write_str("| label_format ")?;
                for (at, format) in formats.iter().enumerate() {
                    if at > 0 {
                        f.write_char(',')?;
                    }
                    if format.rename {
                        write!(f, "{}={}", format.label, format.value)?;
                    } else {
                        write!(f, "{}={}", format.label, Quoted(&format.value))?;
                    }
                }
                Ok(())
            }
            Stage::Drop(labels) => write!(f, "| drop {}", NamedLabels(labels)),
            Stage::Keep(labels) => write!(f, "| keep {}", NamedLabels(labels)),
        }
    }
}

impl Display for LinePattern {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            LinePattern::Text(text) => Quoted(text).fmt(f),
            LinePattern::Ip(pattern) => write!(f, "ip({})", Quoted(pattern)),
        }
    }
}

/// A parser's `a="b.c",d="e"`.
struct Extractions<'a>(&'a [Extraction]);

impl Display for Extractions<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for (at, field) in self.0.iter().enumerate() {
            if at > 0 {
                f.write_char(',')?;
            }
            write!(f, "{}={}", field.label, Quoted(&field.path))?;
        }
        Ok(())
    }
}

/// `drop`'s and `keep`'s `a,b="c"`.
struct NamedLabels<'a>(&'a [NamedLabel]);

impl Display for NamedLabels<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for (at, label) in self.0.iter().enumerate() {
            if at > 0 {
                f.write_char(',')?;
            }
            match label {
                NamedLabel::Name(name) => f.write_str(name)?,
                NamedLabel::Matching(matcher) => write!(
                    f,
                    "{}{}{}",
                    matcher.label,
                    matcher.op,
                    Quoted(&matcher.value)
                )?,
            }
        }
        Ok(())
    }
}

impl Display for MatchOp {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MatchOp::Eq => "=",
            MatchOp::Ne => "!=",
            MatchOp::Re => "=~",
            MatchOp::NotRe => "!~",
        })
    }
}

impl Display for LabelFilter {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            LabelFilter::Compare { label, op, value } => {
                let op = match op {
                    CompareOp::Eq => match value {
                        LabelValue::Text(_) => "=",
                        _ => "==",
                    },
                    CompareOp::Ne => "!=",
                    CompareOp::Re => "=~",
                    CompareOp::NotRe => "!~",
                    CompareOp::Gt => ">",
                    CompareOp::Ge => ">=",
                    CompareOp::Lt => "<",
                    CompareOp::Le => "<=",
                };
                write!(f, "{label}{op}")?;
                match value {
                    LabelValue::Text(text) => Quoted(text).fmt(f),
                    LabelValue::Number(number) => Number(*number).fmt(f),
                    LabelValue::Duration(duration) => GoDuration(*duration).fmt(f),
                    LabelValue::Bytes(bytes) => f.write_str(&humanize_bytes(*bytes)),
                }
            }
            LabelFilter::Ip {
                label,
                negated,
                pattern,
            } => {
                let op = if *negated { "!=" } else { "=" };
                write!(f, "{label}{op}ip({})", Quoted(pattern))
            }
            LabelFilter::And(left, right) => write!(f, "( {left} , {right} )"),
            LabelFilter::Or(left, right) => write!(f, "( {left} or {right} )"),
        }
    }
}

impl Display for MetricExpr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            MetricExpr::Range(range) => range.fmt(f),
            MetricExpr::Aggregate {
                op,
                grouping,
                parameter,
                inner,
            } => {
                f.write_str(op.name())?;
                // Loki leaves out `by ()`, which groups everything as no grouping does.
                if let Some(grouping) = grouping
                    .as_ref()
                    .filter(|g| g.without || !g.labels.is_empty())
                {
                    write!(f, "{grouping}")?;
                }
                f.write_char('(')?;
                if let Some(parameter) = parameter {
                    write!(f, "{},", Literal(*parameter))?;
                }
                write!(f, "{inner})")
            }
            MetricExpr::Binary {
                op,
                modifier,
                left,
                right,
            } => {
                if let (MetricExpr::Number(a), MetricExpr::Number(b)) = (&**left, &**right) {
                    return Literal(op.apply(*a, *b)).fmt(f);
                }
                let name = op.symbol();
                write!(f, "({left} {name}")?;
                if modifier.return_bool {
                    f.write_str(" bool")?;
                }
                // Loki writes the group (or nothing) after the matching labels and a space, so
                // `on ()` without a group is followed by two spaces; `ignoring ()`, which matches
                // as no modifier does, it leaves out with its group.
                let written = modifier
                    .labels
                    .as_ref()
                    .filter(|labels| modifier.on || !labels.is_empty());
                if let Some(labels) = written {
                    let how = if modifier.on { "on" } else { "ignoring" };
                    write!(f, " {how} ({}) ", labels.join(","))?;
                    if let Some(group) = &modifier.group {
                        f.write_str(if group.right {
                            "group_right"
                        } else {
                            "group_left"
                        })?;
                        if !group.include.is_empty() {
                            write!(f, " ({})", group.include.join(","))?;
                        }
                    }
                }
                write!(f, " {right})")
            }
            MetricExpr::Number(number) => Literal(*number).fmt(f),
            MetricExpr::Vector(value) => write!(f, "vector({value:.6})"),
            MetricExpr::LabelReplace(replace) => write!(
                f,
                "label_replace({},{},{},{},{})",
                replace.inner,
                Quoted(&replace.dst),
                Quoted(&replace.replacement),
                Quoted(&replace.src),
                Quoted(&replace.regex)
            ),
        }
    }
}

impl Display for Grouping {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let how = if self.without { "without" } else { "by" };
        write!(f, " {how} ({})", self.labels.join(","))
    }
}

impl Display for RangeExpr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", self.function.name())?;
        if let Some(parameter) = self.parameter {
            write!(f, "{},", Number(parameter))?;
        }
        self.query.fmt(f)?;
        if let Some(unwrap) = &self.unwrap {
            write!(f, " | {}", unwrap.written())?;
            for filter in &unwrap.filters {
                write!(f, " | {filter}")?;
            }
        }
        write!(f, "[{}]", PromDuration(self.range))?;
        if !self.offset.is_zero() {
            write!(f, " offset {}", GoDuration(self.offset))?;
        }
        f.write_char(')')?;
        if let Some(grouping) = &self.grouping {
            grouping.fmt(f)?;
        }
        Ok(())
    }
}

impl AggregateOp {
    /// Its name in LogQL.
    pub(crate) fn name(self) -> &'static str {
        match self {
            AggregateOp::Sum => "sum",
            AggregateOp::Count => "count",
            AggregateOp::Avg => "avg",
            AggregateOp::Min => "min",
            AggregateOp::Max => "max",
            AggregateOp::Topk => "topk",
            AggregateOp::Bottomk => "bottomk",
            AggregateOp::Sort => "sort",
            AggregateOp::SortDesc => "sort_desc",
        }
    }
}

impl BinaryOp {
    /// How LogQL writes it.
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Mod => "%",
            BinaryOp::Pow => "^",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
            BinaryOp::Unless => "unless",
        }
    }
    /// The operation on two numbers, as Loki folds it when it parses: a comparison gives 1 or 0,
    /// a division by zero NaN.
    pub(crate) fn apply(self, a: f64, b: f64) -> f64 {
        match super::binary::binary(
            self,
            &BinaryModifier::default(),
            super::eval::Value::Scalar(a),
            super::eval::Value::Scalar(b),
        ) {
            Ok(super::eval::Value::Scalar(value)) => value,
            _ => f64::NAN,
        }
    }
}

impl Unwrap {
    /// `unwrap label`, `unwrap duration(label)`: the stage without its filters.
    pub(crate) fn written(&self) -> String {
        let label = &self.label;
        match self.conversion {
            Conversion::Number => format!("unwrap {label}"),
            Conversion::Duration => format!("unwrap duration({label})"),
            Conversion::DurationSeconds => format!("unwrap duration_seconds({label})"),
            Conversion::Bytes => format!("unwrap bytes({label})"),
        }
    }
}

/// A number as Go's `strconv.FormatFloat(n, 'f', -1, 64)` writes it: no exponent, no trailing
/// zeros.
struct Number(f64);

impl Display for Number {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n.is_nan() {
            f.write_str("NaN")
        } else if n.is_infinite() {
            f.write_str(if n > 0.0 { "+Inf" } else { "-Inf" })
        } else {
            // Rust's shortest round-trip digits, never in exponent form: Go's 'f' with -1.
            write!(f, "{n}")
        }
    }
}

/// A number of a metric expression as Go's `strconv.FormatFloat(n, 'g', -1, 64)` writes it: the
/// shortest digits, in exponent form below 1e-4 and from 1e6 (`1e+06`, `1.5e-05`).
pub(crate) struct Literal(pub(crate) f64);

impl Display for Literal {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if !n.is_finite() || n == 0.0 {
            return Number(n).fmt(f);
        }
        let scientific = format!("{n:e}");
        let (mantissa, exponent) = scientific
            .split_once('e')
            .expect("Rust writes an exponent in {:e}");
        let exponent: i32 = exponent.parse().expect("an integer exponent");
        if (-4..6).contains(&exponent) {
            return Number(n).fmt(f);
        }
        let sign = if exponent < 0 { '-' } else { '+' };
        write!(f, "{mantissa}e{sign}{:02}", exponent.abs())
    }
}

/// A text quoted as Go's `strconv.Quote` does (and its `%q`).
pub(crate) struct Quoted<'a>(pub(crate) &'a str);

impl Display for Quoted<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        for c in self.0.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\t' => f.write_str("\\t")?,
                '\r' => f.write_str("\\r")?,
                '\u{7}' => f.write_str("\\a")?,
                '\u{8}' => f.write_str("\\b")?,
                '\u{c}' => f.write_str("\\f")?,
                '\u{b}' => f.write_str("\\v")?,
                c if (c as u32) < 0x20 || c == '\u{7f}' => write!(f, "\\x{:02x}", c as u32)?,
                c if c.is_control() => write!(f, "\\u{:04x}", c as u32)?,
                c => f.write_char(c)?,
            }
        }
        f.write_char('"')
    }
}

/// A duration as Go's `time.Duration.String` writes it: `1h30m0s`, `1.5s`, `250ms`.
struct GoDuration(Duration);

impl Display for GoDuration {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        if nanos == 0 {
            return f.write_str("0s");
        }
        if nanos < 1_000_000_000 {
            // Below a second, in the largest unit that keeps it at least 1.
            let (scale, unit) = match nanos {
                n if n < 1_000 => (1, "ns"),
                n if n < 1_000_000 => (1_000, "µs"),
                _ => (1_000_000, "ms"),
            };
            return write!(f, "{}{unit}", Fraction(nanos, scale));
        }
        let hours = nanos / 3_600_000_000_000;
        let minutes = nanos / 60_000_000_000 % 60;
        let seconds = nanos % 60_000_000_000;
        if hours > 0 {
            write!(f, "{hours}h{minutes}m")?;
        } else if minutes > 0 {
            write!(f, "{minutes}m")?;
        }
        write!(f, "{}s", Fraction(seconds, 1_000_000_000))
    }
}

/// `value / scale` with the fraction's trailing zeros left out.
struct Fraction(u128, u128);

impl Display for Fraction {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let Fraction(value, scale) = *self;
        write!(f, "{}", value / scale)?;
        let rest = value % scale;
        if rest > 0 {
            let digits = scale.ilog10() as usize;
            let fraction = format!("{rest:0digits$}");
            write!(f, ".{}", fraction.trim_end_matches('0'))?;
        }
        Ok(())
    }
}

/// A range as Prometheus's `model.Duration` writes it: years and weeks only when they divide it,
/// then each unit from days to milliseconds that is not zero (`2w`, `400d`, `1d1h1m1s`,
/// `1s500ms`).
pub(crate) struct PromDuration(pub(crate) Duration);

impl Display for PromDuration {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let mut ms = self.0.as_millis();
        if ms == 0 {
            return f.write_str("0s");
        }
        const UNITS: [(&str, u128); 7] = [
            ("y", 365 * 86_400_000),
            ("w", 7 * 86_400_000),
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1_000),
            ("ms", 1),
        ];
        for (unit, size) in UNITS {
            let whole_only = matches!(unit, "y" | "w");
            if whole_only && !ms.is_multiple_of(size) {
                continue;
            }
            if ms >= size {
                write!(f, "{}{unit}", ms / size)?;
                ms %= size;
            }
        }
        Ok(())
    }
}

/// A size as Go's `humanize.Bytes` writes it, without its space: `512B`, `10kB`, `1.0MB`.
fn humanize_bytes(bytes: u64) -> String {
    if bytes < 10 {
        return format!("{bytes}B");
    }
    const SIZES: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    let exponent = ((bytes as f64).ln() / 1000f64.ln()).floor() as usize;
    let exponent = exponent.min(SIZES.len() - 1);
    let value = ((bytes as f64) / 1000f64.powi(exponent as i32) * 10.0 + 0.5).floor() / 10.0;
    if value < 10.0 {
        format!("{value:.1}{}", SIZES[exponent])
    } else {
        format!("{value:.0}{}", SIZES[exponent])
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;

    /// Queries and what Loki 3.7.6's `format_query` answered for each.
    const LOKI_FORMATTED: &[(&str, &str)] = &[
        (
            r#"{service_name="checkout",level=~"warn|error"}|="x"|json"#,
            r#"{service_name="checkout", level=~"warn|error"} |= "x" | json"#,
        ),
        (
            r#"sum by(level)(count_over_time({service_name="checkout"}|json|status>=500[5m]))"#,
            r#"sum by (level)(count_over_time({service_name="checkout"} | json | status>=500[5m]))"#,
        ),
        (
            r#"{a="b", c!="d", e=~"f.*", g!~"h"}"#,
            r#"{a="b", c!="d", e=~"f.*", g!~"h"}"#,
        ),
        (
            r#"{a="b"} |= "x" != "y" |~ "z.*" !~ "w""#,
            r#"{a="b"} |= "x" != "y" |~ "z.*" !~ "w""#,
        ),
        (
            r#"{a="b"} | logfmt | duration > 1s"#,
            r#"{a="b"} | logfmt | duration>1s"#,
        ),
        (
            r#"{a="b"} | json | size > 10KB"#,
            r#"{a="b"} | json | size>10kB"#,
        ),
        (
            r#"{a="b"} | json | size >= 1MiB"#,
            r#"{a="b"} | json | size>=1.0MB"#,
        ),
        (
            r#"{a="b"} | json | status == 500"#,
            r#"{a="b"} | json | status==500"#,
        ),
        (
            r#"{a="b"} | json | status != 500"#,
            r#"{a="b"} | json | status!=500"#,
        ),
        (
            r#"{a="b"} | json | status < 0.25"#,
            r#"{a="b"} | json | status<0.25"#,
        ),
        (
            r#"{a="b"} | json | status <= 1e3"#,
            r#"{a="b"} | json | status<=1000"#,
        ),
        (
            r#"{a="b"} | json | user = "x""#,
            r#"{a="b"} | json | user="x""#,
        ),
        (
            r#"{a="b"} | json | user =~ "x.*""#,
            r#"{a="b"} | json | user=~"x.*""#,
        ),
        (
            r#"{a="b"} | json | user !~ "x.*""#,
            r#"{a="b"} | json | user!~"x.*""#,
        ),
        (
            r#"{a="b"} | json | user != "x""#,
            r#"{a="b"} | json | user!="x""#,
        ),
        (
            r#"{a="b"} | json | a="1" or b="2""#,
            r#"{a="b"} | json | ( a="1" or b="2" )"#,
        ),
        (
            r#"{a="b"} | json | a="1" and b="2""#,
            r#"{a="b"} | json | ( a="1" , b="2" )"#,
        ),
        (
            r#"{a="b"} | json | a="1", b="2""#,
            r#"{a="b"} | json | ( a="1" , b="2" )"#,
        ),
        (
            r#"{a="b"} | json | a="1" b="2""#,
            r#"{a="b"} | json | ( a="1" , b="2" )"#,
        ),
        (
            r#"{a="b"} | json | (a="1" or b="2") and c="3""#,
            r#"{a="b"} | json | ( ( a="1" or b="2" ) , c="3" )"#,
        ),
        (
            r#"{a="b"} | json | a="1" or (b="2" and c="3")"#,
            r#"{a="b"} | json | ( a="1" or ( b="2" , c="3" ) )"#,
        ),
        (
            r#"{a="b"} | line_format "{{.a}} {{__line__}}""#,
            r#"{a="b"} | line_format "{{.a}} {{__line__}}""#,
        ),
        (r#"{a="b"} | drop a, b"#, r#"{a="b"} | drop a,b"#),
        (r#"{a="b"} | keep a, b"#, r#"{a="b"} | keep a,b"#),
        (r#"{a="b"} | drop __error__"#, r#"{a="b"} | drop __error__"#),
        (
            r#"{a="b"} | json | duration >= 1h30m"#,
            r#"{a="b"} | json | duration>=1h30m0s"#,
        ),
        (
            r#"{a="b"} | json | duration > 250ms"#,
            r#"{a="b"} | json | duration>250ms"#,
        ),
        (
            r#"{a="b"} | json | duration > 90s"#,
            r#"{a="b"} | json | duration>1m30s"#,
        ),
        (
            r#"{a="b"} | json | duration > 1.5s"#,
            r#"{a="b"} | json | duration>1.5s"#,
        ),
        (r#"rate({a="b"}[1m])"#, r#"rate({a="b"}[1m])"#),
        (
            r#"bytes_over_time({a="b"}[1h])"#,
            r#"bytes_over_time({a="b"}[1h])"#,
        ),
        (
            r#"bytes_rate({a="b"}[90s])"#,
            r#"bytes_rate({a="b"}[1m30s])"#,
        ),
        (
            r#"count_over_time({a="b"}[1h30m])"#,
            r#"count_over_time({a="b"}[1h30m])"#,
        ),
        (
            r#"count_over_time({a="b"}[2d])"#,
            r#"count_over_time({a="b"}[2d])"#,
        ),
        (r#"sum(rate({a="b"}[1m]))"#, r#"sum(rate({a="b"}[1m]))"#),
        (
            r#"sum without (a, b) (rate({a="b"}[1m]))"#,
            r#"sum without (a,b)(rate({a="b"}[1m]))"#,
        ),
        (
            r#"count by (a) (rate({a="b"}[1m]))"#,
            r#"count by (a)(rate({a="b"}[1m]))"#,
        ),
        (r#"avg(rate({a="b"}[1m]))"#, r#"avg(rate({a="b"}[1m]))"#),
        (
            r#"min by (a) (rate({a="b"}[1m]))"#,
            r#"min by (a)(rate({a="b"}[1m]))"#,
        ),
        (r#"max(rate({a="b"}[1m]))"#, r#"max(rate({a="b"}[1m]))"#),
        (
            r#"topk(5, sum by (a) (rate({a="b"}[1m])))"#,
            r#"topk(5,sum by (a)(rate({a="b"}[1m])))"#,
        ),
        (
            r#"sum(rate({a="b"}[1m])) + sum(rate({c="d"}[1m]))"#,
            r#"(sum(rate({a="b"}[1m])) + sum(rate({c="d"}[1m])))"#,
        ),
        (
            r#"sum(rate({a="b"}[1m])) - 2"#,
            r#"(sum(rate({a="b"}[1m])) - 2)"#,
        ),
        (
            r#"sum(rate({a="b"}[1m])) * 2.5"#,
            r#"(sum(rate({a="b"}[1m])) * 2.5)"#,
        ),
        (
            r#"sum(rate({a="b"}[1m])) / sum(rate({c="d"}[1m]))"#,
            r#"(sum(rate({a="b"}[1m])) / sum(rate({c="d"}[1m])))"#,
        ),
        (
            r#"2 * sum(rate({a="b"}[1m]))"#,
            r#"(2 * sum(rate({a="b"}[1m])))"#,
        ),
        (
            r#"(sum(rate({a="b"}[1m])) + 1) * 2"#,
            r#"((sum(rate({a="b"}[1m])) + 1) * 2)"#,
        ),
        (
            r#"sum(rate({a="b"}[1m])) + 1 * 2"#,
            r#"(sum(rate({a="b"}[1m])) + 2)"#,
        ),
        ("vector(1)", "vector(1.000000)"),
        (
            "vector(1) + vector(2)",
            "(vector(1.000000) + vector(2.000000))",
        ),
        ("1 + 2", "3"),
        (r#"{a="b"} |= "quote\"d""#, r#"{a="b"} |= "quote\"d""#),
        (r#"{a="b"} |= `raw\d`"#, r#"{a="b"} |= "raw\\d""#),
        (
            r#"{a="b"} | json | msg = "tab\there""#,
            r#"{a="b"} | json | msg="tab\there""#,
        ),
        (
            r#"sum by (a, b) (count_over_time({a="b"} | json | __error__="" [5m]))"#,
            r#"sum by (a,b)(count_over_time({a="b"} | json | __error__=""[5m]))"#,
        ),
        (
            r#"{a="b"} | json | status > -1"#,
            r#"{a="b"} | json | status>-1"#,
        ),
        (
            r#"count_over_time({a="b"}[5m0s])"#,
            r#"count_over_time({a="b"}[5m])"#,
        ),
        (
            r#"count_over_time({a="b"}[60s])"#,
            r#"count_over_time({a="b"}[1m])"#,
        ),
        (
            r#"count_over_time({a="b"}[1500ms])"#,
            r#"count_over_time({a="b"}[1s500ms])"#,
        ),
        (
            r#"{a="b"} | json | status = 500"#,
            r#"{a="b"} | json | status==500"#,
        ),
        (r#"{a="b"} | json | d = 1s"#, r#"{a="b"} | json | d==1s"#),
        (
            r#"{a="b"} | json | s == 1KB"#,
            r#"{a="b"} | json | s==1.0kB"#,
        ),
        (
            r#"sum(rate({a="b"}[1m])) * 1e21"#,
            r#"(sum(rate({a="b"}[1m])) * 1e+21)"#,
        ),
        (
            r#"sum(rate({a="b"}[1m])) * 0.1"#,
            r#"(sum(rate({a="b"}[1m])) * 0.1)"#,
        ),
        ("{a=\"b\"} |= \"é\u{1}\"", "{a=\"b\"} |= \"é\\x01\""),
        (
            r#"count_over_time({a="b"}[90061s])"#,
            r#"count_over_time({a="b"}[1d1h1m1s])"#,
        ),
        (
            r#"count_over_time({a="b"}[14d])"#,
            r#"count_over_time({a="b"}[2w])"#,
        ),
        (
            r#"count_over_time({a="b"}[100ms])"#,
            r#"count_over_time({a="b"}[100ms])"#,
        ),
        (r#"{a="b"} | json | d > 1h"#, r#"{a="b"} | json | d>1h0m0s"#),
        (r#"{a="b"} | json | d > 1us"#, r#"{a="b"} | json | d>1µs"#),
        (
            r#"{a="b"} | json | d > 100ns"#,
            r#"{a="b"} | json | d>100ns"#,
        ),
        (
            r#"{a="b"} | json | d > 36h"#,
            r#"{a="b"} | json | d>36h0m0s"#,
        ),
        (r#"{a="b"} | json | s > 9B"#, r#"{a="b"} | json | s>9B"#),
        (
            r#"{a="b"} | json | s > 999999B"#,
            r#"{a="b"} | json | s>1000kB"#,
        ),
        (
            r#"{a="b"} | json | s > 1GiB"#,
            r#"{a="b"} | json | s>1.1GB"#,
        ),
        (
            r#"sum(rate({a="b"}[1m])) * 1e20"#,
            r#"(sum(rate({a="b"}[1m])) * 1e+20)"#,
        ),
        (
            r#"sum(rate({a="b"}[1m])) * 0.00001"#,
            r#"(sum(rate({a="b"}[1m])) * 1e-05)"#,
        ),
        (
            r#"sum(rate({a="b"}[1m])) * 0.0001"#,
            r#"(sum(rate({a="b"}[1m])) * 0.0001)"#,
        ),
        (
            r#"sum(rate({a="b"}[1m])) * 123456789012"#,
            r#"(sum(rate({a="b"}[1m])) * 1.23456789012e+11)"#,
        ),
        (
            r#"{a="b"} | json | s > 1e21"#,
            r#"{a="b"} | json | s>1000000000000000000000"#,
        ),
        (
            r#"{a="b"} | json | s > 0.00001"#,
            r#"{a="b"} | json | s>0.00001"#,
        ),
        // Pipeline stages, as Loki 3.7.6 writes them.
        (r#"{a="b"} != "a" or "b""#, r#"{a="b"} != "a" != "b""#),
        (
            r#"{a="b"} |= "a" or "b" or "c" != "d" or "e""#,
            r#"{a="b"} |= "a" or "b" or "c" != "d" != "e""#,
        ),
        (r#"{a="b"} |~ "a" or "b""#, r#"{a="b"} |~ "a" or "b""#),
        (r#"{a="b"} !~ "a" or "b""#, r#"{a="b"} !~ "a" !~ "b""#),
        (
            r#"{a="b"} |= "x" or ip("1.2.3.4")"#,
            r#"{a="b"} |= "x" or ip("1.2.3.4")"#,
        ),
        (
            r#"{a="b"} != "z" or ip("1.2.3.4")"#,
            r#"{a="b"} != "z" != ip("1.2.3.4")"#,
        ),
        (r#"{a="b"} != ip("1.2.3.4")"#, r#"{a="b"} != ip("1.2.3.4")"#),
        (
            r#"{a="b"} | x = ip("10.0.0.0/8")"#,
            r#"{a="b"} | x=ip("10.0.0.0/8")"#,
        ),
        (
            r#"{a="b"} | x != ip("::1") and y="1""#,
            r#"{a="b"} | ( x!=ip("::1") , y="1" )"#,
        ),
        (
            r#"{a="b"} | json a="b.c", d="e[0]""#,
            r#"{a="b"} | json a="b.c",d="e[0]""#,
        ),
        (r#"{a="b"} | json a, b"#, r#"{a="b"} | json a="a",b="b""#),
        (r#"{a="b"} | logfmt a"#, r#"{a="b"} | logfmt a="a""#),
        (
            r#"{a="b"} | logfmt --keep-empty --strict"#,
            r#"{a="b"} | logfmt --strict --keep-empty"#,
        ),
        (
            r#"{a="b"} | logfmt --strict a, b="c""#,
            r#"{a="b"} | logfmt --strict a="a",b="c""#,
        ),
        (
            r#"{a="b"} | regexp `(?P<x>\d)`"#,
            r#"{a="b"} | regexp "(?P<x>\\d)""#,
        ),
        (
            r#"{a="b"} | pattern "<x> b""#,
            r#"{a="b"} | pattern "<x> b""#,
        ),
        (r#"{a="b"} | unpack"#, r#"{a="b"} | unpack"#),
        (r#"{a="b"} | decolorize"#, r#"{a="b"} | decolorize"#),
        (
            r#"{a="b"} | label_format a=b, c="d", e=`f`"#,
            r#"{a="b"} | label_format a=b,c="d",e="f""#,
        ),
        (
            r#"{a="b"} | line_format "{{ .method | ToLower }}""#,
            r#"{a="b"} | line_format "{{ .method | ToLower }}""#,
        ),
        (r#"{a="b"} | drop a, b="c""#, r#"{a="b"} | drop a,b="c""#),
        (
            r#"{a="b"} | keep a=~"b", c!~"x""#,
            r#"{a="b"} | keep a=~"b",c!~"x""#,
        ),
        (
            r#"sum_over_time({a="b"} | logfmt | unwrap bytes [5m])"#,
            r#"sum_over_time({a="b"} | logfmt | unwrap bytes[5m])"#,
        ),
        (
            r#"avg_over_time({a="b"} | unwrap bytes(s) [1m]) without (x, y)"#,
            r#"avg_over_time({a="b"} | unwrap bytes(s)[1m]) without (x,y)"#,
        ),
        (
            r#"max_over_time({a="b"} | unwrap duration_seconds(d) | x > 1 | y = "z" [1m])"#,
            r#"max_over_time({a="b"} | unwrap duration_seconds(d) | x>1 | y="z"[1m])"#,
        ),
        (
            r#"rate_counter({a="b"} | unwrap x [1m])"#,
            r#"rate_counter({a="b"} | unwrap x[1m])"#,
        ),
        (
            r#"absent_over_time({a="b"}[5m] offset 1h)"#,
            r#"absent_over_time({a="b"}[5m] offset 1h0m0s)"#,
        ),
        (
            r#"count_over_time({a="b"}[5m] offset 90s)"#,
            r#"count_over_time({a="b"}[5m] offset 1m30s)"#,
        ),
        (
            r#"bottomk(2, rate({a="b"}[1m]))"#,
            r#"bottomk(2,rate({a="b"}[1m]))"#,
        ),
        (r#"sort(rate({a="b"}[1m]))"#, r#"sort(rate({a="b"}[1m]))"#),
        (
            r#"sort_desc(rate({a="b"}[1m]))"#,
            r#"sort_desc(rate({a="b"}[1m]))"#,
        ),
        (r#"rate({a="b"}[1m]) > 2"#, r#"(rate({a="b"}[1m]) > 2)"#),
        (
            r#"rate({a="b"}[1m]) >= bool 2"#,
            r#"(rate({a="b"}[1m]) >= bool 2)"#,
        ),
        (
            r#"rate({a="b"}[1m]) != 1 < 2 <= 3"#,
            r#"(((rate({a="b"}[1m]) != 1) < 2) <= 3)"#,
        ),
        ("1 > 2", "0"),
        ("1 < bool 2", "1"),
        (
            r#"rate({a="b"}[1m]) or rate({c="d"}[1m]) unless rate({e="f"}[1m])"#,
            r#"(rate({a="b"}[1m]) or (rate({c="d"}[1m]) unless rate({e="f"}[1m])))"#,
        ),
        (
            r#"rate({a="b"}[1m]) / on (x, y) group_left (z) rate({c="d"}[1m])"#,
            r#"(rate({a="b"}[1m]) / on (x,y) group_left (z) rate({c="d"}[1m]))"#,
        ),
        (
            r#"rate({a="b"}[1m]) / ignoring (x) group_right rate({c="d"}[1m])"#,
            r#"(rate({a="b"}[1m]) / ignoring (x) group_right rate({c="d"}[1m]))"#,
        ),
        (
            r#"rate({a="b"}[1m]) / on () rate({c="d"}[1m])"#,
            r#"(rate({a="b"}[1m]) / on ()  rate({c="d"}[1m]))"#,
        ),
        (
            r#"rate({a="b"}[1m]) > bool on (x) rate({c="d"}[1m])"#,
            r#"(rate({a="b"}[1m]) > bool on (x)  rate({c="d"}[1m]))"#,
        ),
        (
            r#"sum by () (rate({a="b"}[1m]))"#,
            r#"sum(rate({a="b"}[1m]))"#,
        ),
        (
            r#"sum without () (rate({a="b"}[1m]))"#,
            r#"sum without ()(rate({a="b"}[1m]))"#,
        ),
        (
            r#"avg_over_time({a="b"} | unwrap x [1m]) by ()"#,
            r#"avg_over_time({a="b"} | unwrap x[1m]) by ()"#,
        ),
        (
            r#"rate({a="b"}[1m]) and ignoring () rate({c="d"}[1m])"#,
            r#"(rate({a="b"}[1m]) and rate({c="d"}[1m]))"#,
        ),
        (
            r#"rate({a="b"}[1m]) + on () group_left rate({c="d"}[1m])"#,
            r#"(rate({a="b"}[1m]) + on () group_left rate({c="d"}[1m]))"#,
        ),
        (
            r#"label_replace(rate({a="b"}[1m]), "d\"st", "a\\b", "src", "")"#,
            r#"label_replace(rate({a="b"}[1m]),"d\"st","a\\b","src","")"#,
        ),
    ];

    /// Long log queries and what Loki 3.7.6's `format_query` answered for each: one stage a line.
    const LOKI_PRETTY: &[(&str, &str)] = &[
        (
            "{a=\"b\"} |= \"x\" or \"y\" != \"z\" or ip(\"1.2.3.4\") |~ \"a\" or \"b\" | json a=\"b.c\", d=\"e[0]\" | logfmt --strict --keep-empty a, b=\"c\" | regexp \"(?P<x>.)\" | pattern \"<x> <_>\" | label_format a=b, c=\"{{.d}}\" | line_format \"{{.a | ToUpper}}\" | decolorize | unpack | drop a=\"b\", c | keep d!=\"e\", f | addr = ip(\"10.0.0.0/8\") | addr != ip(\"::1\")",
            "{a=\"b\"}\n  |= \"x\" or \"y\" != \"z\" != ip(\"1.2.3.4\") |~ \"a\" or \"b\"\n  | json a=\"b.c\",d=\"e[0]\"\n  | logfmt --strict --keep-empty a=\"a\",b=\"c\"\n  | regexp \"(?P<x>.)\"\n  | pattern \"<x> <_>\"\n  | label_format a=b,c=\"{{.d}}\"\n  | line_format \"{{.a | ToUpper}}\"\n| decolorize\n  | unpack\n  | drop a=\"b\",c\n  | keep d!=\"e\",f\n  | addr=ip(\"10.0.0.0/8\")\n  | addr!=ip(\"::1\")",
        ),
        (
            "{a=\"b\"} |= \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" or \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbb\" != \"ccccccccccccccccccccccccccccccccccc\" |~ \"dddd\" | json",
            "{a=\"b\"}\n  |= \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" or \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"\n  != \"ccccccccccccccccccccccccccccccccccc\"\n  |~ \"dddd\"\n  | json",
        ),
        (
            "{a=\"b\"} |= \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" != \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\" |= \"c\"",
            "{a=\"b\"}\n  |= \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n  != \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"\n  |= \"c\"",
        ),
        (
            "{a=\"b\"} |= \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" or \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"",
            "{a=\"b\"}\n  |= \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"",
        ),
        (
            "{service_name=\"checkout\", env=\"prod\"} | json | decolorize | line_format \"{{ .method | ToLower }} {{ .path }}\"",
            "{service_name=\"checkout\", env=\"prod\"}\n  | json\n| decolorize\n  | line_format \"{{ .method | ToLower }} {{ .path }}\"",
        ),
        (
            "{service_name=\"checkout\"} | logfmt | status >= 500 and duration > 1s or method=\"POST\" | keep status, method",
            "{service_name=\"checkout\"}\n  | logfmt\n  | ( ( status>=500 , duration>1s ) or method=\"POST\" )\n  | keep status,method",
        ),
    ];

    #[test]
    fn long_log_queries_are_written_one_stage_a_line() {
        for (query, want) in LOKI_PRETTY {
            let parsed = parse(query).unwrap_or_else(|err| panic!("{query}: {err}"));
            assert_eq!(super::super::pretty(&parsed), *want, "{query}");
        }
        let short = r#"{a="b"} | json"#;
        assert_eq!(super::super::pretty(&parse(short).unwrap()), short);
    }

    /// Ranges longer than the parser takes, as Loki 3.7.6 writes them.
    #[test]
    fn long_ranges_are_written_in_whole_years_and_weeks_only() {
        let days = |n: u64| super::PromDuration(std::time::Duration::from_secs(n * 86_400));
        assert_eq!(days(400).to_string(), "400d");
        assert_eq!(days(365).to_string(), "1y");
        assert_eq!(days(14).to_string(), "2w");
    }

    /// Loki 3.7.6 folds a division by zero into NaN, which is no query of its own.
    #[test]
    fn a_folded_division_by_zero_is_nan() {
        assert_eq!(parse("6 / 0").unwrap().to_string(), "NaN");
    }

    #[test]
    fn queries_are_written_back_as_loki_writes_them() {
        for (query, want) in LOKI_FORMATTED {
            let parsed = parse(query).unwrap_or_else(|err| panic!("{query}: {err}"));
            assert_eq!(parsed.to_string(), *want, "{query}");
            // What is written back reads back (a size may round: `1000kB` is written `1.0MB`).
            assert!(parse(want).is_ok(), "{want}");
        }
    }
}
