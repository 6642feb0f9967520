//! What a read returns and how much it may: a stored record as read back, the row and byte budget
//! of one read, and the collector both backends fill while they stream rows.

use chrono::{DateTime, Utc};

use crate::model::cursor::Cursor;

/// A stored record as read back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoredRow {
    /// Unique id (not commit-ordered on PostgreSQL; see `postgres::tail`).
    pub id: i64,
    /// The record's timestamp.
    pub ts: DateTime<Utc>,
    /// When the database received it.
    pub received_at: DateTime<Utc>,
    /// Severity number.
    pub severity: i16,
    /// Emitting service.
    pub service: String,
    /// The log line.
    pub message: String,
    /// The labels of its stream as a JSON object of strings.
    pub labels: String,
    /// Its own attributes (structured metadata) as a JSON object.
    pub attributes: String,
    /// Trace id, lowercase hex.
    pub trace_id: Option<String>,
    /// Span id, lowercase hex.
    pub span_id: Option<String>,
}

/// Rows of a counted read that share a window and their label columns: `row` holds those
/// columns, its `ts` the window's end, an empty message.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CountedRow {
    /// The window's end and the label columns.
    pub row: StoredRow,
    /// Rows.
    pub count: i64,
    /// Bytes of their messages.
    pub bytes: i64,
}

/// A row of a counted read as both stores select it, after its window in column 0: the service,
/// the labels, the severity, the attributes, the trace and span ids, the lines and their bytes;
/// `end` is the window's end.
pub(in crate::storage) fn decode_counted<R>(
    row: &R,
    end: DateTime<Utc>,
) -> Result<CountedRow, sqlx::Error>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i16: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(CountedRow {
        row: StoredRow {
            id: 0,
            ts: end,
            received_at: end,
            service: row.try_get(1)?,
            labels: row.try_get(2)?,
            severity: row.try_get(3)?,
            message: String::new(),
            attributes: row.try_get(4)?,
            trace_id: row.try_get(5)?,
            span_id: row.try_get(6)?,
        },
        count: row.try_get(7)?,
        bytes: row.try_get(8)?,
    })
}

/// Bytes of a `StoredRecord` on the wire that do not depend on its text: its framing in the
/// answer, the cursor, two timestamps, the severity, and the tags and lengths of the strings.
const FIXED_WIRE_BYTES: usize = 128;

impl StoredRow {
    /// The row's position, for cursors.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            ts_micros: self.ts.timestamp_micros(),
            id: self.id,
            received_micros: self.received_at.timestamp_micros(),
        }
    }

    /// At least the bytes the row takes as a `StoredRecord` in a Query or Tail answer, so that
    /// answers sized by it stay within their limit. Labels and attributes are JSON here and one
    /// map on the wire: an entry's tags and lengths take at most 6 bytes more than its quotes, colon and
    /// comma, and an entry takes at least 6 bytes of JSON, so twice the JSON bounds the map.
    pub fn wire_bytes(&self) -> usize {
        FIXED_WIRE_BYTES
            + self.service.len()
            + self.message.len()
            + 2 * (self.labels.len() + self.attributes.len())
            + self.trace_id.as_ref().map_or(0, String::len)
            + self.span_id.as_ref().map_or(0, String::len)
    }
}

/// How much one read may return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageSize {
    /// Rows at most.
    pub rows: usize,
    /// Bytes at most, counted by [`StoredRow::wire_bytes`]; the first row is returned whatever
    /// its size, so a record larger than the page is still readable, alone.
    pub bytes: usize,
}

/// The rows one read returned.
#[derive(Debug, Default, PartialEq)]
pub struct Page {
    /// In the read's order.
    pub rows: Vec<StoredRow>,
    /// True when a matching row was left out because it would have gone past the byte limit:
    /// there is more to read after the last row.
    pub cut_short: bool,
}

/// Gathers streamed rows until the page is full; the backends stop reading when it says so.
#[derive(Debug)]
pub(in crate::storage) struct Collector {
    size: PageSize,
    bytes: usize,
    page: Page,
}

impl Collector {
    pub(in crate::storage) fn new(size: PageSize) -> Self {
        Collector {
            size,
            bytes: 0,
            page: Page::default(),
        }
    }

    /// Takes `row` if it fits; false once the page is full and reading should stop.
    pub(in crate::storage) fn offer(&mut self, row: StoredRow) -> bool {
        let size = row.wire_bytes();
        if !self.page.rows.is_empty() && self.bytes + size > self.size.bytes {
            self.page.cut_short = true;
            return false;
        }
        self.bytes += size;
        self.page.rows.push(row);
        !self.is_done()
    }

    /// True when no more rows may be taken.
    pub(in crate::storage) fn is_done(&self) -> bool {
        self.page.cut_short || self.page.rows.len() >= self.size.rows
    }

