//! What a Push stream has settled: which of its messages are stored (their records committed or
//! rejected) and which are not, so that a stream that fails part-way tells its client exactly what
//! to send again and what not to.
//!
//! A message is either settled as a whole or not stored at all. Its validation rejections count
//! only once its valid records are committed: a message that is not stored is resent whole, and
//! its rejections are reported when it is.

use tokio::sync::oneshot::error::RecvError;

use crate::error::IngestError;
use crate::ingest::validate::RejectReason;
use crate::pipeline::ack::AckResult;
use crate::proto::trailers::NotStored;
use crate::proto::v1::{PushResponse, Rejection};
use crate::storage::StoreError;

/// Rejections listed in one response; the `rejected` count stays exact beyond it, and the cap keeps
/// a stream of garbage from building an unbounded answer.
pub(crate) const MAX_REPORTED_REJECTIONS: usize = 1000;

/// One message of the stream on its way to the database.
#[derive(Debug)]
pub(crate) struct QueuedMessage {
    /// The message's position in the stream, from 0.
    pub message: u64,
    /// The stream index of the message's first record.
    pub first_index: u64,
    /// Records that failed validation, by position in the message, with their reasons.
    pub invalid: Vec<(usize, String)>,
    /// Records queued.
    pub valid: usize,
}

impl QueuedMessage {
    /// The stream index of the `queued_position`-th queued record: its position in the message
    /// once the records rejected before queueing are counted back in.
    fn stream_index(&self, queued_position: usize) -> u64 {
        let mut position = queued_position;
        for &(skipped, _) in &self.invalid {
            if skipped <= position {
                position += 1;
            } else {
                break;
            }
        }
        self.first_index + position as u64
    }
}

/// The running outcome of a stream.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    accepted: u64,
    duplicates: u64,
    rejected: u64,
    rejections: Vec<Rejection>,
    failed: Vec<u64>,
}

impl Tally {
    /// Counts the outcome of a queued message: its records committed (less the rows the database
    /// refused) and its validation rejections; or, when its batch failed, the message as not
    /// stored and the error that stopped it.
    pub(crate) fn settle(
        &mut self,
        outcome: Result<AckResult, RecvError>,
        queued: QueuedMessage,
    ) -> Result<(), IngestError> {
        let stored = match outcome {
            Ok(Ok(stored)) => stored,
            Ok(Err(err)) => return Err(self.fail(queued.message, err)),
            Err(RecvError { .. }) => {
                let err = StoreError::Unavailable("the batch was dropped before its commit".into());
                return Err(self.fail(queued.message, err));
            }
        };
        self.accepted += (queued.valid - stored.refused.len()) as u64;
        if stored.duplicate {
            self.duplicates += queued.valid as u64;
        }
        for row in stored.refused {
            let reason = format!("{}: {}", RejectReason::StorageRefused.as_str(), row.reason);
            self.reject(queued.stream_index(row.position), reason);
        }
        self.reject_invalid(queued.first_index, queued.invalid);
        Ok(())
    }

    /// Counts a message none of whose records was valid: settled at once, nothing to queue.
    pub(crate) fn reject_invalid(&mut self, first_index: u64, invalid: Vec<(usize, String)>) {
        for (position, reason) in invalid {
            self.reject(first_index + position as u64, reason);
        }
    }

    fn fail(&mut self, message: u64, err: StoreError) -> IngestError {
        let at = self.failed.partition_point(|&failed| failed < message);
        self.failed.insert(at, message);
        IngestError::Store(err)
    }

    fn reject(&mut self, index: u64, reason: String) {
        self.rejected += 1;
        if self.rejections.len() < MAX_REPORTED_REJECTIONS {
            self.rejections.push(Rejection { index, reason });
        }
    }

    /// The answer to a stream that was read to its end with every message stored.
    pub(crate) fn into_response(self) -> PushResponse {
        self.into_parts(None).0
    }

    /// What is settled, and which messages are not stored when the stream stopped at `from`.
    pub(crate) fn into_parts(mut self, from: Option<u64>) -> (PushResponse, NotStored) {
        self.rejections.sort_by_key(|rejection| rejection.index);
        let not_stored = NotStored {
            failed: self.failed,
            from,
        };
        let settled = PushResponse {
            accepted: self.accepted,
            rejected: self.rejected,
            rejections: self.rejections,
            duplicate_records: self.duplicates,
        };
        (settled, not_stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::ack::{RowRejection, Stored};

    fn queued(message: u64, first_index: u64, invalid: &[usize], valid: usize) -> QueuedMessage {
        QueuedMessage {
            message,
            first_index,
            invalid: invalid.iter().map(|&p| (p, "bad".to_owned())).collect(),
            valid,
        }
    }

    #[test]
    fn refused_rows_map_back_past_rejected_positions() {
        // Message positions 0..6 at stream index 100; positions 1 and 3 failed validation, so the
        // queued records are positions 0, 2, 4, 5.
        let chunk = queued(0, 100, &[1, 3], 4);
        let mapped: Vec<u64> = (0..4).map(|queued| chunk.stream_index(queued)).collect();
        assert_eq!(mapped, vec![100, 102, 104, 105]);
    }

    #[test]
    fn the_rejection_list_is_capped_but_the_count_is_exact() {
        let mut tally = Tally::default();
        for index in 0..(MAX_REPORTED_REJECTIONS as u64 + 10) {
            tally.reject(index, "bad".into());
        }
        let response = tally.into_response();
        assert_eq!(response.rejected, MAX_REPORTED_REJECTIONS as u64 + 10);
        assert_eq!(response.rejections.len(), MAX_REPORTED_REJECTIONS);
    }

    #[test]
    fn a_message_that_is_not_stored_counts_none_of_its_rejections() {
        let mut tally = Tally::default();
        let stored = Stored {
            refused: vec![RowRejection {
                position: 1,
                reason: "too long".into(),
            }],
            duplicate: false,
        };
        tally.settle(Ok(Ok(stored)), queued(0, 0, &[0], 3)).unwrap();
        let down = Err(StoreError::Unavailable("down".into()));
        let err = tally.settle(Ok(down), queued(1, 4, &[2], 5)).unwrap_err();
        assert!(matches!(err, IngestError::Store(_)));
        let (settled, not_stored) = tally.into_parts(Some(3));
        assert_eq!((settled.accepted, settled.rejected), (2, 2));
        let indexes: Vec<u64> = settled.rejections.iter().map(|r| r.index).collect();
        assert_eq!(indexes, vec![0, 2]);
        assert_eq!(not_stored.to_header(), "1,3-");
        assert!(not_stored.contains(1) && not_stored.contains(7) && !not_stored.contains(2));
    }
}
