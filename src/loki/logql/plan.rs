//! What of a query the database does: the selection SQL checks (bound values, never text built
//! into the statement), and whether a metric query can be answered from the per-minute volume
//! rollup instead of the rows.

use chrono::{DateTime, Utc};

use super::ast::*;
use super::eval::Steps;
use super::labels::{self, LEVEL_LABEL, SERVICE_LABEL};
use super::pipeline::{drops_non_objects, ERROR_DETAILS_LABEL, ERROR_LABEL};
use crate::model::filter::{Filter, MAX_CONTAINS_BYTES};
use crate::model::selection::{
    LineCondition, Pattern, PlainValues, PostgresPattern, Selection, TextCondition,
};

/// The selection of `query` over `[from, to)`: its selector's conditions on the service, the
/// `level` label and the stream labels whose names are their keys, and the line filters before
/// any `line_format` (which changes the line the later ones see).
pub(crate) fn selection(query: &LogQuery, from: DateTime<Utc>, to: DateTime<Utc>) -> Selection {
    let mut selection = Selection::range(from, to);
    for matcher in &query.selector {
        let value = &matcher.value;
        let condition = || match matcher.op {
            MatchOp::Eq => TextCondition::Eq(value.clone()),
            MatchOp::Ne => TextCondition::Ne(value.clone()),
            MatchOp::Re => TextCondition::Matches(pattern(value, true, false)),
            MatchOp::NotRe => TextCondition::NotMatches(pattern(value, true, true)),
        };
        if matcher.label == SERVICE_LABEL {
            selection.services.push(condition());
        } else if matcher.label == LEVEL_LABEL {
            selection.levels.push(condition());
        } else if is_label_key(matcher) {
            selection
                .labels
                .push((matcher.label.clone(), value.clone()));
        } else if let Some(pattern) = label_key_pattern(matcher) {
            selection
                .label_patterns
                .push((matcher.label.clone(), pattern));
        }
    }
    for stage in &query.pipeline {
        if rewrites_line(stage) {
            break;
        }
        selection.lines.extend(line_condition(stage));
        selection.lines.extend(pattern_literals(stage));
    }
    if drops_non_objects(&query.pipeline) {
        // A JSON object has a `{`: the database passes over the lines without one, which
        // `| json` would fail on and the label filter after it drop.
        selection.lines.push(LineCondition::Contains("{".into()));
    }
    selection
}

/// What a row needs to come out of `query`'s stages with the label `name`, when only a plain
/// `| json` or `| logfmt`, its stream labels or its structured metadata can give it one: its
/// stages are line filters, those parsers and label filters, and the name is letters and digits
/// alone, which a parser makes only of a key of that very name (a JSON key may be written with
/// escapes, and `| json` reads only a line with an object). An `unwrap` takes no line without
/// its label.
pub(crate) fn giving_label(query: &LogQuery, name: &str) -> Option<LineCondition> {
    let plain = !name.is_empty() && name.bytes().all(|byte| byte.is_ascii_alphanumeric());
    let stages = query.pipeline.iter().all(|stage| {
        matches!(
            stage,
            Stage::LineFilter { .. } | Stage::Parser(_) | Stage::LabelFilter(_)
        )
    });
    let json_only = query
        .pipeline
        .iter()
        .all(|stage| !matches!(stage, Stage::Parser(ParserKind::Logfmt)));
    (plain && stages).then(|| LineCondition::MayGiveLabel {
        name: name.to_owned(),
        json_only,
    })
}

/// What a line that a `|>` filter keeps contains: each of its pattern's literals. The engine
/// still tests the pattern; the database only reads fewer rows.
fn pattern_literals(stage: &Stage) -> Vec<LineCondition> {
    let Stage::LineFilter {
        op: LineOp::PatternMatches,
        pattern: LinePattern::Text(text),
        or,
    } = stage
    else {
        return Vec::new();
    };
    match (
        or.is_empty(),
        super::pattern::Pattern::parse_line_filter(text),
    ) {
        (true, Ok(pattern)) => pattern
            .literals()
            .map(|literal| LineCondition::Contains(literal.to_owned()))
            .collect(),
        _ => Vec::new(),
    }
}

