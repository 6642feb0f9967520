//! The opaque position of a stored record: what `Query` pages after and `Tail` resumes from.
//!
//! It is the record's timestamp and id (the keyset `Query` orders by, newest first, with the id
//! breaking ties) plus when it was received (where `Tail` resumes), as base64 of fixed-width
//! integers behind a version byte, so it can change shape later without being mistaken.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use super::InvalidRequest;

const VERSION: u8 = 1;
const ENCODED_BYTES: usize = 1 + 3 * 8;

/// A record's position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// The record's timestamp, microseconds since the epoch.
    pub ts_micros: i64,
    /// The record's id.
    pub id: i64,
    /// When it was received, microseconds since the epoch.
    pub received_micros: i64,
}

impl Cursor {
    /// The text form clients pass back.
    pub fn encode(&self) -> String {
        let mut bytes = Vec::with_capacity(ENCODED_BYTES);
        bytes.push(VERSION);
        bytes.extend_from_slice(&self.ts_micros.to_be_bytes());
        bytes.extend_from_slice(&self.id.to_be_bytes());
        bytes.extend_from_slice(&self.received_micros.to_be_bytes());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Parses a cursor; an empty string is "no cursor".
    pub fn decode(text: &str) -> Result<Option<Cursor>, InvalidRequest> {
        if text.is_empty() {
            return Ok(None);
        }
        let invalid = || {
            InvalidRequest(
                "invalid cursor: pass back a cursor exactly as the server returned it".into(),
            )
        };
        let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| invalid())?;
        if bytes.len() != ENCODED_BYTES || bytes[0] != VERSION {
            return Err(invalid());
        }
        let field = |index: usize| {
            let start = 1 + index * 8;
            i64::from_be_bytes(bytes[start..start + 8].try_into().expect("8 bytes"))
        };
        Ok(Some(Cursor {
            ts_micros: field(0),
            id: field(1),
            received_micros: field(2),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_garbage_is_refused() {
        let cursor = Cursor {
            ts_micros: 1_795_946_400_000_000,
            id: -3,
            received_micros: 42,
        };
        assert_eq!(Cursor::decode(&cursor.encode()).unwrap(), Some(cursor));
        assert_eq!(Cursor::decode("").unwrap(), None);
        for bad in ["not a cursor!", "AAAA", &cursor.encode()[1..]] {
            let err = Cursor::decode(bad).unwrap_err();
            assert!(err.to_string().contains("invalid cursor"), "{bad}: {err}");
        }
    }
}
