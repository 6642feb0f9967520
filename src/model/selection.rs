//! What a LogQL read asks the database for: the conditions of a query that SQL can check, as
//! values to bind. The query engine checks every condition again on the rows that come back, so
//! a store may leave a condition out (PostgreSQL does, for regular expressions its engine would
//! read differently) but never add one: a selection is a superset of the answer.

use chrono::{DateTime, TimeDelta, Utc};

/// A time range and the conditions on a row's columns.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    /// Inclusive lower bound on the timestamp.
    pub from: DateTime<Utc>,
    /// Exclusive upper bound on the timestamp.
    pub to: DateTime<Utc>,
    /// Conditions on the service, all of which hold.
    pub services: Vec<TextCondition>,
    /// Conditions on the stream's `level` label (the empty text without one), all of which hold.
    pub levels: Vec<TextCondition>,
    /// Stream labels whose value equals the given one.
    pub labels: Vec<(String, String)>,
    /// Stream labels whose value matches the pattern, which an empty value does not (a stream
    /// without the label does not match): the store may narrow its read by them, the engine
    /// checks them on each row.
    pub label_patterns: Vec<(String, Pattern)>,
    /// Conditions on the message, all of which hold.
    pub lines: Vec<LineCondition>,
}

impl Selection {
    /// Every row of the range.
    pub fn range(from: DateTime<Utc>, to: DateTime<Utc>) -> Self {
        Selection {
            from,
            to,
            services: Vec::new(),
            levels: Vec::new(),
            labels: Vec::new(),
            label_patterns: Vec::new(),
            lines: Vec::new(),
        }
    }

    /// Whether a store's stream catalog narrows this selection: it names stream labels and not
    /// one service (whose rows an index finds already).
    pub fn wants_catalog(&self) -> bool {
        let one_service = (self.services.iter()).any(|c| matches!(c, TextCondition::Eq(_)));
        let by_labels = !(self.labels.is_empty() && self.label_patterns.is_empty());
        by_labels && !one_service
    }

    /// The selection cut in two at a whole second near the middle of its range, for two reads
    /// side by side; `None` when the range is shorter than `least`. Rows of one instant fall in
    /// one half, so each half gives them in the order one read would.
    pub fn halves(&self, least: TimeDelta) -> Option<(Selection, Selection)> {
        let span = self.to.signed_duration_since(self.from);
        if span < least {
            return None;
        }
        let middle = DateTime::from_timestamp((self.from + span / 2).timestamp(), 0)?;
        if middle <= self.from || middle >= self.to {
            return None;
        }
        let early = Selection {
            to: middle,
            ..self.clone()
        };
        let late = Selection {
            from: middle,
            ..self.clone()
        };
        Some((early, late))
    }
}

/// A condition on a text column.
#[derive(Clone, Debug, PartialEq)]
pub enum TextCondition {
    /// Equal to.
    Eq(String),
    /// Not equal to.
    Ne(String),
    /// The whole value matches the regular expression.
    Matches(Pattern),
    /// The whole value does not match it.
    NotMatches(Pattern),
}

/// A condition on the message.
#[derive(Clone, Debug, PartialEq)]
pub enum LineCondition {
    /// Contains the text (case-sensitive).
    Contains(String),
    /// Does not contain it.
    NotContains(String),
    /// Contains at least one of the texts.
    ContainsAny(Vec<String>),
    /// A match of the regular expression somewhere.
    Matches(Pattern),
    /// No match anywhere.
    NotMatches(Pattern),
    /// A parser may make the label `name` of the line (which holds the name, or a `\` that a
    /// JSON escape could write it with, and a `{` where the only parser is `| json`), or the
    /// stream labels or the structured metadata have it.
    MayGiveLabel {
        /// The label.
        name: String,
        /// Whether `| json` is the only parser.
        json_only: bool,
    },
}

/// A regular expression in Rust's syntax (Loki's, RE2), already anchored where it must match the
/// whole value.
#[derive(Clone, Debug, PartialEq)]
pub struct Pattern {
    /// The expression, for SQLite's `REGEXP`, which runs Rust's engine.
    pub rust: String,
    /// The same expression in PostgreSQL's syntax when it means exactly the same there;
    /// `None` when it might not, and PostgreSQL leaves the condition to the engine.
    pub postgres: Option<PostgresPattern>,
    /// What a pattern of the whole value matches when SQL can say it without the expression,
    /// which an index answers and costs less per row.
    pub plain: Option<PlainValues>,
}

/// The values a pattern of the whole value matches, said plainly.
#[derive(Clone, Debug, PartialEq)]
pub enum PlainValues {
    /// Exactly these texts (`checkout|cron`, as a dashboard's multi-value variable writes them).
    Literals(Vec<String>),
    /// Every text but the empty one (`.+`, a dashboard's "all"). The engine's `.` does not match
    /// a line break, so this is wider than the pattern: the engine tests each row it keeps, and
    /// a negated condition, which must keep exactly the rows the engine would, cannot use it.
    NonEmpty,
    /// Every text (`.*`), as widely.
    Any,
}

