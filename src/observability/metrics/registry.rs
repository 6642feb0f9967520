//! One server's recorder: the series its subsystems register, and the handle `/metrics` renders.
//! Nothing is installed as the `metrics` facade's global recorder, so two servers in a process
//! (tests start many) never see each other's numbers, and a test can own a registry of its own.

use std::sync::Arc;

use metrics::{Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use super::series::Series;

/// Buckets of every histogram named `…_seconds`.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Buckets of every histogram named `…_rows`.
const ROWS_BUCKETS: &[f64] = &[
    1.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 25000.0,
];

/// What the Prometheus recorder is told of each registration; it reads none of it.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// A Prometheus recorder of one's own, cheap to clone (clones share it).
#[derive(Clone, Debug)]
pub(crate) struct Registry {
    recorder: Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    /// An empty registry whose histograms get their buckets from their names' unit suffix.
    pub(crate) fn new() -> Registry {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
            .and_then(|builder| {
                builder.set_buckets_for_metric(Matcher::Suffix("_rows".into()), ROWS_BUCKETS)
            })
            .expect("bucket lists are non-empty constants")
            .build_recorder();
        let handle = recorder.handle();
        Registry {
            recorder: Arc::new(recorder),
            handle,
        }
    }

    /// The handle `/metrics` renders and runs the exporter's upkeep with.
    pub(crate) fn handle(&self) -> PrometheusHandle {
        self.handle.clone()
    }

    /// Every series registered here, in Prometheus's text format.
    pub(crate) fn render(&self) -> String {
        self.handle.render()
    }

    /// The buckets the exporter gives the histogram `name`, which its readable copy must share.
    pub(super) fn buckets(name: &str) -> &'static [f64] {
        debug_assert!(
            name.ends_with("_seconds") || name.ends_with("_rows"),
            "{name}: a histogram's name ends in the unit its buckets are for"
        );
        if name.ends_with("_rows") {
            ROWS_BUCKETS
        } else {
            SECONDS_BUCKETS
        }
    }

    pub(super) fn counter(&self, series: Series, labels: Vec<Label>) -> metrics::Counter {
        self.recorder
            .register_counter(&Key::from_parts(series.name, labels), &METADATA)
    }

    pub(super) fn gauge(&self, series: Series, labels: Vec<Label>) -> metrics::Gauge {
        self.recorder
            .register_gauge(&Key::from_parts(series.name, labels), &METADATA)
    }

    pub(super) fn histogram(&self, series: Series, labels: Vec<Label>) -> metrics::Histogram {
        self.recorder
            .register_histogram(&Key::from_parts(series.name, labels), &METADATA)
    }

    /// Gives `series` its `# HELP` line and unit, as a counter.
    pub(super) fn describe_counter(&self, series: Series) {
        self.recorder
            .describe_counter(series.name.into(), Some(series.unit), series.help.into());
    }

    /// The same, as a gauge.
    pub(super) fn describe_gauge(&self, series: Series) {
        self.recorder
            .describe_gauge(series.name.into(), Some(series.unit), series.help.into());
    }

    /// The same, as a histogram.
    pub(super) fn describe_histogram(&self, series: Series) {
        self.recorder
            .describe_histogram(series.name.into(), Some(series.unit), series.help.into());
    }
}
