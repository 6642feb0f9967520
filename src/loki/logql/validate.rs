//! What Loki checks once a query has parsed, before it runs: that each selector narrows the
//! streams, and that each group of line filters (regular expressions and patterns) compiles,
//! in its words.

use super::ast::*;
use super::ParseError;

/// Loki's checks of a parsed query, in its order: the selectors, then the pipelines.
pub(crate) fn check(query: &Query) -> Result<(), ParseError> {
    let mut logs = Vec::new();
    match query {
        Query::Log(log) => logs.push(log),
        Query::Metric(expr) => log_queries(expr, &mut logs),
    }
    for log in &logs {
        selector(&log.selector)?;
    }
    for log in &logs {
        line_filters(&log.pipeline)?;
    }
    Ok(())
}

fn log_queries<'a>(expr: &'a MetricExpr, logs: &mut Vec<&'a LogQuery>) {
    match expr {
        MetricExpr::Range(range) => logs.push(&range.query),
        MetricExpr::Aggregate { inner, .. } => log_queries(inner, logs),
        MetricExpr::LabelReplace(replace) => log_queries(&replace.inner, logs),
        MetricExpr::Binary { left, right, .. } => {
            log_queries(left, logs);
            log_queries(right, logs);
        }
        MetricExpr::Number(_) | MetricExpr::Vector(_) => {}
    }
}

/// Loki's refusal of a selector that every stream matches: it would read them all.
fn selector(matchers: &[Matcher]) -> Result<(), ParseError> {
    let narrows = matchers.iter().any(|matcher| match matcher.op {
        MatchOp::Eq => !matcher.value.is_empty(),
        // An expression too large to compile here is refused when the query compiles.
        MatchOp::Re => {
            super::pipeline::regex(&matcher.value, true).map_or(true, |re| !re.is_match(""))
        }
        MatchOp::Ne | MatchOp::NotRe => false,
    });
    if narrows {
        return Ok(());
    }
    Err(ParseError::unplaced(
        0,
        "queries require at least one regexp or equality matcher that does not have an empty-compatible value. For instance, app=~\".*\" does not meet this requirement, but app=~\".+\" will",
    ))
}

/// Loki runs a pipeline's line filters together, each group of them (up to a label filter or
/// a `line_format`) as one stage, and names the group where one of its expressions does not
/// compile: `stage '|= "x" |~ "("' : error parsing regexp: …`.
fn line_filters(pipeline: &[Stage]) -> Result<(), ParseError> {
    let mut group: Vec<&Stage> = Vec::new();
    for stage in pipeline.iter().map(Some).chain([None]) {
        match stage {
            Some(filter @ Stage::LineFilter { .. }) => {
                group.push(filter);
                continue;
            }
            Some(Stage::LabelFilter(_) | Stage::LineFormat(_)) | None => {}
            Some(_) => continue,
        }
        // The texts of the group's filters of these kinds (an `ip()` has none to compile).
        let texts = |ops: [LineOp; 2]| {
            group
                .iter()
                .flat_map(move |filter| match filter {
                    Stage::LineFilter { op, pattern, or } if ops.contains(op) => {
                        std::iter::once(pattern).chain(or).collect()
                    }
                    _ => Vec::new(),
                })
                .filter_map(|pattern| match pattern {
                    LinePattern::Text(text) => Some(text.as_str()),
                    LinePattern::Ip(_) => None,
                })
        };
        // Loki names a regular expression's error before a pattern's.
        let regex_error =
            texts([LineOp::Matches, LineOp::NotMatches]).find_map(super::go_regex::error);
        let pattern_error = || {
            texts([LineOp::PatternMatches, LineOp::NotPatternMatches])
                .find_map(|text| super::pattern::Pattern::parse_line_filter(text).err())
                .map(|err| err.to_string())
        };
        if let Some(err) = regex_error.or_else(pattern_error) {
            let written: Vec<String> = group.iter().map(|stage| stage.to_string()).collect();
            return Err(ParseError::unplaced(
                0,
                format!("stage '{}' : {err}", written.join(" ")),
            ));
        }
        group.clear();
    }
    Ok(())
}
