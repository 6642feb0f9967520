//! One batching task per shard. It owns its buffer (no lock on the hot path), flushes when the
//! buffer holds `max_rows` rows or `max_bytes` bytes or its oldest row is `linger` old (a timer armed
//! by the first row, never a poll loop), and resolves every chunk's acknowledgement after the commit.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ack::{RowRejection, Stored};
use super::stall::Progress;
use super::writer::{Span, Writer, Written};
use super::Chunk;
use super::{FlushTrigger, PipelineMetrics, ShardMetrics};
use crate::client::deadline::sleep_until_some;
use crate::model::reject::RejectReason;
use crate::storage::{ChunkKey, Row};

/// When a shard flushes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BatchLimits {
    /// Flush at this many rows.
    pub max_rows: usize,
    /// Flush at this many bytes.
    pub max_bytes: usize,
    /// Flush when the oldest row has waited this long.
    pub linger: Duration,
}

/// The pure batching policy: what is buffered and when it must go. No I/O, so it is tested alone.
#[derive(Debug)]
pub(crate) struct Batch<T> {
    items: Vec<T>,
    rows: usize,
    bytes: usize,
    deadline: Option<Instant>,
}

impl<T> Default for Batch<T> {
    fn default() -> Self {
        Batch {
            items: Vec::new(),
            rows: 0,
            bytes: 0,
            deadline: None,
        }
    }
}

impl<T> Batch<T> {
    /// Adds an item holding `rows` rows and `bytes` bytes that arrived at `arrived`; true when the
    /// batch is now full and must be flushed.
    pub(crate) fn push(
        &mut self,
        item: T,
        rows: usize,
        bytes: usize,
        arrived: Instant,
        limits: &BatchLimits,
    ) -> bool {
        if self.items.is_empty() {
            self.deadline = Some(arrived + limits.linger);
        }
        self.items.push(item);
        self.rows += rows;
        self.bytes += bytes;
        self.rows >= limits.max_rows || self.bytes >= limits.max_bytes
    }

    /// When the oldest item's linger runs out, if anything is buffered.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// True when nothing is buffered.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Empties the batch, returning its items and row count.
    pub(crate) fn take(&mut self) -> (Vec<T>, usize) {
        let rows = self.rows;
        let taken = std::mem::take(self);
        (taken.items, rows)
    }
}

/// A shard's batching task.
pub(crate) struct Batcher {
    /// Shard number, named in its log lines.
    pub shard: usize,
    /// The shard's series.
    pub series: Arc<ShardMetrics>,
    /// The series every shard shares.
    pub metrics: Arc<PipelineMetrics>,
    /// The shard's queue.
    pub queue: mpsc::Receiver<Chunk>,
    /// Marked at every chunk taken off the queue: handlers waiting for room wait while it moves.
    pub dequeued: Arc<Progress>,
    /// Where batches go.
    pub writer: Writer,
    /// When to flush.
    pub limits: BatchLimits,
    /// Cancelled at shutdown: take what is queued, flush it, stop.
    pub closing: CancellationToken,
}

impl Batcher {
    /// Runs until shutdown, then flushes everything queued regardless of linger.
    pub(crate) async fn run(mut self) {
        let mut batch: Batch<Chunk> = Batch::default();
        let mut closed = false;
        loop {
            let linger = batch.deadline();
            tokio::select! {
                biased;
                _ = self.closing.cancelled(), if !closed => {
                    // Refuse new chunks but keep draining those already queued; recv() then
                    // returns None once the queue is empty.
                    self.queue.close();
                    closed = true;
                }
                received = self.queue.recv() => {
                    let Some(chunk) = received else { break };
                    self.dequeued.mark();
                    let (rows, bytes, arrived) = (chunk.records.len(), chunk.bytes, chunk.enqueued_at);
                    if batch.push(chunk, rows, bytes, arrived, &self.limits) {
                        self.flush(&mut batch, FlushTrigger::Full).await;
                    }
                }
                _ = sleep_until_some(linger) => {
                    self.flush(&mut batch, FlushTrigger::Linger).await;
                }
            }
        }
        self.flush(&mut batch, FlushTrigger::Shutdown).await;
    }

