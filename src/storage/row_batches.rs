//! Rows handed from the task that reads them to the one that consumes them, a batch at a time.
//!
//! A long read has two halves of about the same cost: fetching and decoding rows, and what the
//! query does with each (a LogQL pipeline). Run in one task they take turns on one core; handed
//! over in batches they run on two, and one wake carries many rows instead of one.
//!
//! The consumer only looks at each row, then hands the spent batch back, and the reader writes
//! the next rows into its buffers: a row's texts are neither allocated on one thread nor freed
//! on the other, which was about a fifth of a parsing query's profile on SQLite.
//!
//! A read may be split between several readers (`channels`), each reusing its own spent
//! batches, their rows handed to the one consumer as they come.

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
/// Spent batches waiting for the reader to reuse them; the consumer drops any beyond that.
const SPENT_BATCHES: usize = 1;
/// A spent row whose texts hold more bytes than this is dropped rather than reused, so that one
/// long line does not keep its buffer for the rest of the read.
const REUSED_ROW_BYTES: usize = 4096;

/// A full batch and the reader it came from, to whom it goes back once spent.
type Batch = (usize, Vec<StoredRow>);

/// The reading end.
pub(in crate::storage) struct RowSender {
    /// Which of the handover's readers this is.
    reader: usize,
    sender: mpsc::Sender<Batch>,
    spent: mpsc::Receiver<Vec<StoredRow>>,
    batch: Vec<StoredRow>,
    bytes: usize,
    /// Rows whose buffers the next rows are written into.
    spare: Vec<StoredRow>,
}

/// The consuming end.
pub(in crate::storage) struct RowReceiver {
    batches: mpsc::Receiver<Batch>,
    /// Each reader's way back for its spent batches.
    spent: Vec<mpsc::Sender<Vec<StoredRow>>>,
}

/// A new handover from one reader.
pub(in crate::storage) fn channel() -> (RowSender, RowReceiver) {
    let (mut senders, receiver) = channels(1);
    let sender = senders
        .pop()
        .expect("a handover from one reader has its reader");
    (sender, receiver)
}

/// A new handover from `readers` readers (at least one) to one consumer.
pub(in crate::storage) fn channels(readers: usize) -> (Vec<RowSender>, RowReceiver) {
    let readers = readers.max(1);
    let (sender, batches) = mpsc::channel(BATCHES_IN_FLIGHT * readers);
    let (senders, spent) = (0..readers)
        .map(|reader| {
            let (spent_sender, spent) = mpsc::channel(SPENT_BATCHES);
            let row_sender = RowSender {
                reader,
                sender: sender.clone(),
                spent,
                batch: Vec::with_capacity(BATCH_ROWS),
                bytes: 0,
                spare: Vec::new(),
            };
            (row_sender, spent_sender)
        })
        .unzip();
    (senders, RowReceiver { batches, spent })
}

/// Bytes held by a row's texts.
fn held_bytes(row: &StoredRow) -> usize {
    row.service.capacity()
        + row.message.capacity()
        + row.labels.capacity()
        + row.attributes.capacity()
}

impl RowSender {
    /// A row to write the next one into: a spent one, its buffers kept, or a new one.
    pub(in crate::storage) fn spare(&mut self) -> StoredRow {
        loop {
            if let Some(row) = self.spare.pop() {
                if held_bytes(&row) <= REUSED_ROW_BYTES {
                    return row;
                }
                continue;
            }
            match self.spent.try_recv() {
                Ok(batch) => self.spare = batch,
                Err(_) => return StoredRow::default(),
            }
        }
    }

    /// Adds `row`, sending the batch once full; false once the consumer is gone.
    pub(in crate::storage) async fn push(&mut self, row: StoredRow) -> bool {
        match self.add(row) {
            Some(full) => self.sender.send((self.reader, full)).await.is_ok(),
            None => true,
        }
    }

    /// [`RowSender::push`], from a thread that may block.
    pub(in crate::storage) fn push_blocking(&mut self, row: StoredRow) -> bool {
        match self.add(row) {
            Some(full) => self.sender.blocking_send((self.reader, full)).is_ok(),
            None => true,
        }
    }

