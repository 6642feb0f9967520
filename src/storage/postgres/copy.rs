//! A batch as the body of `COPY logs (…) FROM STDIN (FORMAT binary)`: every value in PostgreSQL's
//! binary wire form, so the server neither parses text (timestamps, numbers) nor builds and takes
//! apart arrays, which `INSERT … SELECT FROM UNNEST` of one array per column costs per row.

use chrono::{DateTime, Utc};

use crate::storage::row::Row;

/// The statement the body is sent to.
pub(super) const COPY_SQL: &str =
    "COPY logs (tenant, ts, severity, service, message, labels, attributes, trace_id_bytes, span_id_bytes) \
     FROM STDIN (FORMAT binary)";

/// The binary format's signature, then 32-bit flags and header-extension length, both 0.
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// Columns per tuple.
const COLUMNS: i16 = 9;
/// The end of the data: a tuple of -1 columns.
const TRAILER: [u8; 2] = (-1i16).to_be_bytes();
/// jsonb's binary input is a version byte, then the JSON text.
const JSONB_VERSION: u8 = 1;
/// Microseconds from the Unix epoch to PostgreSQL's, 2000-01-01 00:00:00 UTC.
pub(super) const POSTGRES_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// The COPY body of `rows`.
pub(super) fn encode<'a>(rows: impl ExactSizeIterator<Item = &'a Row<'a>>) -> Vec<u8> {
    let mut rows = rows.peekable();
    // Ten length words and the fixed-size values, plus the strings.
    let estimate = rows.peek().map_or(0, |row| tuple_len(row)) * (rows.len() + 1);
    let mut out = Vec::with_capacity(HEADER.len() + estimate + TRAILER.len());
    out.extend_from_slice(HEADER);
    for row in rows {
        let record = row.record;
        out.extend_from_slice(&COLUMNS.to_be_bytes());
        text(&mut out, row.tenant);
        fixed(&mut out, &timestamp(record.ts).to_be_bytes());
        fixed(&mut out, &record.severity.to_be_bytes());
        text(&mut out, &record.service);
        text(&mut out, &record.message);
        jsonb(&mut out, &record.labels);
        jsonb(&mut out, &record.attributes);
        nullable(&mut out, record.trace_id.as_ref().map(<[u8; 16]>::as_slice));
        nullable(&mut out, record.span_id.as_ref().map(<[u8; 8]>::as_slice));
    }
    out.extend_from_slice(&TRAILER);
    out
}

/// About what one row takes in the body.
fn tuple_len(row: &Row<'_>) -> usize {
    let record = row.record;
    2 + 9 * 4
        + 2
        + 8
        + 2
        + row.tenant.len()
        + record.service.len()
        + record.message.len()
        + record.labels.len()
        + record.attributes.len()
        + 16
        + 8
}

/// `timestamptz`: microseconds since PostgreSQL's epoch. Records hold whole microseconds.
fn timestamp(ts: DateTime<Utc>) -> i64 {
    ts.timestamp_micros() - POSTGRES_EPOCH_MICROS
}

fn fixed(out: &mut Vec<u8>, value: &[u8]) {
    out.extend_from_slice(&(value.len() as i32).to_be_bytes());
    out.extend_from_slice(value);
}

/// jsonb: its version byte, then the JSON text.
fn jsonb(out: &mut Vec<u8>, json: &str) {
    out.extend_from_slice(&((json.len() + 1) as i32).to_be_bytes());
    out.push(JSONB_VERSION);
    out.extend_from_slice(json.as_bytes());
}

fn text(out: &mut Vec<u8>, value: &str) {
    fixed(out, value.as_bytes());
}

/// `bytea` or NULL.
fn nullable(out: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        Some(value) => fixed(out, value),
        None => out.extend_from_slice(&(-1i32).to_be_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    #[test]
    fn a_row_is_encoded_field_by_field() {
        let record = Record {
            ts: "2000-01-01T00:00:01.000002Z".parse().unwrap(),
            severity: 9,
            service: "api".into(),
            message: "hi".into(),
            labels: r#"{"job":"a"}"#.into(),
            attributes: "{}".into(),
            trace_id: None,
            span_id: Some([0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]),
        };
        let rows = [Row {
            tenant: "t",
            record: &record,
        }];
        let body = encode(rows.iter());
        assert!(body.starts_with(b"PGCOPY\n\xff\r\n\0"));
        let tuple = &body[HEADER.len()..];
        assert_eq!(&tuple[..2], &9i16.to_be_bytes());
        assert_eq!(&tuple[2..7], b"\0\0\0\x01t");
        assert_eq!(&tuple[7..11], &8i32.to_be_bytes());
        assert_eq!(&tuple[11..19], &1_000_002i64.to_be_bytes());
        assert_eq!(&tuple[19..25], b"\0\0\0\x02\0\x09");
        assert!(body
            .windows(16)
            .any(|window| window == b"\0\0\0\x0c\x01{\"job\":\"a\"}"));
        assert!(body.ends_with(b"\0\0\0\x08\0\xf0\x67\xaa\x0b\xa9\x02\xb7\xff\xff"));
        let null_trace = body
            .windows(8)
            .any(|window| window == b"{}\xff\xff\xff\xff\0\0");
        assert!(null_trace, "trace_id is NULL");
    }
}
