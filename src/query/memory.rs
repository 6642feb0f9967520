//! How much memory reads may hold. Each read is charged for what it builds, as it builds it: a
//! metric query for each series (its points and labels), a log query for each line it keeps, a
//! page for the records it may hold, and an answer for its bytes until they are handed to the
//! connection. Two bounds apply: `--max-query-bytes` to one read, and `--max-read-bytes` to the
//! reads of every tenant together. A charge past either is refused, and the read stops there
//! rather than building the rest first.
//!
//! The reads' total is one atomic counter, so charging takes no lock; a read's charge is given
//! back when its [`ReadCharge`] is dropped, however the read ends (answered, refused, timed out,
//! or its client gone).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::metrics::QueryMetrics;
use crate::config::ByteSize;
use crate::error::QueryError;
use crate::observability::metrics::{CounterVec, Gauge};

/// The two bounds, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MemoryLimits {
    /// What one read may hold (`--max-query-bytes`).
    pub per_read: usize,
    /// What every read together may hold (`--max-read-bytes`).
    pub all_reads: usize,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        MemoryLimits {
            per_read: 64 << 20,
            all_reads: 256 << 20,
        }
    }
}

/// The memory every read of the process holds, against its bounds.
#[derive(Debug)]
pub(crate) struct ReadMemory {
    limits: MemoryLimits,
    held: AtomicUsize,
    /// `loghaul_read_memory_bytes`: what `held` says.
    held_gauge: Gauge,
    refusals: CounterVec<2>,
}

impl ReadMemory {
    /// Nothing held yet, within `limits`, shown and refused in `metrics`.
    pub(crate) fn new(limits: MemoryLimits, metrics: &QueryMetrics) -> Self {
        ReadMemory {
            limits,
            held: AtomicUsize::new(0),
            held_gauge: metrics.read_memory_bytes.clone(),
            refusals: metrics.read_memory_refusals.clone(),
        }
    }

    /// Bytes every read holds now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// An empty charge for one read of `tenant`.
    pub(crate) fn read(self: &Arc<Self>, tenant: &Arc<str>) -> ReadCharge {
        ReadCharge {
            memory: Arc::clone(self),
            tenant: Arc::clone(tenant),
            held: 0,
            read: Arc::new(AtomicUsize::new(0)),
            counting: true,
            part: false,
        }
    }

    /// Takes `bytes` from the reads' total, unless that would pass `--max-read-bytes`.
    fn take(&self, bytes: usize) -> bool {
        let all = self.limits.all_reads;
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(bytes).filter(|total| *total <= all)
            })
            .is_ok()
    }
}

/// What one read holds; given back when dropped.
#[derive(Debug)]
pub(crate) struct ReadCharge {
    memory: Arc<ReadMemory>,
    tenant: Arc<str>,
    /// What this charge holds.
    held: usize,
    /// What the read holds in all: this charge and its parts ([`ReadCharge::part`]) together,
    /// the figure `--max-query-bytes` bounds.
    read: Arc<AtomicUsize>,
    /// Whether a refusal of `--max-query-bytes` is counted: not while the read would try again
    /// in smaller pieces.
    counting: bool,
    /// A part of a read ([`ReadCharge::part`]): neither of its refusals is counted, as the read
    /// tries again without parts and counts its own.
    part: bool,
}

impl ReadCharge {
    /// Charges `bytes` more, or refuses them (counted in `loghaul_read_memory_refusals_total`)
    /// when the read would pass `--max-query-bytes` or the reads together `--max-read-bytes`.
    /// A refused charge holds nothing more.
    pub(crate) fn charge(&mut self, bytes: usize) -> Result<(), QueryError> {
        let limits = self.memory.limits;
        let fits = self
            .read
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(bytes)
                    .filter(|total| *total <= limits.per_read)
            })
            .is_ok();
        if !fits {
            let err = QueryError::ReadTooLarge {
                limit: ByteSize(limits.per_read as u64),
            };
            return Err(if self.counting {
                self.refuse("query", err)
            } else {
                err
            });
        }
        if !self.memory.take(bytes) {
            self.read.fetch_sub(bytes, Ordering::Relaxed);
            let err = QueryError::ReadMemoryFull {
                limit: ByteSize(limits.all_reads as u64),
            };
            return Err(if self.part {
                err
            } else {
                self.refuse("all_reads", err)
            });
        }
        self.held += bytes;
        self.memory.held_gauge.add(bytes as f64);
        Ok(())
    }

    /// Gives back `bytes` (at most what the read holds) of memory the read no longer has.
    pub(crate) fn release(&mut self, bytes: usize) {
        let bytes = bytes.min(self.held);
        if bytes == 0 {
            return;
        }
        self.held -= bytes;
        self.read.fetch_sub(bytes, Ordering::Relaxed);
        self.memory.held.fetch_sub(bytes, Ordering::Relaxed);
        self.memory.held_gauge.add(-(bytes as f64));
    }

    /// Bytes this read holds.
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// An empty charge for a part of this read that runs beside the rest (one read of a metric
    /// query whose reads run at once): what the parts hold together is bounded as one read's, and
    /// a part's refusal of `--max-query-bytes` is not counted, as the read tries again without
    /// parts ([`ReadCharge::absorb`] takes back what a part made); so is its refusal of
    /// `--max-read-bytes`, which the read, holding less without parts, may not meet again.
    pub(crate) fn part(&self) -> ReadCharge {
        ReadCharge {
            memory: Arc::clone(&self.memory),
            tenant: Arc::clone(&self.tenant),
            held: 0,
            read: Arc::clone(&self.read),
            counting: false,
            part: true,
        }
    }

    /// Takes over what `part` (made by [`ReadCharge::part`]) holds.
    pub(crate) fn absorb(&mut self, mut part: ReadCharge) {
        debug_assert!(
            Arc::ptr_eq(&self.read, &part.read),
            "a part of another read"
        );
        self.held += std::mem::take(&mut part.held);
    }

    /// Whether a refusal of `--max-query-bytes` is counted from now on; a read that will try
    /// again in smaller pieces when refused counts only the refusal it gives up on.
    pub(crate) fn count_refusals(&mut self, counting: bool) {
        self.counting = counting;
    }

    fn refuse(&self, limit: &'static str, err: QueryError) -> QueryError {
        self.memory.refusals.increment([limit, &self.tenant], 1);
        err
    }
}

