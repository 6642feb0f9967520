//! One Tail subscriber: polls the database for newly committed records and queues them for its
//! client. Polling (rather than an in-process fan-out) is what makes records committed by another
//! replica sharing the database show up.
//!
//! Each subscriber's queue holds at most `--tail-queue-bytes` ([`super::tail_queue`]), counted
//! until its transport has taken them, and the poller reads only what fits: a client that reads
//! slowly pauses its own poller, whose records wait in the database, not in memory. One whose
//! queue stays full for [`STALL_GRACE`] is dropped with RESOURCE_EXHAUSTED ("subscriber too
//! slow"), its queue released at once; that never slows ingest anyway: tails only read, on the
//! read pool. How many tails may be open, and how long a poll may take, is
//! `query::admission`'s and `query::limits`' business.

use std::sync::Arc;
use std::time::Duration;

use tokio_stream::{Stream, StreamExt};
use tonic::Status;

use super::admission::{TailSlot, TenantReads};
use super::cursor::Cursor;
use super::filter::Filter;
use super::tail_queue::{queue, QueueReceiver, QueueSender, Room};
use super::{to_wire, Reads};
use crate::config::QueryOptions;
use crate::error::QueryError;
use crate::proto::v1::{TailRequest, TailResponse};
use crate::storage::{PageSize, StoredRow, Tail};

/// How long a subscriber's queue may stay too full to take another poll's records before the
/// subscriber is dropped as too slow: long enough for a client on a slow link to take one
/// message, short enough that a client that stopped reading soon learns why.
pub(crate) const STALL_GRACE: Duration = Duration::from_secs(5);

/// How a tail polls and queues.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TailConfig {
    /// Time between polls when nothing is waiting: the bound on delivery delay.
    pub poll_interval: Duration,
    /// Records per message and per poll.
    pub batch: usize,
    /// Bytes queued for one subscriber, counted as its records take on the wire, until its
    /// transport has taken them.
    pub queue_bytes: usize,
    /// Most record ids a PostgreSQL tail may remember for de-duplication.
    pub max_remembered: usize,
}

impl Default for TailConfig {
    fn default() -> Self {
        TailConfig {
            poll_interval: Duration::from_millis(500),
            batch: 500,
            queue_bytes: 4 << 20,
            max_remembered: 200_000,
        }
    }
}

impl From<&QueryOptions> for TailConfig {
    fn from(config: &QueryOptions) -> Self {
        TailConfig {
            poll_interval: config.tail_poll_interval.0,
            queue_bytes: config.tail_queue_bytes.as_usize(),
            ..TailConfig::default()
        }
    }
}

/// What a tail delivers: each poll's new rows, oldest first, then at most one error that ends
/// it. It holds the tail's place until both its poller and its reader are done, so a dropped
/// subscriber whose client has not read yet still counts against `--max-tails`.
#[derive(Debug)]
pub(crate) struct Follow {
    queue: QueueReceiver,
    _place: Arc<TailSlot>,
}

impl Follow {
    /// A follow of whatever `queue` is fed, holding `place`: for tests of what reads a tail.
    #[cfg(test)]
    pub(crate) fn of(queue: QueueReceiver, place: TailSlot) -> Self {
        Follow {
            queue,
            _place: Arc::new(place),
        }
    }
}

impl Stream for Follow {
    type Item = Result<Vec<StoredRow>, QueryError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::pin::Pin::new(&mut self.queue).poll_next(cx)
    }
}

/// Checks a Tail request and starts following it for `tenant`: the one entry point of the gRPC
/// service and the console, so both refuse the same requests with the same reasons.
pub(crate) async fn start(
    reads: &Reads,
    tenant: &Arc<str>,
    request: TailRequest,
) -> Result<impl Stream<Item = Result<TailResponse, Status>> + Send + 'static, QueryError> {
    let filter = Filter::from_proto(request.filter)?;
    let after = Cursor::decode(&request.cursor)?;
    let rows = open(reads, tenant, filter, after).await?;
    Ok(rows.map(|polled| {
        polled
            .map(|rows| TailResponse {
                records: rows.into_iter().map(to_wire).collect(),
            })
            .map_err(Status::from)
    }))
}