/// The condition on the stored line a line filter is, where the database can check it: text, a
/// regular expression, or alternatives of either (as one expression). An `ip()` filter alone and
/// a pattern (`|>`) are left to the engine.
fn line_condition(stage: &Stage) -> Option<LineCondition> {
    let Stage::LineFilter {
        op,
        pattern: first,
        or,
    } = stage
    else {
        return None;
    };
    if !or.is_empty() {
        // With `or`, an `ip("…")` alternative is matched as its text, as in Loki.
        let texts = std::iter::once(first)
            .chain(or)
            .map(|alternative| match alternative {
                LinePattern::Text(text) | LinePattern::Ip(text) => text.as_str(),
            });
        return match op {
            // Texts stay texts: PostgreSQL's regular expressions are several times slower than
            // a search for each.
            LineOp::Contains => Some(LineCondition::ContainsAny(
                texts.map(str::to_owned).collect(),
            )),
            LineOp::Matches => {
                let any = texts
                    .map(|text| format!("(?:{text})"))
                    .collect::<Vec<_>>()
                    .join("|");
                Some(LineCondition::Matches(pattern(&any, false, false)))
            }
            // The parser makes a negated filter with `or` one filter per alternative.
            _ => None,
        };
    }
    let LinePattern::Text(text) = first else {
        return None;
    };
    Some(match op {
        LineOp::Contains => LineCondition::Contains(text.clone()),
        LineOp::NotContains => LineCondition::NotContains(text.clone()),
        LineOp::Matches => LineCondition::Matches(pattern(text, false, false)),
        LineOp::NotMatches => LineCondition::NotMatches(pattern(text, false, true)),
        LineOp::PatternMatches | LineOp::NotPatternMatches => return None,
    })
}

/// True for a stage after which the line is no longer the stored one.
fn rewrites_line(stage: &Stage) -> bool {
    matches!(
        stage,
        Stage::LineFormat(_) | Stage::Unpack | Stage::Decolorize
    )
}

/// The part of `query` a tail's polls can check, in the terms of the other tails' filter: one
/// service by equality, labels by key, and the first `|=` before any `line_format`. The engine
/// still checks every row it polls, so this only has to let through every row the query
/// matches.
pub(crate) fn tail_filter(query: &LogQuery) -> Filter {
    let mut filter = Filter::default();
    for matcher in &query.selector {
        if matcher.label == SERVICE_LABEL && matcher.op == MatchOp::Eq && filter.services.is_empty()
        {
            filter.services.push(matcher.value.clone());
        } else if is_label_key(matcher) {
            filter
                .attributes
                .insert(matcher.label.clone(), matcher.value.clone());
        }
    }
    filter.contains = query
        .pipeline
        .iter()
        .take_while(|stage| !rewrites_line(stage))
        .find_map(|stage| match stage {
            Stage::LineFilter {
                op: LineOp::Contains,
                pattern: LinePattern::Text(pattern),
                or,
            } if or.is_empty() && !pattern.is_empty() && pattern.len() <= MAX_CONTAINS_BYTES => {
                Some(pattern.clone())
            }
            _ => None,
        });
    filter
}

/// True for an `=` matcher SQL checks on the stream label of the same key: a label name with `_`
/// may stand for a key with `.` or `-` and is left to the engine, one without is its key.
fn is_label_key(matcher: &Matcher) -> bool {
    matcher.op == MatchOp::Eq
        && !matcher.value.is_empty()
        && matcher.label.chars().all(|c| c.is_ascii_alphanumeric())
}

/// The pattern of an `=~` matcher on a label key (as [`is_label_key`] reads names) that no empty
/// value matches: only streams that have the label can match it.
fn label_key_pattern(matcher: &Matcher) -> Option<Pattern> {
    if matcher.op != MatchOp::Re || !matcher.label.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let pattern = pattern(&matcher.value, true, false);
    let matches_empty = regex::Regex::new(&pattern.rust).map_or(true, |re| re.is_match(""));
    (!matches_empty).then_some(pattern)
}

