//! Why a record is refused: one code per cause, shared by validation, the batcher's metrics
//! and the answers clients read.

/// Why a record was refused: the `reason` label of `loghaul_records_rejected_total` and the code
/// before the colon in a rejection's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectReason {
    /// The message exceeds `--max-message-bytes`.
    MessageTooLarge,
    /// More attributes than a record may have (128).
    TooManyAttributes,
    /// An attribute key longer than 256 bytes.
    AttributeKeyTooLarge,
    /// An attribute value longer than 16 KiB.
    AttributeValueTooLarge,
    /// A service name longer than 256 bytes.
    ServiceTooLarge,
    /// A NUL character, which PostgreSQL text cannot hold.
    NulCharacter,
    /// More than 10 minutes ahead of the server's clock.
    TimestampInFuture,
    /// Older than the retention window (`--retention`): it would be deleted at the next run.
    TimestampTooOld,
    /// Out of the representable range, or not after the Unix epoch.
    InvalidTimestamp,
    /// A severity number outside 0..=24.
    InvalidSeverity,
    /// A trace id that is not 32 hex characters.
    InvalidTraceId,
    /// A span id that is not 16 hex characters.
    InvalidSpanId,
    /// The database refused the row (reported after the commit of its neighbours).
    StorageRefused,
    /// The record's bytes are not a valid protobuf record (a string that is not UTF-8, a field
    /// cut short); its neighbours in the message are stored.
    MalformedRecord,
}

impl RejectReason {
    /// Every reason, so dashboards can show zero-valued series.
    pub const ALL: [RejectReason; 14] = [
        RejectReason::MessageTooLarge,
        RejectReason::TooManyAttributes,
        RejectReason::AttributeKeyTooLarge,
        RejectReason::AttributeValueTooLarge,
        RejectReason::ServiceTooLarge,
        RejectReason::NulCharacter,
        RejectReason::TimestampInFuture,
        RejectReason::TimestampTooOld,
        RejectReason::InvalidTimestamp,
        RejectReason::InvalidSeverity,
        RejectReason::InvalidTraceId,
        RejectReason::InvalidSpanId,
        RejectReason::StorageRefused,
        RejectReason::MalformedRecord,
    ];

    /// The stable code used as metric label and reason prefix.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::MessageTooLarge => "message_too_large",
            RejectReason::TooManyAttributes => "too_many_attributes",
            RejectReason::AttributeKeyTooLarge => "attribute_key_too_large",
            RejectReason::AttributeValueTooLarge => "attribute_value_too_large",
            RejectReason::ServiceTooLarge => "service_too_large",
            RejectReason::NulCharacter => "nul_character",
            RejectReason::TimestampInFuture => "timestamp_in_future",
            RejectReason::TimestampTooOld => "timestamp_too_old",
            RejectReason::InvalidTimestamp => "invalid_timestamp",
            RejectReason::InvalidSeverity => "invalid_severity",
            RejectReason::InvalidTraceId => "invalid_trace_id",
            RejectReason::InvalidSpanId => "invalid_span_id",
            RejectReason::StorageRefused => "storage_refused",
            RejectReason::MalformedRecord => "malformed_record",
        }
    }
}

/// Rejections of one message, counted by reason while its records are decoded, so that the
/// metric is touched once per reason and message rather than once per record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RejectionCounts([u64; RejectReason::ALL.len()]);

impl RejectionCounts {
    /// Counts one record refused for `reason`.
    pub fn add(&mut self, reason: RejectReason) {
        self.0[reason as usize] += 1;
    }

    /// The reasons that occurred, with their counts.
    pub fn nonzero(&self) -> impl Iterator<Item = (RejectReason, u64)> + '_ {
        RejectReason::ALL
            .iter()
            .zip(self.0)
            .filter(|(_, count)| *count > 0)
            .map(|(reason, count)| (*reason, count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_slot() {
        let mut counts = RejectionCounts::default();
        for (position, reason) in RejectReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, position, "ALL is in declaration order");
            counts.add(*reason);
        }
        counts.add(RejectReason::NulCharacter);
        let seen: Vec<_> = counts.nonzero().collect();
        assert_eq!(seen.len(), RejectReason::ALL.len());
        assert!(seen.contains(&(RejectReason::NulCharacter, 2)));
    }
}
