//! Any bytes a client can put in a LogRecord: decoding never panics, and a record that passes
//! validation is one the databases can store (no NUL, microsecond time, attributes as a JSON
//! object of strings, ids in lowercase hex).
#![no_main]

use chrono::{DateTime, TimeDelta, Utc};
use libfuzzer_sys::fuzz_target;
use loghaul::proto::v1::LogRecord;
use loghaul::ingest::validate::{validate, Limits};
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(wire) = LogRecord::decode(data) else {
        return;
    };
    let limits = Limits {
        max_message_bytes: 1024,
        max_age: Some(TimeDelta::days(7)),
    };
    let now = DateTime::<Utc>::from_timestamp(1_764_417_600, 0).unwrap();
    let Ok(record) = validate(wire, &limits, now) else {
        return;
    };
    loghaul_fuzz::check_storable(&record, now);
});
