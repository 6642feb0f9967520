//! What a unary request (an OTLP export, a Loki push) reports about its refused records: the exact
//! count, and the first few by their position in the request, in one line a client can log.

use std::fmt::Write;

use crate::model::reject::RejectionCounts;
use crate::pipeline::ack::RowRejection;
use crate::server::transcode::Refused;
use crate::server::validate::{Invalid, RejectReason};

/// Rejections spelled out in the summary; the count stays exact beyond it. Clients log the
/// message, so it should stay readable in one log line.
pub const MAX_LISTED_REJECTIONS: usize = 10;
/// Longest reason quoted in the summary; a database's refusal can be long, and a reason that
/// quotes the input as long as the input.
pub const MAX_REASON_CHARS: usize = 200;

/// `reason` cut to [`MAX_REASON_CHARS`], formatted no further than that.
pub fn capped_reason(reason: impl std::fmt::Display) -> String {
    /// Takes characters until it is full, then refuses the rest, which ends the formatting.
    struct Capped(String, usize);
    impl Write for Capped {
        fn write_str(&mut self, text: &str) -> std::fmt::Result {
            for c in text.chars() {
                if self.1 == MAX_REASON_CHARS {
                    return Err(std::fmt::Error);
                }
                self.0.push(c);
                self.1 += 1;
            }
            Ok(())
        }
    }
    let mut capped = Capped(String::new(), 0);
    let _ = write!(capped, "{reason}");
    capped.0
}

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
    /// Records the transport refused before they were decoded, not counted yet.
    upfront: Refused,
}

impl RequestTally {
    /// A tally for a request whose transport already refused `upfront` (records of a JSON body
    /// that did not deserialize); they are counted as the numbering reaches them.
    pub fn new(upfront: Refused) -> Self {
        RequestTally {
            by_reason: upfront.by_reason(),
            upfront,
            ..RequestTally::default()
        }
    }

    /// Counts the next record; returns its index in the request. Records the transport refused
    /// are counted on the way.
    pub fn next_index(&mut self) -> u64 {
        self.count_upfront();
        self.received += 1;
        self.received - 1
    }

    /// Counts the records the transport refused after the last one decoded, and lets go of
    /// their marks.
    pub fn end_of_records(&mut self) {
        self.count_upfront();
        self.upfront = Refused::default();
    }

    /// Counts the run of records the transport refused from the next index on; the reasons it
    /// kept are listed while there is room. Their counts by reason are already in `by_reason`.
    fn count_upfront(&mut self) {
        let run = self.upfront.run_at(self.received);
        if run == 0 {
            return;
        }
        let upto = self.received + run;
        let room = MAX_LISTED_REJECTIONS.saturating_sub(self.listed.len());
        let kept = self
            .upfront
            .detailed()
            .iter()
            .filter(|(index, _)| (self.received..upto).contains(index))
            .take(room);
        self.listed
            .extend(kept.map(|(index, invalid)| (*index, invalid.to_reason())));
        self.received = upto;
        self.rejected += run;
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
    fn records_the_transport_refused_are_numbered_in_around_the_decoded_ones() {
        let mut upfront = Refused::default();
        for index in [0, 1, 5, 6, 7, 8, 12] {
            upfront.add(
                index,
                RejectReason::MalformedRecord,
                &format_args!("bad {index}"),
            );
        }
        let mut tally = RequestTally::new(upfront);
        let decoded: Vec<u64> = (0..6).map(|_| tally.next_index()).collect();
        assert_eq!(decoded, [2, 3, 4, 9, 10, 11]);
        tally.invalid(
            10,
            &Invalid::new(RejectReason::InvalidSeverity, "severity 99"),
        );
        tally.end_of_records();
        assert_eq!(tally.received, 13);
        let counts: Vec<_> = tally.by_reason.nonzero().collect();
        assert_eq!(
            counts,
            [
                (RejectReason::InvalidSeverity, 1),
                (RejectReason::MalformedRecord, 7)
            ]
        );
        let (rejected, message) = tally.summary("records", "n").unwrap();
        assert_eq!(rejected, 8);
        assert_eq!(
            message,
            "8 of 13 records rejected (n): #0 malformed_record: bad 0; #1 malformed_record: bad 1; \
             #5 malformed_record: bad 5; #6 malformed_record: bad 6; #7 malformed_record: bad 7; \
             #8 malformed_record: bad 8; #10 invalid_severity: severity 99; \
             #12 malformed_record: bad 12"
        );
    }

    #[test]
    fn a_reason_is_written_no_further_than_its_cap() {
        struct Endless;
        impl std::fmt::Display for Endless {
            fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                loop {
                    f.write_str("é")?;
                }
            }
        }
        assert_eq!(capped_reason(Endless), "é".repeat(MAX_REASON_CHARS));
        assert_eq!(capped_reason("short"), "short");
    }

    #[test]
    fn long_reasons_are_cut() {
        let mut tally = tally(1);
        tally.reject(0, "x".repeat(5000));
        let (_, message) = tally.summary("records", "n").unwrap();
        assert!(message.len() < 500, "{}", message.len());
    }
}
