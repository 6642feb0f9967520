//! The health snapshot the console's Health view samples every few seconds: the service's own
//! Prometheus metrics (the same numbers `/metrics` shows), read back from the recorder and
//! summed over their labels, plus readiness and the storage backend. Counters and histogram sums
//! are cumulative; the page turns successive samples into rates and per-interval means.

use std::collections::BTreeMap;
use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{json, Value};

use crate::observability::readiness::Readiness;
use crate::pipeline::Ingress;

/// Counters of the caller's own records, by the name the page knows them by: summed over the
/// samples labelled with the caller's tenant, so that no tenant sees another's traffic.
const TENANT_COUNTERS: [(&str, &str); 5] = [
    ("received", "loghaul_records_received_total"),
    ("committed", "loghaul_records_committed_total"),
    ("rejected", "loghaul_records_rejected_total"),
    ("failed", "loghaul_records_failed_total"),
    ("rate_limited", "loghaul_rate_limited_total"),
];

/// Counters of the pipeline itself, shared by every tenant and summed over their labels.
const PIPELINE_COUNTERS: [(&str, &str); 2] = [
    (
        "backpressure_timeouts",
        "loghaul_backpressure_timeouts_total",
    ),
    ("insert_errors", "loghaul_insert_errors_total"),
];

/// Histograms (sum, count and cumulative buckets, summed over shards).
const HISTOGRAMS: [(&str, &str); 3] = [
    ("batch_rows", "loghaul_batch_rows"),
    ("flush_seconds", "loghaul_flush_duration_seconds"),
    (
        "backpressure_wait_seconds",
        "loghaul_backpressure_wait_seconds",
    ),
];

/// Gauges without labels.
const GAUGES: [(&str, &str); 4] = [
    ("buffered_bytes", "loghaul_buffered_bytes"),
    ("buffered_bytes_limit", "loghaul_buffered_bytes_limit"),
    ("active_streams", "loghaul_active_streams"),
    ("tail_subscribers", "loghaul_tail_subscribers"),
];

/// What the snapshot is taken from.
#[derive(Clone)]
pub struct HealthSource {
    /// The process's metrics recorder.
    pub metrics: PrometheusHandle,
    /// Readiness flags.
    pub readiness: Arc<Readiness>,
    /// The pipeline, whose queue gauges are sampled on demand.
    pub ingress: Ingress,
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
}

