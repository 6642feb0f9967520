//! Metric queries as numbers: the steps of a range query, the series a range function makes
//! from the lines it is given, and the aggregations and arithmetic over them, as Loki computes
//! them. A step with no line in its range has no point (Loki leaves it out).

use std::collections::hash_map::Entry;
use std::collections::BTreeMap;

use super::ast::*;
use super::labels::{self, HashedLabels, Labels, SeriesMap};

/// The most points one series may have, as in Loki.
pub(crate) const MAX_POINTS: i64 = 11_000;
/// A series' own memory besides its points and label texts: its place in the map that gathers
/// the series, its points' vector, and the tree node its labels sit in.
const SERIES_OVERHEAD_BYTES: usize = 256;
/// A label's memory besides its name and value: their two string headers and its share of the
/// tree node.
const LABEL_OVERHEAD_BYTES: usize = 64;

/// Why a metric query cannot be computed as asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);

impl EvalError {
    /// An answer of more than `max` series.
    pub(crate) fn too_many_series(max: usize) -> Self {
        EvalError(format!(
            "maximum number of series ({max}) reached for a single query; narrow the selector or aggregate with sum by (…)"
        ))
    }

    /// A metric query whose line still carries `__error__` after its pipeline, in Loki's words
    /// (a 400 there too): counting it would silently count lines the query could not read.
    pub(crate) fn pipeline(kind: &str, labels: &Labels) -> Self {
        let series: Vec<String> = labels
            .iter()
            .map(|(name, value)| format!("{name}={value:?}"))
            .collect();
        EvalError(format!(
            "pipeline error: '{kind}' for series: '{{{series}}}'.\n\
             Use a label filter to intentionally skip this error. (e.g | __error__!=\"{kind}\").\n\
             To skip all potential errors you can match empty errors.(e.g __error__=\"\")\n\
             The label filter can also be specified after unwrap. (e.g | unwrap latency | __error__=\"\" )\n",
            series = series.join(", ")
        ))
    }
}

/// The instants a query is evaluated at: `start`, `start + step`, … up to `end`, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Steps {
    /// The first instant.
    pub start: i64,
    /// Between two instants (positive).
    pub step: i64,
    /// How many instants.
    pub count: usize,
}

impl Steps {
    /// The instants from `start` to `end` inclusive, refused past [`MAX_POINTS`].
    pub(crate) fn new(start: i64, end: i64, step: i64) -> Result<Self, EvalError> {
        if step <= 0 {
            return Err(EvalError(
                "zero or negative query resolution step widths are not accepted. Try a positive integer".into(),
            ));
        }
        if end < start {
            return Err(EvalError("the end is before the start".into()));
        }
        let count = (end - start) / step + 1;
        if count > MAX_POINTS {
            return Err(EvalError(format!(
                "exceeded maximum resolution of {MAX_POINTS} points per timeseries; try increasing the value of the step parameter (the query asks for {count})"
            )));
        }
        Ok(Steps {
            start,
            step,
            count: count as usize,
        })
    }

    /// The instants of a metric range query as Loki answers it: its query frontend rounds the
    /// start down and the end up to whole steps since the epoch before it evaluates, so its points
    /// fall on multiples of the step, not on `start + k·step`.
    pub(crate) fn aligned(start: i64, end: i64, step: i64) -> Result<Self, EvalError> {
        if step <= 0 {
            return Steps::new(start, end, step);
        }
        let start = start - start.rem_euclid(step);
        let end = match end.rem_euclid(step) {
            0 => end,
            rest => end.saturating_add(step - rest),
        };
        Steps::new(start, end, step)
    }

    /// The instant at `index`.
    pub(crate) fn at(&self, index: usize) -> i64 {
        self.start + self.step * index as i64
    }

    /// The last instant.
    pub(crate) fn end(&self) -> i64 {
        self.at(self.count - 1)
    }

