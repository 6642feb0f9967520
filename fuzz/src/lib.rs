//! Invariants the fuzz targets check on every record that passes validation.

use chrono::{DateTime, Utc};
use loghaul::record::Record;

/// Panics (a finding) unless the record is one both databases store as it is.
pub fn check_storable(record: &Record, now: DateTime<Utc>) {
    for text in [&record.service, &record.message, &record.attributes] {
        assert!(!text.contains('\0'), "a NUL passed validation");
    }
    assert!(!record.labels.contains('\0'), "a NUL passed validation");
    assert!(!record.service.is_empty());
    assert_eq!(record.ts.timestamp_subsec_nanos() % 1000, 0, "microseconds");
    assert!(record.ts.timestamp() > 0);
    assert!(record.ts <= now + chrono::TimeDelta::minutes(10));
    assert!((0..=24).contains(&record.severity));
    let attributes: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&record.attributes).expect("attributes are a JSON object");
    assert!(attributes.values().all(serde_json::Value::is_string));
    // An all-zero id is W3C's "none": validation must not keep it.
    assert_ne!(record.trace_id, Some([0; 16]));
    assert_ne!(record.span_id, Some([0; 8]));
    let _ = record.size_bytes();
}
