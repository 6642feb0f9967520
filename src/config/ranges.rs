//! One-line refusals of numeric options outside their ranges, each naming the flag, the range and
//! the value given.

use std::ops::RangeInclusive;
use std::time::Duration;

use super::{ByteSize, ConfigError, HumanDuration};

/// Bytes in a KiB, MiB and GiB, for the ranges.
pub(super) const KIB: u64 = 1 << 10;
/// Bytes in a MiB.
pub(super) const MIB: u64 = 1 << 20;
/// Bytes in a GiB.
pub(super) const GIB: u64 = 1 << 30;

/// A count within `range`; `off` names the one value outside it that means something (and must
/// then be the range's start), or is empty.
pub(super) fn count(
    flag: &str,
    value: usize,
    range: RangeInclusive<usize>,
    off: &str,
) -> Result<(), ConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    let (start, end) = (range.start(), range.end());
    let from = if off.is_empty() {
        start.to_string()
    } else {
        off.to_owned()
    };
    Err(ConfigError::Invalid(format!(
        "{flag} must be from {from} to {end}, not {value}"
    )))
}

/// A size within `range`, or 0 when `off` names what 0 means.
pub(super) fn bytes(
    flag: &str,
    value: ByteSize,
    range: RangeInclusive<u64>,
    off: &str,
) -> Result<(), ConfigError> {
    if range.contains(&value.0) || (value.0 == 0 && !off.is_empty()) {
        return Ok(());
    }
    let (start, end) = (ByteSize(*range.start()), ByteSize(*range.end()));
    let zero = if off.is_empty() {
        String::new()
    } else {
        format!("{off}, or ")
    };
    Err(ConfigError::Invalid(format!(
        "{flag} must be {zero}from {start} to {end}, not {value}"
    )))
}

/// A duration within `range`, or 0 when `off` names what 0 means.
pub(super) fn duration(
    flag: &str,
    value: HumanDuration,
    range: RangeInclusive<Duration>,
    off: Option<&str>,
) -> Result<(), ConfigError> {
    if range.contains(&value.0) || (value.0.is_zero() && off.is_some()) {
        return Ok(());
    }
    let (start, end) = (HumanDuration(*range.start()), HumanDuration(*range.end()));
    let zero = off.map(|off| format!("{off}, or ")).unwrap_or_default();
    Err(ConfigError::Invalid(format!(
        "{flag} must be {zero}from {start} to {end}, not {value}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_out_of_range_is_one_line_naming_the_flag_the_range_and_the_value() {
        let err = count("--shards", 1_000_000_000, 0..=1024, "0 (one per core)").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid configuration: --shards must be from 0 (one per core) to 1024, not 1000000000"
        );
        let err = bytes("--max-request-bytes", ByteSize(0), KIB..=GIB, "").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid configuration: --max-request-bytes must be from 1KiB to 1GiB, not 0"
        );
        let one_ns = HumanDuration(Duration::from_nanos(1));
        let range = Duration::from_secs(1)..=Duration::from_secs(86_400);
        let err = duration(
            "--max-connection-age",
            one_ns,
            range.clone(),
            Some("0s (never)"),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid configuration: --max-connection-age must be 0s (never), or from 1s to 1day, not "),
            "{err}"
        );
        assert!(duration(
            "--max-connection-age",
            HumanDuration(Duration::ZERO),
            range,
            Some("0s (never)")
        )
        .is_ok());
    }
}
