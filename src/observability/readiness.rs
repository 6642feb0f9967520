//! Whether the service should receive traffic: the store answers and the service is not draining.

use std::sync::atomic::{AtomicBool, Ordering};

use metrics::Unit;

use super::metrics::{Gauge, Registry, Series};

const STORE_UP: Series = Series::new(
    "loghaul_store_up",
    Unit::Count,
    "1 when the database answered the last write or probe, else 0.",
);
const READY: Series = Series::new(
    "loghaul_ready",
    Unit::Count,
    "1 when the service is ready for traffic, else 0.",
);

/// Shared readiness flags, written by the store probe, the writers and shutdown.
#[derive(Debug)]
pub(crate) struct Readiness {
    store_up: AtomicBool,
    draining: AtomicBool,
    /// `loghaul_store_up`, set when the flag changes.
    store_up_gauge: Gauge,
    /// `loghaul_ready`, set at each scrape.
    ready_gauge: Gauge,
}

impl Readiness {
    /// Ready, with its gauges registered in `registry`.
    pub(crate) fn new(registry: &Registry) -> Readiness {
        let readiness = Readiness {
            store_up: AtomicBool::new(true),
            draining: AtomicBool::new(false),
            store_up_gauge: Gauge::register(registry, STORE_UP, Vec::new()),
            ready_gauge: Gauge::register(registry, READY, Vec::new()),
        };
        // The gauge only moves when the flag flips: it starts where the flag does, up.
        readiness.store_up_gauge.set(1.0);
        readiness
    }

    /// Records whether the last contact with the store succeeded.
    pub(crate) fn set_store_up(&self, up: bool) {
        let was = self.store_up.swap(up, Ordering::Relaxed);
        if was != up {
            self.store_up_gauge.set(if up { 1.0 } else { 0.0 });
            if up {
                tracing::info!("the store answers again");
            } else {
                tracing::error!("the store is unreachable; readiness is off");
            }
        }
    }

    /// Marks the service as shutting down; it stays not-ready from then on.
    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// True when the store answered last time.
    pub(crate) fn store_up(&self) -> bool {
        self.store_up.load(Ordering::Relaxed)
    }

    /// True when the service is shutting down.
    pub(crate) fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Ready for traffic: the store is up and the service is not draining.
    pub(crate) fn is_ready(&self) -> bool {
        self.store_up() && !self.draining()
    }

    /// Sets `loghaul_ready` from [`Readiness::is_ready`], just before a scrape reads it.
    pub(crate) fn publish(&self) {
        self.ready_gauge
            .set(if self.is_ready() { 1.0 } else { 0.0 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_service_reports_its_store_up_until_a_contact_fails() {
        let registry = Registry::new();
        let readiness = Readiness::new(&registry);
        assert!(registry.render().contains("loghaul_store_up 1\n"));
        readiness.set_store_up(false);
        assert!(registry.render().contains("loghaul_store_up 0\n"));
        readiness.set_store_up(true);
        assert!(registry.render().contains("loghaul_store_up 1\n"));
    }
}
