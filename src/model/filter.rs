//! A validated read filter: the wire `Filter` checked once, with the reason for anything refused.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::InvalidRequest;
use crate::proto::v1;

/// Records per page when the request does not say.
pub(crate) const DEFAULT_PAGE_SIZE: usize = 100;
/// Largest page a client may ask for.
pub(crate) const MAX_PAGE_SIZE: usize = 1000;
/// Most services or attributes one filter may name (each becomes a condition in SQL).
pub(crate) const MAX_FILTER_TERMS: usize = 64;
/// Longest `contains` text.
pub(crate) const MAX_CONTAINS_BYTES: usize = 1024;

/// Which records match; every condition is optional.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    /// Inclusive lower bound on the timestamp.
    pub from: Option<DateTime<Utc>>,
    /// Exclusive upper bound on the timestamp.
    pub to: Option<DateTime<Utc>>,
    /// Any of these services (empty: all).
    pub services: Vec<String>,
    /// Severity at least this (0: all).
    pub min_severity: i16,
    /// Message contains this text.
    pub contains: Option<String>,
    /// Every attribute has exactly this value.
    pub attributes: BTreeMap<String, String>,
}

fn invalid(message: impl Into<String>) -> InvalidRequest {
    InvalidRequest(message.into())
}

fn timestamp(
    name: &str,
    ts: Option<prost_types::Timestamp>,
) -> Result<Option<DateTime<Utc>>, InvalidRequest> {
    let Some(ts) = ts else { return Ok(None) };
    let nanos = u32::try_from(ts.nanos)
        .ok()
        .filter(|nanos| *nanos < 1_000_000_000)
        .ok_or_else(|| invalid(format!("filter.{name}: nanos {} out of range", ts.nanos)))?;
    DateTime::from_timestamp(ts.seconds, nanos)
        .map(Some)
        .ok_or_else(|| {
            invalid(format!(
                "filter.{name}: {}s is not a representable time",
                ts.seconds
            ))
        })
}

impl Filter {
    /// Checks a wire filter (absent means "everything").
    pub fn from_proto(wire: Option<v1::Filter>) -> Result<Filter, InvalidRequest> {
        let Some(wire) = wire else {
            return Ok(Filter::default());
        };
        let from = timestamp("from", wire.from)?;
        let to = timestamp("to", wire.to)?;
        if let (Some(from), Some(to)) = (from, to) {
            if from >= to {
                return Err(invalid(format!(
                    "bad time range: from ({}) must be before to ({})",
                    from.to_rfc3339(),
                    to.to_rfc3339()
                )));
            }
        }
        let min_severity = i16::try_from(wire.min_severity)
            .ok()
            .filter(|severity| (0..=24).contains(severity))
            .ok_or_else(|| {
                invalid(format!(
                    "filter.min_severity {} is outside OpenTelemetry's 0..=24",
                    wire.min_severity
                ))
            })?;
        if wire.services.len() > MAX_FILTER_TERMS || wire.attributes.len() > MAX_FILTER_TERMS {
            return Err(invalid(format!(
                "a filter names at most {MAX_FILTER_TERMS} services and {MAX_FILTER_TERMS} attributes"
            )));
        }
        if wire.contains.len() > MAX_CONTAINS_BYTES {
            return Err(invalid(format!(
                "filter.contains is longer than {MAX_CONTAINS_BYTES} bytes"
            )));
        }
        let has_nul = wire.contains.contains('\0')
            || wire.services.iter().any(|service| service.contains('\0'))
            || wire
                .attributes
                .iter()
                .any(|(key, value)| key.contains('\0') || value.contains('\0'));
        if has_nul {
            return Err(invalid("filters cannot contain NUL characters"));
        }
        Ok(Filter {
            from,
            to,
            services: wire.services,
            min_severity,
            contains: Some(wire.contains).filter(|text| !text.is_empty()),
            attributes: wire.attributes.into_iter().collect(),
        })
    }

    /// The attributes as the JSON object `@>` compares against.
    pub fn attributes_json(&self) -> String {
        serde_json::to_string(&self.attributes).expect("a map of strings always serializes")
    }
}

/// The page size a request asks for: 0 means the default, beyond the maximum is refused.
pub(crate) fn page_size(requested: u32) -> Result<usize, InvalidRequest> {
    match requested as usize {
        0 => Ok(DEFAULT_PAGE_SIZE),
        size if size > MAX_PAGE_SIZE => Err(invalid(format!(
            "page_size {size} is too large; the maximum is {MAX_PAGE_SIZE}"
        ))),
        size => Ok(size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(seconds: i64) -> Option<prost_types::Timestamp> {
        Some(prost_types::Timestamp { seconds, nanos: 0 })
    }

    #[test]
    fn a_reversed_range_and_bad_values_say_why() {
        let reversed = v1::Filter {
            from: ts(200),
            to: ts(100),
            ..v1::Filter::default()
        };
        let err = Filter::from_proto(Some(reversed)).unwrap_err();
        assert!(err.to_string().contains("bad time range"), "{err}");
        let severity = v1::Filter {
            min_severity: 99,
            ..v1::Filter::default()
        };
        assert!(Filter::from_proto(Some(severity)).is_err());
        let nanos = v1::Filter {
            from: Some(prost_types::Timestamp {
                seconds: 1,
                nanos: -1,
            }),
            ..v1::Filter::default()
        };
        assert!(Filter::from_proto(Some(nanos)).is_err());
    }

    #[test]
    fn page_sizes_default_and_cap() {
        assert_eq!(page_size(0).unwrap(), DEFAULT_PAGE_SIZE);
        assert_eq!(page_size(1000).unwrap(), 1000);
        let err = page_size(1001).unwrap_err();
        assert!(err.to_string().contains("too large"), "{err}");
    }

    #[test]
    fn empty_fields_mean_no_condition() {
        let filter = Filter::from_proto(Some(v1::Filter::default())).unwrap();
        assert_eq!(filter, Filter::default());
        assert_eq!(filter.attributes_json(), "{}");
    }
}
