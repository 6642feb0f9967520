//! One tail subscriber's queue: the batches its poller has read and its client has not yet
//! taken, bounded in bytes (`--tail-queue-bytes`) rather than in messages, since a message may
//! hold one record or `--max-page-bytes` of them.
//!
//! A batch counts from when the poller queues it until the reader comes back for the next one:
//! the transport below (hyper's write buffer, the HTTP/2 stream, the WebSocket sink) takes a
//! message only once it has written most of the previous one, so asking for the next is the
//! sign that the last has left. The poller asks for room before it reads the database, so
//! nothing is read that does not fit; and when the subscriber is dropped as too slow, what it
//! had queued is released at once, leaving only the reason for its client to read.
//!
//! The lock is the subscriber's own, shared by its poller and its reader only.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use tokio::sync::Notify;
use tokio_stream::Stream;

use crate::error::QueryError;
use crate::observability::metrics::Gauge;
use crate::storage::StoredRow;

/// Bytes a batch is counted as: what its records take on the wire (the JSON and Loki forms are
/// of the same order).
pub(crate) fn batch_bytes(rows: &[StoredRow]) -> usize {
    rows.iter().map(StoredRow::wire_bytes).sum()
}

/// A new queue of at most `limit` bytes, whose bytes are added to `queued` while they wait: the
/// poller's end and the reader's.
pub(crate) fn queue(limit: usize, queued: Gauge) -> (QueueSender, QueueReceiver) {
    let shared = Arc::new(Shared {
        limit,
        queued,
        state: Mutex::new(State::default()),
        reader: AtomicWaker::new(),
        taken: Notify::new(),
    });
    (
        QueueSender {
            shared: Arc::clone(&shared),
        },
        QueueReceiver { shared },
    )
}

struct Shared {
    limit: usize,
    /// `loghaul_tail_queued_bytes`, shared by every subscriber.
    queued: Gauge,
    state: Mutex<State>,
    /// Wakes the reader when a batch or the end is queued.
    reader: AtomicWaker,
    /// Wakes the poller when the reader takes a batch or goes away.
    taken: Notify,
}

#[derive(Default)]
struct State {
    batches: VecDeque<(Vec<StoredRow>, usize)>,
    /// The queued batches' bytes plus `in_flight`.
    bytes: usize,
    /// The batch the reader took last, counted until it asks for the next.
    in_flight: usize,
    /// Why the subscriber ends, delivered after the queued batches.
    end: Option<QueryError>,
    /// The poller is done: after the batches and `end`, the stream ends.
    finished: bool,
    reader_gone: bool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding it leaves plain counters: still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    /// Counts `bytes` more in this queue and in `loghaul_tail_queued_bytes`.
    fn charge(&mut self, bytes: usize, queued: &Gauge) {
        self.bytes += bytes;
        queued.add(bytes as f64);
    }

    /// Counts `bytes` less.
    fn release(&mut self, bytes: usize, queued: &Gauge) {
        self.bytes -= bytes;
        queued.add(-(bytes as f64));
    }
}

/// Whether a subscriber has room for more.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// The bytes asked for are free.
    Free,
    /// The queue stayed without the room asked for through the whole wait.
    Stalled,
    /// The reader went away.
    ReaderGone,
}

/// The poller's end.
pub(crate) struct QueueSender {
    shared: Arc<Shared>,
}

impl QueueSender {
    /// The queue's bound in bytes.
    pub(crate) fn limit(&self) -> usize {
        self.shared.limit
    }

    /// Waits until at least `wanted` bytes are free, for up to `within`, or says why they are not.
    pub(crate) async fn room(&self, wanted: usize, within: Duration) -> Room {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let taken = self.shared.taken.notified();
            tokio::pin!(taken);
            // Registered before the state is read, so a take in between still wakes it.
            taken.as_mut().enable();
            {
                let state = self.shared.state();
                if state.reader_gone {
                    return Room::ReaderGone;
                }
                if self.shared.limit.saturating_sub(state.bytes) >= wanted {
                    return Room::Free;
                }
            }
            if tokio::time::timeout_at(deadline, taken).await.is_err() {
                return Room::Stalled;
            }
        }
    }

    /// Completes when the reader has gone away.
    pub(crate) async fn closed(&self) {
        loop {
            let taken = self.shared.taken.notified();
            tokio::pin!(taken);
            taken.as_mut().enable();
            if self.shared.state().reader_gone {
                return;
            }
            taken.await;
        }
    }

    /// Queues `rows`, which the caller read within the room it was given; false when the
    /// reader is gone.
    pub(crate) fn push(&self, rows: Vec<StoredRow>) -> bool {
        let bytes = batch_bytes(&rows);
        {
            let mut state = self.shared.state();
            if state.reader_gone {
                return false;
            }
            state.charge(bytes, &self.shared.queued);
            state.batches.push_back((rows, bytes));
        }
        self.shared.reader.wake();
        true
    }

    /// Ends the subscriber with `end` (none: the reader gets what is queued, then the end of the
    /// stream). When `discard`, what is queued is dropped first, so its memory is released now
    /// rather than when a client that stopped reading comes back.
    pub(crate) fn finish(self, end: Option<QueryError>, discard: bool) {
        {
            let mut state = self.shared.state();
            if discard {
                let queued: usize = state.batches.drain(..).map(|(_, bytes)| bytes).sum();
                state.release(queued, &self.shared.queued);
            }
            state.end = end;
            state.finished = true;
        }
        self.shared.reader.wake();
    }
}

