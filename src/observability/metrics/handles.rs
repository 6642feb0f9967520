//! Handles to registered series. Each one writes to its [`Registry`]'s Prometheus recorder and
//! keeps its own copy of the value, so that the console reads the numbers `/metrics` shows
//! without parsing the exposition text back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use metrics::Label;

use super::registry::Registry;
use super::series::Series;

fn static_labels<const N: usize>(
    keys: &[&'static str; N],
    values: [&'static str; N],
) -> Vec<Label> {
    keys.iter()
        .zip(values)
        .map(|(key, value)| Label::from_static_parts(key, value))
        .collect()
}

/// A counter Prometheus exports and the service can read.
#[derive(Clone, Debug)]
pub struct Counter {
    exported: metrics::Counter,
    value: Arc<AtomicU64>,
}

impl Counter {
    /// The series `series` with `labels`, registered in `registry`.
    pub(crate) fn register(registry: &Registry, series: Series, labels: Vec<Label>) -> Counter {
        registry.describe_counter(series);
        Counter {
            exported: registry.counter(series, labels),
            value: Arc::default(),
        }
    }

    /// Adds `n`.
    pub fn increment(&self, n: u64) {
        if n == 0 {
            return;
        }
        self.exported.increment(n);
        self.value.fetch_add(n, Ordering::Relaxed);
    }

    /// The count since this process started.
    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// A gauge Prometheus exports and the service can read.
#[derive(Clone, Debug)]
pub struct Gauge {
    exported: metrics::Gauge,
    bits: Arc<AtomicU64>,
}

impl Gauge {
    /// The series `series` with `labels`, registered in `registry`.
    pub(crate) fn register(registry: &Registry, series: Series, labels: Vec<Label>) -> Gauge {
        registry.describe_gauge(series);
        Gauge {
            exported: registry.gauge(series, labels),
            bits: Arc::new(AtomicU64::new(0f64.to_bits())),
        }
    }

    /// Sets the value.
    pub fn set(&self, value: f64) {
        self.exported.set(value);
        self.bits.store(value.to_bits(), Ordering::Relaxed);
    }

    /// Adds `delta` (negative to subtract).
    pub fn add(&self, delta: f64) {
        self.exported.increment(delta);
        let _ = self
            .bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + delta).to_bits())
            });
    }

    /// The value now.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.bits.load(Ordering::Relaxed))
    }
}

/// A histogram Prometheus exports and the service can read, with the exporter's buckets.
#[derive(Clone, Debug)]
pub struct Histogram {
    exported: metrics::Histogram,
    shared: Arc<HistogramValues>,
}

#[derive(Debug)]
struct HistogramValues {
    bounds: &'static [f64],
    /// Observations at or below each bound (not cumulative), then those above the last one.
    counts: Box<[AtomicU64]>,
    sum_bits: AtomicU64,
}

/// A histogram's values at one moment: cumulative buckets as Prometheus reports them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// Sum of the observations.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
    /// (upper bound, observations at or below it); the last bound is `+Inf`.
    pub buckets: Vec<(f64, u64)>,
}

impl HistogramSnapshot {
    /// Adds another histogram with the same bounds (for example another shard's).
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        self.sum += other.sum;
        self.count += other.count;
        if self.buckets.is_empty() {
            self.buckets = other.buckets.clone();
        } else {
            for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
                mine.1 += theirs.1;
            }
        }
    }
}

impl Histogram {
    /// The series `series` with `labels`, registered in `registry`, with the buckets the exporter
    /// gives its name.
    pub(crate) fn register(registry: &Registry, series: Series, labels: Vec<Label>) -> Histogram {
        registry.describe_histogram(series);
        let bounds = Registry::buckets(series.name);
        Histogram {
            exported: registry.histogram(series, labels),
            shared: Arc::new(HistogramValues {
                bounds,
                counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
                sum_bits: AtomicU64::new(0f64.to_bits()),
            }),
        }
    }

    /// Records one observation.
    pub fn record(&self, value: f64) {
        self.exported.record(value);
        let values = &self.shared;
        let slot = values.bounds.partition_point(|bound| *bound < value);
        values.counts[slot].fetch_add(1, Ordering::Relaxed);
        let _ = values
            .sum_bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
    }

    /// Its values now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let values = &self.shared;
        let mut cumulative = 0;
        let bounds = values.bounds.iter().copied().chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds
            .zip(values.counts.iter())
            .map(|(bound, count)| {
                cumulative += count.load(Ordering::Relaxed);
                (bound, cumulative)
            })
            .collect();
        HistogramSnapshot {
            sum: f64::from_bits(values.sum_bits.load(Ordering::Relaxed)),
            count: cumulative,
            buckets,
        }
    }
}

