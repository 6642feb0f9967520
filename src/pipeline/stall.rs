//! When a wait for room counts as stalled: a request waits for the budget or a shard's queue as
//! long as that resource keeps moving, and is refused only once it has not moved at all for the
//! whole `--enqueue-timeout`. A wall-clock deadline would refuse the 300th shipper of a fleet for
//! standing in line behind 299 others that were all being served.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// When a resource last moved: bytes came back to the budget, a chunk left a queue.
#[derive(Debug)]
pub(crate) struct Progress {
    base: Instant,
    /// Microseconds from `base` to the last move.
    last: AtomicU64,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            base: Instant::now(),
            last: AtomicU64::new(0),
        }
    }
}

impl Progress {
    /// Records that the resource moved now.
    pub(crate) fn mark(&self) {
        let micros = u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.last.fetch_max(micros, Ordering::Relaxed);
    }

    /// When the resource last moved (its creation, if never).
    pub(crate) fn last(&self) -> Instant {
        self.base + Duration::from_micros(self.last.load(Ordering::Relaxed))
    }
}

/// A wait that ended because nothing moved for the whole timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stalled {
    /// How long the waiter waited in all.
    pub waited: Duration,
}

/// Runs `wait` until it completes, or until `progress` has not moved for `timeout` since the later
/// of the wait's start and its last move. Dropping `wait` on a stall must be safe (cancel-safe).
pub(crate) async fn unless_stalled<F: Future>(
    wait: F,
    progress: &Progress,
    timeout: Duration,
) -> Result<F::Output, Stalled> {
    let started = Instant::now();
    let stalls_at = || started.max(progress.last()) + timeout;
    tokio::pin!(wait);
    loop {
        tokio::select! {
            biased;
            done = &mut wait => return Ok(done),
            () = tokio::time::sleep_until(stalls_at()) => {
                if Instant::now() >= stalls_at() {
                    return Err(Stalled { waited: started.elapsed() });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wait_is_refused_only_after_a_whole_timeout_without_progress() {
        let progress = Progress::default();
        let timeout = Duration::from_secs(5);
        // Moving every 4 s, the resource keeps a waiter of 60 s waiting rather than refusing it.
        let long_wait = tokio::time::sleep(Duration::from_secs(60));
        let moving = async {
            loop {
                tokio::time::sleep(Duration::from_secs(4)).await;
                progress.mark();
            }
        };
        let outcome = tokio::select! {
            outcome = unless_stalled(long_wait, &progress, timeout) => outcome,
            () = moving => unreachable!(),
        };
        assert_eq!(outcome, Ok(()));

        // Standing still, it refuses the next waiter once the timeout has passed since the later
        // of the wait's start and the last move.
        let started = Instant::now();
        let outcome = unless_stalled(std::future::pending::<()>(), &progress, timeout).await;
        assert_eq!(outcome, Err(Stalled { waited: timeout }));
        assert_eq!(started.elapsed(), timeout);
    }
}
