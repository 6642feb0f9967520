//! Writes a batch: retries what the database may accept later (capped exponential backoff, while
//! the batch is held, which is itself backpressure), and isolates rows the database refuses by
//! splitting the batch, so one bad row never fails its neighbours.

use std::sync::Arc;
use std::time::Duration;

use metrics::counter;
use tokio::time::Instant;

use crate::observability::readiness::Readiness;
use crate::storage::{Row, Store, StoreError};

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Writes batches to the store with retry and row isolation.
#[derive(Clone, Debug)]
pub struct Writer {
    store: Store,
    retry_timeout: Duration,
    readiness: Arc<Readiness>,
}

impl Writer {
    /// A writer that gives up on an unavailable store after `retry_timeout`.
    pub fn new(store: Store, retry_timeout: Duration, readiness: Arc<Readiness>) -> Self {
        Writer {
            store,
            retry_timeout,
            readiness,
        }
    }

    /// Stores `rows`; returns the positions (ascending) and reasons of rows the database refused.
    /// An error means the store stayed unavailable past the retry timeout and nothing more is known.
    pub async fn write(&self, rows: &[Row<'_>]) -> Result<Vec<(usize, String)>, StoreError> {
        let deadline = Instant::now() + self.retry_timeout;
        let mut refused = Vec::new();
        // Depth-first over halves, first half on top, so refusals come out in row order.
        let mut pending = vec![(0, rows.len())];
        while let Some((start, len)) = pending.pop() {
            match self
                .insert_retrying(&rows[start..start + len], deadline)
                .await
            {
                Ok(()) => {}
                Err(StoreError::RowRejected(reason)) if len == 1 => {
                    tracing::warn!(reason = %reason, "the database refused a record");
                    refused.push((start, reason));
                }
                Err(StoreError::RowRejected(_)) => {
                    let half = len / 2;
                    pending.push((start + half, len - half));
                    pending.push((start, half));
                }
                Err(other) => return Err(other),
            }
        }
        Ok(refused)
    }

    async fn insert_retrying(&self, rows: &[Row<'_>], deadline: Instant) -> Result<(), StoreError> {
        let mut backoff = FIRST_BACKOFF;
        let mut attempt: u32 = 1;
        loop {
            let err = match self.store.insert(rows).await {
                Ok(()) => {
                    self.readiness.set_store_up(true);
                    return Ok(());
                }
                Err(err) => err,
            };
            counter!("loghaul_insert_errors_total", "kind" => err.kind()).increment(1);
            let StoreError::Unavailable(reason) = &err else {
                return Err(err);
            };
            self.readiness.set_store_up(false);
            let jittered = backoff.mul_f64(0.5 + fastrand::f64());
            if Instant::now() + jittered > deadline {
                return Err(err);
            }
            tracing::warn!(attempt, rows = rows.len(), retry_in = ?jittered, error = %reason, "insert failed; retrying");
            tokio::time::sleep(jittered).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            attempt += 1;
        }
    }
}