/// A counter with `N` labels whose values are given at each increment, for events rarer than a
/// record (a stream's end, a query, a console request); the sum over all values is readable.
/// Clones count into the same series and the same total.
#[derive(Clone, Debug)]
pub(crate) struct CounterVec<const N: usize> {
    registry: Registry,
    series: Series,
    labels: [&'static str; N],
    total: Arc<AtomicU64>,
}

impl<const N: usize> CounterVec<N> {
    /// The family `series` with label names `labels`, registered in `registry`.
    pub(crate) fn register(registry: &Registry, series: Series, labels: [&'static str; N]) -> Self {
        registry.describe_counter(series);
        CounterVec {
            registry: registry.clone(),
            series,
            labels,
            total: Arc::default(),
        }
    }

    /// Adds `n` to the series with these label values.
    pub(crate) fn increment(&self, values: [&str; N], n: u64) {
        let labels = self
            .labels
            .iter()
            .zip(values)
            .map(|(key, value)| Label::new(*key, value.to_owned()))
            .collect();
        self.registry.counter(self.series, labels).increment(n);
        self.total.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds `n` to the series with these static label values, without allocating.
    pub(crate) fn increment_static(&self, values: [&'static str; N], n: u64) {
        self.registry
            .counter(self.series, static_labels(&self.labels, values))
            .increment(n);
        self.total.fetch_add(n, Ordering::Relaxed);
    }

    /// The sum over every label value since this process started.
    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

/// A gauge family with one label, whose handles are taken once by their owner.
#[derive(Debug)]
pub(crate) struct GaugeVec {
    registry: Registry,
    series: Series,
    label: &'static str,
}

impl GaugeVec {
    /// The family `series` with label name `label`, registered in `registry`.
    pub(crate) fn register(registry: &Registry, series: Series, label: &'static str) -> Self {
        registry.describe_gauge(series);
        GaugeVec {
            registry: registry.clone(),
            series,
            label,
        }
    }

    /// The handle of the series with this label value.
    pub(crate) fn handle(&self, value: &str) -> Gauge {
        Gauge::register(
            &self.registry,
            self.series,
            vec![Label::new(self.label, value.to_owned())],
        )
    }
}

/// A histogram family with labels given at each observation, for rare events.
#[derive(Debug)]
pub(crate) struct HistogramVec<const N: usize> {
    registry: Registry,
    series: Series,
    labels: [&'static str; N],
}

impl<const N: usize> HistogramVec<N> {
    /// The family `series` with label names `labels`, registered in `registry`.
    pub(crate) fn register(registry: &Registry, series: Series, labels: [&'static str; N]) -> Self {
        registry.describe_histogram(series);
        HistogramVec {
            registry: registry.clone(),
            series,
            labels,
        }
    }

    /// Records `value` in the series with these static label values.
    pub(crate) fn record(&self, values: [&'static str; N], value: f64) {
        self.registry
            .histogram(self.series, static_labels(&self.labels, values))
            .record(value);
    }
}

#[cfg(test)]
mod tests {
    use metrics::Unit;

    use super::*;

    #[test]
    fn a_histogram_reads_back_cumulative_buckets_like_prometheus() {
        let histogram = Histogram::register(
            &Registry::new(),
            Series::new("loghaul_test_seconds", Unit::Seconds, "test"),
            Vec::new(),
        );
        for value in [0.0005, 0.001, 0.005, 50.0] {
            histogram.record(value);
        }
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.count, 4);
        assert!((snapshot.sum - 50.0065).abs() < 1e-9, "{}", snapshot.sum);
        assert_eq!(snapshot.buckets[0], (0.001, 2));
        assert_eq!(snapshot.buckets[2], (0.005, 3));
        assert_eq!(snapshot.buckets.last(), Some(&(f64::INFINITY, 4)));
        let mut merged = HistogramSnapshot::default();
        merged.merge(&snapshot);
        merged.merge(&snapshot);
        assert_eq!(merged.count, 8);
        assert_eq!(merged.buckets[2], (0.005, 6));
    }

    #[test]
    fn gauges_and_counters_read_back_what_was_written() {
        let registry = Registry::new();
        let gauge = Gauge::register(
            &registry,
            Series::new("loghaul_test_gauge", Unit::Count, "test"),
            Vec::new(),
        );
        gauge.add(3.0);
        gauge.add(-1.0);
        assert_eq!(gauge.get(), 2.0);
        gauge.set(7.0);
        assert_eq!(gauge.get(), 7.0);
        let family = CounterVec::register(
            &registry,
            Series::new("loghaul_test_total", Unit::Count, "test"),
            ["outcome"],
        );
        family.increment_static(["ok"], 2);
        family.increment(["failed"], 1);
        assert_eq!(family.total(), 3);
    }
}
