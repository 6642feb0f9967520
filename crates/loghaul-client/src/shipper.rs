//! The shipper: takes records from any thread without blocking, batches them into chunks, sends
//! the chunks over one long-lived Push stream that it rotates so acknowledgements come back, and
//! sends again, with the same producer id and sequence, every chunk not acknowledged.
//!
//! It runs on a thread of its own with a single-threaded runtime, so it neither needs nor disturbs
//! the application's runtime, and its own transport logs never feed a tracing layer back into it.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::{Future, StreamExt};
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

use super::backoff::{is_retryable, told_delay, Backoff};
use super::buffer::{FullPolicy, Slots};
use super::codec::PreEncoded;
use super::stats::{Counters, ShipperStats};
use crate::deadline::sleep_until_some;
use loghaul_proto::api_key::request_with_key;
use loghaul_proto::trailers;
use loghaul_proto::v1::{LogRecord, PushRequest, PushResponse};

const PUSH_PATH: &str = "/loghaul.v1.LogIngest/Push";

/// Records taken from the application's channel per wake-up.
const RECEIVE_AT_ONCE: usize = 1024;

/// Rejections kept for [`Shipper::rejections`]; the `rejected` count stays exact beyond it.
const MAX_KEPT_REJECTIONS: usize = 1000;

thread_local! {
    /// Set on the shipper's own thread, whose events a tracing layer must not ship.
    pub(crate) static ON_SHIPPER_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// How a shipper batches, buffers, rotates and retries.
#[derive(Clone, Debug)]
pub struct ShipperConfig {
    /// A chunk is sealed at this many records.
    pub chunk_records: usize,
    /// A chunk is sealed at about this many encoded bytes (keep it under the server's
    /// `--max-request-bytes`).
    pub chunk_bytes: usize,
    /// A chunk is sealed when its first record has waited this long.
    pub linger: Duration,
    /// Records held at most: pushed and not yet acknowledged (retries included).
    pub buffer_records: usize,
    /// What `push` does when the buffer is full.
    pub when_full: FullPolicy,
    /// A stream is closed (and its acknowledgement awaited) after this many chunks…
    pub rotate_chunks: usize,
    /// …or this long after it opened, whichever comes first.
    pub rotate_after: Duration,
    /// Streams awaiting their acknowledgement at once.
    pub max_streams: usize,
    /// A stream not answered this long after it closed is abandoned and its chunks sent again.
    pub ack_timeout: Duration,
    /// First retry delay; doubles up to `max_backoff`.
    pub first_backoff: Duration,
    /// Longest retry delay (a server's RetryInfo may ask for longer and is honoured).
    pub max_backoff: Duration,
    /// Service name for records that name none.
    pub service: Option<String>,
}

impl Default for ShipperConfig {
    fn default() -> Self {
        ShipperConfig {
            chunk_records: 1000,
            chunk_bytes: 1024 * 1024,
            linger: Duration::from_millis(100),
            buffer_records: 100_000,
            when_full: FullPolicy::DropNewest,
            rotate_chunks: 32,
            rotate_after: Duration::from_secs(1),
            max_streams: 4,
            ack_timeout: Duration::from_secs(60),
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(30),
            service: None,
        }
    }
}

/// Why `push` did not take a record (it is counted in `dropped`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// The buffer was full (and stayed full for the `Block` time, under that policy).
    #[error("the shipper's buffer is full; the record was dropped")]
    Full,
    /// The shipper was closed.
    #[error("the shipper is closed; the record was dropped")]
    Closed,
}

/// A record the server refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordRejection {
    /// The record's number in push order, counting from 0.
    pub record: u64,
    /// The server's reason code and explanation.
    pub reason: String,
}

