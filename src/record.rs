//! The record as the pipeline carries and the database stores it, after validation.

use chrono::{DateTime, Utc};

/// A validated log record, ready to be written. Strings are moved from the wire message, not copied.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// When the event happened, truncated to microseconds (the databases' precision).
    pub ts: DateTime<Utc>,
    /// OpenTelemetry severity number, 0..=24.
    pub severity: i16,
    /// The emitting service, never empty.
    pub service: String,
    /// The log line.
    pub message: String,
    /// Attributes as a JSON object, serialized once at validation.
    pub attributes: String,
    /// W3C trace id as 32 lowercase hex characters.
    pub trace_id: Option<String>,
    /// W3C span id as 16 lowercase hex characters.
    pub span_id: Option<String>,
}

/// What a record costs in memory beyond its strings: its slot in a `Vec<Record>`, plus the
/// allocator's rounding of up to five string allocations. Charged for every record whatever its
/// size, because a record of 2 bytes on the wire still takes this much once decoded.
pub const RECORD_OVERHEAD_BYTES: usize = std::mem::size_of::<Record>() + 64;

impl Record {
    /// Approximate heap and inline size, used for batch sizing and the memory budget.
    pub fn size_bytes(&self) -> usize {
        RECORD_OVERHEAD_BYTES
            + self.service.len()
            + self.message.len()
            + self.attributes.len()
            + self.trace_id.as_ref().map_or(0, String::len)
            + self.span_id.as_ref().map_or(0, String::len)
    }
}
