//! The trailers of a Push stream that failed part-way, read by clients to resend exactly what
//! was not stored: `loghaul-unstored-messages` (which messages), `loghaul-accepted` /
//! `loghaul-rejected` (counts of the settled records) and `loghaul-settled-bin` (a
//! `PushResponse` of the settled records).

use std::fmt;

use prost::Message;
use tonic::metadata::MetadataMap;

use super::v1::PushResponse;

/// Messages of the stream that were not stored.
pub const UNSTORED_MESSAGES: &str = "loghaul-unstored-messages";
/// Records of the stored messages that were committed.
pub const ACCEPTED: &str = "loghaul-accepted";
/// Records of the stored messages that were rejected.
pub const REJECTED: &str = "loghaul-rejected";
/// The settled records as an encoded `PushResponse`.
pub const SETTLED_BIN: &str = "loghaul-settled-bin";

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

/// What a failed stream's trailers say was stored: which messages were not, and the settled
/// records of the others; `None` when the status does not carry them (an older server, or a
/// failure before the stream was read).
pub fn partly_stored(metadata: &MetadataMap) -> Option<(NotStored, PushResponse)> {
    let not_stored = metadata.get(UNSTORED_MESSAGES)?.to_str().ok()?;
    let not_stored = NotStored::from_header(not_stored)?;
    let settled = metadata.get_bin(SETTLED_BIN)?.to_bytes().ok()?;
    let settled = PushResponse::decode(settled).ok()?;
    Some((not_stored, settled))
}

#[cfg(test)]
mod tests {
    use super::*;

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
