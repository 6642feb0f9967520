//! The connections one HTTP listener holds, against its cap. Past the cap a new connection takes
//! the place of the connection that has been idle longest (no request in flight: none sent yet,
//! or kept alive since its last answer), which is closed; the new one is refused only when every
//! connection is serving a request.
//!
//! So connections that connect and send nothing cannot keep anyone out, a kubelet's probe
//! included, and nothing needs configuring for it: a probe sends its request as soon as it is
//! connected, and only `cap` connections arriving after it, while it still has not, could take
//! its place. A request in flight is never cut to make room.
//!
//! The list of connections is behind one lock per listener, taken when a connection opens and
//! closes; requests only touch their own connection's counters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::metrics::ListenerMetrics;

/// The connections of one listener.
#[derive(Debug)]
pub(crate) struct Slots {
    cap: usize,
    /// The listener's name, the `listener` label of its metrics.
    name: &'static str,
    metrics: Arc<ListenerMetrics>,
    /// What `idle_since` counts from.
    epoch: Instant,
    held: Mutex<Held>,
    /// Woken when the last connection closes.
    emptied: Notify,
}

#[derive(Debug, Default)]
struct Held {
    next_id: u64,
    connections: HashMap<u64, Arc<Activity>>,
    /// Connections told to make room that have not closed yet; they no longer count against the
    /// cap.
    leaving: usize,
}

impl Slots {
    /// Room for `cap` connections on the listener `name`, whose refusals and evictions are
    /// counted in `metrics`.
    pub(crate) fn new(cap: usize, name: &'static str, metrics: Arc<ListenerMetrics>) -> Arc<Slots> {
        Arc::new(Slots {
            cap,
            name,
            metrics,
            epoch: Instant::now(),
            held: Mutex::default(),
            emptied: Notify::new(),
        })
    }

    /// A slot for a new connection, making room if the listener is full; `None` (counted) when
    /// every connection has a request in flight.
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Slot> {
        let mut held = self.lock();
        if held.connections.len() - held.leaving >= self.cap {
            let victim = held
                .connections
                .values()
                .filter(|activity| !activity.leave.is_cancelled() && activity.is_idle())
                .min_by_key(|activity| activity.idle_since.load(Ordering::Relaxed))
                .cloned();
            let Some(victim) = victim else {
                self.metrics.refused.increment_static([self.name], 1);
                return None;
            };
            victim.leave.cancel();
            held.leaving += 1;
            self.metrics.evicted.increment_static([self.name], 1);
        }
        let id = held.next_id;
        held.next_id += 1;
        let activity = Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(self.nanos()),
            leave: CancellationToken::new(),
            slots: Arc::downgrade(self),
        });
        held.connections.insert(id, Arc::clone(&activity));
        Some(Slot {
            slots: Arc::clone(self),
            id,
            activity,
        })
    }

    /// Waits until every connection has closed.
    pub(crate) async fn closed(&self) {
        loop {
            let emptied = self.emptied.notified();
            tokio::pin!(emptied);
            emptied.as_mut().enable();
            if self.lock().connections.is_empty() {
                return;
            }
            emptied.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn nanos(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// A connection's place on its listener; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Arc<Slots>,
    id: u64,
    activity: Arc<Activity>,
}

impl Slot {
    /// What the connection is doing, for its requests to update.
    pub(crate) fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.lock();
        if let Some(activity) = held.connections.remove(&self.id) {
            if activity.leave.is_cancelled() {
                held.leaving -= 1;
            }
        }
        if held.connections.is_empty() {
            self.slots.emptied.notify_waiters();
        }
    }
}

/// What one connection is doing: its requests in flight, since when it has had none, and
/// whether it was told to make room.
#[derive(Debug)]
pub(crate) struct Activity {
    in_flight: AtomicUsize,
    /// When its last request ended (or it opened), in nanoseconds since the listener's epoch.
    idle_since: AtomicU64,
    leave: CancellationToken,
    slots: std::sync::Weak<Slots>,
}

impl Activity {
    /// Marks a request in flight until the returned guard is dropped (with its answer's body).
    pub(crate) fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(self))
    }

    /// True while no request is in flight.
    pub(crate) fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// Completes once the connection is told to make room for a newer one.
    pub(crate) async fn told_to_leave(&self) {
        self.leave.cancelled().await;
    }
}

/// A request in flight on its connection.
#[derive(Debug)]
pub(crate) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let activity = &self.0;
        if let Some(slots) = activity.slots.upgrade() {
            activity.idle_since.store(slots.nanos(), Ordering::Relaxed);
        }
        activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observability::metrics::Registry;

    fn slots(cap: usize) -> Arc<Slots> {
        Slots::new(
            cap,
            "test",
            Arc::new(ListenerMetrics::register(&Registry::new())),
        )
    }

    #[test]
    fn past_the_cap_the_connection_idle_longest_makes_room() {
        let slots = slots(2);
        let first = slots.admit().unwrap();
        let second = slots.admit().unwrap();
        // The first answered a request after the second opened: the second is idle longest.
        drop(first.activity().begin());
        let third = slots.admit().expect("an idle connection makes room");
        assert!(second.activity().leave.is_cancelled());
        assert!(!first.activity().leave.is_cancelled());
        // Told to leave, the second no longer counts; the first is idle longest now.
        let fourth = slots.admit().unwrap();
        assert!(first.activity().leave.is_cancelled());
        drop((first, second));
        assert_eq!(slots.lock().connections.len(), 2);
        assert_eq!(slots.lock().leaving, 0);
        drop((third, fourth));
        assert!(slots.lock().connections.is_empty());
        assert_eq!(slots.metrics.evicted.total(), 2);
    }

    #[test]
    fn a_connection_with_a_request_in_flight_is_never_told_to_leave() {
        let slots = slots(1);
        let serving = slots.admit().unwrap();
        let busy = serving.activity().begin();
        assert!(slots.admit().is_none(), "every connection is busy: refused");
        assert_eq!(slots.metrics.refused.total(), 1);
        assert!(!serving.activity().leave.is_cancelled());
        drop(busy);
        let next = slots.admit().expect("idle again, it makes room");
        assert!(serving.activity().leave.is_cancelled());
        drop(next);
    }

    #[tokio::test]
    async fn closed_waits_for_every_connection() {
        let slots = slots(4);
        let open = slots.admit().unwrap();
        let waiting = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slots.closed().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(open);
        waiting.await.unwrap();
    }
}