    /// Rows that may still be taken.
    pub(in crate::storage) fn rows_left(&self) -> usize {
        self.size.rows.saturating_sub(self.page.rows.len())
    }

    pub(in crate::storage) fn finish(self) -> Page {
        self.page
    }
}

/// Writes `text` over `field`, in its buffer: a read reuses its rows' buffers
/// (`row_batches.rs`).
pub(in crate::storage) fn overwrite(field: &mut String, text: &str) {
    field.clear();
    field.push_str(text);
}

/// [`overwrite`] for a text that may be missing.
pub(in crate::storage) fn overwrite_option(field: &mut Option<String>, text: Option<&str>) {
    match (field.as_mut(), text) {
        (Some(kept), Some(text)) => overwrite(kept, text),
        (_, text) => *field = text.map(str::to_owned),
    }
}

/// [`overwrite_option`] with `bytes` written as lowercase hex.
pub(in crate::storage) fn overwrite_hex(field: &mut Option<String>, bytes: Option<&[u8]>) {
    let Some(bytes) = bytes else {
        *field = None;
        return;
    };
    let text = field.get_or_insert_with(String::new);
    text.clear();
    // Through a buffer on the stack, a trace id's worth at a time.
    let mut digits = [0; 32];
    for chunk in bytes.chunks(digits.len() / 2) {
        let digits = &mut digits[..chunk.len() * 2];
        hex::encode_to_slice(chunk, digits).expect("the buffer holds two digits a byte");
        text.push_str(std::str::from_utf8(digits).expect("hex digits are ASCII"));
    }
}

/// A microsecond count as a time (saturating at the representable range).
pub(in crate::storage) fn from_micros(micros: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(micros).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, message_bytes: usize) -> StoredRow {
        StoredRow {
            id,
            ts: from_micros(1_795_946_400_000_000),
            received_at: from_micros(1_795_946_400_000_000),
            severity: 9,
            service: "api".into(),
            message: "m".repeat(message_bytes),
            labels: "{}".into(),
            attributes: "{}".into(),
            trace_id: None,
            span_id: None,
        }
    }

    #[test]
    fn an_overwritten_field_holds_the_new_text_alone() {
        let mut text = "a longer text".to_owned();
        overwrite(&mut text, "ab");
        assert_eq!(text, "ab");
        let mut missing = Some("x".to_owned());
        overwrite_option(&mut missing, None);
        assert_eq!(missing, None);
        overwrite_option(&mut missing, Some("y"));
        assert_eq!(missing.as_deref(), Some("y"));
        let mut id = Some("ffffffffffffffffffff".to_owned());
        overwrite_hex(&mut id, Some(&[0x0a, 0xf7, 0x65, 0x19]));
        assert_eq!(id.as_deref(), Some("0af76519"));
        // Longer than the buffer: written in pieces.
        let long: Vec<u8> = (0..=40).collect();
        overwrite_hex(&mut id, Some(&long));
        assert_eq!(id.as_deref(), Some(hex::encode(&long).as_str()));
        overwrite_hex(&mut id, None);
        assert_eq!(id, None);
    }

    #[test]
    fn a_collector_stops_before_the_row_that_would_not_fit() {
        let budget = PageSize {
            rows: 10,
            bytes: 3 * row(0, 1000).wire_bytes(),
        };
        let mut collector = Collector::new(budget);
        assert!(collector.offer(row(1, 1000)));
        assert!(collector.offer(row(2, 1000)));
        assert!(collector.offer(row(3, 1000)));
        assert!(!collector.offer(row(4, 1000)), "the fourth does not fit");
        let batch = collector.finish();
        assert!(batch.cut_short);
        assert_eq!(
            batch.rows.iter().map(|r| r.id).collect::<Vec<_>>(),
            [1, 2, 3]
        );
    }

    #[test]
    fn a_row_larger_than_the_budget_goes_alone_and_the_row_limit_holds() {
        let mut collector = Collector::new(PageSize {
            rows: 10,
            bytes: 100,
        });
        assert!(
            collector.offer(row(1, 5000)),
            "the first row is taken whatever its size"
        );
        assert!(!collector.offer(row(2, 1)));
        let batch = collector.finish();
        assert_eq!(batch.rows.len(), 1);
        assert!(batch.cut_short);

        let mut collector = Collector::new(PageSize {
            rows: 2,
            bytes: usize::MAX,
        });
        assert!(collector.offer(row(1, 1)));
        assert!(!collector.offer(row(2, 1)), "full at two rows");
        let batch = collector.finish();
        assert_eq!(batch.rows.len(), 2);
        assert!(!batch.cut_short, "full by rows is not cut short");
    }
}