/// Starts following `tenant`'s records that `filter` matches, committed after `after` (or from
/// now): a tail slot of the tenant's is held until the follow ends.
pub(crate) async fn open(
    reads: &Reads,
    tenant: &Arc<str>,
    filter: Filter,
    after: Option<Cursor>,
) -> Result<Follow, QueryError> {
    let place = reads.admission.tail(tenant)?;
    let slots = reads.admission.tenant(tenant);
    let slot = slots.admit().await?;
    let tail = reads
        .limits
        .within_timeout(reads.reader.tail(after))
        .await?;
    drop(slot);
    Ok(follow(reads.clone(), place, slots, filter, tail))
}

/// Consecutive failed polls (the database unavailable, or a poll past `--query-timeout`) before
/// the tail ends with the last one's error.
const MAX_POLL_FAILURES: u32 = 5;

/// Starts following and returns the stream the client reads.
fn follow(reads: Reads, place: TailSlot, slots: TenantReads, filter: Filter, tail: Tail) -> Follow {
    let (sender, receiver) = queue(
        reads.tail.queue_bytes,
        reads.metrics.tail_queued_bytes.clone(),
    );
    let place = Arc::new(place);
    let polling = Arc::clone(&place);
    tokio::spawn(async move {
        let metrics = Arc::clone(&reads.metrics);
        metrics.tail_subscribers.add(1.0);
        let end = run(&reads, &slots, &filter, tail, &sender).await;
        metrics.tail_subscribers.add(-1.0);
        let label = match &end {
            None => "client_gone",
            Some(err) => err.kind(),
        };
        metrics.tails_ended.increment_static([label], 1);
        if let Some(err) = &end {
            tracing::debug!(error = %err, "tail ended");
        }
        // A subscriber dropped for being slow would not read its queue soon: it goes now.
        let discard = matches!(end, Some(QueryError::SubscriberTooSlow(_)));
        sender.finish(end, discard);
        drop(polling);
    });
    Follow {
        queue: receiver,
        _place: place,
    }
}

/// The poll loop; returns why it ended (None: the client went away).
async fn run(
    reads: &Reads,
    slots: &TenantReads,
    filter: &Filter,
    mut tail: Tail,
    queue: &QueueSender,
) -> Option<QueryError> {
    let config = reads.tail;
    let mut failures = 0;
    let mut more = false;
    // A message is at most a quarter of the queue (and at most a page), so that the queue holds
    // several and the one a connection is writing, which the queue no longer counts once the
    // connection has asked for the next, is small beside it.
    let page = reads.limits.page_size(config.batch);
    let message = page.bytes.min(queue.limit() / 4);
    loop {
        if !more {
            tokio::select! {
                () = queue.closed() => return None,
                () = reads.draining.cancelled() => return Some(QueryError::ShuttingDown),
                () = tokio::time::sleep(config.poll_interval) => {}
            }
        }
        // Nothing is read that the subscriber has no room for: its records wait in the database.
        tokio::select! {
            room = queue.room(message, STALL_GRACE) => match room {
                Room::Free => {}
                Room::ReaderGone => return None,
                Room::Stalled => return Some(too_slow(queue.limit())),
            },
            () = reads.draining.cancelled() => return Some(QueryError::ShuttingDown),
        }
        let budget = PageSize {
            rows: page.rows,
            bytes: message,
        };
        // A poll dropped part-way leaves `tail` as it was: it changes only once the rows are read.
        // It takes one of its tenant's read slots, waiting its turn behind the tenant's other
        // reads, never the other tenants'.
        let poll = async {
            let _slot = slots.wait().await;
            let tenant = slots.name();
            tail.poll(tenant, filter, budget).await
        };
        let (rows, waiting) = match reads.limits.within_timeout(poll).await {
            Ok(polled) => {
                failures = 0;
                polled
            }
            Err(err) => {
                failures += 1;
                if failures >= MAX_POLL_FAILURES {
                    return Some(err);
                }
                more = false;
                continue;
            }
        };
        more = waiting;
        if tail.remembered() > config.max_remembered {
            return Some(QueryError::SubscriberTooSlow(
                "more matching records per second than a tail can follow".into(),
            ));
        }
        if !rows.is_empty() && !queue.push(rows) {
            return None;
        }
    }
}

/// Why a subscriber whose queue stayed full is dropped.
fn too_slow(limit: usize) -> QueryError {
    QueryError::SubscriberTooSlow(format!(
        "its queue of unread records (--tail-queue-bytes, {}) stayed full for {}s",
        crate::config::ByteSize(limit as u64),
        STALL_GRACE.as_secs()
    ))
}