/// True when the selection of `query` holds every condition of it, so the database can count a
/// limit itself: no stage, and each matcher one SQL checks exactly (equality of the service or
/// the level, or literal alternatives of either, and label keys).
pub(crate) fn is_exact(query: &LogQuery) -> bool {
    query.pipeline.is_empty()
        && query.selector.iter().all(|m| {
            ((m.label == SERVICE_LABEL || m.label == LEVEL_LABEL)
                && match m.op {
                    MatchOp::Eq | MatchOp::Ne => true,
                    // Compared as values, exactly; `.+` and `.*` are compared more widely.
                    MatchOp::Re | MatchOp::NotRe => literal_alternatives(&m.value).is_some(),
                })
                || is_label_key(m)
        })
}

/// True when every stage of `query` is a line filter the selection holds (text or a regular
/// expression, with or without `or`; not `ip()` alone or a pattern): then the rows the selection
/// gives, selected by their stream labels, are the query's lines, and the database may count
/// them without sending them.
pub(crate) fn filters_lines_only(query: &LogQuery) -> bool {
    query
        .pipeline
        .iter()
        .all(|stage| line_condition(stage).is_some())
}

/// True for a stage that makes or removes labels and does nothing else: every line passes it as
/// it came (`unpack` replaces the line, a label filter drops lines, a template may fail).
fn makes_labels_only(stage: &Stage) -> bool {
    matches!(
        stage,
        Stage::Parser(_)
            | Stage::JsonFields(_)
            | Stage::LogfmtWith { .. }
            | Stage::Regexp(_)
            | Stage::Pattern(_)
            | Stage::Drop(_)
            | Stage::Keep(_)
    )
}

/// `query` without its stages that make or remove labels only, when all the others are line
/// filters (no stage reads a label): the lines a `sum` of everything counts, whose one series
/// keeps no label and refuses no pipeline error (`metric::fetch`). `query` itself otherwise.
pub(crate) fn lines_counted_by_a_sum(query: &LogQuery) -> LogQuery {
    let mut lines = query.clone();
    if (query.pipeline.iter())
        .all(|stage| makes_labels_only(stage) || matches!(stage, Stage::LineFilter { .. }))
    {
        lines.pipeline.retain(|stage| !makes_labels_only(stage));
    }
    lines
}

/// True for a `drop` of nothing but the labels a parser's error sets.
fn drops_errors_only(stage: &Stage) -> bool {
    match stage {
        Stage::Drop(names) => names
            .iter()
            .all(|name| [ERROR_LABEL, ERROR_DETAILS_LABEL].contains(&name.name())),
        _ => false,
    }
}

/// True when `query` is a selector of indexed labels alone: what the rollup's rows can tell.
pub(crate) fn is_indexed_selector(query: &LogQuery) -> bool {
    query.pipeline.is_empty() && query.selector.iter().all(|m| labels::is_indexed(&m.label))
}

/// A regular expression of the query for the stores: as it is for SQLite (whose `REGEXP` runs
/// Rust's engine), and for PostgreSQL only when its engine reads it the same way.
fn pattern(text: &str, whole: bool, negated: bool) -> Pattern {
    let rust = if whole {
        format!("^(?:{text})$")
    } else {
        text.to_owned()
    };
    Pattern {
        rust,
        postgres: postgres_pattern(text, whole, negated),
        plain: whole.then(|| plain_values(text)).flatten(),
    }
}

/// What `text` matches as a whole, when that is plain: `.+`, `.*`, or literal alternatives.
fn plain_values(text: &str) -> Option<PlainValues> {
    match text {
        ".+" => Some(PlainValues::NonEmpty),
        ".*" => Some(PlainValues::Any),
        _ => literal_alternatives(text).map(PlainValues::Literals),
    }
}

