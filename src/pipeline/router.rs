//! Which shard a stream's chunks go to: pinned for the stream's life (order within a stream is
//! kept), chosen as the less loaded of two random shards ("power of two choices"), which spreads
//! load nearly as well as scanning every queue without touching them all.

use tokio::sync::mpsc;

/// Picks the less loaded of two random queues.
pub fn pick_shard<T>(queues: &[mpsc::Sender<T>]) -> usize {
    match queues.len() {
        0 => panic!("a pipeline has at least one shard"),
        1 => 0,
        count => {
            let first = fastrand::usize(..count);
            let mut second = fastrand::usize(..count - 1);
            if second >= first {
                second += 1;
            }
            // `capacity()` is the free room: more room means less loaded.
            if queues[second].capacity() > queues[first].capacity() {
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
