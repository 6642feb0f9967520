//! What a detected field's values look like, decided as Loki decides it, with Go's parsers: a
//! whole number, a number, a boolean, a duration (`1m30s`), a size (`10KB`), or else text; and a
//! size written back as Loki writes it for a query (`2KB` → `2.0kB`).

use serde::Serialize;

use crate::loki::logql::go_numbers::parse_bytes;

/// A detected field's type, by its name in Loki's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    /// Text.
    String,
    /// A whole number (64 bits, signed).
    Int,
    /// Any other number.
    Float,
    /// `true`, `f`, `TRUE`…
    Boolean,
    /// `250ms`, `1h2m`…
    Duration,
    /// `512B`, `1.5MB`, `3MiB`…
    Bytes,
}

impl Kind {
    /// The type of `value`, the first of these that reads it, in Loki's order: Go's
    /// `strconv.ParseInt`, `ParseFloat`, `ParseBool`, `time.ParseDuration`, then a size.
    pub(crate) fn of(value: &str) -> Kind {
        if value.parse::<i64>().is_ok() {
            Kind::Int
        } else if is_float(value) {
            Kind::Float
        } else if matches!(
            value,
            "1" | "t"
                | "T"
                | "TRUE"
                | "true"
                | "True"
                | "0"
                | "f"
                | "F"
                | "FALSE"
                | "false"
                | "False"
        ) {
            Kind::Boolean
        } else if is_duration(value) {
            Kind::Duration
        } else if size(value).is_some() {
            Kind::Bytes
        } else {
            Kind::String
        }
    }
}

/// Go's `ParseFloat`: Rust reads the same decimal forms and `inf`/`nan`, but Go refuses a
/// number too large for a float where Rust gives infinity.
fn is_float(value: &str) -> bool {
    value.parse::<f64>().is_ok_and(|number| {
        number.is_finite() || value.to_ascii_lowercase().contains("in") || number.is_nan()
    })
}

/// Go's `time.ParseDuration`: an optional sign, then numbers (with a fraction) each followed
/// by a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`); `0` alone needs none.
fn is_duration(value: &str) -> bool {
    let rest = value.strip_prefix(['+', '-']).unwrap_or(value);
    if rest == "0" {
        return true;
    }
    let mut rest = rest;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let number = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if !rest[..number].bytes().any(|b| b.is_ascii_digit())
            || rest[..number].matches('.').count() > 1
        {
            return false;
        }
        rest = &rest[number..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        if !matches!(
            &rest[..unit],
            "ns" | "us" | "µs" | "μs" | "ms" | "s" | "m" | "h"
        ) {
            return false;
        }
        rest = &rest[unit..];
    }
    true
}

/// A size as go-humanize's `ParseBytes` reads it: digits (with `.` and `,`), optional spaces,
/// and a unit of 1000s (`kB`, `k`) or 1024s (`KiB`, `Ki`), in any case, or none.
pub(crate) fn size(value: &str) -> Option<u64> {
    parse_bytes(value).ok()
}

/// The units a value must end in for Loki to write it back as a size.
const UNITS: [&str; 25] = [
    "b", "kib", "kb", "mib", "mb", "gib", "gb", "tib", "tb", "pib", "pb", "eib", "eb", "ki", "k",
    "mi", "m", "gi", "g", "ti", "t", "pi", "p", "ei", "e",
];

/// A field's value as Loki lists it among a field's values: a size with a unit as go-humanize
/// writes it, without its space (`2KB` → `2.0kB`, `1.5MB` → `1.5MB`), so that it can go into a
/// query as it is; anything else unchanged.
pub(crate) fn listed(value: &str) -> String {
    let lower = value.to_ascii_lowercase();
    match size(value) {
        Some(bytes) if UNITS.iter().any(|unit| lower.ends_with(unit)) => humanized(bytes),
        _ => value.to_owned(),
    }
}

/// go-humanize's `Bytes`, in powers of 1000, one decimal below 10 of a unit.
fn humanized(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    if bytes < 10 {
        return format!("{bytes}B");
    }
    let exponent = ((bytes as f64).ln() / 1000f64.ln()).floor();
    let value = (bytes as f64 / 1000f64.powf(exponent) * 10.0 + 0.5).floor() / 10.0;
    let unit = UNITS[exponent as usize];
    if value < 10.0 {
        format!("{value:.1}{unit}")
    } else {
        format!("{value:.0}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_typed_in_lokis_order() {
        for (value, kind) in [
            ("200", Kind::Int),
            ("+5", Kind::Int),
            ("-3", Kind::Int),
            ("1.5", Kind::Float),
            ("1e3", Kind::Float),
            ("99999999999999999999", Kind::Float),
            ("1e400", Kind::String),
            ("true", Kind::Boolean),
            ("TRUE", Kind::Boolean),
            ("F", Kind::Boolean),
            ("yes", Kind::String),
            ("250ms", Kind::Duration),
            ("1m30s", Kind::Duration),
            ("1.5h", Kind::Duration),
            ("-2s", Kind::Duration),
            ("5d", Kind::String),
            ("10KB", Kind::Bytes),
            ("3MiB", Kind::Bytes),
            ("300kB", Kind::Bytes),
            ("5 k", Kind::Bytes),
            ("1,000", Kind::Bytes),
            ("0x10", Kind::String),
            ("", Kind::String),
            ("GET", Kind::String),
            ("550e8400-e29b-41d4-a716-446655440000", Kind::String),
        ] {
            assert_eq!(Kind::of(value), kind, "{value:?}");
        }
    }

    #[test]
    fn sizes_are_listed_as_loki_writes_them() {
        for (value, listed_as) in [
            ("2KB", "2.0kB"),
            ("12kB", "12kB"),
            ("1.5MB", "1.5MB"),
            ("512B", "512B"),
            ("5KB", "5.0kB"),
            ("300kB", "300kB"),
            ("3MiB", "3.1MB"),
            ("5", "5"),
            ("GET", "GET"),
        ] {
            assert_eq!(listed(value), listed_as, "{value:?}");
        }
    }
}