/// The texts `text` matches as a whole when it is literal alternatives alone (`a|b\.c`), in
/// both Rust's syntax and Loki's; `None` for anything else. No alternative may be empty, so that
/// a missing label, whose value is the empty text, is never one of them.
fn literal_alternatives(text: &str) -> Option<Vec<String>> {
    const META: &str = "\\.+*?()|[]{}^$";
    // Each is a bound parameter, and SQLite takes at most 32,766 in a statement: a longer list
    // keeps its expression.
    const MOST: usize = 1_000;
    let mut literals = vec![String::new()];
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        let count = literals.len();
        let current = literals.last_mut()?;
        match c {
            '|' if current.is_empty() || count == MOST => return None,
            '|' => literals.push(String::new()),
            // Only the escapes both syntaxes read as the character itself: Rust's `\<` is a
            // word boundary, for one.
            '\\' => match chars.next()? {
                escaped if META.contains(escaped) => current.push(escaped),
                _ => return None,
            },
            c if META.contains(c) => return None,
            c => current.push(c),
        }
    }
    if literals.last().is_none_or(String::is_empty) {
        return None;
    }
    literals.sort_unstable();
    literals.dedup();
    Some(literals)
}

/// `text` in PostgreSQL's regular-expression syntax, when it is in the part of the syntax both
/// engines read alike: literals, `.`, `*`, `+`, `?`, `|`, groups, bracket expressions and escaped
/// punctuation, with `(?i)` only in front. A negated condition must exclude exactly the rows the
/// engine would, so it also leaves out `.` (PostgreSQL's matches a newline, Rust's does not),
/// case-insensitivity and the `\d`-style classes, whose Unicode tables may differ.
fn postgres_pattern(text: &str, whole: bool, negated: bool) -> Option<PostgresPattern> {
    let (body, case_insensitive) = match text.strip_prefix("(?i)") {
        Some(body) => (body, true),
        None => (text, false),
    };
    if case_insensitive && negated {
        return None;
    }
    // Empty alternatives and groups are read differently, or refused, by PostgreSQL.
    let empty_branch = ["||", "(|", "|)", "()", "[]", "[^]"]
        .iter()
        .any(|bad| body.contains(bad))
        || body.starts_with('|')
        || body.ends_with('|')
        || body.is_empty();
    if empty_branch {
        return None;
    }
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                escaped if escaped.is_ascii_punctuation() => {}
                'd' | 's' | 'w' | 'D' | 'S' | 'W' if !negated => {}
                _ => return None,
            },
            '(' if chars.peek() == Some(&'?') => {
                chars.next();
                if chars.next() != Some(':') {
                    return None;
                }
            }
            '.' if negated => return None,
            '{' | '}' => return None,
            c if c.is_alphanumeric() => {}
            c if " _-/:,=@#%'\"<>!&;.*+?|()[]^$~`".contains(c) => {}
            _ => return None,
        }
    }
    let expression = if whole {
        format!("^(?:{body})$")
    } else {
        body.to_owned()
    };
    Some(PostgresPattern {
        expression,
        case_insensitive,
    })
}

/// A minute, the rollup's resolution, in nanoseconds.
pub(crate) const MINUTE_NANOS: i64 = 60_000_000_000;

/// A metric query the rollup answers: `sum` (optionally `by` service and level) of a range
/// function over a selector of service and level alone.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct VolumePlan {
    /// The function of each range.
    pub function: RangeFunction,
    /// The range, whole minutes.
    pub range: std::time::Duration,
    /// The log query (its selector only).
    pub query: LogQuery,
    /// The labels the sum keeps, from `service_name`, `level` and `detected_level`.
    pub by: Vec<String>,
}

/// Where a metric query's answer may count a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// At its own time, as a scan counts it.
    Exact,
    /// At the end of its minute: what a volume histogram asks for (Grafana tags its histogram
    /// requests), so that the rollup can answer ranges that do not start on a minute.
    Minute,
}