impl HealthSource {
    /// The snapshot as JSON, as `tenant` may see it: its own records' counters and the shared
    /// pipeline's health.
    pub fn snapshot(&self, tenant: &str) -> Value {
        self.ingress.sample_gauges();
        let samples = parse(&self.metrics.render());
        let sum = |name: &str| -> f64 {
            samples
                .iter()
                .filter(|sample| sample.name == name)
                .map(|sample| sample.value)
                // Not `sum()`: an empty float sum is -0.0, which JSON and the page show as "-0".
                .fold(0.0, |total, value| total + value)
        };
        let tenant_sum = |name: &str| -> f64 {
            samples
                .iter()
                .filter(|sample| sample.name == name && sample.label("tenant") == Some(tenant))
                .map(|sample| sample.value)
                .fold(0.0, |total, value| total + value)
        };
        let counters: serde_json::Map<String, Value> = TENANT_COUNTERS
            .iter()
            .map(|(key, name)| ((*key).to_owned(), json!(tenant_sum(name))))
            .chain(
                PIPELINE_COUNTERS
                    .iter()
                    .map(|(key, name)| ((*key).to_owned(), json!(sum(name)))),
            )
            .collect();
        let gauges: serde_json::Map<String, Value> = GAUGES
            .iter()
            .map(|(key, name)| ((*key).to_owned(), json!(sum(name))))
            .collect();
        let histograms: serde_json::Map<String, Value> = HISTOGRAMS
            .iter()
            .map(|(key, name)| {
                let mut buckets: BTreeMap<String, (f64, f64)> = BTreeMap::new();
                let bucket_name = format!("{name}_bucket");
                for sample in samples.iter().filter(|sample| sample.name == bucket_name) {
                    let Some(le) = sample.label("le") else {
                        continue;
                    };
                    let bound = if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().unwrap_or(f64::NAN)
                    };
                    buckets.entry(le.to_owned()).or_insert((bound, 0.0)).1 += sample.value;
                }
                let mut buckets: Vec<(f64, f64)> = buckets
                    .into_values()
                    .filter(|(bound, _)| !bound.is_nan())
                    .collect();
                buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
                let buckets: Vec<Value> = buckets
                    .into_iter()
                    .map(|(bound, count)| {
                        let bound = if bound.is_finite() {
                            json!(bound)
                        } else {
                            json!("+Inf")
                        };
                        json!([bound, count])
                    })
                    .collect();
                let value = json!({
                    "sum": sum(&format!("{name}_sum")),
                    "count": sum(&format!("{name}_count")),
                    "buckets": buckets,
                });
                ((*key).to_owned(), value)
            })
            .collect();
        let mut shards: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for sample in &samples {
            let slot = match sample.name.as_str() {
                "loghaul_queue_depth" => 0,
                "loghaul_queue_capacity" => 1,
                _ => continue,
            };
            let Some(shard) = sample.label("shard").and_then(|shard| shard.parse().ok()) else {
                continue;
            };
            let entry = shards.entry(shard).or_default();
            if slot == 0 {
                entry.0 += sample.value;
            } else {
                entry.1 += sample.value;
            }
        }
        let shards: Vec<Value> = shards
            .into_iter()
            .map(|(shard, (depth, capacity))| json!({"shard": shard, "depth": depth, "capacity": capacity}))
            .collect();
        let readiness = &self.readiness;
        json!({
            "time_ms": chrono::Utc::now().timestamp_millis(),
            "ready": readiness.is_ready(),
            "store_up": readiness.store_up(),
            "draining": readiness.draining(),
            "backend": self.backend,
            "counters": counters,
            "gauges": gauges,
            "histograms": histograms,
            "shards": shards,
        })
    }
}

/// One line of the Prometheus text format.
#[derive(Debug, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

impl Sample {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }
}

/// Parses the text exposition format as the exporter writes it (no timestamps); lines it cannot
/// read are skipped, since a missing series only leaves a gap in a chart.
fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().ok()?,
    };
    let Some((name, rest)) = series.split_once('{') else {
        return Some(Sample {
            name: series.to_owned(),
            labels: Vec::new(),
            value,
        });
    };
    let body = rest.strip_suffix('}')?;
    let mut labels = Vec::new();
    let mut chars = body.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        if chars.next() != Some('"') {
            return None;
        }
        let mut label = String::new();
        loop {
            match chars.next()? {
                '\\' => match chars.next()? {
                    'n' => label.push('\n'),
                    other => label.push(other),
                },
                '"' => break,
                other => label.push(other),
            }
        }
        labels.push((key.trim_start_matches(',').to_owned(), label));
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_exposition_format_with_spaces_and_escapes_in_labels() {
        let text = "# HELP x y\nloghaul_records_received_total 42\nloghaul_backpressure_timeouts_total{resource=\"shard queue\"} 3\nloghaul_batch_rows_bucket{shard=\"1\",le=\"+Inf\"} 7\nweird{a=\"q\\\"uote\"} 1.5\n";
        let samples = parse(text);
        assert_eq!(samples.len(), 4);
        assert_eq!(samples[0].value, 42.0);
        assert_eq!(samples[1].label("resource"), Some("shard queue"));
        assert_eq!(samples[2].label("shard"), Some("1"));
        assert_eq!(samples[2].label("le"), Some("+Inf"));
        assert_eq!(samples[3].label("a"), Some("q\"uote"));
        assert_eq!(samples[3].value, 1.5);
        assert!(parse_line("broken{a=1} 2").is_none());
    }
}