impl Drop for QueueSender {
    fn drop(&mut self) {
        // A poller that panicked or was cancelled still ends its reader's stream.
        self.shared.state().finished = true;
        self.shared.reader.wake();
    }
}

/// The reader's end: the batches in order, then at most one error, then the end.
pub(crate) struct QueueReceiver {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for QueueReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueReceiver")
            .field("limit", &self.shared.limit)
            .finish_non_exhaustive()
    }
}

impl Stream for QueueReceiver {
    type Item = Result<Vec<StoredRow>, QueryError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let shared = &self.shared;
        let mut state = shared.state();
        // Asking for the next batch means the transport took the last one.
        let released = std::mem::take(&mut state.in_flight);
        if released > 0 {
            state.release(released, &shared.queued);
        }
        let next = match state.batches.pop_front() {
            Some((rows, bytes)) => {
                state.in_flight = bytes;
                Poll::Ready(Some(Ok(rows)))
            }
            None => match state.end.take() {
                Some(err) => Poll::Ready(Some(Err(err))),
                None if state.finished => Poll::Ready(None),
                None => {
                    // Registered under the lock the poller queues under: no batch slips by.
                    shared.reader.register(cx.waker());
                    Poll::Pending
                }
            },
        };
        drop(state);
        if released > 0 {
            shared.taken.notify_waiters();
        }
        next
    }
}

impl Drop for QueueReceiver {
    fn drop(&mut self) {
        {
            let mut state = self.shared.state();
            state.reader_gone = true;
            state.batches.clear();
            let held = state.bytes;
            state.release(held, &self.shared.queued);
            state.in_flight = 0;
        }
        self.shared.taken.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;
    use futures::FutureExt;
    use tokio_stream::StreamExt;

    use super::*;
    use crate::observability::metrics::Registry;
    use crate::query::metrics::QueryMetrics;

    /// A `loghaul_tail_queued_bytes` of the test's own.
    fn gauge() -> Gauge {
        QueryMetrics::register(&Registry::new()).tail_queued_bytes
    }

    fn rows(count: usize, message_bytes: usize) -> Vec<StoredRow> {
        let ts = DateTime::from_timestamp(0, 0).unwrap();
        (0..count)
            .map(|n| StoredRow {
                id: n as i64,
                ts,
                received_at: ts,
                severity: 9,
                service: "api".into(),
                message: "x".repeat(message_bytes),
                labels: "{}".into(),
                attributes: "{}".into(),
                trace_id: None,
                span_id: None,
            })
            .collect()
    }

    const NOW: Duration = Duration::ZERO;

    #[tokio::test]
    async fn a_batch_counts_until_the_reader_asks_for_the_next() {
        let queued = gauge();
        let (sender, mut receiver) = queue(10_000, queued.clone());
        let batch = rows(2, 1000);
        let bytes = batch_bytes(&batch);
        assert!(sender.push(batch));
        assert_eq!(queued.get(), bytes as f64);
        let free = 10_000 - bytes;
        assert_eq!(sender.room(free, NOW).await, Room::Free);
        assert_eq!(sender.room(free + 1, NOW).await, Room::Stalled);
        assert_eq!(receiver.next().await.unwrap().unwrap().len(), 2);
        // Taken, but the transport may still be writing it.
        assert_eq!(sender.room(free + 1, NOW).await, Room::Stalled);
        assert!(receiver.next().now_or_never().is_none(), "nothing more yet");
        assert_eq!(sender.room(10_000, NOW).await, Room::Free);
        sender.finish(None, false);
        assert!(receiver.next().await.is_none());
    }

    #[tokio::test]
    async fn a_full_queue_stalls_the_poller_until_the_reader_takes_a_batch() {
        let (sender, mut receiver) = queue(5_000, gauge());
        assert!(sender.push(rows(2, 1000)));
        assert!(sender.push(rows(2, 1000)));
        assert_eq!(
            sender.room(2_000, Duration::from_millis(20)).await,
            Room::Stalled
        );
        let (room, ()) = tokio::join!(sender.room(2_000, Duration::from_secs(10)), async {
            receiver.next().await.unwrap().unwrap();
            receiver.next().await.unwrap().unwrap();
        });
        assert_eq!(room, Room::Free);
    }

    #[tokio::test]
    async fn a_dropped_subscriber_releases_its_queue_and_keeps_the_reason() {
        let (sender, mut receiver) = queue(100_000, gauge());
        for _ in 0..3 {
            assert!(sender.push(rows(10, 1000)));
        }
        let in_flight = receiver.next().await.unwrap().unwrap();
        let shared = Arc::clone(&sender.shared);
        sender.finish(Some(QueryError::SubscriberTooSlow("test".into())), true);
        assert_eq!(shared.state().bytes, batch_bytes(&in_flight));
        let end = receiver.next().await.unwrap().unwrap_err();
        assert!(matches!(end, QueryError::SubscriberTooSlow(_)), "{end:?}");
        assert_eq!(shared.state().bytes, 0);
        assert!(receiver.next().await.is_none());
    }

    #[tokio::test]
    async fn the_poller_learns_when_the_reader_goes() {
        let (sender, receiver) = queue(100, gauge());
        let closed = tokio::spawn(async move {
            sender.closed().await;
            sender
        });
        drop(receiver);
        let sender = closed.await.unwrap();
        assert!(!sender.push(rows(1, 10)));
        assert_eq!(sender.room(0, NOW).await, Room::ReaderGone);
    }
}