/// The volume plan of `expr` at `steps`, when the rollup can answer it at the minute's
/// resolution: its range and step whole minutes, and with [`Placement::Exact`] its steps on whole
/// minutes too. A step inside a minute counts that minute at the step whose range holds the
/// minute's end, which is where a scan counts only the lines of the minute's last part.
pub(crate) fn volume_plan(
    expr: &MetricExpr,
    steps: Steps,
    placement: Placement,
) -> Option<VolumePlan> {
    let whole_steps = steps.count == 1 || steps.step % MINUTE_NANOS == 0;
    let aligned = placement == Placement::Minute || steps.start % MINUTE_NANOS == 0;
    if !(whole_steps && aligned) {
        return None;
    }
    let (grouping, range_expr) = expr.sum_of_range()?;
    // The rollup counts lines and their bytes at their own minute: no values, no offset.
    let counts_lines = matches!(
        range_expr.function,
        RangeFunction::CountOverTime
            | RangeFunction::Rate
            | RangeFunction::BytesOverTime
            | RangeFunction::BytesRate
    );
    if !counts_lines || range_expr.unwrap.is_some() || !range_expr.offset.is_zero() {
        return None;
    }
    let RangeExpr {
        function,
        query,
        range,
        ..
    } = range_expr;
    let lines_only;
    let query = match grouping {
        None => {
            lines_only = lines_counted_by_a_sum(query);
            &lines_only
        }
        Some(_) => query,
    };
    let by = match grouping {
        None => Vec::new(),
        Some(Grouping {
            without: false,
            labels: by,
        }) if by.iter().all(|label| labels::is_rollup_label(label)) => by.clone(),
        Some(_) => return None,
    };
    let whole_minutes = range.as_secs() >= 60 && range.as_nanos() % MINUTE_NANOS as u128 == 0;
    let selector_only = query.selector.iter().all(|m| labels::is_indexed(&m.label))
        // Grafana's volume query drops `__error__`, which no stage here sets.
        && query.pipeline.iter().all(drops_errors_only);
    (whole_minutes && selector_only).then(|| VolumePlan {
        function: *function,
        range: *range,
        query: query.clone(),
        by,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(text: &str) -> LogQuery {
        match super::super::parse(text).unwrap() {
            Query::Log(log) => log,
            Query::Metric(_) => panic!("metric"),
        }
    }

    fn metric(text: &str) -> MetricExpr {
        match super::super::parse(text).unwrap() {
            Query::Metric(metric) => metric,
            Query::Log(_) => panic!("log"),
        }
    }

    #[test]
    fn a_tail_polls_with_what_its_filter_can_hold_and_no_less() {
        let query = log(
            r#"{service_name="api", service_name!="web", level=~"warn|error", region="eu", http_method="GET"} |~ "x" |= "db" |= "late""#,
        );
        let filter = tail_filter(&query);
        assert_eq!(filter.services, ["api"]);
        assert_eq!(filter.min_severity, 0, "the level is a label as sent");
        assert_eq!(
            filter.attributes.into_iter().collect::<Vec<_>>(),
            [("region".to_owned(), "eu".to_owned())],
            "a label with _ may stand for another key"
        );
        assert_eq!(filter.contains.as_deref(), Some("db"), "the first |=");

        let after_format = tail_filter(&log(r#"{level="nope"} | line_format "{{.a}}" |= "db""#));
        assert_eq!(after_format.contains, None, "line_format changes the line");
        assert_eq!(after_format.attributes["level"], "nope");
        let everything = tail_filter(&log(r#"{service_name=~"a|b", level!="debug"}"#));
        assert_eq!(everything, Filter::default());
    }

    #[test]
    fn the_selection_takes_what_sql_can_check() {
        let now = Utc::now();
        let query = log(
            r#"{service_name="api", level=~"error|fatal", region="eu", http_method="GET"} |= "db" |~ "t.me" | json | line_format "{{.x}}" |= "late""#,
        );
        let selection = selection(&query, now, now);
        assert_eq!(selection.services, [TextCondition::Eq("api".into())]);
        assert!(matches!(
            selection.levels.as_slice(),
            [TextCondition::Matches(_)]
        ));
        assert_eq!(selection.labels, [("region".into(), "eu".into())]);
        assert_eq!(selection.lines.len(), 2, "not the filter after line_format");
        let LineCondition::Matches(pattern) = &selection.lines[1] else {
            panic!("{:?}", selection.lines[1]);
        };
        assert_eq!(pattern.postgres.as_ref().unwrap().expression, "t.me");
        assert!(selection.label_patterns.is_empty());
    }

    #[test]
    fn a_label_pattern_no_empty_value_matches_narrows_the_selection() {
        let now = Utc::now();
        let patterns = |text: &str| -> Vec<(String, String)> {
            (selection(&log(text), now, now).label_patterns.into_iter())
                .map(|(key, pattern)| (key, pattern.rust))
                .collect()
        };
        assert_eq!(
            patterns(r#"{job=~"cron|batch", env=~"prod.*", service_name=~"a.+"}"#),
            [
                ("job".into(), "^(?:cron|batch)$".into()),
                ("env".into(), "^(?:prod.*)$".into()),
            ]
        );
        for unnarrowed in [
            r#"{service_name="a", job=~"cron|"}"#,
            r#"{service_name="a", job=~".*"}"#,
            r#"{service_name="a", k8s_pod=~"web-.+"}"#,
            r#"{service_name="a", job!~"cron"}"#,
            r#"{service_name="a", level=~"error|warn"}"#,
        ] {
            assert!(patterns(unnarrowed).is_empty(), "{unnarrowed}");
        }
    }

    #[test]
    fn literal_alternatives_are_compared_as_values() {
        let now = Utc::now();
        let literals = |text: &str| {
            let selection = selection(&log(text), now, now);
            let TextCondition::Matches(pattern) = &selection.services[0] else {
                panic!("{text}: {:?}", selection.services);
            };
            pattern.plain.clone()
        };
        let some = |values: &[&str]| {
            Some(PlainValues::Literals(
                values.iter().map(|v| v.to_string()).collect(),
            ))
        };
        assert_eq!(
            literals(r#"{service_name=~"cron|checkout|cron"}"#),
            some(&["checkout", "cron"])
        );
        assert_eq!(literals(r#"{service_name=~"api"}"#), some(&["api"]));
        assert_eq!(
            literals(r#"{service_name=~"a\.b|c\|d|é x"}"#),
            some(&["a.b", "c|d", "é x"])
        );
        for not_literal in [
            "a.b", "a|", "|a", "a||b", "(?i)a", "a|b+", "(a|b)", "[ab]", "a\\<b", "a\\db", "^a$",
            "",
        ] {
            assert_eq!(
                pattern(not_literal, true, false).plain,
                None,
                "{not_literal}"
            );
        }
        for (text, value) in [("a|b", "a"), ("a\\.b", "a.b"), ("x y|z", "x y")] {
            let pattern = pattern(text, true, false);
            let Some(PlainValues::Literals(literals)) = pattern.plain else {
                panic!("{text}");
            };
            assert!(literals.contains(&value.to_string()));
            assert!(regex::Regex::new(&pattern.rust).unwrap().is_match(value));
        }
        let many = |n: usize| {
            (0..n)
                .map(|i| format!("s{i}"))
                .collect::<Vec<_>>()
                .join("|")
        };
        assert!(pattern(&many(1_000), true, false).plain.is_some());
        assert_eq!(
            pattern(&many(1_001), true, false).plain,
            None,
            "too many to bind"
        );
        assert_eq!(pattern("a|b", false, false).plain, None, "a match anywhere");
        assert_eq!(
            literals(r#"{service_name=~".+"}"#),
            Some(PlainValues::NonEmpty)
        );
        assert_eq!(pattern(".*", true, true).plain, Some(PlainValues::Any));
        assert_eq!(pattern(".+", false, false).plain, None);
    }

    #[test]
    fn a_selector_sql_checks_exactly_lets_the_database_count_the_limit() {
        for exact in [
            r#"{service_name="api", level!="debug", region="eu"}"#,
            r#"{service_name=~"api|web", level!~"debug|info"}"#,
        ] {
            assert!(is_exact(&log(exact)), "{exact}");
        }
        for inexact in [
            r#"{service_name=~"api.*"}"#,
            r#"{service_name=~".+"}"#,
            r#"{service_name=~"api|web", region=~"eu|us"}"#,
            r#"{service_name="api"} |= "x""#,
        ] {
            assert!(!is_exact(&log(inexact)), "{inexact}");
        }
    }

    #[test]
    fn alternatives_are_one_expression_for_sql() {
        let now = Utc::now();
        let query = log(r#"{service_name="api"} |= "a.b" or ip("10.0.0.0/24") |~ "x+" or "(?i)y""#);
        let lines = selection(&query, now, now).lines;
        let [LineCondition::ContainsAny(texts), LineCondition::Matches(expressions)] = &lines[..]
        else {
            panic!("{lines:?}");
        };
        assert_eq!(texts, &["a.b", "10.0.0.0/24"]);
        assert_eq!(expressions.rust, "(?:x+)|(?:(?i)y)");
        assert!(expressions.postgres.is_none(), "(?i) only in front");
        assert!(filters_lines_only(&query));
    }

    #[test]
    fn an_unwrap_narrows_the_rows_only_where_a_plain_parser_makes_its_label() {
        let give = |text: &str, name: &str| giving_label(&log(text), name);
        let mention = |json_only| {
            Some(LineCondition::MayGiveLabel {
                name: "bytes".into(),
                json_only,
            })
        };
        assert_eq!(give(r#"{a="b"} | json"#, "bytes"), mention(true));
        assert_eq!(give(r#"{a="b"} | json | user="u""#, "bytes"), mention(true));
        let logfmt = r#"{a="b"} |= "x" | logfmt | status >= 500"#;
        assert_eq!(give(logfmt, "bytes"), mention(false));
        assert_eq!(give(r#"{a="b"} | json | logfmt"#, "bytes"), mention(false));
        for (text, name) in [
            (r#"{a="b"} | json"#, "bytes_total"),
            (r#"{a="b"} | json"#, "req.bytes"),
            (r#"{a="b"} | regexp "(?P<bytes>\\d+)""#, "bytes"),
            (r#"{a="b"} | json | label_format bytes=size"#, "bytes"),
            (r#"{a="b"} | json bytes="size""#, "bytes"),
            (r#"{a="b"} | unpack"#, "bytes"),
            (r#"{a="b"} | line_format "{{.x}}" | json"#, "bytes"),
        ] {
            assert_eq!(give(text, name), None, "{text} unwrap {name}");
        }
    }

    #[test]
    fn lines_that_json_would_fail_on_and_a_filter_drop_are_left_to_the_database() {
        let now = Utc::now();
        let brace = || LineCondition::Contains("{".into());
        for (text, narrowed) in [
            (r#"{service_name="api"} | json | __error__="""#, true),
            (
                r#"{service_name="api"} |= "x" | json | __error__="" | a="1""#,
                true,
            ),
            (r#"{service_name="api"} | json"#, false),
            (
                r#"{service_name="api"} | json | __error__="" or a="1""#,
                false,
            ),
            (r#"{service_name="api"} | logfmt | __error__="""#, false),
        ] {
            let lines = selection(&log(text), now, now).lines;
            assert_eq!(lines.contains(&brace()), narrowed, "{text}: {lines:?}");
        }
    }

    #[test]
    fn a_pattern_filter_narrows_by_its_literals_but_is_never_counted_by_sql() {
        let now = Utc::now();
        let query = log(r#"{service_name="api"} |> "<_> GET <_> 500""#);
        assert_eq!(
            selection(&query, now, now).lines,
            [
                LineCondition::Contains(" GET ".into()),
                LineCondition::Contains(" 500".into())
            ]
        );
        assert!(!filters_lines_only(&query));
        for other in [
            r#"{service_name="api"} |> "<_> GET <_>" or "<_> PUT <_>""#,
            r#"{service_name="api"} !> "<_> GET <_>""#,
        ] {
            let query = log(other);
            assert!(selection(&query, now, now).lines.is_empty(), "{other}");
            assert!(!filters_lines_only(&query), "{other}");
        }
    }

    #[test]
    fn postgres_gets_only_the_patterns_it_reads_alike() {
        let pg = |text: &str, negated| postgres_pattern(text, false, negated);
        assert!(pg("error|warn", false).is_some());
        assert!(pg(r"GET /api/\d+", false).is_some());
        assert!(pg(r"GET /api/\d+", true).is_none());
        assert!(pg("a.b", true).is_none());
        assert!(pg(r"\bword\b", false).is_none(), "\\b is a backspace there");
        assert!(pg("a{2,300}", false).is_none());
        assert!(pg("(?P<x>a)", false).is_none());
        assert!(pg("a||b", false).is_none());
        let ci = pg("(?i)error", false).unwrap();
        assert!(ci.case_insensitive);
        assert_eq!(ci.expression, "error");
        assert_eq!(
            postgres_pattern("a|b", true, false).unwrap().expression,
            "^(?:a|b)$"
        );
    }

    #[test]
    fn the_rollup_answers_sums_over_service_and_level() {
        let grafana = metric(
            r#"sum by (level, detected_level) (count_over_time({service_name="api"} | drop __error__ [1m]))"#,
        );
        let minutes = Steps::new(0, 10 * MINUTE_NANOS, MINUTE_NANOS).unwrap();
        let plan = volume_plan(&grafana, minutes, Placement::Exact).unwrap();
        assert_eq!(plan.by, ["level", "detected_level"]);
        let unaligned = Steps::new(1, 10 * MINUTE_NANOS, MINUTE_NANOS).unwrap();
        assert_eq!(volume_plan(&grafana, unaligned, Placement::Exact), None);
        assert_eq!(
            volume_plan(&grafana, unaligned, Placement::Minute),
            Some(plan),
            "a histogram takes minutes counted at their end"
        );
        let half_minutes = Steps::new(0, 10 * MINUTE_NANOS, MINUTE_NANOS / 2).unwrap();
        for placement in [Placement::Exact, Placement::Minute] {
            assert_eq!(volume_plan(&grafana, half_minutes, placement), None);
        }
        let instant = Steps::new(MINUTE_NANOS, MINUTE_NANOS, 1).unwrap();
        assert!(volume_plan(&grafana, instant, Placement::Exact).is_some());
        for scanned in [
            r#"sum by (level) (count_over_time({service_name="api"} |= "x" [1m]))"#,
            r#"sum by (user) (count_over_time({service_name="api"}[1m]))"#,
            r#"sum(count_over_time({service_name="api"}[30s]))"#,
            r#"count_over_time({service_name="api"}[1m])"#,
            r#"sum(count_over_time({user="x"}[1m]))"#,
            r#"count(count_over_time({service_name="api"}[1m]))"#,
            r#"sum by (level) (count_over_time({service_name="api"} | json [1m]))"#,
            r#"sum by () (count_over_time({service_name="api"} | json [1m]))"#,
            r#"sum(count_over_time({service_name="api"} | json | status="500" [1m]))"#,
        ] {
            let plan = volume_plan(&metric(scanned), minutes, Placement::Minute);
            assert_eq!(plan, None, "{scanned}");
        }
        // A sum of everything counts the lines whatever its parsers make of them.
        let parsed = r#"sum(rate({service_name="api"} | json | logfmt | keep a [1m]))"#;
        let plan = volume_plan(&metric(parsed), minutes, Placement::Minute).unwrap();
        assert!(plan.query.pipeline.is_empty(), "{plan:?}");
    }

    #[test]
    fn a_sum_of_everything_reads_lines_without_the_stages_that_only_make_labels() {
        let lines = |text: &str| lines_counted_by_a_sum(&log(text));
        assert_eq!(
            lines(r#"{job="a"} |= "x" | json | regexp "(?P<n>\\d+)" | pattern "<_> <m>" | drop m"#),
            log(r#"{job="a"} |= "x""#)
        );
        assert_eq!(
            lines(r#"{job="a"} | logfmt --strict a | json b="c.d" | keep b != "x""#),
            log(r#"{job="a"}"#)
        );
        for kept in [
            r#"{job="a"} | json | status >= 500"#,
            r#"{job="a"} | json | line_format "{{.msg}}""#,
            r#"{job="a"} | json | label_format a="{{.b}}""#,
            r#"{job="a"} | unpack"#,
            r#"{job="a"} | json | decolorize"#,
        ] {
            assert_eq!(lines(kept), log(kept), "{kept}");
        }
    }
}
