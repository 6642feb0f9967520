//! The range functions of unwrapped values (`sum_over_time`, `quantile_over_time`, …), fed one
//! sample at a time during the scan, as Loki computes them. Most fold each sample into every
//! step whose range holds it, so a series holds one cell per step whatever the lines; a quantile
//! and a counter's rate need the samples themselves, which are kept per series (24 bytes each,
//! charged) and never the lines.
//!
//! Samples of one instant from several streams are taken in the order Loki merges them, by their
//! stream's hash (`labels::stream_hash`): `first_over_time` keeps the one of the smallest hash,
//! `last_over_time` the largest, and a counter's rate reads them in that order.

use std::collections::hash_map::Entry;

use super::ast::RangeFunction;
use super::eval::{self, series_bytes, EvalError, Series, Steps};
use super::labels::{HashedLabels, Labels, SeriesMap};

/// A sample: its time (nanoseconds) and value.
type Sample = (i64, f64);

/// A sample and its stream's hash, which orders the samples of one instant.
#[derive(Clone, Copy, Debug)]
struct Placed {
    ts: i64,
    stream: u64,
    value: f64,
}

impl Placed {
    /// Whether this sample comes before `other` in Loki's merge order.
    fn before(&self, other: &Placed) -> bool {
        (self.ts, self.stream) < (other.ts, other.stream)
    }
}

/// What one step of a folded series holds so far.
#[derive(Clone, Copy, Debug)]
enum Fold {
    /// `sum_over_time`, `rate`: the sum.
    Sum(f64),
    /// `avg_over_time`: Loki's running mean.
    Mean { count: f64, mean: f64 },
    /// `min_over_time`.
    Min(f64),
    /// `max_over_time`.
    Max(f64),
    /// `stddev_over_time`, `stdvar_over_time`: Welford's running variance.
    Spread { count: f64, mean: f64, aux: f64 },
    /// `first_over_time`: the earliest sample.
    First(Placed),
    /// `last_over_time`: the latest sample.
    Last(Placed),
}

impl Fold {
    fn new(function: RangeFunction, sample: Placed) -> Fold {
        let value = sample.value;
        match function {
            RangeFunction::AvgOverTime => Fold::Mean {
                count: 1.0,
                mean: value,
            },
            RangeFunction::MinOverTime => Fold::Min(value),
            RangeFunction::MaxOverTime => Fold::Max(value),
            RangeFunction::StddevOverTime | RangeFunction::StdvarOverTime => Fold::Spread {
                count: 1.0,
                mean: value,
                aux: 0.0,
            },
            RangeFunction::FirstOverTime => Fold::First(sample),
            RangeFunction::LastOverTime => Fold::Last(sample),
            _ => Fold::Sum(value),
        }
    }

    fn add(&mut self, sample: Placed) {
        let value = sample.value;
        match self {
            Fold::Sum(sum) => *sum += value,
            Fold::Mean { count, mean } => {
                *count += 1.0;
                // Loki's mean: an infinite one stays unless a NaN or an opposite infinity comes.
                if mean.is_infinite() {
                    let same_infinity = value.is_infinite() && (*mean > 0.0) == (value > 0.0);
                    if same_infinity || value.is_finite() {
                        return;
                    }
                }
                *mean += value / *count - *mean / *count;
            }
            Fold::Min(min) => {
                if value < *min || min.is_nan() {
                    *min = value;
                }
            }
            Fold::Max(max) => {
                if value > *max || max.is_nan() {
                    *max = value;
                }
            }
            Fold::Spread { count, mean, aux } => {
                *count += 1.0;
                let delta = value - *mean;
                *mean += delta / *count;
                *aux += delta * (value - *mean);
            }
            Fold::First(first) => {
                if sample.before(first) {
                    *first = sample;
                }
            }
            // Of two samples of one instant and stream, the later one read.
            Fold::Last(last) => {
                if !sample.before(last) {
                    *last = sample;
                }
            }
        }
    }

    fn value(self, function: RangeFunction, seconds: f64) -> f64 {
        match self {
            Fold::Sum(sum) if function == RangeFunction::Rate => sum / seconds,
            Fold::Sum(sum) => sum,
            Fold::Mean { mean, .. } => mean,
            Fold::Min(value) | Fold::Max(value) => value,
            Fold::Spread { count, aux, .. } if function == RangeFunction::StdvarOverTime => {
                aux / count
            }
            Fold::Spread { count, aux, .. } => (aux / count).sqrt(),
            Fold::First(sample) | Fold::Last(sample) => sample.value,
        }
    }
}