    /// Sends what is left.
    pub(in crate::storage) async fn finish(mut self) {
        if !self.batch.is_empty() {
            let last = std::mem::take(&mut self.batch);
            let _ = self.sender.send((self.reader, last)).await;
        }
    }

    /// [`RowSender::finish`], from a thread that may block.
    pub(in crate::storage) fn finish_blocking(mut self) {
        if !self.batch.is_empty() {
            let last = std::mem::take(&mut self.batch);
            let _ = self.sender.blocking_send((self.reader, last));
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

/// Gives `sink` the rows of `receiver`'s batches until it returns false or every reader is done,
/// each reader's in its order, handing each spent batch back to its reader for its buffers.
pub(in crate::storage) async fn deliver(
    receiver: &mut RowReceiver,
    sink: &mut (dyn FnMut(&StoredRow) -> bool + Send),
) {
    while let Some((reader, batch)) = receiver.batches.recv().await {
        for row in &batch {
            if !sink(row) {
                return;
            }
        }
        // Full or closed: the batch is freed here instead.
        let _ = receiver.spent[reader].try_send(batch);
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
        while let Some((_, batch)) = batches.batches.recv().await {
            sizes.push(batch.len());
            ids.extend(batch.iter().map(|row| row.id));
        }
        reading.await.unwrap();
        assert_eq!(ids, (0..1000).collect::<Vec<_>>());
        assert_eq!(sizes, [256, 44, 256, 44, 256, 44, 100]);
    }

    #[tokio::test]
    async fn spent_rows_are_written_again_unless_they_hold_a_long_text() {
        let (mut sender, mut receiver) = channel();
        assert_eq!(sender.spare(), StoredRow::default(), "nothing spent yet");
        for id in 0..BATCH_ROWS as i64 {
            let bytes = if id == 0 { REUSED_ROW_BYTES } else { 100 };
            assert!(sender.push(row(id, bytes)).await);
        }
        // The consumer's end of a handover that carries that one batch and ends.
        let batch = receiver.batches.recv().await.unwrap();
        let (full, batches) = mpsc::channel::<Batch>(1);
        full.send(batch).await.unwrap();
        drop(full);
        let mut one_batch = RowReceiver {
            batches,
            spent: receiver.spent.clone(),
        };
        let mut seen = 0;
        deliver(&mut one_batch, &mut |_| {
            seen += 1;
            true
        })
        .await;
        assert_eq!(seen, BATCH_ROWS);
        let mut reused = 0;
        loop {
            let spare = sender.spare();
            if spare.message.capacity() == 0 {
                break;
            }
            assert!(spare.message.capacity() >= 100 && spare.message.capacity() < 1000);
            reused += 1;
        }
        assert_eq!(reused, BATCH_ROWS - 1, "all but the long row");
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

    #[tokio::test]
    async fn two_readers_hand_over_all_their_rows_and_each_gets_its_own_batches_back() {
        let (senders, mut receiver) = channels(2);
        let readings: Vec<_> = senders
            .into_iter()
            .enumerate()
            .map(|(reader, mut sender)| {
                tokio::spawn(async move {
                    let first = reader as i64 * 10_000;
                    let mut reused = 0;
                    for id in first..first + 2000 {
                        let mut spare = sender.spare();
                        if spare.message.capacity() > 0 {
                            // A row this reader wrote: its message is this reader's size.
                            assert_eq!(spare.message.capacity(), 10 + reader);
                            reused += 1;
                        }
                        spare.id = id;
                        spare.message.clear();
                        spare.message.push_str(&"x".repeat(10 + reader));
                        spare.message.shrink_to_fit();
                        assert!(sender.push(spare).await);
                    }
                    sender.finish().await;
                    reused
                })
            })
            .collect();
        let mut ids = Vec::new();
        deliver(&mut receiver, &mut |row| {
            ids.push(row.id);
            true
        })
        .await;
        let mut reused = 0;
        for reading in readings {
            reused += reading.await.unwrap();
        }
        assert!(reused > 0, "spent batches went back to their readers");
        let (early, late): (Vec<i64>, Vec<i64>) = ids.iter().partition(|id| **id < 10_000);
        assert_eq!(
            early,
            (0..2000).collect::<Vec<_>>(),
            "one reader's rows in its order"
        );
        assert_eq!(late, (10_000..12_000).collect::<Vec<_>>());
    }
}
