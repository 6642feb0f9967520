//! The record as the pipeline carries and the database stores it, after validation.

use std::sync::Arc;

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
    /// The labels of the stream it came in (a Loki stream's, an OpenTelemetry resource's
    /// attributes) as a JSON object of strings, serialized once per stream and shared by its
    /// records.
    pub labels: Arc<str>,
    /// Its own attributes (structured metadata) as a JSON object, serialized once at validation.
    pub attributes: String,
    /// W3C trace id, never all zero.
    pub trace_id: Option<[u8; 16]>,
    /// W3C span id, never all zero.
    pub span_id: Option<[u8; 8]>,
}

/// What a record costs in memory beyond its strings: its slot in a `Vec<Record>`, plus the
/// allocator's rounding of its string allocations. Charged for every record whatever its
/// size, because a record of 2 bytes on the wire still takes this much once decoded.
pub const RECORD_OVERHEAD_BYTES: usize = std::mem::size_of::<Record>() + 64;

impl Record {
    /// Approximate heap and inline size, used for batch sizing and the memory budget. The
    /// stream's labels count with each record: held once, they are written with each row, and
    /// a batch's statement holds them once per row.
    pub fn size_bytes(&self) -> usize {
        RECORD_OVERHEAD_BYTES
            + self.service.len()
            + self.message.len()
            + self.labels.len()
            + self.attributes.len()
    }
}
