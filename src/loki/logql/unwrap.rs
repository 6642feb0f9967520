//! `| unwrap`: the number a line gives a range function of values, read from one of its labels
//! as Loki reads it (Go's number, duration and size syntaxes, with Go's error texts, which Loki
//! shows in `__error_details__`).

use super::ast::{Conversion, Unwrap};
use super::go_numbers::{parse_bytes, parse_duration, parse_float};
use super::labels::Labels;
use super::pipeline::{CompileError, LabelCheck, ERROR_DETAILS_LABEL, ERROR_LABEL};

/// What `__error__` says when a label's text is not a number of the kind asked.
pub(crate) const EXTRACTION_ERROR: &str = "SampleExtractionErr";

/// An unwrap, compiled: the label, its conversion and the filters after it.
#[derive(Clone, Debug)]
pub(crate) struct Unwrapper {
    label: String,
    conversion: Conversion,
    filters: Vec<LabelCheck>,
}

impl Unwrapper {
    /// Compiles `unwrap`.
    pub(crate) fn compile(unwrap: &Unwrap) -> Result<Self, CompileError> {
        Ok(Unwrapper {
            label: unwrap.label.clone(),
            conversion: unwrap.conversion,
            filters: unwrap
                .filters
                .iter()
                .map(LabelCheck::compile)
                .collect::<Result<_, _>>()?,
        })
    }

    /// The sample of a line whose labels the pipeline left as `labels`, and the labels of its
    /// series; `None` when the line gives none: the label is missing or empty (which Loki
    /// allows), or a filter after the unwrap drops it. A text that is no number gives 0 and
    /// `__error__`, which the caller refuses unless a filter dropped it; the label stays then, as
    /// in Loki's message.
    pub(crate) fn sample(&self, mut labels: Labels) -> Option<(Labels, f64)> {
        let text = labels.get(&self.label).filter(|text| !text.is_empty())?;
        let value = match convert(self.conversion, text) {
            Ok(value) => value,
            Err(details) => {
                labels.insert(ERROR_LABEL.into(), EXTRACTION_ERROR.into());
                labels.insert(ERROR_DETAILS_LABEL.into(), details);
                0.0
            }
        };
        for filter in &self.filters {
            if !filter.holds(&mut labels) {
                return None;
            }
        }
        if !labels.contains_key(ERROR_LABEL) {
            labels.remove(&self.label);
        }
        Some((labels, value))
    }
}

/// `text` as the number `conversion` reads, or Go's error text.
pub(crate) fn convert(conversion: Conversion, text: &str) -> Result<f64, String> {
    match conversion {
        Conversion::Number => parse_float(text),
        Conversion::Duration | Conversion::DurationSeconds => {
            parse_duration(text).map(duration_seconds)
        }
        Conversion::Bytes => parse_bytes(text).map(|bytes| bytes as f64),
    }
}

/// Go's `Duration.Seconds()` of `nanos`.
fn duration_seconds(nanos: i64) -> f64 {
    let seconds = nanos / 1_000_000_000;
    let rest = nanos % 1_000_000_000;
    seconds as f64 + rest as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_durations_and_sizes_read_as_go_reads_them() {
        assert_eq!(convert(Conversion::Number, "3718"), Ok(3718.0));
        assert_eq!(convert(Conversion::Number, "-0.5"), Ok(-0.5));
        // Loki 3.7.6's `__error_details__` for `| unwrap path`.
        assert_eq!(
            convert(Conversion::Number, "/api/v1/items"),
            Err(r#"strconv.ParseFloat: parsing "/api/v1/items": invalid syntax"#.into())
        );
        assert!(convert(Conversion::Number, "1e999")
            .unwrap_err()
            .contains("value out of range"));
        // Loki's values for `| unwrap duration(duration)` over the logfmt lines.
        assert_eq!(convert(Conversion::Duration, "1.5s"), Ok(1.5));
        assert_eq!(convert(Conversion::Duration, "45us"), Ok(0.000045));
        assert_eq!(convert(Conversion::Duration, "0.5ms"), Ok(0.0005));
        assert_eq!(convert(Conversion::Duration, "1h30m"), Ok(5400.0));
        assert_eq!(convert(Conversion::Duration, "-250ms"), Ok(-0.25));
        assert_eq!(
            convert(Conversion::Duration, "/api/v1/items"),
            Err(r#"time: invalid duration "/api/v1/items""#.into())
        );
        assert_eq!(
            convert(Conversion::Duration, "5"),
            Err(r#"time: missing unit in duration "5""#.into())
        );
        assert_eq!(
            convert(Conversion::Duration, "5d"),
            Err(r#"time: unknown unit "d" in duration "5d""#.into())
        );
        // And for `| unwrap bytes(size)`.
        assert_eq!(convert(Conversion::Bytes, "512B"), Ok(512.0));
        assert_eq!(convert(Conversion::Bytes, "300kB"), Ok(300_000.0));
        assert_eq!(convert(Conversion::Bytes, "1.5MB"), Ok(1_500_000.0));
        assert_eq!(convert(Conversion::Bytes, "1KiB"), Ok(1024.0));
        assert_eq!(convert(Conversion::Bytes, "1,024"), Ok(1024.0));
        assert_eq!(
            convert(Conversion::Bytes, "/api/v1/items"),
            Err(r#"strconv.ParseFloat: parsing "": invalid syntax"#.into())
        );
        assert_eq!(
            convert(Conversion::Bytes, "12 parsecs"),
            Err("unhandled size name: parsecs".into())
        );
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_unwrapped_label_leaves_the_series_unless_it_failed() {
        let unwrap = |text: &str| match super::super::parse(text).unwrap() {
            super::super::Query::Metric(super::super::ast::MetricExpr::Range(range)) => {
                Unwrapper::compile(range.unwrap.as_ref().unwrap()).unwrap()
            }
            other => panic!("{other:?}"),
        };
        let plain = unwrap(r#"sum_over_time({a="b"} | unwrap bytes [5m])"#);
        let (series, value) = plain
            .sample(labels(&[("a", "b"), ("bytes", "12")]))
            .unwrap();
        assert_eq!((series, value), (labels(&[("a", "b")]), 12.0));
        assert_eq!(plain.sample(labels(&[("a", "b")])), None, "no label");
        assert_eq!(plain.sample(labels(&[("bytes", "")])), None, "empty");
        let (failed, value) = plain.sample(labels(&[("bytes", "x")])).unwrap();
        assert_eq!(value, 0.0);
        assert_eq!(failed[ERROR_LABEL], EXTRACTION_ERROR);
        assert_eq!(failed["bytes"], "x");
        let skipping = unwrap(r#"sum_over_time({a="b"} | unwrap bytes | __error__="" [5m])"#);
        assert_eq!(skipping.sample(labels(&[("bytes", "x")])), None);
        let above = unwrap(r#"sum_over_time({a="b"} | unwrap bytes | bytes > 10 [5m])"#);
        assert_eq!(above.sample(labels(&[("bytes", "9")])), None);
        assert!(above.sample(labels(&[("bytes", "11")])).is_some());
    }
}
