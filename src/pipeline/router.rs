//! Which shard records go to, chosen as the less loaded of two random shards ("power of two
//! choices"), which spreads load nearly as well as scanning every shard without touching them all.
//! A request's single chunk goes to the shorter queue. A Push stream is pinned to one shard for
//! its life (order within a stream is kept), the one with fewer streams pinned: the queues' depth
//! at the instant a stream starts says nothing of the load it brings, and a fleet of shippers that
//! connect together would all read the same momentary depth and pile onto one shard.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

/// The number of streams pinned to each shard.
pub(crate) type PinCounts = Arc<[AtomicUsize]>;

/// A stream's place on its shard, given back when the stream ends.
#[derive(Debug)]
pub struct ShardPin {
    counts: PinCounts,
    shard: usize,
}

impl ShardPin {
    /// The shard.
    pub fn shard(&self) -> usize {
        self.shard
    }
}

impl Drop for ShardPin {
    fn drop(&mut self) {
        self.counts[self.shard].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Pins a new stream to the one of two random shards with fewer streams pinned.
pub(crate) fn pin_stream(counts: &PinCounts) -> ShardPin {
    let pinned = |shard: usize| counts[shard].load(Ordering::Relaxed);
    let shard = less_loaded(counts.len(), |first, second| pinned(second) < pinned(first));
    counts[shard].fetch_add(1, Ordering::Relaxed);
    ShardPin {
        counts: Arc::clone(counts),
        shard,
    }
}

/// Picks the less loaded of two random queues.
pub(crate) fn pick_shard<T>(queues: &[mpsc::Sender<T>]) -> usize {
    // `capacity()` is the free room: more room means less loaded.
    less_loaded(queues.len(), |first, second| {
        queues[second].capacity() > queues[first].capacity()
    })
}

/// Of two random shards out of `count`, the second when `lighter(first, second)` says it is the
/// less loaded, else the first.
fn less_loaded(count: usize, lighter: impl Fn(usize, usize) -> bool) -> usize {
    match count {
        0 => panic!("a pipeline has at least one shard"),
        1 => 0,
        count => {
            let first = fastrand::usize(..count);
            let mut second = fastrand::usize(..count - 1);
            if second >= first {
                second += 1;
            }
            if lighter(first, second) {
                second
            } else {
                first
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_shard_is_always_chosen() {
        let (tx, _rx) = mpsc::channel::<u8>(4);
        assert_eq!(pick_shard(&[tx]), 0);
    }

    #[test]
    fn streams_that_start_together_spread_evenly_and_give_their_place_back() {
        let counts: PinCounts = (0..2).map(|_| AtomicUsize::new(0)).collect();
        let pins: Vec<ShardPin> = (0..1024).map(|_| pin_stream(&counts)).collect();
        let on = |shard: usize| pins.iter().filter(|pin| pin.shard() == shard).count();
        assert_eq!((on(0), on(1)), (512, 512));
        drop(pins);
        assert_eq!(
            counts[0].load(Ordering::Relaxed) + counts[1].load(Ordering::Relaxed),
            0
        );
    }

    #[tokio::test]
    async fn a_full_queue_is_avoided_when_it_is_one_of_the_two() {
        let (full, _full_rx) = mpsc::channel::<u8>(2);
        let (empty, _empty_rx) = mpsc::channel::<u8>(2);
        full.send(1).await.unwrap();
        full.send(2).await.unwrap();
        let queues = [full, empty];
        for _ in 0..50 {
            assert_eq!(pick_shard(&queues), 1);
        }
    }
}
