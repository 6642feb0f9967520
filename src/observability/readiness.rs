//! Whether the service should receive traffic: the store answers and the service is not draining.

use std::sync::atomic::{AtomicBool, Ordering};

/// Shared readiness flags, written by the store probe, the writers and shutdown.
#[derive(Debug)]
pub(crate) struct Readiness {
    store_up: AtomicBool,
    draining: AtomicBool,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            store_up: AtomicBool::new(true),
            draining: AtomicBool::new(false),
        }
    }
}

impl Readiness {
    /// Records whether the last contact with the store succeeded.
    pub(crate) fn set_store_up(&self, up: bool) {
        let was = self.store_up.swap(up, Ordering::Relaxed);
        if was != up {
            super::metrics::metrics()
                .store_up
                .set(if up { 1.0 } else { 0.0 });
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
}
