//! Writes a batch: retries what the database may accept later (capped exponential backoff, while
//! the batch is held, which is itself backpressure), and isolates rows the database refuses by
//! splitting the batch, so one bad row never fails its neighbours.
//!
//! Chunks named by a producer and sequence are claimed in the transaction that stores their rows,
//! so a key exists iff its rows were committed. Splitting therefore never cuts such a chunk in
//! two transactions: its bad rows are found by inserts that are rolled back, then its good rows
//! and its claim are committed together.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::PipelineMetrics;
use crate::client::backoff::Backoff;
use crate::observability::readiness::Readiness;
use crate::storage::{ChunkKey, Claim, Row, Store, StoreError};

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// One chunk of a batch: its rows (consecutive, in batch order) and its key, if any.
#[derive(Clone, Debug)]
pub(crate) struct Span<'a> {
    /// Positions of the chunk's rows in the batch.
    pub rows: Range<usize>,
    /// Set when the chunk is deduplicated.
    pub key: Option<ChunkKey<'a>>,
}

/// What a write did.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Written {
    /// Positions (ascending) and reasons of rows the database refused.
    pub refused: Vec<(usize, String)>,
    /// Per chunk: its key was already stored, so nothing of it was written.
    pub duplicate: Vec<bool>,
}

/// Writes batches to the store with retry and row isolation.
#[derive(Clone, Debug)]
pub(crate) struct Writer {
    store: Store,
    retry_timeout: Duration,
    readiness: Arc<Readiness>,
    metrics: Arc<PipelineMetrics>,
}

enum Attempt<'c> {
    Insert(&'c [Claim<'c>]),
    Probe,
}

impl Writer {
    /// A writer that gives up on an unavailable store after `retry_timeout`, counting failed
    /// attempts in `metrics`.
    pub(crate) fn new(
        store: Store,
        retry_timeout: Duration,
        readiness: Arc<Readiness>,
        metrics: Arc<PipelineMetrics>,
    ) -> Self {
        Writer {
            store,
            retry_timeout,
            readiness,
            metrics,
        }
    }

