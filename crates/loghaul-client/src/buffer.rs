//! The shipper's bound: a count of records held (pushed and not yet acknowledged or given up),
//! taken without a lock; only a push that must wait for room touches a mutex.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What `push` does when the buffer is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FullPolicy {
    /// Drop the record being pushed and count it; `push` never waits.
    DropNewest,
    /// Wait up to this long for room, then drop the record and count it.
    Block(Duration),
}

/// Room for a bounded number of records.
#[derive(Debug)]
pub struct Slots {
    capacity: usize,
    used: AtomicUsize,
    waiters: AtomicUsize,
    closed: AtomicBool,
    lock: Mutex<()>,
    room: Condvar,
}

impl Slots {
    /// Room for `capacity` records.
    pub fn new(capacity: usize) -> Self {
        Slots {
            capacity,
            used: AtomicUsize::new(0),
            waiters: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            lock: Mutex::new(()),
            room: Condvar::new(),
        }
    }

    /// Records held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }

    /// Takes one slot if there is room, without waiting.
    pub fn try_take(&self) -> bool {
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                (used < self.capacity).then_some(used + 1)
            })
            .is_ok()
    }

    /// Takes one slot as the policy allows; false when the record must be dropped.
    pub fn take(&self, policy: FullPolicy) -> bool {
        if self.try_take() {
            return true;
        }
        match policy {
            FullPolicy::DropNewest => false,
            FullPolicy::Block(limit) => self.wait(limit),
        }
    }

    fn wait(&self, limit: Duration) -> bool {
        let deadline = Instant::now().checked_add(limit);
        // Registered before the retry under the lock, so a release in between sees a waiter and
        // notifies after we sleep (it takes the same lock): no lost wake-up.
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let taken = loop {
            if self.try_take() {
                break true;
            }
            if self.closed.load(Ordering::SeqCst) {
                break false;
            }
            let wait = match deadline {
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => break false,
                },
                None => Duration::from_secs(3600),
            };
            guard = self
                .room
                .wait_timeout(guard, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        };
        drop(guard);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        taken
    }

    /// Wakes every push waiting for room and makes it, and every later wait, give up.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.room.notify_all();
    }

    /// Gives back `count` slots, waking pushes that wait for room.
    pub fn release(&self, count: usize) {
        if count == 0 {
            return;
        }
        self.used.fetch_sub(count, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
            self.room.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn drop_newest_never_waits_and_refuses_past_capacity() {
        let slots = Slots::new(3);
        let taken = (0..5)
            .filter(|_| slots.take(FullPolicy::DropNewest))
            .count();
        assert_eq!((taken, slots.used()), (3, 3));
        slots.release(2);
        assert!(slots.take(FullPolicy::DropNewest));
        assert_eq!(slots.used(), 2);
    }

    #[test]
    fn block_waits_for_a_release_or_gives_up_at_its_limit() {
        let slots = Arc::new(Slots::new(1));
        assert!(slots.take(FullPolicy::DropNewest));
        let started = Instant::now();
        assert!(!slots.take(FullPolicy::Block(Duration::from_millis(50))));
        assert!(started.elapsed() >= Duration::from_millis(50));

        let releaser = {
            let slots = Arc::clone(&slots);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                slots.release(1);
            })
        };
        assert!(slots.take(FullPolicy::Block(Duration::from_secs(30))));
        releaser.join().unwrap();
        assert_eq!(slots.used(), 1);

        let closer = {
            let slots = Arc::clone(&slots);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                slots.close();
            })
        };
        assert!(
            !slots.take(FullPolicy::Block(Duration::MAX)),
            "close wakes the wait"
        );
        closer.join().unwrap();
    }
}
