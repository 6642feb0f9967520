//! Severity: OpenTelemetry's numbers (1–24, 0 for unspecified) and the six level names whose
//! ranges cover them, as every layer names, parses and prints them.

use std::ops::RangeInclusive;

/// A level: one of OpenTelemetry's six ranges of severity numbers, or none of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Severity {
    /// Severity number 0 (unspecified), or one outside 1..=24.
    Unknown,
    /// 1–4.
    Trace,
    /// 5–8.
    Debug,
    /// 9–12.
    Info,
    /// 13–16.
    Warn,
    /// 17–20.
    Error,
    /// 21–24.
    Fatal,
}

impl Severity {
    /// Every level, unknown first, then in increasing severity.
    pub(crate) const ALL: [Severity; 7] = [
        Severity::Unknown,
        Severity::Trace,
        Severity::Debug,
        Severity::Info,
        Severity::Warn,
        Severity::Error,
        Severity::Fatal,
    ];

    /// The level whose range holds a severity number.
    pub(crate) fn of(number: i32) -> Severity {
        match number {
            1..=4 => Severity::Trace,
            5..=8 => Severity::Debug,
            9..=12 => Severity::Info,
            13..=16 => Severity::Warn,
            17..=20 => Severity::Error,
            21..=24 => Severity::Fatal,
            _ => Severity::Unknown,
        }
    }

    /// The level a name stands for, in any case, with the spellings loggers, shippers and Loki
    /// use (`warning`, `err`, `crit`, `emerg`…); `None` for any other text, `unknown` included.
    pub(crate) fn from_name(name: &str) -> Option<Severity> {
        let level = match name.to_ascii_lowercase().as_str() {
            "trace" => Severity::Trace,
            "debug" | "dbg" => Severity::Debug,
            "info" | "information" | "informational" | "notice" => Severity::Info,
            "warn" | "warning" => Severity::Warn,
            "error" | "err" | "eror" => Severity::Error,
            "fatal" | "critical" | "crit" | "panic" | "emerg" | "emergency" | "alert" => {
                Severity::Fatal
            }
            _ => return None,
        };
        Some(level)
    }

    /// A minimum severity as a filter takes it: a number 0..=24, or a level name (its lowest
    /// number); `None` for anything else.
    pub(crate) fn parse_min(text: &str) -> Option<i32> {
        match text.parse::<i32>() {
            Ok(number) => (0..=24).contains(&number).then_some(number),
            Err(_) => Severity::from_name(text).map(Severity::number),
        }
    }

    /// Loki's name for it: lowercase, `unknown` for none.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Severity::Unknown => "unknown",
            Severity::Trace => "trace",
            Severity::Debug => "debug",
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Error => "error",
            Severity::Fatal => "fatal",
        }
    }

    /// Its name on a line of `loghaul query` and `tail`: uppercase, `-` for none.
    pub(crate) fn short_name(self) -> &'static str {
        match self {
            Severity::Unknown => "-",
            Severity::Trace => "TRACE",
            Severity::Debug => "DEBUG",
            Severity::Info => "INFO",
            Severity::Warn => "WARN",
            Severity::Error => "ERROR",
            Severity::Fatal => "FATAL",
        }
    }

    /// The severity numbers it covers (just 0 for unknown).
    pub(crate) fn range(self) -> RangeInclusive<i32> {
        match self {
            Severity::Unknown => 0..=0,
            level => {
                let low = 1 + 4 * (level as i32 - 1);
                low..=low + 3
            }
        }
    }

    /// The lowest number of its range: what a record that names only the level is stored with.
    pub(crate) fn number(self) -> i32 {
        *self.range().start()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_belongs_to_the_level_whose_range_holds_it() {
        for level in Severity::ALL {
            for number in level.range() {
                assert_eq!(Severity::of(number), level, "{number}");
            }
        }
        assert_eq!(Severity::of(-1), Severity::Unknown);
        assert_eq!(Severity::of(25), Severity::Unknown);
        assert_eq!(Severity::Warn.range(), 13..=16);
        assert_eq!(Severity::Fatal.range(), 21..=24);
    }

    #[test]
    fn names_parse_in_any_case_with_their_aliases() {
        assert_eq!(Severity::from_name("WARNING"), Some(Severity::Warn));
        assert_eq!(Severity::from_name("Err"), Some(Severity::Error));
        assert_eq!(Severity::from_name("emerg"), Some(Severity::Fatal));
        assert_eq!(Severity::from_name("informational"), Some(Severity::Info));
        assert_eq!(Severity::from_name("unknown"), None);
        assert_eq!(Severity::from_name("loud"), None);
        for level in &Severity::ALL[1..] {
            assert_eq!(Severity::from_name(level.name()), Some(*level));
            assert_eq!(Severity::from_name(level.short_name()), Some(*level));
        }
    }

    #[test]
    fn a_minimum_is_a_number_in_range_or_a_name() {
        assert_eq!(Severity::parse_min("0"), Some(0));
        assert_eq!(Severity::parse_min("24"), Some(24));
        assert_eq!(Severity::parse_min("warn"), Some(13));
        assert_eq!(Severity::parse_min("25"), None);
        assert_eq!(Severity::parse_min("-1"), None);
        assert_eq!(Severity::parse_min("loud"), None);
    }
}