    /// The indexes of the instants whose range `(t - range, t]` holds `ts`, that is the `t` in
    /// `[ts, ts + range)`.
    pub(crate) fn covering(&self, ts: i64, range: i64) -> std::ops::Range<usize> {
        let first = ceil_div(ts - self.start, self.step).max(0);
        let past = ceil_div(ts + range - self.start, self.step).clamp(0, self.count as i64);
        (first.min(past) as usize)..(past as usize)
    }
}

fn ceil_div(a: i64, b: i64) -> i64 {
    let q = a.div_euclid(b);
    if a.rem_euclid(b) == 0 {
        q
    } else {
        q + 1
    }
}

/// One series: its labels and its value at each step (`None`: no point).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Series {
    /// The labels.
    pub labels: Labels,
    /// One value per step.
    pub points: Vec<Option<f64>>,
}

/// The memory of labels: their texts and what holds them.
pub(crate) fn labels_bytes(labels: &Labels) -> usize {
    labels
        .iter()
        .map(|(name, value)| LABEL_OVERHEAD_BYTES + name.len() + value.len())
        .sum()
}

/// The memory of a series with `labels` and `points` steps: the figure a read is charged for it.
pub(crate) fn series_bytes(labels: &Labels, points: usize) -> usize {
    SERIES_OVERHEAD_BYTES
        + labels_bytes(labels)
        + points.saturating_mul(std::mem::size_of::<Option<f64>>())
}

impl Series {
    /// Its memory, as [`series_bytes`] counts it.
    pub(crate) fn bytes(&self) -> usize {
        series_bytes(&self.labels, self.points.len())
    }
}

/// What a metric expression evaluates to.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    /// A plain number.
    Scalar(f64),
    /// Series over the steps.
    Matrix(Vec<Series>),
}

impl Value {
    /// The memory of its series, as [`series_bytes`] counts it.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Value::Scalar(_) => 0,
            Value::Matrix(series) => series.iter().map(Series::bytes).sum(),
        }
    }
}

/// Sums lines into a range function's series: each line counts (or its bytes do) at every step
/// whose range holds it.
#[derive(Debug)]
pub(crate) struct RangeAccumulator {
    function: RangeFunction,
    range: i64,
    /// `offset`: each step counts the range that ends this long before it.
    offset: i64,
    steps: Steps,
    series: SeriesMap<Vec<Option<f64>>>,
}

impl RangeAccumulator {
    /// An empty accumulator of `function` over `range` nanoseconds at `steps`.
    pub(crate) fn new(function: RangeFunction, range: i64, steps: Steps) -> Self {
        RangeAccumulator {
            function,
            range,
            offset: 0,
            steps,
            series: SeriesMap::default(),
        }
    }

    /// The same, each step counting the range that ends `offset` nanoseconds before it.
    pub(crate) fn with_offset(mut self, offset: i64) -> Self {
        self.offset = offset;
        self
    }

    /// The steps it counts at.
    pub(crate) fn steps(&self) -> Steps {
        self.steps
    }

    /// Adds a line of `bytes` at `ts` (nanoseconds) to the series of `labels`. Gives the memory
    /// of the series it made for the line ([`series_bytes`]), 0 when the line joined one (or
    /// counts at no step).
    pub(crate) fn add(
        &mut self,
        labels: Labels,
        ts: i64,
        bytes: usize,
    ) -> Result<usize, EvalError> {
        self.add_many(labels, ts, 1, bytes as u64)
    }