/// Handle to a running shipper; clones share it. Call [`Shipper::close`] before exiting, or
/// buffered records are lost.
#[derive(Clone, Debug)]
pub struct Shipper {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    slots: Slots,
    policy: FullPolicy,
    records: mpsc::UnboundedSender<LogRecord>,
    closed: AtomicBool,
    close: watch::Sender<Option<Instant>>,
    counters: Counters,
    rejections: Mutex<Vec<RecordRejection>>,
    last_error: Mutex<Option<String>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Shipper {
    /// Starts the shipper's thread; the endpoints are connected lazily (and again after
    /// failures), and several are balanced: each new stream goes to the least loaded replica
    /// whose connection is ready.
    pub(crate) fn start(
        endpoints: Vec<Endpoint>,
        api_key: Option<String>,
        config: ShipperConfig,
    ) -> std::io::Result<Shipper> {
        let (records, incoming) = mpsc::unbounded_channel();
        let (close, closing) = watch::channel(None);
        let shared = Arc::new(Shared {
            slots: Slots::new(config.buffer_records.max(1)),
            policy: config.when_full,
            records,
            closed: AtomicBool::new(false),
            close,
            counters: Counters::default(),
            rejections: Mutex::new(Vec::new()),
            last_error: Mutex::new(None),
            thread: Mutex::new(None),
        });
        let task_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("loghaul-shipper".into())
            .spawn(move || {
                ON_SHIPPER_THREAD.with(|flag| flag.set(true));
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime starts");
                runtime.block_on(async move {
                    let channel = match <[Endpoint; 1]>::try_from(endpoints) {
                        Ok([endpoint]) => endpoint.connect_lazy(),
                        Err(endpoints) => Channel::balance_list(endpoints.into_iter()),
                    };
                    let task = Task::new(channel, api_key, config, task_shared, incoming, closing);
                    task.run().await;
                });
            })?;
        *shared.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread);
        Ok(Shipper { shared })
    }

    /// Takes a record for shipping; never blocks under [`FullPolicy::DropNewest`], and at most
    /// the configured time under [`FullPolicy::Block`]. A record without a timestamp is stamped
    /// now, so a retry later does not move it in time.
    pub fn push(&self, mut record: LogRecord) -> Result<(), PushError> {
        let shared = &self.shared;
        if shared.closed.load(Ordering::Acquire) {
            Counters::add(&shared.counters.dropped, 1);
            return Err(PushError::Closed);
        }
        if !shared.slots.take(shared.policy) {
            Counters::add(&shared.counters.dropped, 1);
            if shared.closed.load(Ordering::Acquire) {
                return Err(PushError::Closed);
            }
            return Err(PushError::Full);
        }
        if record.timestamp.is_none() {
            record.timestamp = Some(prost_types::Timestamp::from(std::time::SystemTime::now()));
        }
        if shared.records.send(record).is_err() {
            shared.slots.release(1);
            Counters::add(&shared.counters.dropped, 1);
            return Err(PushError::Closed);
        }
        Counters::add(&shared.counters.pushed, 1);
        Ok(())
    }

    /// The counters now.
    pub fn stats(&self) -> ShipperStats {
        self.shared.counters.snapshot(self.shared.slots.used())
    }

    /// Records the server refused so far (the first 1000), with their push-order numbers.
    pub fn rejections(&self) -> Vec<RecordRejection> {
        self.shared
            .rejections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The last failure the shipper saw (a stream error or a refusal it gave up on), if any.
    pub fn last_error(&self) -> Option<String> {
        self.shared
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits (blocking this thread) until every record pushed so far is acknowledged, refused or
    /// given up, or `timeout` passes; true when nothing is left.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if self.shared.slots.used() == 0 {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Refuses every later record and wakes pushes waiting for room (they return
    /// [`PushError::Closed`]); what is buffered is still shipped, until [`Shipper::close`].
    pub fn stop_taking(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.slots.close();
    }

    /// Stops taking records, sends what is buffered, and waits (blocking this thread) up to
    /// `deadline` for the acknowledgements; records still unacknowledged then count as failed.
    /// Returns the final counters. Further calls (from any clone) return at once.
    pub fn close(&self, deadline: Duration) -> ShipperStats {
        self.stop_taking();
        let _ = self.shared.close.send(Some(Instant::now() + deadline));
        let thread = self
            .shared
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            if thread.join().is_err() {
                self.shared.set_error("the shipper thread panicked".into());
            }
        }
        self.stats()
    }

    /// [`Shipper::close`] for async code: waits on a blocking thread, not on the runtime.
    pub async fn close_async(&self, deadline: Duration) -> ShipperStats {
        let shipper = self.clone();
        match tokio::task::spawn_blocking(move || shipper.close(deadline)).await {
            Ok(stats) => stats,
            Err(_) => self.stats(),
        }
    }
}

impl Shared {
    fn set_error(&self, error: String) {
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(error);
    }
}

/// A sealed chunk, kept encoded until it is acknowledged.
#[derive(Debug)]
struct Sealed {
    sequence: u64,
    first_record: u64,
    records: usize,
    encoded: Bytes,
    sent_before: bool,
}

/// The stream chunks are being written to.
struct Open {
    id: u64,
    sender: mpsc::Sender<Bytes>,
    opened: Instant,
    chunks: usize,
}

type Answer = (u64, Result<PushResponse, Status>);

struct Task {
    channel: Channel,
    api_key: Option<String>,
    config: ShipperConfig,
    shared: Arc<Shared>,
    incoming: mpsc::UnboundedReceiver<LogRecord>,
    closing: watch::Receiver<Option<Instant>>,
    producer_id: Vec<u8>,
    next_sequence: u64,
    next_record: u64,
    batch: Vec<LogRecord>,
    batch_bytes: usize,
    batch_deadline: Option<Instant>,
    /// Sealed chunks waiting to be sent, in sequence order.
    queue: VecDeque<Sealed>,
    open: Option<Open>,
    /// Chunks sent on each stream not yet answered.
    unanswered: HashMap<u64, Vec<Sealed>>,
    answers: FuturesUnordered<Pin<Box<dyn Future<Output = Answer>>>>,
    next_stream: u64,
    paused_until: Option<Instant>,
    backoff: Backoff,
}

impl Task {
    fn new(
        channel: Channel,
        api_key: Option<String>,
        config: ShipperConfig,
        shared: Arc<Shared>,
        incoming: mpsc::UnboundedReceiver<LogRecord>,
        closing: watch::Receiver<Option<Instant>>,
    ) -> Task {
        // Zero would mean "never send" or "never seal": the smallest working value instead.
        let config = ShipperConfig {
            chunk_records: config.chunk_records.max(1),
            rotate_chunks: config.rotate_chunks.max(1),
            max_streams: config.max_streams.max(1),
            ..config
        };
        let producer_id: Vec<u8> = (0..16).map(|_| fastrand::u8(..)).collect();
        let backoff = Backoff::new(config.first_backoff, config.max_backoff);
        Task {
            channel,
            api_key,
            config,
            shared,
            incoming,
            closing,
            producer_id,
            next_sequence: 0,
            next_record: 0,
            batch: Vec::new(),
            batch_bytes: 0,
            batch_deadline: None,
            queue: VecDeque::new(),
            open: None,
            unanswered: HashMap::new(),
            answers: FuturesUnordered::new(),
            next_stream: 0,
            paused_until: None,
            backoff,
        }
    }

