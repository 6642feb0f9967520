//! What a unary request (an OTLP export, a Loki push) reports about its refused records: the exact
//! count, and the first few by their position in the request, in one line a client can log.

use crate::model::reject::RejectionCounts;
use crate::pipeline::ack::RowRejection;
use crate::server::validate::{Invalid, RejectReason};

/// Rejections spelled out in the summary; the count stays exact beyond it. Clients log the
/// message, so it should stay readable in one log line.
pub const MAX_LISTED_REJECTIONS: usize = 10;
/// Longest reason quoted in the summary; a database's refusal can be long.
const MAX_REASON_CHARS: usize = 200;

/// The running outcome of one request.
#[derive(Debug, Default)]
pub struct RequestTally {
    /// Records received, valid or not.
    pub received: u64,
    rejected: u64,
    /// The first rejections found, `(request index, reason)`.
    listed: Vec<(u64, String)>,
    /// Validation rejections by reason, for the metric.
    pub by_reason: RejectionCounts,
}

impl RequestTally {
    /// Counts the next record; returns its index in the request.
    pub fn next_index(&mut self) -> u64 {
        self.received += 1;
        self.received - 1
    }

    /// Counts a record that failed validation.
    pub fn invalid(&mut self, index: u64, invalid: &Invalid) {
        self.by_reason.add(invalid.reason);
        self.reject(index, invalid.to_reason());
    }

    /// Counts the rows the database refused, mapped back to request indexes by `queued_at`.
    pub fn refused(&mut self, refused: Vec<RowRejection>, queued_at: &[u64]) {
        for row in refused {
            let reason = format!("{}: {}", RejectReason::StorageRefused.as_str(), row.reason);
            self.reject(queued_at[row.position], reason);
        }
    }

    fn reject(&mut self, index: u64, reason: String) {
        self.rejected += 1;
        if self.listed.len() < MAX_LISTED_REJECTIONS {
            self.listed.push((index, reason));
        }
    }

    /// `None` when every record was stored; otherwise the number rejected and a message naming
    /// the first of them by index: "3 of 10 {records} rejected ({where}): #2 reason; …".
    pub fn summary(mut self, records: &str, numbering: &str) -> Option<(u64, String)> {
        if self.rejected == 0 {
            return None;
        }
        self.listed.sort_by_key(|(index, _)| *index);
        let listed: Vec<String> = self
            .listed
            .iter()
            .map(|(index, reason)| {
                let reason: String = reason.chars().take(MAX_REASON_CHARS).collect();
                format!("#{index} {reason}")
            })
            .collect();
        let mut message = format!(
            "{} of {} {records} rejected ({numbering}): {}",
            self.rejected,
            self.received,
            listed.join("; ")
        );
        let unlisted = self.rejected - self.listed.len() as u64;
        if unlisted > 0 {
            message.push_str(&format!("; and {unlisted} more"));
        }
        Some((self.rejected, message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(received: u64) -> RequestTally {
        RequestTally {
            received,
            ..RequestTally::default()
        }
    }

    #[test]
    fn a_clean_request_has_no_summary() {
        assert_eq!(tally(5).summary("records", "n"), None);
    }

    #[test]
    fn the_summary_lists_the_first_rejections_in_request_order_and_counts_the_rest() {
        let mut tally = tally(100);
        for index in (0..30).rev() {
            tally.reject(index * 3, format!("invalid_severity: number {index}"));
        }
        let (rejected, message) = tally.summary("log records", "by position").unwrap();
        assert_eq!(rejected, 30);
        assert!(
            message.starts_with("30 of 100 log records rejected (by position): #60 "),
            "{message}"
        );
        assert!(message.contains("#60 invalid_severity: number 20; #63"));
        assert!(message.ends_with("; and 20 more"));
        assert_eq!(message.matches('#').count(), MAX_LISTED_REJECTIONS);
    }

    #[test]
    fn long_reasons_are_cut() {
        let mut tally = tally(1);
        tally.reject(0, "x".repeat(5000));
        let (_, message) = tally.summary("records", "n").unwrap();
        assert!(message.len() < 500, "{}", message.len());
    }
}
