//! A parsed query laid out on several lines as Loki 3's `format_query` answers it: an
//! expression whose one-line form (see [`super::format`]) is longer than 100 bytes is split, its
//! parts on lines of their own, indented two spaces a level; a shorter one stays on one line.
//! The split form has Loki's quirks: a space before a range's `[5m]`, the offset written as a
//! range (`1h`, not `1h0m0s`), `by (a, b)` with a space after the comma, and a binary operator's
//! `on (…)` followed by a space even without a group.

use std::fmt::Write;

use super::ast::*;
use super::format::{Literal, PromDuration, Quoted};

/// Longer one-line forms than this (in bytes, as Loki counts) are split.
const MAX_LINE: usize = 100;

/// The query as Loki's `format_query` writes it.
pub(crate) fn pretty(query: &Query) -> String {
    match query {
        Query::Log(query) => log_query(query, 0),
        Query::Metric(expr) => metric(expr, 0),
    }
}

fn indent(level: usize) -> String {
    "  ".repeat(level)
}

/// `text` on one line at `level`, when it is short enough.
fn one_line(text: String, level: usize) -> Result<String, String> {
    if text.len() > MAX_LINE {
        Err(text)
    } else {
        Ok(indent(level) + &text)
    }
}

fn log_query(query: &LogQuery, level: usize) -> String {
    if one_line(query.to_string(), level).is_ok() || query.pipeline.is_empty() {
        return indent(level) + &query.to_string();
    }
    let selector = LogQuery {
        selector: query.selector.clone(),
        pipeline: Vec::new(),
    };
    let mut out = indent(level) + &selector.to_string();
    // Loki keeps adjacent line filters together as one stage of the pipeline.
    let mut stages = query.pipeline.as_slice();
    while let Some(first) = stages.first() {
        let run = if matches!(first, Stage::LineFilter { .. }) {
            stages
                .iter()
                .take_while(|stage| matches!(stage, Stage::LineFilter { .. }))
                .count()
        } else {
            1
        };
        out.push('\n');
        out += &super::format::pretty_stage(&stages[..run], level + 1);
        stages = &stages[run..];
    }
    out
}

fn metric(expr: &MetricExpr, level: usize) -> String {
    let text = match one_line(expr.to_string(), level) {
        Ok(line) => return line,
        Err(text) => text,
    };
    match expr {
        MetricExpr::Range(range) => range_expr(range, level),
        MetricExpr::Aggregate {
            op,
            grouping,
            parameter,
            inner,
        } => {
            let mut out = indent(level) + op.name() + &grouping_of(grouping.as_ref());
            out += "(\n";
            if let Some(k) = parameter {
                let _ = writeln!(out, "{}{},", indent(level + 1), *k as i64);
            }
            out += &metric(inner, level + 1);
            out + "\n" + &indent(level) + ")"
        }
        MetricExpr::Binary {
            op,
            modifier,
            left,
            right,
        } => format!(
            "{}\n{}{}\n{}",
            metric(left, level + 1),
            indent(level),
            operator(*op, modifier),
            metric(right, level + 1)
        ),
        MetricExpr::LabelReplace(replace) => {
            let inner = indent(level + 1);
            format!(
                "{}label_replace(\n{},\n{inner}{},\n{inner}{},\n{inner}{},\n{inner}{}\n{})",
                indent(level),
                metric(&replace.inner, level + 1),
                Quoted(&replace.dst),
                Quoted(&replace.replacement),
                Quoted(&replace.src),
                Quoted(&replace.regex),
                indent(level)
            )
        }
        MetricExpr::Number(_) | MetricExpr::Vector(_) => indent(level) + &text,
    }
}

fn range_expr(range: &RangeExpr, level: usize) -> String {
    let mut out = indent(level) + range.function.name() + "(\n";
    if let Some(parameter) = range.parameter {
        let _ = writeln!(out, "{}{},", indent(level + 1), Literal(parameter));
    }
    out += &log_query(&range.query, level + 1);
    if let Some(unwrap) = &range.unwrap {
        let at = indent(level + 2);
        let _ = write!(out, "\n{at}| {}", unwrap.written());
        for filter in &unwrap.filters {
            let _ = write!(out, "\n{at}| {filter}");
        }
    }
    let _ = write!(out, " [{}]", PromDuration(range.range));
    if !range.offset.is_zero() {
        let _ = write!(out, " offset {}", PromDuration(range.offset));
    }
    out + "\n" + &indent(level) + ")" + &grouping_of(range.grouping.as_ref())
}