    async fn run(mut self) {
        let mut close_deadline: Option<Instant> = None;
        let mut incoming_done = false;
        let mut arrived = Vec::with_capacity(RECEIVE_AT_ONCE);
        loop {
            if close_deadline.is_some() && incoming_done {
                self.seal();
                if self.queue.is_empty() {
                    // Nothing left to send: close the stream so its acknowledgement comes back.
                    self.open = None;
                }
                if self.queue.is_empty() && self.unanswered.is_empty() {
                    break;
                }
            }
            let can_send = !self.queue.is_empty()
                && self
                    .paused_until
                    .is_none_or(|until| Instant::now() >= until)
                && (self.open.is_some() || self.answers.len() < self.config.max_streams);
            if self
                .paused_until
                .is_some_and(|until| Instant::now() >= until)
            {
                self.paused_until = None;
            }
            if can_send && self.open.is_none() {
                self.open_stream();
            }
            let rotate_at = self
                .open
                .as_ref()
                .filter(|open| open.chunks > 0)
                .map(|open| open.opened + self.config.rotate_after);
            let sender = self
                .open
                .as_ref()
                .filter(|_| can_send)
                .map(|open| open.sender.clone());
            tokio::select! {
                biased;
                changed = self.closing.changed(), if close_deadline.is_none() => {
                    let deadline = match changed {
                        Ok(()) => *self.closing.borrow(),
                        // Every handle is gone without close: flush for as long as it takes.
                        Err(_) => None,
                    };
                    close_deadline = Some(deadline.unwrap_or_else(far_future));
                    self.incoming.close();
                }
                () = sleep_until_some(close_deadline) => break,
                Some(answer) = self.answers.next() => self.settle(answer),
                // Before taking more records, so a steady inflow never starves the sending.
                permit = reserve(sender) => match permit {
                    Some(permit) => self.send_next(permit),
                    // The stream ended under us; its answer says why and requeues its chunks.
                    None => self.open = None,
                },
                received = self.incoming.recv_many(&mut arrived, RECEIVE_AT_ONCE), if !incoming_done => {
                    if received == 0 {
                        incoming_done = true;
                        if close_deadline.is_none() {
                            close_deadline = Some(far_future());
                        }
                    }
                    for record in arrived.drain(..) {
                        self.add(record);
                    }
                }
                () = sleep_until_some(self.batch_deadline) => self.seal(),
                () = sleep_until_some(rotate_at) => self.open = None,
                () = sleep_until_some(self.paused_until) => self.paused_until = None,
            }
        }
        self.give_up();
    }