/// The test of a column a store may run in place of a pattern of plain values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PlainTest<'a> {
    /// No test: every row may match.
    Everything,
    /// The value is one of these.
    OneOf(&'a [String]),
    /// The value is none of these.
    NoneOf(&'a [String]),
    /// The value is not empty.
    NotEmpty,
}

impl Pattern {
    /// The plain test that stands for this pattern, or for its negation: exact for literal
    /// alternatives, and wider than the pattern for `.+` and `.*`, which only a condition that
    /// may keep more rows than it matches (not a negated one) can take.
    pub fn plain_test(&self, negated: bool) -> Option<PlainTest<'_>> {
        match (self.plain.as_ref()?, negated) {
            (PlainValues::Literals(literals), false) => Some(PlainTest::OneOf(literals)),
            (PlainValues::Literals(literals), true) => Some(PlainTest::NoneOf(literals)),
            (PlainValues::NonEmpty, false) => Some(PlainTest::NotEmpty),
            (PlainValues::Any, false) => Some(PlainTest::Everything),
            (PlainValues::NonEmpty | PlainValues::Any, true) => None,
        }
    }
}

/// A regular expression for PostgreSQL's `~` (or `~*`, case-insensitive).
#[derive(Clone, Debug, PartialEq)]
pub struct PostgresPattern {
    /// The expression.
    pub expression: String,
    /// Compare with `~*` instead of `~`.
    pub case_insensitive: bool,
}

/// Per minute, per service, severity and `level` label: how many records and how many bytes of
/// message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeRow {
    /// The minute's start, in seconds since the epoch.
    pub minute: i64,
    /// The service.
    pub service: String,
    /// The severity number.
    pub severity: i16,
    /// The stream's `level` label as sent, empty without one.
    pub level: String,
    /// Records.
    pub count: i64,
    /// Bytes of their messages.
    pub bytes: i64,
}

/// Which of its attributes a counted row is grouped by, and keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CountedAttributes {
    /// None: they read `{}`.
    None,
    /// Those of these keys a row has; the others read as absent. Grouping by a few keys makes
    /// one group where grouping by every attribute (a request id among them) makes one a line.
    Only(Vec<String>),
    /// All of them.
    All,
}

/// The order a read returns rows in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Newest first (by timestamp, then id).
    Newest,
    /// Oldest first.
    Oldest,
    /// Whatever order the database finds them in (metric queries, which sum).
    Any,
}

/// How a counted read groups the rows of a selection: by their label columns and a window of
/// their time. A row at `ts` is in the window `(end − width, end]` whose `end` is `origin` plus a
/// whole number of widths, so the rows of one window count at the same steps of a metric query
/// whenever every step and range boundary is such an end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Counting {
    /// A window's width, in microseconds (positive).
    pub width_micros: i64,
    /// A window's end at or before every row of the selection, in microseconds since the epoch.
    pub origin_micros: i64,
    /// Group by the severity too (else it reads 0).
    pub severity: bool,
    /// Which attributes to group by too.
    pub attributes: CountedAttributes,
    /// Group by the trace and span ids too (else they read as absent).
    pub trace: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64, nanos: u32) -> DateTime<Utc> {
        DateTime::from_timestamp(seconds, nanos).unwrap()
    }

    #[test]
    fn a_selection_of_labels_without_one_service_wants_the_catalog() {
        let pattern = Pattern {
            rust: "^(?:cron)$".into(),
            postgres: None,
            plain: None,
        };
        let range = Selection::range(at(0, 0), at(60, 0));
        let by_label = Selection {
            labels: vec![("job".into(), "cron".into())],
            ..range.clone()
        };
        let by_pattern = Selection {
            label_patterns: vec![("job".into(), pattern.clone())],
            ..range.clone()
        };
        assert!(by_label.wants_catalog());
        assert!(by_pattern.wants_catalog());
        assert!(!range.wants_catalog());
        let one_service = Selection {
            services: vec![TextCondition::Eq("cron".into())],
            ..by_label.clone()
        };
        assert!(!one_service.wants_catalog());
        let services = Selection {
            services: vec![TextCondition::Matches(pattern)],
            ..by_label
        };
        assert!(services.wants_catalog());
    }

    #[test]
    fn only_literal_alternatives_stand_for_a_negated_pattern() {
        let of = |plain| Pattern {
            rust: String::new(),
            postgres: None,
            plain: Some(plain),
        };
        let values = vec!["a".to_string(), "b".to_string()];
        let literals = of(PlainValues::Literals(values.clone()));
        assert_eq!(literals.plain_test(false), Some(PlainTest::OneOf(&values)));
        assert_eq!(literals.plain_test(true), Some(PlainTest::NoneOf(&values)));
        // `!~ ".+"` keeps a value with a line break, which `= ''` would not.
        assert_eq!(
            of(PlainValues::NonEmpty).plain_test(false),
            Some(PlainTest::NotEmpty)
        );
        assert_eq!(of(PlainValues::NonEmpty).plain_test(true), None);
        assert_eq!(
            of(PlainValues::Any).plain_test(false),
            Some(PlainTest::Everything)
        );
        assert_eq!(of(PlainValues::Any).plain_test(true), None);
    }

    #[test]
    fn halves_meet_at_a_whole_second_and_cover_the_range() {
        let whole = Selection {
            lines: vec![LineCondition::Contains("x".into())],
            ..Selection::range(at(100, 250_000_000), at(401, 0))
        };
        let (early, late) = whole.halves(TimeDelta::minutes(2)).unwrap();
        assert_eq!((early.from, early.to), (at(100, 250_000_000), at(250, 0)));
        assert_eq!((late.from, late.to), (at(250, 0), at(401, 0)));
        assert_eq!(early.lines, whole.lines);
        assert_eq!(late.lines, whole.lines);
    }

    #[test]
    fn a_short_range_is_read_whole() {
        let short = Selection::range(at(100, 0), at(219, 0));
        assert_eq!(short.halves(TimeDelta::minutes(2)), None);
        // No whole second strictly inside.
        let within = Selection::range(at(100, 100), at(100, 900));
        assert_eq!(within.halves(TimeDelta::zero()), None);
    }
}
