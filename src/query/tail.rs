//! One Tail subscriber: polls the database for newly committed records and sends them on a bounded
//! channel. Polling (rather than an in-process fan-out) is what makes records committed by another
//! replica sharing the database show up.
//!
//! The channel holds at most `buffer` messages of at most `batch` records and `--max-page-bytes`
//! each, so a subscriber costs bounded memory; when it is full the subscriber is dropped with
//! RESOURCE_EXHAUSTED ("subscriber too slow") instead of the poller waiting, which could never
//! slow ingest anyway: tails only read, on the read pool. How many tails may be open, and how
//! long a poll may take, is `query::admission`'s and `query::limits`' business.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::Status;

use super::admission::{TailSlot, TenantReads};
use super::cursor::Cursor;
use super::filter::Filter;
use super::{to_wire, Reads};
use crate::error::QueryError;
use crate::observability::metrics::metrics;
use crate::proto::v1::{TailRequest, TailResponse};
use crate::storage::{StoredRow, Tail};

/// How a tail polls and buffers.
#[derive(Clone, Copy, Debug)]
pub struct TailConfig {
    /// Time between polls when nothing is waiting: the bound on delivery delay.
    pub poll_interval: Duration,
    /// Records per message and per poll.
    pub batch: usize,
    /// Messages buffered for the subscriber before it counts as too slow.
    pub buffer: usize,
    /// Most record ids a PostgreSQL tail may remember for de-duplication.
    pub max_remembered: usize,
}

impl Default for TailConfig {
    fn default() -> Self {
        TailConfig {
            poll_interval: Duration::from_millis(500),
            batch: 500,
            buffer: 16,
            max_remembered: 200_000,
        }
    }
}

impl TailConfig {
    /// The tail settings of `loghaul serve`.
    pub fn from_config(config: &crate::config::ServeConfig) -> Self {
        TailConfig {
            poll_interval: config.tail_poll_interval.0,
            ..TailConfig::default()
        }
    }
}

/// What a tail delivers: each poll's new rows, oldest first, then at most one error that ends it.
pub type Follow = ReceiverStream<Result<Vec<StoredRow>, QueryError>>;

/// Checks a Tail request and starts following it for `tenant`: the one entry point of the gRPC
/// service and the console, so both refuse the same requests with the same reasons.
pub async fn start(
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
pub async fn open(
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
    // One slot more than the data may use, so the final status always fits.
    let (sender, receiver) = mpsc::channel(reads.tail.buffer + 1);
    tokio::spawn(async move {
        metrics().tail_subscribers.add(1.0);
        let end = run(&reads, &slots, &filter, tail, &sender).await;
        metrics().tail_subscribers.add(-1.0);
        drop(place);
        let label = match &end {
            None => "client_gone",
            Some(err) => err.kind(),
        };
        metrics().tails_ended.increment_static([label], 1);
        if let Some(err) = end {
            tracing::debug!(error = %err, "tail ended");
            let _ = sender.try_send(Err(err));
        }
    });
    ReceiverStream::new(receiver)
}

/// The poll loop; returns why it ended (None: the client went away).
async fn run(
    reads: &Reads,
    slots: &TenantReads,
    filter: &Filter,
    mut tail: Tail,
    sender: &mpsc::Sender<Result<Vec<StoredRow>, QueryError>>,
) -> Option<QueryError> {
    let config = reads.tail;
    let mut failures = 0;
    let mut more = false;
    let budget = reads.limits.budget(config.batch);
    loop {
        if !more {
            tokio::select! {
                () = sender.closed() => return None,
                () = reads.draining.cancelled() => return Some(QueryError::ShuttingDown),
                () = tokio::time::sleep(config.poll_interval) => {}
            }
        }
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
                "more matching records per second than a tail can follow",
            ));
        }
        if rows.is_empty() {
            continue;
        }
        // Keep the last slot for the closing status.
        if sender.capacity() <= 1 {
            if sender.is_closed() {
                return None;
            }
            return Some(QueryError::SubscriberTooSlow(
                "its buffer of unread records is full",
            ));
        }
        if sender.try_send(Ok(rows)).is_err() {
            return None;
        }
    }
}
