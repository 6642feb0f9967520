//! Times written by Go's layouts (`"2006-01-02T15:04:05.000Z07:00"`), as a template's `date`
//! and a printed time write them: each element of Go's reference time in a layout stands for
//! that element of the time, everything else is copied. Times are in UTC, the zone Loki's
//! templates use where it runs in UTC.

use std::fmt::Write;

use chrono::{DateTime, Datelike, Timelike, Utc};

/// The layout Go prints a time with (`time.Time.String`).
pub(crate) const PRINTED: &str = "2006-01-02 15:04:05.999999999 -0700 MST";

/// One element of a layout.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Element {
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekDay,
    WeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    Pm,
    LowerPm,
    /// `MST`: the zone's abbreviation.
    Zone,
    /// `-0700`, `-07:00`, `-07`, `-070000`, `-07:00:00`: the offset, written as given.
    Offset(&'static str),
    /// `Z0700` and the like: `Z` for UTC, else the offset.
    IsoOffset(&'static str),
    /// `.000` (`zeros` true) or `.999`: so many digits of the second's fraction, the nines
    /// without trailing zeros; the separator (`.` or `,`) as given.
    Fraction {
        separator: char,
        digits: usize,
        zeros: bool,
    },
}

/// The element `layout` starts with and its length, as Go's `nextStdChunk` finds it.
fn element_at(layout: &[u8]) -> Option<(Element, usize)> {
    let starts = |text: &str| layout.starts_with(text.as_bytes());
    let lower_after = |at: usize| layout.get(at).is_some_and(u8::is_ascii_lowercase);
    Some(match layout.first()? {
        b'J' if starts("January") => (Element::LongMonth, 7),
        b'J' if starts("Jan") && !lower_after(3) => (Element::Month, 3),
        b'M' if starts("Monday") => (Element::LongWeekDay, 6),
        b'M' if starts("Mon") && !lower_after(3) => (Element::WeekDay, 3),
        b'M' if starts("MST") => (Element::Zone, 3),
        b'0' => match layout.get(1)? {
            b'1' => (Element::ZeroMonth, 2),
            b'2' => (Element::ZeroDay, 2),
            b'3' => (Element::ZeroHour12, 2),
            b'4' => (Element::ZeroMinute, 2),
            b'5' => (Element::ZeroSecond, 2),
            b'6' => (Element::Year, 2),
            b'0' if layout.get(2) == Some(&b'2') => (Element::ZeroYearDay, 3),
            _ => return None,
        },
        b'1' if layout.get(1) == Some(&b'5') => (Element::Hour, 2),
        b'1' => (Element::NumMonth, 1),
        b'2' if starts("2006") => (Element::LongYear, 4),
        b'2' => (Element::Day, 1),
        // `_2006` is a `_` and the year: the caller copies the `_`.
        b'_' if starts("_2") && !starts("_2006") => (Element::UnderDay, 2),
        b'_' if starts("__2") => (Element::UnderYearDay, 3),
        b'3' => (Element::Hour12, 1),
        b'4' => (Element::Minute, 1),
        b'5' => (Element::Second, 1),
        b'P' if starts("PM") => (Element::Pm, 2),
        b'p' if starts("pm") => (Element::LowerPm, 2),
        b'-' | b'Z' => {
            let iso = layout[0] == b'Z';
            let offset = ["070000", "07:00:00", "0700", "07:00", "07"]
                .into_iter()
                .find(|form| layout[1..].starts_with(form.as_bytes()))?;
            let element = if iso {
                Element::IsoOffset(offset)
            } else {
                Element::Offset(offset)
            };
            (element, offset.len() + 1)
        }
        &separator @ (b'.' | b',') => {
            let digit = *layout.get(1).filter(|d| matches!(d, b'0' | b'9'))?;
            let run = layout[1..].iter().take_while(|&&d| d == digit).count();
            // A run of the same digit followed by another digit is no fraction.
            if layout.get(1 + run).is_some_and(u8::is_ascii_digit) {
                return None;
            }
            let element = Element::Fraction {
                separator: separator as char,
                digits: run,
                zeros: digit == b'0',
            };
            (element, 1 + run)
        }
        _ => return None,
    })
}

/// `nanos` (since the epoch) written by Go's `layout`, in UTC.
pub(crate) fn format(nanos: i64, layout: &str) -> String {
    let time = DateTime::<Utc>::from_timestamp_nanos(nanos);
    let mut out = String::with_capacity(layout.len() + 8);
    let bytes = layout.as_bytes();
    let mut at = 0;
    let mut literal = 0;
    while at < bytes.len() {
        let Some((element, width)) = element_at(&bytes[at..]) else {
            at += 1;
            continue;
        };
        out.push_str(&layout[literal..at]);
        write_element(&mut out, &time, element);
        at += width;
        literal = at;
    }
    out.push_str(&layout[literal..]);
    out
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

fn write_element(out: &mut String, time: &DateTime<Utc>, element: Element) {
    let month = MONTHS[time.month0() as usize];
    let weekday = WEEKDAYS[time.weekday().num_days_from_monday() as usize];
    let hour12 = match time.hour() % 12 {
        0 => 12,
        hour => hour,
    };
    let _ = match element {
        Element::LongMonth => write!(out, "{month}"),
        Element::Month => write!(out, "{}", &month[..3]),
        Element::NumMonth => write!(out, "{}", time.month()),
        Element::ZeroMonth => write!(out, "{:02}", time.month()),
        Element::LongWeekDay => write!(out, "{weekday}"),
        Element::WeekDay => write!(out, "{}", &weekday[..3]),
        Element::Day => write!(out, "{}", time.day()),
        Element::UnderDay => write!(out, "{:>2}", time.day()),
        Element::ZeroDay => write!(out, "{:02}", time.day()),
        Element::UnderYearDay => write!(out, "{:>3}", time.ordinal()),
        Element::ZeroYearDay => write!(out, "{:03}", time.ordinal()),
        Element::Hour => write!(out, "{:02}", time.hour()),
        Element::Hour12 => write!(out, "{hour12}"),
        Element::ZeroHour12 => write!(out, "{hour12:02}"),
        Element::Minute => write!(out, "{}", time.minute()),
        Element::ZeroMinute => write!(out, "{:02}", time.minute()),
        Element::Second => write!(out, "{}", time.second()),
        Element::ZeroSecond => write!(out, "{:02}", time.second()),
        Element::LongYear => write!(out, "{:04}", time.year()),
        Element::Year => write!(out, "{:02}", time.year().rem_euclid(100)),
        Element::Pm => write!(out, "{}", if time.hour() >= 12 { "PM" } else { "AM" }),
        Element::LowerPm => write!(out, "{}", if time.hour() >= 12 { "pm" } else { "am" }),
        Element::Zone => write!(out, "UTC"),
        Element::IsoOffset(_) => write!(out, "Z"),
        // UTC's offset, in the form given: the digits are zeros, the colons kept.
        Element::Offset(form) => write!(out, "+{}", form.replace(|c| c != ':', "0")),
        Element::Fraction {
            separator,
            digits,
            zeros,
        } => {
            let nanos = format!("{:09}", time.nanosecond() % 1_000_000_000);
            let taken = &nanos[..digits.min(9)];
            let shown = if zeros {
                taken
            } else {
                taken.trim_end_matches('0')
            };
            if shown.is_empty() {
                Ok(())
            } else {
                write!(out, "{separator}{shown}")
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-06T19:28:11.922942775Z, written by Loki 3.7.6's `date`.
    const AT: i64 = 1_796_585_291_922_942_775;

    #[test]
    fn layouts_write_what_go_writes() {
        for (layout, written) in [
            ("2006-01-02T15:04:05.000Z07:00", "2026-12-06T19:28:11.922Z"),
            (
                "Mon Jan _2 15:04:05 MST 2006 .000000 .999 pm PM 3 03 Z0700 -07:00 Z07",
                "Sun Dec  6 19:28:11 UTC 2026 .922942 .922 pm PM 7 07 Z +00:00 Z",
            ),
            (
                "January Jan 1 01 2 02 _2 __2 002 15 3 03 4 04 5 05 06 2006 Mon Monday MST .0 .00 ,000 .999999999",
                "December Dec 12 12 6 06  6 340 340 19 7 07 28 28 11 11 26 2026 Sun Sunday UTC .9 .92 ,922 .922942775",
            ),
            (PRINTED, "2026-12-06 19:28:11.922942775 +0000 UTC"),
            ("Jana Mona _2006 .01 x", "Jana Mona _2026 .12 x"),
        ] {
            assert_eq!(format(AT, layout), written, "{layout}");
        }
    }

    #[test]
    fn printed_times_drop_a_zero_fraction() {
        // 2023-11-14T22:13:20.123Z and the whole second.
        assert_eq!(
            format(1_700_000_000_123_000_000, PRINTED),
            "2023-11-14 22:13:20.123 +0000 UTC"
        );
        assert_eq!(
            format(1_700_000_000_000_000_000, PRINTED),
            "2023-11-14 22:13:20 +0000 UTC"
        );
        assert_eq!(format(1_700_000_000_000_000_000, "3:04PM"), "10:13PM");
        assert_eq!(format(1_700_000_000_000_000_000, "-0700 -07"), "+0000 +00");
    }
}