/// A series' state.
#[derive(Debug)]
enum Cells {
    /// One fold per step.
    Folds(Vec<Option<Fold>>),
    /// Every sample in the read, for the functions of a whole window.
    Window(Vec<Placed>),
}

/// Gathers samples into a range function's series at the query's steps.
#[derive(Debug)]
pub(crate) struct SampleAccumulator {
    function: RangeFunction,
    parameter: Option<f64>,
    range: i64,
    offset: i64,
    steps: Steps,
    series: SeriesMap<Cells>,
    /// The bytes it reported making, all told.
    held: usize,
}

impl SampleAccumulator {
    /// An empty accumulator of `function` (with `quantile_over_time`'s `parameter`) over `range`
    /// nanoseconds ending `offset` nanoseconds before each of `steps`.
    pub(crate) fn new(
        function: RangeFunction,
        parameter: Option<f64>,
        range: i64,
        offset: i64,
        steps: Steps,
    ) -> Self {
        SampleAccumulator {
            function,
            parameter,
            range,
            offset,
            steps,
            series: SeriesMap::default(),
            held: 0,
        }
    }

    fn windowed(&self) -> bool {
        matches!(
            self.function,
            RangeFunction::QuantileOverTime | RangeFunction::RateCounter
        )
    }

    /// Adds the sample `value` at `ts`, of the stream whose hash is `stream`, to the series of
    /// `labels`. Gives the memory it took for it (a new series, or the sample itself when kept),
    /// for the caller to charge.
    pub(crate) fn add(
        &mut self,
        labels: Labels,
        ts: i64,
        stream: u64,
        value: f64,
    ) -> Result<usize, EvalError> {
        let covering = self
            .steps
            .covering(ts.saturating_add(self.offset), self.range);
        if covering.is_empty() {
            return Ok(0);
        }
        let windowed = self.windowed();
        let mut made = 0;
        let cells = match self.series.entry(HashedLabels::new(labels)) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(new) => {
                made = series_bytes(new.key().labels(), self.steps.count);
                let cells = if windowed {
                    Cells::Window(Vec::new())
                } else {
                    made += self.steps.count * std::mem::size_of::<Option<Fold>>();
                    Cells::Folds(vec![None; self.steps.count])
                };
                new.insert(cells)
            }
        };
        let sample = Placed { ts, stream, value };
        match cells {
            Cells::Folds(folds) => {
                for fold in &mut folds[covering] {
                    match fold {
                        Some(fold) => fold.add(sample),
                        None => *fold = Some(Fold::new(self.function, sample)),
                    }
                }
            }
            Cells::Window(samples) => {
                samples.push(sample);
                made += std::mem::size_of::<Placed>();
            }
        }
        self.held += made;
        Ok(made)
    }

    /// The memory it holds: the sum of what [`SampleAccumulator::add`] gave.
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// The series, sorted by labels; each holds [`Series::bytes`] of what it held.
    pub(crate) fn finish(self) -> Vec<Series> {
        let seconds = self.range as f64 / 1e9;
        let (function, parameter, range, offset, steps) = (
            self.function,
            self.parameter,
            self.range,
            self.offset,
            self.steps,
        );
        let mut series: Vec<Series> = self
            .series
            .into_iter()
            .map(|(key, cells)| {
                let labels = key.into_labels();
                let points = match cells {
                    Cells::Folds(folds) => folds
                        .into_iter()
                        .map(|fold| fold.map(|fold| fold.value(function, seconds)))
                        .collect(),
                    Cells::Window(samples) => {
                        windows(samples, steps, range, offset, |window| match function {
                            RangeFunction::RateCounter => rate_counter(window, range),
                            _ => quantile(parameter.unwrap_or(f64::NAN), window),
                        })
                    }
                };
                Series { labels, points }
            })
            .collect();
        eval::sort_by_labels(&mut series);
        series
    }
}

