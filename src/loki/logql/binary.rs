//! Binary operators between metric values, as Loki evaluates them step by step: arithmetic,
//! comparisons (filters, or 0/1 with `bool`) and the set operators, with `on`/`ignoring` and
//! `group_left`/`group_right` deciding which series of the two sides meet.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::ast::{BinaryModifier, BinaryOp};
use super::eval::{EvalError, Series, Value};
use super::labels::Labels;

/// `op` on two numbers; `None` where a comparison that filters fails. A comparison that does
/// not filter gives 1 or 0.
fn merge(op: BinaryOp, left: f64, right: f64, filter: bool) -> Option<f64> {
    let holds = match op {
        BinaryOp::Add => return Some(left + right),
        BinaryOp::Sub => return Some(left - right),
        BinaryOp::Mul => return Some(left * right),
        // Loki answers NaN, not an infinity, for a division by zero.
        BinaryOp::Div if right == 0.0 => return Some(f64::NAN),
        BinaryOp::Div => return Some(left / right),
        // Go's `math.Mod` and `math.Pow`, which Loki uses: the same IEEE results as Rust's.
        BinaryOp::Mod => return Some(left % right),
        BinaryOp::Pow => return Some(left.powf(right)),
        BinaryOp::Eq => left == right,
        BinaryOp::Ne => left != right,
        BinaryOp::Gt => left > right,
        BinaryOp::Ge => left >= right,
        BinaryOp::Lt => left < right,
        BinaryOp::Le => left <= right,
        BinaryOp::And | BinaryOp::Or | BinaryOp::Unless => {
            unreachable!("set operators match series, not numbers")
        }
    };
    match (holds, filter) {
        (true, true) => Some(left),
        (false, true) => None,
        (holds, false) => Some(f64::from(u8::from(holds))),
    }
}

/// `left op right`.
pub(crate) fn binary(
    op: BinaryOp,
    modifier: &BinaryModifier,
    left: Value,
    right: Value,
) -> Result<Value, EvalError> {
    let filter = !modifier.return_bool;
    Ok(match (left, right) {
        // Loki folds two numbers when it parses, and its comparisons of numbers give 0 or 1.
        (Value::Scalar(a), Value::Scalar(b)) => {
            Value::Scalar(merge(op, a, b, false).unwrap_or(f64::NAN))
        }
        (Value::Matrix(series), Value::Scalar(b)) => {
            Value::Matrix(each_point(series, |a| merge(op, a, b, filter)))
        }
        // A comparison that filters keeps the series' value whichever side it is on.
        (Value::Scalar(a), Value::Matrix(series)) => Value::Matrix(each_point(series, |b| {
            let merged = merge(op, a, b, filter)?;
            Some(if op.is_comparison() && filter {
                b
            } else {
                merged
            })
        })),
        (Value::Matrix(left), Value::Matrix(right)) => {
            Value::Matrix(vectors(op, modifier, left, right)?)
        }
    })
}

/// Each point of `series` through `f`; series left without a point go.
fn each_point(series: Vec<Series>, f: impl Fn(f64) -> Option<f64>) -> Vec<Series> {
    series
        .into_iter()
        .filter_map(|s| {
            let points: Vec<Option<f64>> = s.points.into_iter().map(|p| p.and_then(&f)).collect();
            points.iter().any(Option::is_some).then_some(Series {
                labels: s.labels,
                points,
            })
        })
        .collect()
}

