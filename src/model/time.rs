//! Instants as the wire carries them (`google.protobuf.Timestamp`) and as people write them.

use chrono::{DateTime, Utc};
use prost_types::Timestamp;

/// An instant as a protobuf timestamp.
pub(crate) fn to_proto(ts: DateTime<Utc>) -> Timestamp {
    Timestamp {
        seconds: ts.timestamp(),
        nanos: ts.timestamp_subsec_nanos() as i32,
    }
}

/// A protobuf timestamp as an instant; `None` outside chrono's range or with negative nanos.
pub(crate) fn from_proto(ts: &Timestamp) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(ts.seconds, u32::try_from(ts.nanos).ok()?)
}

/// RFC 3339 text (`2026-11-29T10:00:00Z`, any offset) as a protobuf timestamp; the error says
/// what was wrong and how to write it, after `what` (the flag or parameter).
pub(crate) fn parse_rfc3339(what: &str, text: &str) -> Result<Timestamp, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|ts| to_proto(ts.to_utc()))
        .map_err(|err| format!("{what} {text:?}: {err}; write it like 2026-11-29T10:00:00Z"))
}

/// Nanoseconds since the epoch as a protobuf timestamp (before 1970 too).
pub(crate) fn from_unix_nanos(nanos: i128) -> Option<Timestamp> {
    Some(Timestamp {
        seconds: i64::try_from(nanos.div_euclid(1_000_000_000)).ok()?,
        nanos: nanos.rem_euclid(1_000_000_000) as i32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_round_trip_through_the_wire_form() {
        let ts = DateTime::parse_from_rfc3339("2026-11-29T10:00:00.123456789Z")
            .unwrap()
            .to_utc();
        let wire = to_proto(ts);
        assert_eq!((wire.seconds, wire.nanos), (1_795_946_400, 123_456_789));
        assert_eq!(from_proto(&wire), Some(ts));
        assert_eq!(
            from_proto(&Timestamp {
                seconds: 0,
                nanos: -1
            }),
            None
        );
    }

    #[test]
    fn rfc3339_with_an_offset_is_read_as_utc_and_a_bad_one_says_how_to_write_it() {
        let wire = parse_rfc3339("--from", "2026-11-29T11:00:00+01:00").unwrap();
        assert_eq!(wire.seconds, 1_795_946_400);
        let err = parse_rfc3339("--from", "yesterday").unwrap_err();
        assert!(err.starts_with("--from \"yesterday\": "), "{err}");
        assert!(err.ends_with("write it like 2026-11-29T10:00:00Z"), "{err}");
    }

    #[test]
    fn nanoseconds_before_the_epoch_keep_nanos_positive() {
        let wire = from_unix_nanos(-1).unwrap();
        assert_eq!((wire.seconds, wire.nanos), (-1, 999_999_999));
        assert_eq!(from_unix_nanos(i128::MAX), None);
    }
}
