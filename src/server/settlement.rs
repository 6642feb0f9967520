//! What a Push stream has settled: which of its messages are stored (their records committed or
//! rejected) and which are not, so that a stream that fails part-way tells its client exactly what
//! to send again and what not to.
//!
//! A message is either settled as a whole or not stored at all. Its validation rejections count
//! only once its valid records are committed: a message that is not stored is resent whole, and
//! its rejections are reported when it is.

use std::fmt;

use tokio::sync::oneshot::error::RecvError;

use crate::error::IngestError;
use crate::pipeline::ack::AckResult;
use crate::proto::v1::{PushResponse, Rejection};
use crate::server::validate::RejectReason;
use crate::storage::StoreError;

/// Rejections listed in one response; the `rejected` count stays exact beyond it, and the cap keeps
/// a stream of garbage from building an unbounded answer.
pub const MAX_REPORTED_REJECTIONS: usize = 1000;

/// One message of the stream on its way to the database.
#[derive(Debug)]
pub struct QueuedMessage {
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

/// The messages of a stream that were not stored: some that failed on their own (their batch
/// could not be committed) and every message from the one the stream stopped at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NotStored {
    /// Messages read and queued whose records were not committed, ascending.
    pub failed: Vec<u64>,
    /// The first message the server did not store whatever came after it; `None` when the stream
    /// was read to its end.
    pub from: Option<u64>,
}

impl NotStored {
    /// Whether every message of the stream is stored.
    pub fn is_empty(&self) -> bool {
        self.failed.is_empty() && self.from.is_none()
    }

    /// The `loghaul-unstored-messages` trailer: message indexes and ranges, `a-b` inclusive and
    /// `a-` for "a and every message after it", comma-separated (`2,5-7,9-`).
    pub fn to_header(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        let mut failed = self
            .failed
            .iter()
            .copied()
            .filter(|&message| self.from.is_none_or(|from| message < from))
            .peekable();
        while let Some(start) = failed.next() {
            let mut end = start;
            while failed.peek() == Some(&(end + 1)) {
                end = failed.next().unwrap_or(end);
            }
            match (start == end, self.from == Some(end + 1)) {
                // A run that reaches `from` merges into the open range below.
                (_, true) => {
                    parts.push(format!("{start}-"));
                    return parts.join(",");
                }
                (true, false) => parts.push(start.to_string()),
                (false, false) => parts.push(format!("{start}-{end}")),
            }
        }
        if let Some(from) = self.from {
            parts.push(format!("{from}-"));
        }
        parts.join(",")
    }

    /// Parses [`NotStored::to_header`]; `None` for anything it did not write.
    pub fn from_header(header: &str) -> Option<NotStored> {
        let mut not_stored = NotStored::default();
        if header.is_empty() {
            return Some(not_stored);
        }
        let mut parts = header.split(',').peekable();
        while let Some(part) = parts.next() {
            match part.split_once('-') {
                None => not_stored.failed.push(part.parse().ok()?),
                Some((start, "")) if parts.peek().is_none() => {
                    not_stored.from = Some(start.parse().ok()?);
                }
                Some((start, end)) => {
                    let (start, end): (u64, u64) = (start.parse().ok()?, end.parse().ok()?);
                    if end < start || end - start > MAX_RANGE {
                        return None;
                    }
                    not_stored.failed.extend(start..=end);
                }
            }
        }
        Some(not_stored)
    }

    /// Whether message `message` of the stream was not stored.
    pub fn contains(&self, message: u64) -> bool {
        self.from.is_some_and(|from| message >= from) || self.failed.binary_search(&message).is_ok()
    }
}

/// Longest closed range a client accepts from the trailer; a stream never has more messages in
/// flight than its queue can hold, so anything longer is not from a loghaul server.
const MAX_RANGE: u64 = 1 << 20;

impl fmt::Display for NotStored {
    /// `message 3..`, `messages 2, 5-7, 9..`: the trailer's ranges, with `..` for an open end.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header = self.to_header();
        let parts: Vec<String> = header
            .split(',')
            .map(|part| match part.strip_suffix('-') {
                Some(start) => format!("{start}.."),
                None => part.to_owned(),
            })
            .collect();
        let noun = if parts.len() == 1 && !parts[0].contains(['-', '.']) {
            "message"
        } else {
            "messages"
        };
        write!(f, "{noun} {}", parts.join(", "))
    }
}

/// The running outcome of a stream.
#[derive(Debug, Default)]
pub struct Tally {
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
    pub fn settle(
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
    pub fn reject_invalid(&mut self, first_index: u64, invalid: Vec<(usize, String)>) {
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
    pub fn into_response(self) -> PushResponse {
        self.into_parts(None).0
    }

    /// What is settled, and which messages are not stored when the stream stopped at `from`.
    pub fn into_parts(mut self, from: Option<u64>) -> (PushResponse, NotStored) {
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

    #[test]
    fn the_trailer_round_trips_and_merges_runs() {
        for (failed, from, header, text) in [
            (vec![], Some(0), "0-", "messages 0.."),
            (vec![2], None, "2", "message 2"),
            (
                vec![2, 5, 6, 7],
                Some(9),
                "2,5-7,9-",
                "messages 2, 5-7, 9..",
            ),
            (vec![4, 5], Some(6), "4-", "messages 4.."),
            (vec![1, 3], None, "1,3", "messages 1, 3"),
        ] {
            let not_stored = NotStored { failed, from };
            assert_eq!(not_stored.to_header(), header);
            assert_eq!(not_stored.to_string(), text);
            let parsed = NotStored::from_header(header).unwrap();
            for message in 0..12 {
                assert_eq!(
                    parsed.contains(message),
                    not_stored.contains(message),
                    "{header} {message}"
                );
            }
        }
        for garbage in ["x", "3-1", "1-,2", "-", "0-99999999999"] {
            assert_eq!(NotStored::from_header(garbage), None, "{garbage}");
        }
    }
}