/// `value` of the samples in each step's range, oldest first; no point where it has none.
fn windows(
    mut placed: Vec<Placed>,
    steps: Steps,
    range: i64,
    offset: i64,
    value: impl Fn(&[Sample]) -> f64,
) -> Vec<Option<f64>> {
    // Stable: samples of one instant and stream keep the order the scan gave them.
    placed.sort_by_key(|sample| (sample.ts, sample.stream));
    let samples: Vec<Sample> = placed
        .into_iter()
        .map(|sample| (sample.ts, sample.value))
        .collect();
    let (mut first, mut past) = (0, 0);
    (0..steps.count)
        .map(|at| {
            let end = steps.at(at) - offset;
            while past < samples.len() && samples[past].0 <= end {
                past += 1;
            }
            while first < past && samples[first].0 <= end - range {
                first += 1;
            }
            (first < past).then(|| value(&samples[first..past]))
        })
        .collect()
}

/// Loki's quantile: linear between the two nearest ranks; −∞ below 0, +∞ above 1.
pub(crate) fn quantile(q: f64, samples: &[Sample]) -> f64 {
    if samples.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    let mut values: Vec<f64> = samples.iter().map(|sample| sample.1).collect();
    values.sort_by(f64::total_cmp);
    let n = values.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    values[lower as usize] * (1.0 - weight) + values[upper as usize] * weight
}

