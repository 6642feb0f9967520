//! `loghaul.v1.LogQuery`: reading a tenant's records back, page by page (`Query`) or live (`Tail`).
//!
//! - [`filter`]: the wire filter validated once, page-size rules.
//! - [`cursor`]: the opaque (ts, id, received_at) position of a record.
//! - [`service`]: the gRPC handlers; the tenant comes from the auth layer, never the request.
//! - [`tail`]: the follow loop of one subscriber: polls the database (so records committed by any
//!   replica show up), bounded buffer, dropped when too slow.
//!
//! The SQL lives with the other storage code, in `storage::reader`.

pub mod cursor;
pub mod filter;
pub mod service;
pub mod tail;

use std::collections::BTreeMap;

use crate::proto::v1::StoredRecord;
use crate::storage::reader::StoredRow;

fn timestamp(ts: chrono::DateTime<chrono::Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ts.timestamp(),
        nanos: ts.timestamp_subsec_nanos() as i32,
    }
}

/// A stored row as the wire record, with its cursor.
pub fn to_wire(row: StoredRow) -> StoredRecord {
    let attributes =
        match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&row.attributes) {
            Ok(object) => object
                .into_iter()
                .map(|(key, value)| match value {
                    serde_json::Value::String(text) => (key, text),
                    other => (key, other.to_string()),
                })
                .collect(),
            Err(_) => BTreeMap::new(),
        };
    StoredRecord {
        cursor: row.cursor().encode(),
        timestamp: Some(timestamp(row.ts)),
        severity: i32::from(row.severity),
        service: row.service,
        message: row.message,
        attributes,
        trace_id: row.trace_id.unwrap_or_default(),
        span_id: row.span_id.unwrap_or_default(),
        received_at: Some(timestamp(row.received_at)),
    }
}
