//! Human-friendly durations (`50ms`, `5s`, `2m`) and byte sizes (`65536`, `64MiB`) for flags and files.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest duration any option takes. Durations are added to and subtracted from the clock
/// (retention cut-offs, deadlines), which overflows far below what `humantime` parses.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A duration written the way people write them: `50ms`, `5s`, `2m`, `1h`, `7d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl FromStr for HumanDuration {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let duration = humantime::parse_duration(text.trim()).map_err(|err| {
            format!("invalid duration {text:?} ({err}); write it like 50ms, 5s, 2m")
        })?;
        if duration > MAX_DURATION {
            return Err(format!(
                "duration {text:?} is too long; at most 100 years (36500d)"
            ));
        }
        Ok(HumanDuration(duration))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A size in bytes: a plain integer, or a number with a unit (`KiB`, `MiB`, `GiB`, `KB`, `MB`, `GB`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// The size as `usize`, saturating on 32-bit targets.
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let trimmed = text.trim();
        let split = trimmed
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(trimmed.len());
        let (digits, unit) = trimmed.split_at(split);
        let invalid =
            || format!("invalid byte size {text:?}; write it like 65536, 256KiB or 64MiB");
        let number: u64 = digits.parse().map_err(|_| invalid())?;
        let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kb" => 1_000,
            "kib" | "k" => 1 << 10,
            "mb" => 1_000_000,
            "mib" | "m" => 1 << 20,
            "gb" => 1_000_000_000,
            "gib" | "g" => 1 << 30,
            _ => return Err(invalid()),
        };
        number
            .checked_mul(multiplier)
            .map(ByteSize)
            .ok_or_else(invalid)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
        for (size, name) in units {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{name}", self.0 / size);
            }
        }
        write!(f, "{}", self.0)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Number(number) => Ok(ByteSize(number)),
            Raw::Text(text) => text.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_the_usual_units() {
        let parse = |text: &str| text.parse::<HumanDuration>().map(|d| d.0);
        assert_eq!(parse("50ms"), Ok(Duration::from_millis(50)));
        assert_eq!(parse("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert!(parse("five").is_err());
        assert!(parse("").is_err());
        assert_eq!(parse("36500d"), Ok(MAX_DURATION));
        let too_long = parse("100000000y").unwrap_err();
        assert!(too_long.contains("at most 100 years"), "{too_long}");
    }

    #[test]
    fn byte_sizes_accept_integers_and_units() {
        let parse = |text: &str| text.parse::<ByteSize>().map(|b| b.0);
        assert_eq!(parse("65536"), Ok(65536));
        assert_eq!(parse("256KiB"), Ok(256 * 1024));
        assert_eq!(parse("64MiB"), Ok(64 << 20));
        assert_eq!(parse("1 GiB"), Ok(1 << 30));
        assert_eq!(parse("10MB"), Ok(10_000_000));
        assert!(parse("64 parsecs").is_err());
        assert!(parse("-1").is_err());
        assert!(parse("99999999999999999999GiB").is_err());
    }

    #[test]
    fn byte_sizes_display_in_the_largest_exact_unit() {
        assert_eq!(ByteSize(64 << 20).to_string(), "64MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000");
        assert_eq!("256KiB".parse::<ByteSize>().unwrap().to_string(), "256KiB");
    }
}
