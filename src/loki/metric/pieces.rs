//! A metric query whose reads pass `--max-query-bytes` at once, answered in pieces of its steps.
//!
//! Every value of a metric query at one step depends only on the lines of that step's range, so
//! the steps can be answered a run at a time and the runs put side by side. Whole is tried first;
//! a run refused for its memory is split in two halves, each answered (or split) in turn. What a
//! run holds is the series alive within its steps, so lines that each make a series of their own
//! (an attribute of many values, such as a trace id), which a whole hour of steps cannot hold, fit
//! a few steps at a time; Loki answers such queries too. The price is that the rows of a range
//! that two runs share are read twice.

use std::collections::HashMap;

use crate::error::{HttpError, QueryError};
use crate::loki::logql::ast::{AggregateOp, MetricExpr};
use crate::loki::logql::eval::{self, Series, Steps, Value};
use crate::loki::logql::labels::{Labels, LabelsMap};
use crate::query::memory::ReadCharge;

/// `steps` in two runs, the first of half its instants (rounded down); `None` for one instant.
pub(super) fn halves(steps: Steps) -> Option<(Steps, Steps)> {
    if steps.count < 2 {
        return None;
    }
    let first = steps.count / 2;
    Some((
        Steps {
            count: first,
            ..steps
        },
        Steps {
            start: steps.at(first),
            count: steps.count - first,
            ..steps
        },
    ))
}

/// Whether `err` is a refusal that a smaller run of steps may escape: the read's own memory
/// bound. The server's bound on every read together is not, since others hold what it counts.
pub(super) fn smaller_may_fit(err: &HttpError) -> bool {
    matches!(err, HttpError::Query(QueryError::ReadTooLarge { .. }))
}

/// The runs of a query's steps joined into one value at all its steps, as they are answered.
/// Each series is charged at its whole length when a run first has it, so an answer too large
/// for the read is refused at the first run that shows it, not after every run was read.
pub(super) struct Joined {
    steps: Steps,
    series: Vec<Series>,
    /// Where each labels' series are in `series`: two series of one run may share labels
    /// (`label_replace` can make them), and the n-th of a run continues the n-th of the runs
    /// before. Its copy of each series' labels is charged too, until [`Joined::finish`].
    slots: LabelsMap<Vec<usize>>,
    /// The value when it is a number, the same at every step.
    number: Option<f64>,
}

impl Joined {
    /// Nothing yet of a value at `steps`.
    pub(super) fn new(steps: Steps) -> Self {
        Joined {
            steps,
            series: Vec::new(),
            slots: LabelsMap::default(),
            number: None,
        }
    }

    /// Puts the value of the run of steps `run` at its steps; its charge is given back as its
    /// series are taken in, and theirs at the whole length charged instead.
    pub(super) fn add(
        &mut self,
        run: Steps,
        value: Value,
        charge: &mut ReadCharge,
    ) -> Result<(), QueryError> {
        let series = match value {
            Value::Matrix(series) => series,
            Value::Scalar(number) => {
                self.number = Some(number);
                return Ok(());
            }
        };
        let first = ((run.start - self.steps.start) / self.steps.step) as usize;
        let mut seen: HashMap<&Labels, usize> = HashMap::new();
        for one in &series {
            let nth = seen.entry(&one.labels).or_default();
            let known = match self.slots.get_mut(&one.labels) {
                Some(known) => known,
                None => {
                    charge.charge(eval::labels_bytes(&one.labels))?;
                    self.slots.entry(one.labels.clone()).or_default()
                }
            };
            let slot = match known.get(*nth) {
                Some(slot) => *slot,
                None => {
                    charge.charge(eval::series_bytes(&one.labels, self.steps.count))?;
                    self.series.push(Series {
                        labels: one.labels.clone(),
                        points: vec![None; self.steps.count],
                    });
                    known.push(self.series.len() - 1);
                    self.series.len() - 1
                }
            };
            *nth += 1;
            self.series[slot].points[first..first + one.points.len()].copy_from_slice(&one.points);
        }
        charge.release(series.iter().map(Series::bytes).sum());
        Ok(())
    }