    /// Adds `count` lines of `bytes` in all, all at `ts`; gives what [`RangeAccumulator::add`]
    /// gives.
    pub(crate) fn add_many(
        &mut self,
        labels: Labels,
        ts: i64,
        count: u64,
        bytes: u64,
    ) -> Result<usize, EvalError> {
        let covering = self
            .steps
            .covering(ts.saturating_add(self.offset), self.range);
        if covering.is_empty() {
            return Ok(0);
        }
        let mut made = 0;
        let points = match self.series.entry(HashedLabels::new(labels)) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(new) => {
                made = series_bytes(new.key().labels(), self.steps.count);
                new.insert(vec![None; self.steps.count])
            }
        };
        let amount = match self.function {
            RangeFunction::BytesOverTime | RangeFunction::BytesRate => bytes as f64,
            // Lines: the functions of values read samples instead ([`super::samples`]).
            _ => count as f64,
        };
        for point in &mut points[covering] {
            *point.get_or_insert(0.0) += amount;
        }
        Ok(made)
    }

    /// The series, rates divided by the range in seconds.
    pub(crate) fn finish(self) -> Vec<Series> {
        let per_second = matches!(
            self.function,
            RangeFunction::Rate | RangeFunction::BytesRate
        );
        let seconds = self.range as f64 / 1e9;
        let mut series: Vec<Series> = self
            .series
            .into_iter()
            .map(|(key, mut points)| {
                let labels = key.into_labels();
                if per_second {
                    for value in points.iter_mut().flatten() {
                        *value /= seconds;
                    }
                }
                Series { labels, points }
            })
            .collect();
        sort_by_labels(&mut series);
        series
    }
}

/// Sorts `series` by their labels, keeping the order of those that share them.
pub(crate) fn sort_by_labels(series: &mut [Series]) {
    series.sort_by_cached_key(|one| labels::order_key(&one.labels));
}

/// Refuses an answer of more than `max` series, counting those with a point, as Loki counts the
/// series it answers with (`max_query_series`). It holds for the answer and not for what it is
/// computed from (`count(count_over_time(…))` over thousands of streams is one series): what a
/// query holds on the way is bounded in bytes, [`series_bytes`] being what a read is charged for
/// each series it makes.
pub(crate) fn check_series(value: &Value, max: usize) -> Result<(), EvalError> {
    match value {
        Value::Matrix(series)
            if series
                .iter()
                .filter(|one| one.points.iter().any(Option::is_some))
                .count()
                > max =>
        {
            Err(EvalError::too_many_series(max))
        }
        _ => Ok(()),
    }
}