    async fn flush(&self, batch: &mut Batch<Chunk>, trigger: FlushTrigger) {
        let shard = self.shard;
        if batch.is_empty() {
            return;
        }
        let oldest = batch
            .deadline()
            .map(|deadline| deadline - self.limits.linger);
        let (chunks, row_count) = batch.take();
        let rows: Vec<Row<'_>> = chunks
            .iter()
            .flat_map(|chunk| {
                chunk.records.iter().map(|record| Row {
                    tenant: &chunk.source.tenant,
                    record,
                })
            })
            .collect();
        let mut offset = 0;
        let spans: Vec<Span<'_>> = chunks
            .iter()
            .map(|chunk| {
                let start = offset;
                offset += chunk.records.len();
                Span {
                    rows: start..offset,
                    key: chunk.source.key.as_ref().map(|key| ChunkKey {
                        tenant: &chunk.source.tenant,
                        producer_id: &key.producer_id,
                        sequence: key.sequence,
                    }),
                }
            })
            .collect();
        let started = Instant::now();
        let outcome = self.writer.write(&rows, &spans).await;
        drop(spans);
        drop(rows);

        let series = &self.series;
        series
            .flush_duration
            .record(started.elapsed().as_secs_f64());
        series.batch_rows.record(row_count as f64);
        if let Some(oldest) = oldest {
            series.batch_age.record((started - oldest).as_secs_f64());
        }
        series.batch_flushed(trigger);

        match outcome {
            Ok(written) => {
                let (duplicate_chunks, duplicate_rows) = chunks
                    .iter()
                    .zip(&written.duplicate)
                    .filter(|(_, duplicate)| **duplicate)
                    .fold((0, 0), |(count, rows), (chunk, _)| {
                        (count + 1, rows + chunk.records.len())
                    });
                if duplicate_chunks > 0 {
                    self.metrics.duplicate_chunks.increment(duplicate_chunks);
                    self.metrics
                        .duplicate_records
                        .increment(duplicate_rows as u64);
                }
                if let Some((_, first)) = written.refused.first() {
                    // One line per batch, not per row: a stream of refused rows must not flood
                    // the log. Each row's reason goes back to its client by index.
                    tracing::warn!(shard, refused = written.refused.len(), first_reason = %first, "the database refused records of a batch");
                }
                resolve(chunks, written);
            }
            Err(err) => {
                tracing::error!(shard, rows = row_count, error = %err, "batch not stored; its streams get UNAVAILABLE");
                for chunk in chunks {
                    chunk
                        .source
                        .counts
                        .failed
                        .increment(chunk.records.len() as u64);
                    // A closed receiver means the client left; nobody is waiting for this answer.
                    let _ = chunk.ack.send(Err(err.clone()));
                }
            }
        }
    }
}

/// Sends each chunk its outcome; `written.refused` holds batch-wide row positions in ascending
/// order.
fn resolve(chunks: Vec<Chunk>, written: Written) {
    let mut rejected = written.refused.into_iter().peekable();
    let mut offset = 0;
    for (chunk, duplicate) in chunks.into_iter().zip(written.duplicate) {
        let end = offset + chunk.records.len();
        let mut mine = Vec::new();
        while let Some((position, reason)) = rejected.next_if(|(position, _)| *position < end) {
            mine.push(RowRejection {
                position: position - offset,
                reason,
            });
        }
        offset = end;
        // Counted per chunk, by tenant, so that the console can show each tenant its own.
        let counts = &chunk.source.counts;
        counts
            .rejected(RejectReason::StorageRefused)
            .increment(mine.len() as u64);
        if !duplicate {
            counts
                .committed
                .increment((chunk.records.len() - mine.len()) as u64);
        }
        let _ = chunk.ack.send(Ok(Stored {
            refused: mine,
            duplicate,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> BatchLimits {
        BatchLimits {
            max_rows: 10,
            max_bytes: 1000,
            linger: Duration::from_millis(50),
        }
    }

    #[test]
    fn full_by_rows_or_by_bytes() {
        let now = Instant::now();
        let mut batch = Batch::default();
        assert!(!batch.push("a", 6, 10, now, &limits()));
        assert!(batch.push("b", 4, 10, now, &limits()));
        let (items, rows) = batch.take();
        assert_eq!((items, rows), (vec!["a", "b"], 10));
        assert!(batch.is_empty());
        assert!(batch.push("big", 1, 1000, now, &limits()));
    }

    #[test]
    fn linger_runs_from_the_first_row_only() {
        let first = Instant::now();
        let mut batch = Batch::default();
        assert_eq!(batch.deadline(), None);
        batch.push(1, 1, 1, first, &limits());
        batch.push(2, 1, 1, first + Duration::from_millis(40), &limits());
        assert_eq!(batch.deadline(), Some(first + Duration::from_millis(50)));
        batch.take();
        assert_eq!(batch.deadline(), None);
    }
}