/// A grouping as the split form writes it: ` by (a, b)`, ` without (a)`, ` without`, or
/// nothing for `by ()`.
fn grouping_of(grouping: Option<&Grouping>) -> String {
    let Some(grouping) = grouping else {
        return String::new();
    };
    let mut out = String::new();
    if grouping.without {
        out += " without";
    } else if !grouping.labels.is_empty() {
        out += " by";
    }
    if !grouping.labels.is_empty() {
        let _ = write!(out, " ({})", grouping.labels.join(", "));
    }
    out
}

/// The operator between a split binary operation's operands. Loki writes `on`/`ignoring` only
/// with labels, then always a space and the group, which may be empty.
fn operator(op: BinaryOp, modifier: &BinaryModifier) -> String {
    let mut out = op.symbol().to_owned();
    if modifier.return_bool {
        out += " bool";
    }
    let Some(labels) = modifier.labels.as_ref().filter(|labels| !labels.is_empty()) else {
        return out;
    };
    let how = if modifier.on { "on" } else { "ignoring" };
    let _ = write!(out, " {how} ({}) ", labels.join(", "));
    if let Some(group) = &modifier.group {
        out += if group.right {
            "group_right"
        } else {
            "group_left"
        };
        if !group.include.is_empty() {
            let _ = write!(out, " ({})", group.include.join(", "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::pretty;

    /// Queries and what Loki 3.7.6's `format_query` answered for each.
    const LOKI_PRETTY: &[(&str, &str)] = &[
        (
            r#"{service_name="checkout-service-long-name", environment="production"} |= "error" != "timeout" | json | status >= 500 | line_format "{{.msg}}""#,
            "{service_name=\"checkout-service-long-name\", environment=\"production\"}\n  |= \"error\" != \"timeout\"\n  | json\n  | status>=500\n  | line_format \"{{.msg}}\"",
        ),
        (
            r#"count_over_time({service_name="checkout-service-long-name", environment="production"} |= "error" | json [5m])"#,
            "count_over_time(\n  {service_name=\"checkout-service-long-name\", environment=\"production\"} |= \"error\" | json [5m]\n)",
        ),
        (
            r#"quantile_over_time(0.99, {service_name="checkout-service-long-name", environment="production"} | json | unwrap duration(latency) | __error__="" | x > 2 [5m] offset 1h) by (method, path)"#,
            "quantile_over_time(\n  0.99,\n  {service_name=\"checkout-service-long-name\", environment=\"production\"} | json\n    | unwrap duration(latency)\n    | __error__=\"\"\n    | x>2 [5m] offset 1h\n) by (method, path)",
        ),
        (
            r#"sum without () (rate({service_name="checkout-service-long-name", environment="production"} |= "error" [5m]))"#,
            "sum without(\n  rate({service_name=\"checkout-service-long-name\", environment=\"production\"} |= \"error\"[5m])\n)",
        ),
        (
            r#"sum by () (rate({service_name="checkout-service-long-name", environment="production"} |= "error" [5m]))"#,
            "sum(rate({service_name=\"checkout-service-long-name\", environment=\"production\"} |= \"error\"[5m]))",
        ),
        (
            r#"label_replace(rate({service_name="checkout-service-long-name", environment="production"} |= "error" [5m]), "dst", "$1", "src", "(.*)")"#,
            "label_replace(\n  rate({service_name=\"checkout-service-long-name\", environment=\"production\"} |= \"error\"[5m]),\n  \"dst\",\n  \"$1\",\n  \"src\",\n  \"(.*)\"\n)",
        ),
        (
            r#"sum by (a) (rate({service_name="checkout-service-long-name"}[5m])) + on (a, b) group_right (c, d) sum by (a) (rate({environment="production"}[5m]))"#,
            "  sum by (a)(rate({service_name=\"checkout-service-long-name\"}[5m]))\n+ on (a, b) group_right (c, d)\n  sum by (a)(rate({environment=\"production\"}[5m]))",
        ),
        (
            r#"sum by (a) (rate({service_name="checkout-service-long-name"}[5m])) > bool on (x) sum by (a) (rate({environment="production"}[5m]))"#,
            "  sum by (a)(rate({service_name=\"checkout-service-long-name\"}[5m]))\n> bool on (x) \n  sum by (a)(rate({environment=\"production\"}[5m]))",
        ),
        (
            r#"(sum by (a) (rate({service_name="checkout-service-long-name"}[5m])) > 2) and on () (sum by (a) (rate({environment="production"}[5m])) < bool 5)"#,
            "  (sum by (a)(rate({service_name=\"checkout-service-long-name\"}[5m])) > 2)\nand\n  (sum by (a)(rate({environment=\"production\"}[5m])) < bool 5)",
        ),
        (
            r#"sum(rate({service_name="checkout-service-long-name", environment="production"} |= "error" [5m])) * 100"#,
            "  sum(rate({service_name=\"checkout-service-long-name\", environment=\"production\"} |= \"error\"[5m]))\n*\n  100",
        ),
        (
            r#"{a="b"} |= "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" |= "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" != "cccccccccccccccccccccccccccccc" | json"#,
            "{a=\"b\"}\n  |= \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" |= \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"\n  != \"cccccccccccccccccccccccccccccc\"\n  | json",
        ),
        (
            r#"{a="b"} |= "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" |= "bbbbbbbbbbbbbbbbbbbbbbbbbbbb" | json | x="1" |= "cccccccccccccccccccccccccccccc" | drop a, b | keep c"#,
            "{a=\"b\"}\n  |= \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" |= \"bbbbbbbbbbbbbbbbbbbbbbbbbbbb\"\n  | json\n  | x=\"1\"\n  |= \"cccccccccccccccccccccccccccccc\"\n  | drop a,b\n  | keep c",
        ),
        (
            r#"absent_over_time({service_name="checkout-service-long-name", environment="production"} |= "error" [5m] offset 90s)"#,
            "absent_over_time(\n  {service_name=\"checkout-service-long-name\", environment=\"production\"} |= \"error\" [5m] offset 1m30s\n)",
        ),
        (
            r#"sum by (a) (count_over_time({service_name="checkout-service-long-name", environment="production"} | json | a="1" or b="2" [5m]))"#,
            "sum by (a)(\n  count_over_time(\n    {service_name=\"checkout-service-long-name\", environment=\"production\"} | json | ( a=\"1\" or b=\"2\" ) [5m]\n  )\n)",
        ),
        (
            r#"topk(3, sum by (method, path) (rate({service_name="checkout-service-long-name", environment="production"} |= "error" [5m])))"#,
            "topk(\n  3,\n  sum by (method, path)(\n    rate({service_name=\"checkout-service-long-name\", environment=\"production\"} |= \"error\"[5m])\n  )\n)",
        ),
        (
            r#"topk(5, rate({service_name="checkout-service-long-name", environment="production"} |= "error" [5m]))"#,
            r#"topk(5,rate({service_name="checkout-service-long-name", environment="production"} |= "error"[5m]))"#,
        ),
        (
            r#"avg_over_time({service_name="checkout-service-long-name", environment="production"} | json | unwrap bytes(size) [5m]) without (x)"#,
            "avg_over_time(\n  {service_name=\"checkout-service-long-name\", environment=\"production\"} | json\n    | unwrap bytes(size) [5m]\n) without (x)",
        ),
        (
            r#"quantile_over_time(0.00001, {service_name="checkout-service-long-name", environment="production"} | json | unwrap size [5m])"#,
            "quantile_over_time(\n  1e-05,\n  {service_name=\"checkout-service-long-name\", environment=\"production\"} | json\n    | unwrap size [5m]\n)",
        ),
        (
            r#"sum(rate({service_name="checkout-service-long-name", environment="production"} |= "error" [5m])) by (level) * on (level) group_left sum(rate({a="b"}[1m])) by (level)"#,
            "  sum by (level)(\n    rate({service_name=\"checkout-service-long-name\", environment=\"production\"} |= \"error\"[5m])\n  )\n* on (level) group_left\n  sum by (level)(rate({a=\"b\"}[1m]))",
        ),
        (
            r#"vector(1) + sum(rate({service_name="checkout-service-long-name", environment="production"} |= "error" [5m]))"#,
            "  vector(1.000000)\n+\n  sum(rate({service_name=\"checkout-service-long-name\", environment=\"production\"} |= \"error\"[5m]))",
        ),
        (
            r#"rate({a="b"}[1m]) > bool on (x) group_left (z) rate({c="d"}[1m]) or vector(1) unless bottomk(2, rate({e="f"}[1m]))"#,
            "  (rate({a=\"b\"}[1m]) > bool on (x) group_left (z) rate({c=\"d\"}[1m]))\nor\n  (vector(1.000000) unless bottomk(2,rate({e=\"f\"}[1m])))",
        ),
    ];

    #[test]
    fn long_queries_are_split_as_loki_splits_them() {
        for (query, want) in LOKI_PRETTY {
            let parsed = parse(query).unwrap_or_else(|err| panic!("{query}: {err}"));
            assert_eq!(pretty(&parsed), *want, "{query}");
        }
    }
}