/// The labels an aggregation keeps of `labels`.
pub(crate) fn group_key(grouping: &Option<Grouping>, labels: &Labels) -> Labels {
    match grouping {
        None => Labels::new(),
        Some(Grouping {
            without: false,
            labels: by,
        }) => labels
            .iter()
            .filter(|(name, _)| by.contains(name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect(),
        Some(Grouping {
            without: true,
            labels: without,
        }) => labels
            .iter()
            .filter(|(name, _)| !without.contains(name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect(),
    }
}

/// `op by/without (…) (series)`, step by step; `parameter` is topk's k.
pub(crate) fn aggregate(
    op: AggregateOp,
    grouping: &Option<Grouping>,
    parameter: Option<f64>,
    series: Vec<Series>,
    steps: usize,
) -> Result<Vec<Series>, EvalError> {
    let mut groups: BTreeMap<Labels, Vec<Series>> = BTreeMap::new();
    for one in series {
        groups
            .entry(group_key(grouping, &one.labels))
            .or_default()
            .push(one);
    }
    if matches!(op, AggregateOp::Topk | AggregateOp::Bottomk) {
        let k = parameter.unwrap_or(0.0);
        if !(k >= 1.0 && k.fract() == 0.0) {
            return Err(EvalError(format!(
                "topk's and bottomk's parameter must be a whole number of at least 1, not {k}"
            )));
        }
        let largest = op == AggregateOp::Topk;
        return Ok(groups
            .into_values()
            .flat_map(|members| top_k(members, k as usize, steps, largest))
            .collect());
    }
    if matches!(op, AggregateOp::Sort | AggregateOp::SortDesc) {
        return Ok(sorted(
            groups.into_values().flatten().collect(),
            op == AggregateOp::SortDesc,
        ));
    }
    Ok(groups
        .into_iter()
        .map(|(labels, members)| {
            let points = (0..steps)
                .map(|at| {
                    let values: Vec<f64> = members.iter().filter_map(|s| s.points[at]).collect();
                    if values.is_empty() {
                        return None;
                    }
                    Some(match op {
                        AggregateOp::Sum => values.iter().sum(),
                        AggregateOp::Count => values.len() as f64,
                        AggregateOp::Avg => values.iter().sum::<f64>() / values.len() as f64,
                        AggregateOp::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
                        AggregateOp::Max => {
                            values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                        }
                        AggregateOp::Topk
                        | AggregateOp::Bottomk
                        | AggregateOp::Sort
                        | AggregateOp::SortDesc => unreachable!("handled above"),
                    })
                })
                .collect();
            Series { labels, points }
        })
        .filter(|series| series.points.iter().any(Option::is_some))
        .collect())
}

/// `sort`/`sort_desc`: every series, in the order of its last value (an instant query's only
/// one), NaN last, ties by labels; the series are unchanged.
pub(crate) fn sorted(mut series: Vec<Series>, descending: bool) -> Vec<Series> {
    let last = |s: &Series| s.points.iter().rev().find_map(|p| *p).unwrap_or(f64::NAN);
    series.sort_by(|a, b| {
        let (x, y) = (last(a), last(b));
        let by_value = match (x.is_nan(), y.is_nan()) {
            (true, true) => std::cmp::Ordering::Equal,
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            _ if descending => y.total_cmp(&x),
            _ => x.total_cmp(&y),
        };
        by_value.then_with(|| a.labels.cmp(&b.labels))
    });
    series
}

/// The `k` largest (or smallest) of `members` at each step; a series keeps the points where it
/// is among them.
fn top_k(members: Vec<Series>, k: usize, steps: usize, largest: bool) -> Vec<Series> {
    let mut kept: Vec<Series> = members
        .iter()
        .map(|s| Series {
            labels: s.labels.clone(),
            points: vec![None; steps],
        })
        .collect();
    for at in 0..steps {
        let mut present: Vec<(usize, f64)> = members
            .iter()
            .enumerate()
            .filter_map(|(index, s)| s.points[at].map(|value| (index, value)))
            .collect();
        // Ties go to the series whose labels sort first: the order the series were made in
        // depends on hashing, and an answer must not change between two runs of one query.
        present.sort_by(|a, b| {
            let by_value = if largest {
                b.1.total_cmp(&a.1)
            } else {
                a.1.total_cmp(&b.1)
            };
            by_value.then_with(|| members[a.0].labels.cmp(&members[b.0].labels))
        });
        for (index, value) in present.into_iter().take(k) {
            kept[index].points[at] = Some(value);
        }
    }
    kept.retain(|series| series.points.iter().any(Option::is_some));
    kept
}

/// `label_replace`: where `regex` matches the whole of a series' `src` label (empty when it has
/// none), `dst` becomes `replacement` with the groups expanded (and goes when that is empty);
/// other series are unchanged.
pub(crate) fn label_replace(
    mut series: Vec<Series>,
    replace: &LabelReplace,
) -> Result<Vec<Series>, EvalError> {
    let regex = regex::Regex::new(&format!("^(?:{})$", replace.regex))
        .map_err(|err| EvalError(format!("invalid regex in label_replace: {err}")))?;
    for one in &mut series {
        let source = one.labels.get(&replace.src).map_or("", String::as_str);
        let Some(captures) = regex.captures(source) else {
            continue;
        };
        let mut value = String::new();
        captures.expand(&replace.replacement, &mut value);
        one.labels.remove(&replace.dst);
        if !value.is_empty() {
            one.labels.insert(replace.dst.clone(), value);
        }
    }
    // Two series may now share labels; Loki answers both, and so does this.
    sort_by_labels(&mut series);
    Ok(series)
}

/// `absent_over_time`'s answer from the series its range made: 1 at each step where none has a
/// point, labelled with the selector's equality matchers (a label matched more than once, or
/// any other way, is left out), as Loki labels it.
pub(crate) fn absent(series: &[Series], selector: &[Matcher], steps: usize) -> Vec<Series> {
    let points: Vec<Option<f64>> = (0..steps)
        .map(|at| {
            let present = series.iter().any(|s| s.points[at].is_some());
            (!present).then_some(1.0)
        })
        .collect();
    if points.iter().all(Option::is_none) {
        return Vec::new();
    }
    let mut labels = Labels::new();
    let mut left_out = Vec::new();
    for matcher in selector {
        if matcher.op == MatchOp::Eq && !labels.contains_key(&matcher.label) {
            labels.insert(matcher.label.clone(), matcher.value.clone());
        } else {
            left_out.push(&matcher.label);
        }
    }
    for name in left_out {
        labels.remove(name);
    }
    vec![Series { labels, points }]
}

/// `vector(value)`: one series without labels, `value` at every step.
pub(crate) fn vector(value: f64, steps: usize) -> Value {
    Value::Matrix(vec![Series {
        labels: Labels::new(),
        points: vec![Some(value); steps],
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_query_is_aligned_to_whole_steps_as_lokis_frontend_does() {
        const SECOND: i64 = 1_000_000_000;
        // From 301 s before a minute boundary to the boundary, in steps of 37 s: Loki's points
        // are multiples of 37 s, the first at or before the start, the last at or after the end.
        let minute = 1_796_295_240 * SECOND;
        let steps = Steps::aligned(minute - 301 * SECOND, minute, 37 * SECOND).unwrap();
        assert_eq!(steps.start % (37 * SECOND), 0);
        assert!(steps.start <= minute - 301 * SECOND);
        assert!(steps.start > minute - 301 * SECOND - 37 * SECOND);
        assert_eq!(steps.end() % (37 * SECOND), 0);
        assert!(steps.end() >= minute && steps.end() < minute + 37 * SECOND);
        let on_the_grid = Steps::aligned(60 * SECOND, 120 * SECOND, 60 * SECOND).unwrap();
        assert_eq!((on_the_grid.start, on_the_grid.count), (60 * SECOND, 2));
    }

    const S: i64 = 1_000_000_000;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_line_counts_at_every_step_whose_range_holds_it() {
        let steps = Steps::new(60 * S, 180 * S, 60 * S).unwrap();
        assert_eq!(steps.count, 3);
        // (t - 120s, t]: a line at 61s counts at 120s and 180s, one at 60s at 60s and 120s.
        assert_eq!(steps.covering(61 * S, 120 * S), 1..3);
        assert_eq!(steps.covering(60 * S, 120 * S), 0..2);
        assert_eq!(
            steps.covering(0, 60 * S),
            0..0,
            "its range ends before the first step"
        );
        assert_eq!(steps.covering(500 * S, 60 * S), 3..3);
        let mut acc = RangeAccumulator::new(RangeFunction::Rate, 60 * S, steps);
        let api = labels(&[("service_name", "api")]);
        for (n, ts) in [61, 62, 119, 150].into_iter().enumerate() {
            let made = acc.add(api.clone(), ts * S, 10).unwrap();
            // The first line makes the series, and only it is charged for.
            assert_eq!(made, if n == 0 { series_bytes(&api, 3) } else { 0 });
        }
        assert_eq!(acc.add(api.clone(), 0, 10).unwrap(), 0, "counts at no step");
        let series = acc.finish();
        assert_eq!(series.len(), 1);
        assert_eq!(series[0].bytes(), series_bytes(&api, 3));
        assert_eq!(
            series_bytes(&api, 3),
            256 + 64 + "service_name".len() + "api".len() + 3 * 16
        );
        assert_eq!(series[0].points, [None, Some(3.0 / 60.0), Some(1.0 / 60.0)]);
    }

    #[test]
    fn too_many_points_or_series_are_refused() {
        assert!(Steps::new(0, 20_000 * S, S).is_err());
        assert!(Steps::new(0, 10 * S, 0).is_err());
        let steps = Steps::new(0, 0, S).unwrap();
        let mut acc = RangeAccumulator::new(RangeFunction::CountOverTime, S, steps);
        const MAX: usize = 500;
        for n in 0..=MAX {
            acc.add(labels(&[("n", &n.to_string())]), 0, 1).unwrap();
        }
        let many = Value::Matrix(acc.finish());
        let err = check_series(&many, MAX).unwrap_err();
        assert!(err.0.contains("maximum number of series (500)"), "{err}");
        assert_eq!(
            check_series(&many, MAX + 1),
            Ok(()),
            "the limit is the caller's"
        );
        // The answer is limited, not what it is computed from; a series without a point is none.
        let Value::Matrix(series) = many else {
            unreachable!()
        };
        let counted = aggregate(AggregateOp::Count, &None, None, series.clone(), 1).unwrap();
        assert_eq!(check_series(&Value::Matrix(counted), MAX), Ok(()));
        let mut empty = series;
        empty[0].points = vec![None];
        assert_eq!(check_series(&Value::Matrix(empty), MAX), Ok(()));
    }

    #[test]
    fn aggregations_and_arithmetic_work_point_by_point() {
        let series = vec![
            Series {
                labels: labels(&[("level", "info"), ("pod", "a")]),
                points: vec![Some(1.0), None],
            },
            Series {
                labels: labels(&[("level", "info"), ("pod", "b")]),
                points: vec![Some(3.0), Some(5.0)],
            },
            Series {
                labels: labels(&[("level", "error"), ("pod", "a")]),
                points: vec![Some(2.0), None],
            },
        ];
        let by_level = Some(Grouping {
            without: false,
            labels: vec!["level".into()],
        });
        let sum = aggregate(AggregateOp::Sum, &by_level, None, series.clone(), 2).unwrap();
        assert_eq!(sum[0].labels, labels(&[("level", "error")]));
        assert_eq!(sum[1].points, [Some(4.0), Some(5.0)]);
        let avg = aggregate(AggregateOp::Avg, &None, None, series.clone(), 2).unwrap();
        assert_eq!(avg[0].points, [Some(2.0), Some(5.0)]);
        let count = aggregate(AggregateOp::Count, &None, None, series.clone(), 2).unwrap();
        assert_eq!(count[0].points, [Some(3.0), Some(1.0)]);
        let top = aggregate(AggregateOp::Topk, &None, Some(1.0), series.clone(), 2).unwrap();
        let tied = |pods: [&str; 2]| {
            pods.map(|pod| Series {
                labels: labels(&[("pod", pod)]),
                points: vec![Some(1.0)],
            })
            .to_vec()
        };
        for input in [tied(["a", "b"]), tied(["b", "a"])] {
            let top = aggregate(AggregateOp::Topk, &None, Some(1.0), input, 1).unwrap();
            assert_eq!(
                top[0].labels["pod"], "a",
                "a tie goes by labels, not by order"
            );
        }
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].labels["pod"], "b");
        assert!(aggregate(AggregateOp::Topk, &None, Some(0.5), series, 2).is_err());

        let plain = BinaryModifier::default();
        let two =
            super::super::binary::binary(BinaryOp::Add, &plain, vector(1.0, 1), vector(1.0, 1));
        assert_eq!(two.unwrap(), vector(2.0, 1));
        let doubled =
            super::super::binary::binary(BinaryOp::Mul, &plain, sum_value(), Value::Scalar(2.0))
                .unwrap();
        let Value::Matrix(doubled) = doubled else {
            panic!()
        };
        assert_eq!(doubled[0].points, [Some(2.0), None]);
    }

    fn sum_value() -> Value {
        Value::Matrix(vec![Series {
            labels: Labels::new(),
            points: vec![Some(1.0), None],
        }])
    }
}