/// Loki 3.7.6's `rate_counter`: Prometheus' extrapolated counter rate as Loki calls it, with the
/// samples' times in nanoseconds where Prometheus has milliseconds. The range's start is then
/// always `range` seconds before the first sample and its end the last sample, and the spacing
/// between samples reads a thousand times larger than it is; the answers follow from that, and
/// they are Loki's.
fn rate_counter(samples: &[Sample], range: i64) -> f64 {
    if samples.len() < 2 {
        return 0.0;
    }
    let (first, last) = (samples[0], samples[samples.len() - 1]);
    let range_millis = range / 1_000_000;
    let range_start = first.0 - range_millis;
    let range_end = last.0;
    let mut result = last.1 - first.1;
    let mut previous = 0.0;
    for sample in samples {
        if sample.1 < previous {
            result += previous;
        }
        previous = sample.1;
    }
    let mut to_start = (first.0 - range_start) as f64 / 1000.0;
    let to_end = (range_end - last.0) as f64 / 1000.0;
    let sampled = (last.0 - first.0) as f64 / 1000.0;
    let average = sampled / (samples.len() - 1) as f64;
    if result > 0.0 && first.1 >= 0.0 {
        let to_zero = sampled * (first.1 / result);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    let threshold = average * 1.1;
    let mut interval = sampled;
    interval += if to_start < threshold {
        to_start
    } else {
        average / 2.0
    };
    interval += if to_end < threshold {
        to_end
    } else {
        average / 2.0
    };
    result * (interval / sampled) / (range as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn labels(name: &str) -> Labels {
        Labels::from([("n".to_string(), name.to_string())])
    }

    fn run(
        function: RangeFunction,
        parameter: Option<f64>,
        samples: &[(i64, f64)],
    ) -> Vec<Option<f64>> {
        let steps = Steps::new(60 * S, 120 * S, 60 * S).unwrap();
        let mut acc = SampleAccumulator::new(function, parameter, 60 * S, 0, steps);
        for (ts, value) in samples {
            acc.add(labels("a"), ts * S, 0, *value).unwrap();
        }
        let series = acc.finish();
        series[0].points.clone()
    }

    #[test]
    fn each_function_folds_the_samples_of_its_steps() {
        // Out of order, as a scan may give them: the step at 60 s holds 30 s and 50 s.
        let samples = [(50, 4.0), (30, 2.0), (90, 9.0), (100, 3.0)];
        let at = |function, parameter| run(function, parameter, &samples);
        assert_eq!(
            at(RangeFunction::SumOverTime, None),
            [Some(6.0), Some(12.0)]
        );
        assert_eq!(at(RangeFunction::Rate, None), [Some(0.1), Some(0.2)]);
        assert_eq!(at(RangeFunction::AvgOverTime, None), [Some(3.0), Some(6.0)]);
        assert_eq!(at(RangeFunction::MinOverTime, None), [Some(2.0), Some(3.0)]);
        assert_eq!(at(RangeFunction::MaxOverTime, None), [Some(4.0), Some(9.0)]);
        assert_eq!(
            at(RangeFunction::FirstOverTime, None),
            [Some(2.0), Some(9.0)]
        );
        assert_eq!(
            at(RangeFunction::LastOverTime, None),
            [Some(4.0), Some(3.0)]
        );
        assert_eq!(
            at(RangeFunction::StdvarOverTime, None),
            [Some(1.0), Some(9.0)]
        );
        assert_eq!(
            at(RangeFunction::StddevOverTime, None),
            [Some(1.0), Some(3.0)]
        );
        assert_eq!(
            at(RangeFunction::QuantileOverTime, Some(0.5)),
            [Some(3.0), Some(6.0)]
        );
        assert_eq!(
            at(RangeFunction::QuantileOverTime, Some(0.0)),
            [Some(2.0), Some(3.0)]
        );
        assert_eq!(
            at(RangeFunction::QuantileOverTime, Some(1.0)),
            [Some(4.0), Some(9.0)]
        );
        assert_eq!(
            at(RangeFunction::QuantileOverTime, Some(1.5)),
            [Some(f64::INFINITY), Some(f64::INFINITY)]
        );
    }

    #[test]
    fn a_counter_rate_is_lokis() {
        // Two samples, Loki's extrapolation with its nanosecond times worked by hand: the rise of
        // 6 over a sampled interval that reads 20e6, extended by the 60 "seconds" to the range's
        // start (under the threshold of 1.1 × 20e6), over a range of 60 s.
        let points = run(RangeFunction::RateCounter, None, &[(30, 4.0), (50, 10.0)]);
        let sampled = 20e6;
        let expected = 6.0 * ((sampled + 60.0) / sampled) / 60.0;
        assert_eq!(points[0], Some(expected));
        // One sample makes a zero, as in Loki.
        assert_eq!(
            run(RangeFunction::RateCounter, None, &[(30, 4.0)])[0],
            Some(0.0)
        );
    }

    #[test]
    fn an_offset_reads_an_earlier_range() {
        let steps = Steps::new(60 * S, 120 * S, 60 * S).unwrap();
        let mut acc =
            SampleAccumulator::new(RangeFunction::SumOverTime, None, 60 * S, 60 * S, steps);
        acc.add(labels("a"), 30 * S, 0, 1.0).unwrap();
        assert_eq!(acc.finish()[0].points, [None, Some(1.0)]);
    }

    #[test]
    fn samples_of_one_instant_go_by_their_streams_hash_in_any_order_read() {
        // Three streams' samples at 60 s, in one series (a grouping), read in each order.
        let tied = [(7_u64, 10.0), (3, 30.0), (9, 90.0)];
        let orders = [[0, 1, 2], [2, 1, 0], [1, 2, 0]];
        for order in orders {
            let at = |function| {
                let steps = Steps::new(60 * S, 60 * S, 60 * S).unwrap();
                let mut acc = SampleAccumulator::new(function, None, 60 * S, 0, steps);
                acc.add(labels("a"), 10 * S, 5, 1.0).unwrap();
                for &n in &order {
                    let (stream, value) = tied[n];
                    acc.add(labels("a"), 60 * S, stream, value).unwrap();
                }
                acc.finish()[0].points[0]
            };
            assert_eq!(at(RangeFunction::LastOverTime), Some(90.0), "{order:?}");
            let first = |order: &[usize]| {
                let steps = Steps::new(60 * S, 60 * S, 60 * S).unwrap();
                let mut acc =
                    SampleAccumulator::new(RangeFunction::FirstOverTime, None, 60 * S, 0, steps);
                for &n in order {
                    let (stream, value) = tied[n];
                    acc.add(labels("a"), 30 * S, stream, value).unwrap();
                }
                acc.finish()[0].points[0]
            };
            assert_eq!(first(&order), Some(30.0), "{order:?}");
            // A counter read 1, then 30, 10, 90 at one instant: the drops after 30 and 90 are
            // resets, whatever order the store gave them in.
            let rate = at(RangeFunction::RateCounter);
            let sorted = {
                let steps = Steps::new(60 * S, 60 * S, 60 * S).unwrap();
                let mut acc =
                    SampleAccumulator::new(RangeFunction::RateCounter, None, 60 * S, 0, steps);
                acc.add(labels("a"), 10 * S, 5, 1.0).unwrap();
                for (stream, value) in [(3, 30.0), (7, 10.0), (9, 90.0)] {
                    acc.add(labels("a"), 60 * S, stream, value).unwrap();
                }
                acc.finish()[0].points[0]
            };
            assert_eq!(rate, sorted, "{order:?}");
        }
    }
}
