//! Loki's parser hints: in a metric query that keeps only some labels, `| json` and `| logfmt`
//! extract only the labels the query reads (its grouping, its label filters, the unwrapped one),
//! as Loki's parsers do. Lines are counted alike either way; what differs is the work per line and
//! the labels a pipeline error names, which are Loki's only when the same labels were extracted.
//!
//! Hints are given only where every stage is one whose labels are known (line and label
//! filters, the two plain parsers, `drop`, `keep`, `decolorize`): a template or another parser
//! could read any label, and then every label is extracted.

use super::ast::{Grouping, LabelFilter, RangeExpr, RangeFunction, Stage};

/// The suffix a parsed label gets when its name is taken.
const EXTRACTED_SUFFIX: &str = "_extracted";

/// The labels the plain parsers of `range` extract, when not all: the grouping of the `sum`
/// it feeds (`sum_by`) or its own, with every label its stages and `| unwrap` read. `None` for
/// every label: no grouping, `without`, an empty grouping, or a stage whose labels are not known.
pub(crate) fn parser_hints(
    range: &RangeExpr,
    sum_by: Option<&Option<Grouping>>,
) -> Option<Vec<String>> {
    // Loki gives a `sum` of lines its grouping to extract by, and otherwise the range function's own.
    let grouping = match sum_by {
        Some(grouping) => grouping.as_ref(),
        None => range.grouping.as_ref(),
    };
    let groups = match grouping {
        Some(Grouping {
            without: false,
            labels,
        }) if !labels.is_empty() => labels,
        _ => return None,
    };
    if range.function == RangeFunction::AbsentOverTime {
        return None;
    }
    let mut read: Vec<&str> = groups.iter().map(String::as_str).collect();
    for stage in &range.query.pipeline {
        match stage {
            Stage::LabelFilter(filter) => filtered(filter, &mut read),
            Stage::LineFilter { .. }
            | Stage::Parser(_)
            | Stage::Decolorize
            | Stage::Drop(_)
            | Stage::Keep(_) => {}
            _ => return None,
        }
    }
    if let Some(unwrap) = &range.unwrap {
        read.push(&unwrap.label);
        for filter in &unwrap.filters {
            filtered(filter, &mut read);
        }
    }
    // A label the query reads as `x_extracted` is `x` as the parser finds it.
    let mut hints: Vec<String> = Vec::new();
    for name in read {
        hints.push(name.to_owned());
        if let Some(parsed) = name.strip_suffix(EXTRACTED_SUFFIX) {
            hints.push(parsed.to_owned());
        }
    }
    hints.sort();
    hints.dedup();
    Some(hints)
}

/// Adds the labels `filter` reads to `read`.
fn filtered<'a>(filter: &'a LabelFilter, read: &mut Vec<&'a str>) {
    match filter {
        LabelFilter::Compare { label, .. } | LabelFilter::Ip { label, .. } => read.push(label),
        LabelFilter::And(left, right) | LabelFilter::Or(left, right) => {
            filtered(left, read);
            filtered(right, read);
        }
    }
}

/// True when a parser with `hints` extracts the label `name`.
pub(crate) fn extracts(hints: Option<&[String]>, name: &str) -> bool {
    hints.is_none_or(|hints| hints.iter().any(|hint| hint == name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loki::logql::ast::{MetricExpr, Query};
    use crate::loki::logql::parse;

    /// The hints of the range function `text` holds, with the `sum` around it as the plan
    /// feeds it.
    fn hints(text: &str) -> Option<Vec<String>> {
        let Query::Metric(expr) = parse(text).unwrap() else {
            panic!("{text} is a log query")
        };
        if let Some((grouping, range)) = expr.sum_of_range() {
            return parser_hints(range, Some(grouping));
        }
        let mut expr = &expr;
        loop {
            match expr {
                MetricExpr::Range(range) => return parser_hints(range, None),
                MetricExpr::Aggregate { inner, .. } => expr = inner,
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_query_that_keeps_some_labels_extracts_those_it_reads() {
        assert_eq!(
            hints(r#"sum by (status) (count_over_time({a="b"} | json [5m]))"#),
            Some(vec!["status".to_owned()])
        );
        assert_eq!(
            hints(
                r#"max_over_time({a="b"} | logfmt | ts="t24" | unwrap path | __error__="" [5m]) by (method)"#
            ),
            Some(
                ["__error__", "method", "path", "ts"]
                    .map(String::from)
                    .to_vec()
            )
        );
        assert_eq!(
            hints(
                r#"sum by (level_extracted) (rate({a="b"} | logfmt | x > 1 or y=ip("10.0.0.0/8") [1m]))"#
            ),
            Some(
                ["level", "level_extracted", "x", "y"]
                    .map(String::from)
                    .to_vec()
            )
        );
    }

    #[test]
    fn a_query_that_may_keep_any_label_extracts_them_all() {
        for text in [
            r#"count_over_time({a="b"} | json [5m])"#,
            r#"sum(count_over_time({a="b"} | json [5m]))"#,
            r#"sum without (x) (count_over_time({a="b"} | json [5m]))"#,
            r#"max by (x) (count_over_time({a="b"} | json [5m]))"#,
            r#"sum by (x) (count_over_time({a="b"} | json | line_format "{{.y}}" [5m]))"#,
            r#"sum by (x) (count_over_time({a="b"} | regexp "(?P<x>.)" [5m]))"#,
            r#"sum by (x) (count_over_time({a="b"} | json y="z" [5m]))"#,
        ] {
            assert_eq!(hints(text), None, "{text}");
        }
    }
}