    /// Stores `rows`, made of the chunks `spans` (in order, covering every row). An error means
    /// the store stayed unavailable past the retry timeout and nothing more is known.
    pub(crate) async fn write(
        &self,
        rows: &[Row<'_>],
        spans: &[Span<'_>],
    ) -> Result<Written, StoreError> {
        let deadline = Instant::now() + self.retry_timeout;
        let mut written = Written {
            refused: Vec::new(),
            duplicate: vec![false; spans.len()],
        };
        // Ranges of whole chunks, except inside a chunk without key. Depth-first over halves,
        // first half on top, so refusals come out in row order.
        let mut pending = vec![(0, rows.len())];
        while let Some((start, end)) = pending.pop() {
            let inside: Vec<usize> = (0..spans.len())
                .filter(|&index| spans[index].rows.start < end && spans[index].rows.end > start)
                .collect();
            let claims: Vec<Claim<'_>> = inside
                .iter()
                .filter_map(|&index| {
                    let span = &spans[index];
                    span.key.map(|key| Claim {
                        key,
                        rows: span.rows.start - start..span.rows.end - start,
                    })
                })
                .collect();
            let attempt = Attempt::Insert(&claims);
            match self.retrying(&rows[start..end], attempt, deadline).await {
                Ok(claimed) => {
                    let keyed = inside.iter().filter(|&&index| spans[index].key.is_some());
                    for (&index, won) in keyed.zip(claimed) {
                        written.duplicate[index] = !won;
                    }
                }
                Err(StoreError::RowRejected(reason)) => match inside.as_slice() {
                    [] => {}
                    [only] if spans[*only].key.is_some() => {
                        let index = *only;
                        let outcome = self.write_keyed(rows, &spans[index], deadline).await?;
                        match outcome {
                            Some(refused) => written.refused.extend(refused),
                            None => written.duplicate[index] = true,
                        }
                    }
                    [_] if end - start == 1 => written.refused.push((start, reason)),
                    [_] => {
                        let half = (end - start) / 2;
                        pending.push((start + half, end));
                        pending.push((start, start + half));
                    }
                    several => {
                        // Split at the chunk boundary nearest the middle.
                        let middle = start + (end - start) / 2;
                        let cut = several[1..]
                            .iter()
                            .map(|&index| spans[index].rows.start)
                            .min_by_key(|boundary| boundary.abs_diff(middle))
                            .expect("several chunks have an inner boundary");
                        pending.push((cut, end));
                        pending.push((start, cut));
                    }
                },
                Err(other) => return Err(other),
            }
        }
        Ok(written)
    }

    /// A keyed chunk with a row the database refuses: finds the bad rows with rolled-back
    /// inserts, then commits the others with the claim. `None` when the key was already stored.
    async fn write_keyed(
        &self,
        rows: &[Row<'_>],
        span: &Span<'_>,
        deadline: Instant,
    ) -> Result<Option<Vec<(usize, String)>>, StoreError> {
        let key = span.key.expect("called for keyed chunks");
        let mut refused = Vec::new();
        let mut pending = vec![span.rows.clone()];
        while let Some(range) = pending.pop() {
            match self
                .retrying(&rows[range.clone()], Attempt::Probe, deadline)
                .await
            {
                Ok(_) => {}
                Err(StoreError::RowRejected(reason)) if range.len() == 1 => {
                    refused.push((range.start, reason));
                }
                Err(StoreError::RowRejected(_)) => {
                    let half = range.start + range.len() / 2;
                    pending.push(half..range.end);
                    pending.push(range.start..half);
                }
                Err(other) => return Err(other),
            }
        }
        let kept: Vec<Row<'_>> = span
            .rows
            .clone()
            .filter(|position| !refused.iter().any(|(bad, _)| bad == position))
            .map(|position| rows[position])
            .collect();
        let claim = [Claim {
            key,
            rows: 0..kept.len(),
        }];
        match self
            .retrying(&kept, Attempt::Insert(&claim), deadline)
            .await
        {
            Ok(claimed) if claimed == [true] => Ok(Some(refused)),
            Ok(_) => Ok(None),
            // The rows passed alone but not together (a constraint across rows): refuse them all
            // rather than store part of a chunk whose key cannot then be claimed.
            Err(StoreError::RowRejected(reason)) => {
                let mut all: Vec<(usize, String)> = refused;
                all.extend(span.rows.clone().map(|position| (position, reason.clone())));
                all.sort_by_key(|(position, _)| *position);
                all.dedup_by_key(|(position, _)| *position);
                Ok(Some(all))
            }
            Err(other) => Err(other),
        }
    }

    async fn retrying(
        &self,
        rows: &[Row<'_>],
        attempt: Attempt<'_>,
        deadline: Instant,
    ) -> Result<Vec<bool>, StoreError> {
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        let mut tries: u32 = 1;
        loop {
            let outcome = match &attempt {
                Attempt::Insert(claims) => self.store.insert_claimed(rows, claims).await,
                Attempt::Probe => self.store.probe(rows).await.map(|()| Vec::new()),
            };
            let err = match outcome {
                Ok(claimed) => {
                    self.readiness.set_store_up(true);
                    return Ok(claimed);
                }
                Err(err) => err,
            };
            self.metrics.insert_errors.increment_static([err.kind()], 1);
            let StoreError::Unavailable(reason) = &err else {
                return Err(err);
            };
            self.readiness.set_store_up(false);
            let delay = backoff.delay(None);
            if Instant::now() + delay > deadline {
                return Err(err);
            }
            tracing::warn!(attempt = tries, rows = rows.len(), retry_in = ?delay, error = %reason, "insert failed; retrying");
            tokio::time::sleep(delay).await;
            tries += 1;
        }
    }
}
