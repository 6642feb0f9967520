//! The shipper's counters, updated with relaxed atomics and read as a snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters shared by the application threads and the shipper task.
#[derive(Debug, Default)]
pub struct Counters {
    pub(crate) pushed: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) sent: AtomicU64,
    pub(crate) chunks_sent: AtomicU64,
    pub(crate) acknowledged: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) duplicates: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) streams: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, value: u64) {
        counter.fetch_add(value, Ordering::Relaxed);
    }
}

/// What a shipper has done since it started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShipperStats {
    /// Records held now: pushed and not yet acknowledged, rejected or given up.
    pub buffered: u64,
    /// Records taken by `push`.
    pub pushed: u64,
    /// Records `push` refused because the buffer was full (or the shipper closed).
    pub dropped: u64,
    /// Records sent, counting every retry.
    pub sent: u64,
    /// Chunks sent, counting every retry.
    pub chunks_sent: u64,
    /// Records the server acknowledged as stored.
    pub acknowledged: u64,
    /// Records the server refused (see `Shipper::rejections`).
    pub rejected: u64,
    /// Acknowledged records of chunks the server had already stored: retries it did not store again.
    pub duplicates: u64,
    /// Chunks sent again after a failed or unanswered stream.
    pub retries: u64,
    /// Records given up: a failure retrying cannot fix, or still unacknowledged at the close deadline.
    pub failed: u64,
    /// Push streams opened.
    pub streams: u64,
}

impl Counters {
    /// A consistent-enough view: each counter is read once.
    pub fn snapshot(&self, buffered: usize) -> ShipperStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ShipperStats {
            buffered: buffered as u64,
            pushed: read(&self.pushed),
            dropped: read(&self.dropped),
            sent: read(&self.sent),
            chunks_sent: read(&self.chunks_sent),
            acknowledged: read(&self.acknowledged),
            rejected: read(&self.rejected),
            duplicates: read(&self.duplicates),
            retries: read(&self.retries),
            failed: read(&self.failed),
            streams: read(&self.streams),
        }
    }
}