    /// The joined value, its series in the order the whole query would have given them; the
    /// charge of the labels it kept to join them is given back.
    pub(super) fn finish(mut self, expr: &MetricExpr, charge: &mut ReadCharge) -> Value {
        charge.release(self.slots.keys().map(eval::labels_bytes).sum());
        if let Some(number) = self.number {
            return Value::Scalar(number);
        }
        match expr {
            MetricExpr::Aggregate {
                op: op @ (AggregateOp::Sort | AggregateOp::SortDesc),
                ..
            } => Value::Matrix(eval::sorted(self.series, *op == AggregateOp::SortDesc)),
            // Each run's series are in the order of their labels, but a series a later run
            // begins may sort before those of the runs before it.
            _ => {
                eval::sort_by_labels(&mut self.series);
                Value::Matrix(self.series)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::loki::logql::ast::Query;
    use crate::loki::logql::parse;
    use crate::observability::metrics::Registry;
    use crate::query::memory::{MemoryLimits, ReadMemory};
    use crate::query::metrics::QueryMetrics;

    fn metric(text: &str) -> MetricExpr {
        match parse(text).unwrap() {
            Query::Metric(expr) => expr,
            Query::Log(_) => panic!("{text} is a log query"),
        }
    }

    fn series(label: &str, points: &[Option<f64>]) -> Series {
        Series {
            labels: Labels::from([("a".to_owned(), label.to_owned())]),
            points: points.to_vec(),
        }
    }

    fn charge() -> ReadCharge {
        let memory = Arc::new(ReadMemory::new(
            MemoryLimits::default(),
            &QueryMetrics::register(&Registry::new()),
        ));
        memory.read(&Arc::from("t"))
    }

    /// `runs` joined at `steps` as `expr`'s value, each run charged before it is added; the
    /// value and the read's charge after.
    fn join(steps: Steps, runs: Vec<(Steps, Value)>, expr: &str) -> (Value, ReadCharge) {
        let mut charge = charge();
        let mut joined = Joined::new(steps);
        for (run, value) in runs {
            charge.charge(value.bytes()).unwrap();
            joined.add(run, value, &mut charge).unwrap();
        }
        (joined.finish(&metric(expr), &mut charge), charge)
    }

    #[test]
    fn halves_keep_every_instant_once_in_order() {
        let steps = Steps::new(100, 100 + 6 * 10, 10).unwrap();
        let (first, second) = halves(steps).unwrap();
        let instants: Vec<i64> = (0..first.count)
            .map(|n| first.at(n))
            .chain((0..second.count).map(|n| second.at(n)))
            .collect();
        assert_eq!(
            instants,
            (0..steps.count).map(|n| steps.at(n)).collect::<Vec<_>>()
        );
        assert_eq!((first.count, second.count), (3, 4));
        assert!(halves(Steps::new(5, 5, 1).unwrap()).is_none());
    }

    #[test]
    fn runs_join_by_labels_at_their_steps_and_give_back_their_charge() {
        let steps = Steps::new(0, 40, 10).unwrap();
        let (first, second) = halves(steps).unwrap();
        let runs = vec![
            (
                first,
                Value::Matrix(vec![
                    series("x", &[Some(1.0), None]),
                    series("y", &[Some(2.0), Some(3.0)]),
                ]),
            ),
            (
                second,
                Value::Matrix(vec![
                    series("w", &[None, Some(9.0), Some(8.0)]),
                    series("x", &[Some(4.0), None, None]),
                ]),
            ),
        ];
        let (joined, charge) = join(steps, runs, r#"count_over_time({a="x"}[1m])"#);
        assert_eq!(
            joined,
            Value::Matrix(vec![
                series("w", &[None, None, None, Some(9.0), Some(8.0)]),
                series("x", &[Some(1.0), None, Some(4.0), None, None]),
                series("y", &[Some(2.0), Some(3.0), None, None, None]),
            ])
        );
        assert_eq!(
            charge.held(),
            joined.bytes(),
            "the whole is charged, the runs given back"
        );
    }

    #[test]
    fn series_sharing_labels_stay_apart_and_sort_keeps_its_order() {
        let steps = Steps::new(0, 10, 10).unwrap();
        let (first, second) = halves(steps).unwrap();
        let runs = vec![
            (
                first,
                Value::Matrix(vec![series("x", &[Some(1.0)]), series("x", &[Some(5.0)])]),
            ),
            (
                second,
                Value::Matrix(vec![series("x", &[Some(2.0)]), series("x", &[Some(0.5)])]),
            ),
        ];
        let (joined, _) = join(steps, runs, r#"sort_desc(count_over_time({a="x"}[1m]))"#);
        // By the last value, largest first.
        assert_eq!(
            joined,
            Value::Matrix(vec![
                series("x", &[Some(1.0), Some(2.0)]),
                series("x", &[Some(5.0), Some(0.5)])
            ])
        );
    }
}