    fn add(&mut self, mut record: LogRecord) {
        if record.service.is_empty() {
            if let Some(service) = &self.config.service {
                record.service.clone_from(service);
            }
        }
        if self.batch.is_empty() {
            self.batch_deadline = Some(Instant::now() + self.config.linger);
        }
        self.batch_bytes += record.encoded_len() + 4;
        self.batch.push(record);
        if self.batch.len() >= self.config.chunk_records
            || self.batch_bytes >= self.config.chunk_bytes
        {
            self.seal();
        }
    }

    /// Turns the batch into an encoded chunk with the next sequence number.
    fn seal(&mut self) {
        self.batch_deadline = None;
        if self.batch.is_empty() {
            return;
        }
        let records = std::mem::take(&mut self.batch);
        self.batch_bytes = 0;
        let count = records.len();
        let request = PushRequest {
            records,
            producer_id: Some(self.producer_id.clone()),
            sequence: Some(self.next_sequence),
        };
        self.queue.push_back(Sealed {
            sequence: self.next_sequence,
            first_record: self.next_record,
            records: count,
            encoded: Bytes::from(request.encode_to_vec()),
            sent_before: false,
        });
        self.next_sequence += 1;
        self.next_record += count as u64;
    }

    fn open_stream(&mut self) {
        let id = self.next_stream;
        self.next_stream += 1;
        let (sender, receiver) = mpsc::channel::<Bytes>(4);
        let request = match request_with_key(ReceiverStream::new(receiver), self.api_key.as_deref())
        {
            Ok(request) => request,
            // The key was checked when the client was built.
            Err(err) => unreachable!("{err}"),
        };
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        let timeout = self.config.rotate_after + self.config.ack_timeout;
        let answer = async move {
            let call = async {
                grpc.ready()
                    .await
                    .map_err(|err| Status::unavailable(format!("cannot connect: {err}")))?;
                let path = tonic::codegen::http::uri::PathAndQuery::from_static(PUSH_PATH);
                grpc.client_streaming(request, path, PreEncoded::<PushResponse>::default())
                    .await
                    .map(tonic::Response::into_inner)
            };
            let outcome = match tokio::time::timeout(timeout, call).await {
                Ok(outcome) => outcome,
                Err(_) => Err(Status::deadline_exceeded(
                    "no acknowledgement within the ack timeout",
                )),
            };
            (id, outcome)
        };
        self.answers.push(Box::pin(answer));
        self.unanswered.insert(id, Vec::new());
        Counters::add(&self.shared.counters.streams, 1);
        self.open = Some(Open {
            id,
            sender,
            opened: Instant::now(),
            chunks: 0,
        });
    }

    fn send_next(&mut self, permit: mpsc::OwnedPermit<Bytes>) {
        let (Some(open), Some(mut chunk)) = (self.open.as_mut(), self.queue.pop_front()) else {
            return;
        };
        permit.send(chunk.encoded.clone());
        let counters = &self.shared.counters;
        Counters::add(&counters.sent, chunk.records as u64);
        Counters::add(&counters.chunks_sent, 1);
        if chunk.sent_before {
            Counters::add(&counters.retries, 1);
        }
        chunk.sent_before = true;
        open.chunks += 1;
        let rotate = open.chunks >= self.config.rotate_chunks;
        self.unanswered
            .get_mut(&open.id)
            .expect("an open stream is tracked")
            .push(chunk);
        if rotate {
            self.open = None;
        }
    }

