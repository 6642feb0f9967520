//! The service's series: a [`Registry`] per server, and the handles its subsystems register in
//! it. Each subsystem declares its own series, help texts and labels next to the code that emits
//! them, in a struct built once with the server and handed to that code; no function reaches a
//! process-wide recorder.
//!
//! Names follow Prometheus conventions (`loghaul_` prefix, `_total`, `_seconds`, `_bytes`); labels
//! are bounded by construction: `shard` by the shard count, `tenant` by the configured keys,
//! `reason`/`kind`/`resource`/`outcome`/`trigger`/`protocol` by enums in the code, `listener` by the
//! three HTTP listeners. Series a record passes through (per tenant, per shard) are resolved once,
//! so the hot path looks nothing up by name.

pub(crate) mod handles;
pub(crate) mod registry;
pub(crate) mod series;

pub(crate) use handles::{
    Counter, CounterVec, Gauge, GaugeVec, Histogram, HistogramSnapshot, HistogramVec,
};
pub(crate) use registry::Registry;
pub(crate) use series::Series;

#[cfg(test)]
mod tests {
    use metrics::Unit;

    use super::*;

    #[test]
    fn a_registry_renders_exactly_what_its_own_handles_counted() {
        let registry = Registry::new();
        let calls = CounterVec::register(
            &registry,
            Series::new(
                "loghaul_test_calls_total",
                Unit::Count,
                "Calls, by outcome.",
            ),
            ["outcome"],
        );
        calls.increment_static(["ok"], 2);
        calls.increment(["failed"], 1);
        let open = Gauge::register(
            &registry,
            Series::new("loghaul_test_open", Unit::Count, "Open now."),
            Vec::new(),
        );
        open.set(3.0);
        let took = Histogram::register(
            &registry,
            Series::new("loghaul_test_seconds", Unit::Seconds, "Time taken."),
            Vec::new(),
        );
        took.record(0.02);
        // Another registry in the same process counts apart: the numbers below are exact.
        let other = Registry::new();
        CounterVec::register(
            &other,
            Series::new(
                "loghaul_test_calls_total",
                Unit::Count,
                "Calls, by outcome.",
            ),
            ["outcome"],
        )
        .increment_static(["ok"], 40);

        let text = registry.render();
        for line in [
            "# HELP loghaul_test_calls_total Calls, by outcome.",
            "loghaul_test_calls_total{outcome=\"ok\"} 2",
            "loghaul_test_calls_total{outcome=\"failed\"} 1",
            "# HELP loghaul_test_open Open now.",
            "loghaul_test_open 3",
            "loghaul_test_seconds_bucket{le=\"0.01\"} 0",
            "loghaul_test_seconds_bucket{le=\"0.025\"} 1",
            "loghaul_test_seconds_count 1",
        ] {
            assert!(text.lines().any(|got| got == line), "{line} in\n{text}");
        }
        assert!(other
            .render()
            .contains("loghaul_test_calls_total{outcome=\"ok\"} 40"));
    }
}
