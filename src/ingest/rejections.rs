//! What a unary request (an OTLP export, a Loki push) reports about its refused records: the exact
//! count, and the first few by their position in the request, in one line a client can log.
//! [`Refused`] is how a JSON transcoder keeps the records it refused, one bit each.

use std::fmt::{self, Write};

use crate::ingest::validate::{Invalid, RejectReason};
use crate::model::reject::RejectionCounts;
use crate::pipeline::ack::RowRejection;

/// Rejections spelled out in the summary; the count stays exact beyond it. Clients log the
/// message, so it should stay readable in one log line.
pub(crate) const MAX_LISTED_REJECTIONS: usize = 10;
/// Longest reason quoted in the summary; a database's refusal can be long, and a reason that
/// quotes the input as long as the input.
pub(crate) const MAX_REASON_CHARS: usize = 200;

/// `reason` cut to [`MAX_REASON_CHARS`], formatted no further than that.
pub(crate) fn capped_reason(reason: impl std::fmt::Display) -> String {
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

/// The records a transcoder refused, by request index: all of them counted, by reason, and
/// marked one bit each (what the pipeline needs to number the others); the first
/// [`MAX_LISTED_REJECTIONS`] kept with their reason, cut to a few hundred characters.
///
/// The reply names no more than that: rejections are listed in request order, and the
/// transcoder's come before any other of a higher index, so a reason past the
/// `MAX_LISTED_REJECTIONS`th could never be shown.
#[derive(Debug, Default)]
pub struct Refused {
    /// Bit `i % 64` of word `i / 64` is set when record `i` was refused.
    marks: Vec<u64>,
    count: u64,
    by_reason: RejectionCounts,
    detailed: Vec<(u64, Invalid)>,
}

/// What one kept reason may hold: the text at its longest in UTF-8, and its place in the list.
const DETAIL_BYTES: usize = 4 * MAX_REASON_CHARS + std::mem::size_of::<(u64, Invalid)>();

impl Refused {
    /// Records refused.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Whether record `index` was refused.
    pub fn contains(&self, index: u64) -> bool {
        let (word, bit) = Self::place(index);
        self.marks
            .get(word)
            .is_some_and(|marks| marks & (1 << bit) != 0)
    }

    /// The refused records' indexes, in order.
    pub fn indexes(&self) -> impl Iterator<Item = u64> + '_ {
        self.marks.iter().enumerate().flat_map(|(word, &marks)| {
            (0..64)
                .filter(move |bit| marks & (1 << bit) != 0)
                .map(move |bit| word as u64 * 64 + bit)
        })
    }

    /// The first refused records with their reason, in order.
    pub fn detailed(&self) -> &[(u64, Invalid)] {
        &self.detailed
    }

    /// How many records from `index` on were refused in a row.
    pub fn run_at(&self, index: u64) -> u64 {
        let mut run = 0;
        loop {
            let (word, bit) = Self::place(index + run);
            let Some(&marks) = self.marks.get(word) else {
                return run;
            };
            let ones = u64::from((marks >> bit).trailing_ones()).min(64 - bit as u64);
            run += ones;
            if ones < 64 - bit as u64 {
                return run;
            }
        }
    }

    /// Refused records counted by reason.
    pub fn by_reason(&self) -> RejectionCounts {
        self.by_reason
    }

    /// Bytes held.
    pub fn held_bytes(&self) -> usize {
        self.marks.capacity() * 8 + self.detailed.capacity() * DETAIL_BYTES
    }

    /// Bytes that refusing record `index` would add to what is held, at most.
    pub(crate) fn growth_for(&self, index: u64) -> usize {
        let words = Self::place(index).0 + 1;
        let marks = if words > self.marks.capacity() {
            (Self::capacity_for(words, self.marks.capacity()) - self.marks.capacity()) * 8
        } else {
            0
        };
        let detail = if self.detailed.len() < MAX_LISTED_REJECTIONS
            && self.detailed.len() == self.detailed.capacity()
        {
            MAX_LISTED_REJECTIONS * DETAIL_BYTES
        } else {
            0
        };
        marks + detail
    }

    /// Counts record `index` refused for `reason`, later than any refused before it; `detail`
    /// is written out, up to its first characters, only when the reason is kept.
    pub fn add(&mut self, index: u64, reason: RejectReason, detail: &dyn fmt::Display) {
        let (word, bit) = Self::place(index);
        if word >= self.marks.capacity() {
            let capacity = Self::capacity_for(word + 1, self.marks.capacity());
            self.marks.reserve_exact(capacity - self.marks.len());
        }
        if word >= self.marks.len() {
            self.marks.resize(word + 1, 0);
        }
        self.marks[word] |= 1 << bit;
        self.count += 1;
        self.by_reason.add(reason);
        if self.detailed.len() < MAX_LISTED_REJECTIONS {
            self.detailed.reserve_exact(MAX_LISTED_REJECTIONS);
            self.detailed
                .push((index, Invalid::new(reason, capped_reason(detail))));
        }
    }

    fn place(index: u64) -> (usize, u32) {
        ((index / 64) as usize, (index % 64) as u32)
    }

    /// The bitmap doubles, as a `Vec` would, but by a size known before it grows.
    fn capacity_for(words: usize, capacity: usize) -> usize {
        words.max(capacity * 2).max(16)
    }
}