    fn settle(&mut self, (id, outcome): Answer) {
        if self.open.as_ref().is_some_and(|open| open.id == id) {
            self.open = None;
        }
        let chunks = self.unanswered.remove(&id).unwrap_or_default();
        let status = match outcome {
            Ok(response) => {
                self.backoff.reset();
                let records = chunks.iter().map(|chunk| chunk.records).sum();
                self.acknowledged(&chunks, &response, records);
                return;
            }
            Err(status) => status,
        };
        // A stream that failed part-way names the messages it did not store: the others are
        // acknowledged, and only those go round again.
        let chunks: Vec<Sealed> = match trailers::partly_stored(status.metadata()) {
            Some((not_stored, settled)) => {
                let unstored = |position: usize| not_stored.contains(position as u64);
                let stored_records = chunks
                    .iter()
                    .enumerate()
                    .filter(|(position, _)| !unstored(*position))
                    .map(|(_, chunk)| chunk.records)
                    .sum();
                self.acknowledged(&chunks, &settled, stored_records);
                chunks
                    .into_iter()
                    .enumerate()
                    .filter(|(position, _)| unstored(*position))
                    .map(|(_, chunk)| chunk)
                    .collect()
            }
            None => chunks,
        };
        if chunks.is_empty() {
            return;
        }
        match status {
            status if is_retryable(&status) => {
                let delay = self.backoff.delay(told_delay(&status));
                self.shared.set_error(format!(
                    "{:?}: {}; retrying in {delay:?}",
                    status.code(),
                    status.message()
                ));
                let until = Instant::now() + delay;
                self.paused_until = Some(self.paused_until.map_or(until, |other| other.max(until)));
                // Whatever else is in flight on this connection is likely failing too; new
                // chunks wait for the pause.
                self.open = None;
                for chunk in chunks {
                    let at = self
                        .queue
                        .partition_point(|queued| queued.sequence < chunk.sequence);
                    self.queue.insert(at, chunk);
                }
            }
            status => {
                self.shared.set_error(format!(
                    "{:?}: {}; {} chunks given up",
                    status.code(),
                    status.message(),
                    chunks.len()
                ));
                self.fail(chunks);
            }
        }
    }

    /// Counts a stream's answer; `chunks` are all it carried, in order, so that rejections map
    /// back to records, and `stored_records` of them are released from the buffer.
    fn acknowledged(&self, chunks: &[Sealed], response: &PushResponse, stored_records: usize) {
        let counters = &self.shared.counters;
        Counters::add(&counters.acknowledged, response.accepted);
        Counters::add(&counters.rejected, response.rejected);
        Counters::add(&counters.duplicates, response.duplicate_records);
        if !response.rejections.is_empty() {
            let mut kept = self
                .shared
                .rejections
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for rejection in &response.rejections {
                if kept.len() >= MAX_KEPT_REJECTIONS {
                    break;
                }
                if let Some(record) = record_number(chunks, rejection.index) {
                    kept.push(RecordRejection {
                        record,
                        reason: rejection.reason.clone(),
                    });
                }
            }
        }
        self.shared.slots.release(stored_records);
    }

    fn fail(&self, chunks: Vec<Sealed>) {
        let records: usize = chunks.iter().map(|chunk| chunk.records).sum();
        Counters::add(&self.shared.counters.failed, records as u64);
        self.shared.slots.release(records);
    }

    /// At the close deadline: whatever is not acknowledged is lost.
    fn give_up(&mut self) {
        self.seal();
        let mut left: Vec<Sealed> = self.queue.drain(..).collect();
        for (_, chunks) in self.unanswered.drain() {
            left.extend(chunks);
        }
        // Records pushed but never received (the channel was closed with them in it).
        let mut unreceived = 0;
        while let Ok(_record) = self.incoming.try_recv() {
            unreceived += 1;
        }
        if !left.is_empty() || unreceived > 0 {
            let records: usize = left.iter().map(|chunk| chunk.records).sum::<usize>() + unreceived;
            let last = self
                .shared
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            let mut error = format!("{records} records not acknowledged by the close deadline");
            if let Some(last) = last {
                error.push_str("; last failure: ");
                error.push_str(&last);
            }
            self.shared.set_error(error);
            Counters::add(&self.shared.counters.failed, records as u64);
            self.shared.slots.release(records);
        }
    }
}

/// The push-order number of the record at `index` of a stream that carried `chunks` in order.
fn record_number(chunks: &[Sealed], index: u64) -> Option<u64> {
    let mut start = 0u64;
    for chunk in chunks {
        let end = start + chunk.records as u64;
        if index < end {
            return Some(chunk.first_record + (index - start));
        }
        start = end;
    }
    None
}

async fn reserve(sender: Option<mpsc::Sender<Bytes>>) -> Option<mpsc::OwnedPermit<Bytes>> {
    match sender {
        Some(sender) => sender.reserve_owned().await.ok(),
        None => std::future::pending().await,
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86400 * 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed(first_record: u64, records: usize) -> Sealed {
        Sealed {
            sequence: first_record,
            first_record,
            records,
            encoded: Bytes::new(),
            sent_before: false,
        }
    }

    #[test]
    fn stream_indexes_map_back_to_push_order() {
        let chunks = [sealed(100, 3), sealed(250, 2)];
        assert_eq!(record_number(&chunks, 0), Some(100));
        assert_eq!(record_number(&chunks, 2), Some(102));
        assert_eq!(record_number(&chunks, 3), Some(250));
        assert_eq!(record_number(&chunks, 5), None);
    }
}