impl Drop for ReadCharge {
    fn drop(&mut self) {
        self.release(self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observability::metrics::Registry;

    fn memory(per_read: usize, all_reads: usize) -> Arc<ReadMemory> {
        let metrics = QueryMetrics::register(&Registry::new());
        Arc::new(ReadMemory::new(
            MemoryLimits {
                per_read,
                all_reads,
            },
            &metrics,
        ))
    }

    #[test]
    fn a_parts_refusals_are_left_for_the_read_to_count() {
        let registry = Registry::new();
        let metrics = QueryMetrics::register(&registry);
        let memory = Arc::new(ReadMemory::new(
            MemoryLimits {
                per_read: 100,
                all_reads: 50,
            },
            &metrics,
        ));
        let tenant: Arc<str> = Arc::from("t");
        let mut read = memory.read(&tenant);
        let mut part = read.part();
        let err = part.charge(60).unwrap_err();
        assert!(matches!(err, QueryError::ReadMemoryFull { .. }), "{err}");
        assert!(part.charge(101).is_err());
        assert!(!registry
            .render()
            .contains("loghaul_read_memory_refusals_total{"));
        assert!(read.charge(60).is_err());
        assert!(
            registry
                .render()
                .contains(r#"loghaul_read_memory_refusals_total{limit="all_reads",tenant="t"} 1"#),
            "{}",
            registry.render()
        );
    }

    #[test]
    fn a_read_is_refused_past_its_own_bound_and_holds_nothing_more() {
        let memory = memory(100, 1000);
        let tenant: Arc<str> = Arc::from("t");
        let mut read = memory.read(&tenant);
        read.charge(60).unwrap();
        let err = read.charge(41).unwrap_err();
        assert!(matches!(err, QueryError::ReadTooLarge { .. }), "{err}");
        assert!(err.to_string().contains("(--max-query-bytes)"), "{err}");
        assert_eq!((read.held(), memory.held()), (60, 60));
        read.charge(40).unwrap();
        read.release(30);
        assert_eq!((read.held(), memory.held()), (70, 70));
        drop(read);
        assert_eq!(memory.held(), 0, "a dropped read gives back all it held");
    }

    #[test]
    fn reads_together_are_refused_past_the_server_bound_until_one_gives_back() {
        let memory = memory(100, 150);
        let tenant: Arc<str> = Arc::from("t");
        let mut first = memory.read(&tenant);
        let mut second = memory.read(&tenant);
        first.charge(100).unwrap();
        let err = second.charge(60).unwrap_err();
        assert!(matches!(err, QueryError::ReadMemoryFull { .. }), "{err}");
        assert!(err.to_string().contains("(--max-read-bytes)"), "{err}");
        assert_eq!(second.held(), 0);
        second.charge(50).unwrap();
        drop(first);
        second.charge(50).unwrap();
        assert_eq!(memory.held(), 100);
        second.release(1000);
        assert_eq!(
            memory.held(),
            0,
            "a release gives back no more than was held"
        );
    }

    #[test]
    fn the_parts_of_a_read_are_bounded_together_and_given_back_with_it() {
        let memory = memory(100, 1000);
        let tenant: Arc<str> = Arc::from("t");
        let mut read = memory.read(&tenant);
        read.charge(30).unwrap();
        let (mut left, mut right) = (read.part(), read.part());
        left.charge(40).unwrap();
        let err = right.charge(31).unwrap_err();
        assert!(matches!(err, QueryError::ReadTooLarge { .. }), "{err}");
        right.charge(30).unwrap();
        drop(left);
        assert_eq!(
            (read.held(), memory.held()),
            (30, 60),
            "a dropped part gives back its own"
        );
        read.absorb(right);
        assert_eq!((read.held(), memory.held()), (60, 60));
        read.charge(40).unwrap();
        assert!(read.charge(1).is_err(), "what was absorbed still counts");
        drop(read);
        assert_eq!(memory.held(), 0);
    }

    #[test]
    fn concurrent_reads_never_pass_the_server_bound_together() {
        let memory = memory(1 << 20, 10_000);
        let tenant: Arc<str> = Arc::from("t");
        std::thread::scope(|scope| {
            for _ in 0..4 {
                let memory = &memory;
                let tenant = &tenant;
                scope.spawn(move || {
                    for _ in 0..1000 {
                        let mut read = memory.read(tenant);
                        while read.charge(700).is_ok() {
                            assert!(memory.held() <= 10_000);
                        }
                    }
                });
            }
        });
        assert_eq!(memory.held(), 0);
    }
}