/// The labels two series are matched on.
fn signature(labels: &Labels, modifier: &BinaryModifier) -> Labels {
    match &modifier.labels {
        None => labels.clone(),
        Some(names) if modifier.on => labels
            .iter()
            .filter(|(name, _)| names.contains(name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect(),
        Some(names) => labels
            .iter()
            .filter(|(name, _)| !names.contains(name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect(),
    }
}

/// The labels of a result from the "many" side's `labels` and the "one" side's `other`: with
/// one-to-one matching, only the `on` labels (or all but the `ignoring` ones); then each label
/// `group_…` names, copied from the "one" side.
fn result_labels(labels: &Labels, other: &Labels, modifier: &BinaryModifier) -> Labels {
    let mut result = labels.clone();
    if modifier.group.is_none() {
        match &modifier.labels {
            Some(names) if modifier.on => result.retain(|name, _| names.contains(name)),
            Some(names) => result.retain(|name, _| !names.contains(name)),
            None => {}
        }
    }
    if let Some(group) = &modifier.group {
        for name in &group.include {
            match other.get(name).filter(|value| !value.is_empty()) {
                Some(value) => result.insert(name.clone(), value.clone()),
                None => result.remove(name),
            };
        }
    }
    result
}

/// One side's series with their signatures.
struct Side {
    series: Vec<Series>,
    signatures: Vec<Labels>,
}

impl Side {
    fn new(series: Vec<Series>, modifier: &BinaryModifier) -> Self {
        let signatures = series
            .iter()
            .map(|s| signature(&s.labels, modifier))
            .collect();
        Side { series, signatures }
    }

    /// The indexes of the series with a point at step `at`.
    fn present(&self, at: usize) -> Vec<usize> {
        (0..self.series.len())
            .filter(|&index| self.series[index].points[at].is_some())
            .collect()
    }

    fn value(&self, index: usize, at: usize) -> f64 {
        self.series[index].points[at].expect("only present points are read")
    }
}

/// Two series' values meeting at a step, as Loki's `vectorBinop` pairs them.
fn vectors(
    op: BinaryOp,
    modifier: &BinaryModifier,
    left: Vec<Series>,
    right: Vec<Series>,
) -> Result<Vec<Series>, EvalError> {
    let steps = left.first().or(right.first()).map_or(0, |s| s.points.len());
    let (left, right) = (Side::new(left, modifier), Side::new(right, modifier));
    let mut out: BTreeMap<Labels, Vec<Option<f64>>> = BTreeMap::new();
    let mut put = |labels: Labels, at: usize, value: f64| {
        out.entry(labels).or_insert_with(|| vec![None; steps])[at] = Some(value);
    };
    for at in 0..steps {
        let (lhs, rhs) = (left.present(at), right.present(at));
        match op {
            BinaryOp::And | BinaryOp::Unless => {
                let matched: HashSet<&Labels> = rhs.iter().map(|&r| &right.signatures[r]).collect();
                let keep_matched = op == BinaryOp::And;
                if op == BinaryOp::And && rhs.is_empty() {
                    continue;
                }
                for &l in &lhs {
                    if rhs.is_empty() || matched.contains(&left.signatures[l]) == keep_matched {
                        put(left.series[l].labels.clone(), at, left.value(l, at));
                    }
                }
            }
            BinaryOp::Or => {
                let matched: HashSet<&Labels> = lhs.iter().map(|&l| &left.signatures[l]).collect();
                for &l in &lhs {
                    put(left.series[l].labels.clone(), at, left.value(l, at));
                }
                for &r in &rhs {
                    if !matched.contains(&right.signatures[r]) {
                        put(right.series[r].labels.clone(), at, right.value(r, at));
                    }
                }
            }
            _ => {
                for (labels, value) in pair(op, modifier, (&left, &lhs), (&right, &rhs), at)? {
                    put(labels, at, value);
                }
            }
        }
    }
    Ok(out
        .into_iter()
        .filter(|(_, points)| points.iter().any(Option::is_some))
        .map(|(labels, points)| Series { labels, points })
        .collect())
}

/// Arithmetic or a comparison between the series of two sides present at step `at`: each series
/// of the "many" side (the left unless `group_right`) with the one series of the other side of
/// the same signature, refused where Loki refuses an ambiguous match.
fn pair(
    op: BinaryOp,
    modifier: &BinaryModifier,
    left: (&Side, &[usize]),
    right: (&Side, &[usize]),
    at: usize,
) -> Result<Vec<(Labels, f64)>, EvalError> {
    let swapped = modifier.group.as_ref().is_some_and(|group| group.right);
    let ((many, many_present), (one, one_present)) = if swapped {
        (right, left)
    } else {
        (left, right)
    };
    let mut ones: HashMap<&Labels, usize> = HashMap::new();
    for &index in one_present {
        if ones.insert(&one.signatures[index], index).is_some() {
            let side = if swapped { "left" } else { "right" };
            return Err(EvalError(format!(
                "found duplicate series on the {side} hand-side;many-to-many matching not allowed: matching labels must be unique on one side"
            )));
        }
    }
    let mut matched: HashMap<&Labels, HashSet<Labels>> = HashMap::new();
    let mut results = Vec::new();
    for &index in many_present {
        let signature = &many.signatures[index];
        let Some(&other) = ones.get(signature) else {
            continue;
        };
        let labels = result_labels(
            &many.series[index].labels,
            &one.series[other].labels,
            modifier,
        );
        let seen = matched.entry(signature).or_default();
        if modifier.group.is_none() {
            if !seen.is_empty() {
                return Err(EvalError(
                    "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)".into(),
                ));
            }
            seen.insert(Labels::new());
        } else if !seen.insert(labels.clone()) {
            return Err(EvalError(
                "multiple matches for labels: grouping labels must ensure unique matches".into(),
            ));
        }
        let (a, b) = (many.value(index, at), one.value(other, at));
        let (a, b) = if swapped { (b, a) } else { (a, b) };
        if let Some(value) = merge(op, a, b, !modifier.return_bool) {
            results.push((labels, value));
        }
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loki::logql::ast::Group;

    fn series(pairs: &[(&str, &str)], points: &[Option<f64>]) -> Series {
        Series {
            labels: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            points: points.to_vec(),
        }
    }

    fn matrix(value: Value) -> Vec<Series> {
        match value {
            Value::Matrix(series) => series,
            Value::Scalar(n) => panic!("a number: {n}"),
        }
    }

    #[test]
    fn comparisons_filter_or_answer_0_and_1() {
        // Loki 3.7.6: `sum by (service_name) (…) > 3` keeps the values above 3, `> bool 3`
        // answers 1 or 0 at every step that has a value.
        let counts = || vec![series(&[("s", "a")], &[Some(5.0), Some(2.0), None])];
        let plain = BinaryModifier::default();
        let filtered = matrix(
            binary(
                BinaryOp::Gt,
                &plain,
                Value::Matrix(counts()),
                Value::Scalar(3.0),
            )
            .unwrap(),
        );
        assert_eq!(filtered[0].points, [Some(5.0), None, None]);
        let boolean = BinaryModifier {
            return_bool: true,
            ..BinaryModifier::default()
        };
        let bools = matrix(
            binary(
                BinaryOp::Gt,
                &boolean,
                Value::Matrix(counts()),
                Value::Scalar(3.0),
            )
            .unwrap(),
        );
        assert_eq!(bools[0].points, [Some(1.0), Some(0.0), None]);
        // The number on the left: the series' value is kept, not the number's.
        let flipped = matrix(
            binary(
                BinaryOp::Lt,
                &plain,
                Value::Scalar(3.0),
                Value::Matrix(counts()),
            )
            .unwrap(),
        );
        assert_eq!(flipped[0].points, [Some(5.0), None, None]);
        assert!(matrix(
            binary(
                BinaryOp::Gt,
                &plain,
                Value::Matrix(counts()),
                Value::Scalar(9.0)
            )
            .unwrap()
        )
        .is_empty());
        // Two numbers compare to 0 or 1 with or without `bool`; a division by zero is NaN.
        assert_eq!(
            binary(BinaryOp::Gt, &plain, Value::Scalar(1.0), Value::Scalar(2.0)).unwrap(),
            Value::Scalar(0.0)
        );
        let Value::Scalar(nan) = binary(
            BinaryOp::Div,
            &plain,
            Value::Scalar(1.0),
            Value::Scalar(0.0),
        )
        .unwrap() else {
            panic!()
        };
        assert!(nan.is_nan());
    }

    #[test]
    fn series_meet_by_labels_on_and_ignoring() {
        let levels = || {
            vec![
                series(&[("level", "error"), ("s", "a")], &[Some(2.0)]),
                series(&[("level", "info"), ("s", "a")], &[Some(6.0)]),
            ]
        };
        let total = || vec![series(&[("s", "a")], &[Some(8.0)])];
        let plain = BinaryModifier::default();
        // Without matching labels nothing meets.
        assert!(matrix(
            binary(
                BinaryOp::Div,
                &plain,
                Value::Matrix(levels()),
                Value::Matrix(total())
            )
            .unwrap()
        )
        .is_empty());
        // `on (s)` without a group: two left series for one right is refused, in Loki's words.
        let on = BinaryModifier {
            on: true,
            labels: Some(vec!["s".into()]),
            ..BinaryModifier::default()
        };
        let err = binary(
            BinaryOp::Div,
            &on,
            Value::Matrix(levels()),
            Value::Matrix(total()),
        )
        .unwrap_err();
        assert!(
            err.0
                .starts_with("multiple matches for labels: many-to-one"),
            "{err}"
        );
        // `group_left`: each level's share, with the level's labels.
        let grouped = BinaryModifier {
            group: Some(Group {
                right: false,
                include: Vec::new(),
            }),
            ..on.clone()
        };
        let shares = matrix(
            binary(
                BinaryOp::Div,
                &grouped,
                Value::Matrix(levels()),
                Value::Matrix(total()),
            )
            .unwrap(),
        );
        assert_eq!(shares.len(), 2);
        assert_eq!(shares[0].labels["level"], "error");
        assert_eq!(shares[0].points, [Some(0.25)]);
        // `group_right` the other way round keeps the right side's labels and the left's value.
        let right = BinaryModifier {
            group: Some(Group {
                right: true,
                include: Vec::new(),
            }),
            ..on.clone()
        };
        let flipped = matrix(
            binary(
                BinaryOp::Sub,
                &right,
                Value::Matrix(total()),
                Value::Matrix(levels()),
            )
            .unwrap(),
        );
        assert_eq!(flipped[1].labels["level"], "info");
        assert_eq!(flipped[1].points, [Some(2.0)]);
        // One-to-one with `on`: the result keeps only the `on` labels.
        let one = matrix(
            binary(
                BinaryOp::Add,
                &on,
                Value::Matrix(total()),
                Value::Matrix(total()),
            )
            .unwrap(),
        );
        assert_eq!(one[0].points, [Some(16.0)]);
    }

    #[test]
    fn set_operators_keep_whole_series() {
        let a = || {
            vec![
                series(&[("s", "a")], &[Some(1.0), Some(1.0)]),
                series(&[("s", "b")], &[Some(2.0), None]),
            ]
        };
        let b = || {
            vec![
                series(&[("s", "b")], &[Some(9.0), Some(9.0)]),
                series(&[("s", "c")], &[None, Some(3.0)]),
            ]
        };
        let plain = BinaryModifier::default();
        let and = matrix(
            binary(
                BinaryOp::And,
                &plain,
                Value::Matrix(a()),
                Value::Matrix(b()),
            )
            .unwrap(),
        );
        assert_eq!(and.len(), 1);
        assert_eq!(
            (and[0].labels["s"].as_str(), and[0].points.clone()),
            ("b", vec![Some(2.0), None])
        );
        let or =
            matrix(binary(BinaryOp::Or, &plain, Value::Matrix(a()), Value::Matrix(b())).unwrap());
        let or: Vec<(&str, Vec<Option<f64>>)> = or
            .iter()
            .map(|s| (s.labels["s"].as_str(), s.points.clone()))
            .collect();
        assert_eq!(
            or,
            [
                ("a", vec![Some(1.0), Some(1.0)]),
                ("b", vec![Some(2.0), Some(9.0)]),
                ("c", vec![None, Some(3.0)])
            ]
        );
        let unless = matrix(
            binary(
                BinaryOp::Unless,
                &plain,
                Value::Matrix(a()),
                Value::Matrix(b()),
            )
            .unwrap(),
        );
        assert_eq!(unless.len(), 1);
        assert_eq!(unless[0].labels["s"], "a");
        // `on ()` matches everything with everything.
        let on_nothing = BinaryModifier {
            on: true,
            labels: Some(Vec::new()),
            ..BinaryModifier::default()
        };
        let none = matrix(
            binary(
                BinaryOp::Unless,
                &on_nothing,
                Value::Matrix(a()),
                Value::Matrix(b()),
            )
            .unwrap(),
        );
        assert!(none.is_empty());
    }
}
