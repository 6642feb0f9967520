//! Rows handed from the task that reads them to the one that consumes them, a batch at a time.
//!
//! A long read has two halves of about the same cost: fetching and decoding rows, and what the
//! query does with each (a LogQL pipeline). Run in one task they take turns on one core; handed
//! over in batches they run on two, and one wake carries many rows instead of one.

use tokio::sync::mpsc;

use crate::storage::stored::StoredRow;

/// Rows per batch: enough that the handover costs nothing beside them, few enough that the first
/// rows of a small read arrive at once.
const BATCH_ROWS: usize = 256;
/// Bytes per batch, about: long lines make for short batches, so that what is in flight stays
/// small beside the query's own memory limit.
const BATCH_BYTES: usize = 256 * 1024;
/// Full batches waiting for the consumer; the reader waits beyond that.
const BATCHES_IN_FLIGHT: usize = 2;

/// The reading end.
pub(in crate::storage) struct RowSender {
    sender: mpsc::Sender<Vec<StoredRow>>,
    batch: Vec<StoredRow>,
    bytes: usize,
}

/// The consuming end.
pub(in crate::storage) type RowReceiver = mpsc::Receiver<Vec<StoredRow>>;

/// A new handover.
pub(in crate::storage) fn channel() -> (RowSender, RowReceiver) {
    let (sender, receiver) = mpsc::channel(BATCHES_IN_FLIGHT);
    let sender = RowSender {
        sender,
        batch: Vec::with_capacity(BATCH_ROWS),
        bytes: 0,
    };
    (sender, receiver)
}

impl RowSender {
    /// Adds `row`, sending the batch once full; false once the consumer is gone.
    pub(in crate::storage) async fn push(&mut self, row: StoredRow) -> bool {
        match self.add(row) {
            Some(full) => self.sender.send(full).await.is_ok(),
            None => true,
        }
    }

    /// [`RowSender::push`], from a thread that may block.
    pub(in crate::storage) fn push_blocking(&mut self, row: StoredRow) -> bool {
        match self.add(row) {
            Some(full) => self.sender.blocking_send(full).is_ok(),
            None => true,
        }
    }

    /// Sends what is left.
    pub(in crate::storage) async fn finish(mut self) {
        if !self.batch.is_empty() {
            let _ = self.sender.send(std::mem::take(&mut self.batch)).await;
        }
    }

    /// [`RowSender::finish`], from a thread that may block.
    pub(in crate::storage) fn finish_blocking(mut self) {
        if !self.batch.is_empty() {
            let _ = self.sender.blocking_send(std::mem::take(&mut self.batch));
        }
    }

    /// Resolves once the consumer is gone.
    pub(in crate::storage) async fn closed(&self) {
        self.sender.closed().await;
    }

    fn add(&mut self, row: StoredRow) -> Option<Vec<StoredRow>> {
        self.bytes += row.message.len() + row.labels.len() + row.attributes.len() + 64;
        self.batch.push(row);
        if self.batch.len() < BATCH_ROWS && self.bytes < BATCH_BYTES {
            return None;
        }
        self.bytes = 0;
        Some(std::mem::replace(
            &mut self.batch,
            Vec::with_capacity(BATCH_ROWS),
        ))
    }
}

/// Gives `sink` the rows of `batches` in order until it returns false or they end.
pub(in crate::storage) async fn deliver(
    batches: &mut RowReceiver,
    sink: &mut (dyn FnMut(StoredRow) -> bool + Send),
) {
    while let Some(batch) = batches.recv().await {
        for row in batch {
            if !sink(row) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, message_bytes: usize) -> StoredRow {
        StoredRow {
            id,
            ts: chrono::DateTime::UNIX_EPOCH,
            received_at: chrono::DateTime::UNIX_EPOCH,
            severity: 9,
            service: "svc".into(),
            message: "x".repeat(message_bytes),
            labels: "{}".into(),
            attributes: "{}".into(),
            trace_id: None,
            span_id: None,
        }
    }

    #[tokio::test]
    async fn rows_arrive_in_order_in_batches_bounded_by_rows_and_bytes() {
        let (mut sender, mut batches) = channel();
        let reading = tokio::spawn(async move {
            for id in 0..1000 {
                // Every 300th row is long: it ends its batch.
                let bytes = if id % 300 == 299 { BATCH_BYTES } else { 10 };
                assert!(sender.push(row(id, bytes)).await);
            }
            sender.finish().await;
        });
        let mut sizes = Vec::new();
        let mut ids = Vec::new();
        while let Some(batch) = batches.recv().await {
            sizes.push(batch.len());
            ids.extend(batch.iter().map(|row| row.id));
        }
        reading.await.unwrap();
        assert_eq!(ids, (0..1000).collect::<Vec<_>>());
        assert_eq!(sizes, [256, 44, 256, 44, 256, 44, 100]);
    }

    #[tokio::test]
    async fn the_reader_learns_that_the_consumer_has_gone() {
        let (mut sender, mut batches) = channel();
        let reading = tokio::spawn(async move {
            let mut sent = 0;
            while sender.push(row(sent, 10)).await {
                sent += 1;
            }
            sender.closed().await;
            sent
        });
        let mut seen = 0;
        deliver(&mut batches, &mut |_| {
            seen += 1;
            seen < 300
        })
        .await;
        drop(batches);
        let sent = reading.await.unwrap();
        assert_eq!(seen, 300);
        // What it read past the consumer's stop is bounded by the batches in flight.
        assert!(
            sent < 300 + (BATCHES_IN_FLIGHT + 2) as i64 * BATCH_ROWS as i64,
            "{sent}"
        );
    }
}