/// The running outcome of one request.
#[derive(Debug, Default)]
pub(crate) struct RequestTally {
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
    pub(crate) fn new(upfront: Refused) -> Self {
        RequestTally {
            by_reason: upfront.by_reason(),
            upfront,
            ..RequestTally::default()
        }
    }

    /// Counts the next record; returns its index in the request. Records the transport refused
    /// are counted on the way.
    pub(crate) fn next_index(&mut self) -> u64 {
        self.count_upfront();
        self.received += 1;
        self.received - 1
    }

    /// Counts the records the transport refused after the last one decoded, and lets go of
    /// their marks.
    pub(crate) fn end_of_records(&mut self) {
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
    pub(crate) fn invalid(&mut self, index: u64, invalid: &Invalid) {
        self.by_reason.add(invalid.reason);
        self.reject(index, invalid.to_reason());
    }

    /// Counts the rows the database refused, mapped back to request indexes by `queued_at`.
    pub(crate) fn refused(&mut self, refused: Vec<RowRejection>, queued_at: &[u64]) {
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
    pub(crate) fn summary(mut self, records: &str, numbering: &str) -> Option<(u64, String)> {
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

    #[test]
    fn refused_records_are_one_bit_each_and_only_the_first_keep_a_reason() {
        let mut refused = Refused::default();
        let long = "z".repeat(10_000);
        let mut indexes = Vec::new();
        for index in (3..100_000u64).filter(|index| index % 7 != 0) {
            refused.add(index, RejectReason::MalformedRecord, &long);
            indexes.push(index);
        }
        assert_eq!(refused.count(), indexes.len() as u64);
        assert!(refused.indexes().eq(indexes.iter().copied()));
        assert!(!refused.contains(7) && refused.contains(8) && !refused.contains(100_000));
        assert_eq!(refused.run_at(0), 0);
        assert_eq!(refused.run_at(3), 4);
        assert_eq!(refused.run_at(8), 6);
        assert_eq!(refused.detailed().len(), MAX_LISTED_REJECTIONS);
        assert_eq!(refused.detailed()[0].0, 3);
        for (_, invalid) in refused.detailed() {
            assert_eq!(invalid.detail.chars().count(), MAX_REASON_CHARS);
        }
        assert!(refused.held_bytes() < 64 * 1024, "{}", refused.held_bytes());
        let counts: Vec<_> = refused.by_reason().nonzero().collect();
        assert_eq!(
            counts,
            [(RejectReason::MalformedRecord, indexes.len() as u64)]
        );

        let mut run = Refused::default();
        for index in 60..200 {
            run.add(index, RejectReason::InvalidTimestamp, &"t");
        }
        assert_eq!(run.run_at(60), 140);
        assert_eq!(run.run_at(64), 136);
        assert_eq!(run.run_at(199), 1);
        assert_eq!(run.run_at(200), 0);
    }
}
