//! Go's parsers of numbers in text, as Loki reads label values with them: `strconv.ParseFloat`,
//! `strconv.ParseInt`, `time.ParseDuration` and go-humanize's `ParseBytes`, with the error texts
//! Loki shows in `__error_details__`.

/// Go's `strconv.Quote` for the texts an error shows: printable ASCII as it is, the rest escaped.
fn quote(text: &str) -> String {
    format!("{text:?}")
}

/// Go's `strconv.ParseFloat(text, 64)`.
pub(crate) fn parse_float(text: &str) -> Result<f64, String> {
    let invalid = || {
        format!(
            "strconv.ParseFloat: parsing {}: invalid syntax",
            quote(text)
        )
    };
    // Rust takes a few forms Go does not ("1." is both; "infinity" both; "+.5" both); Go's
    // underscores and hexadecimal floats are rare enough in logs to be refused here.
    let value: f64 = text.parse().map_err(|_| invalid())?;
    let spelled_infinite = text.to_ascii_lowercase().contains("inf");
    if value.is_infinite() && !spelled_infinite {
        return Err(format!(
            "strconv.ParseFloat: parsing {}: value out of range",
            quote(text)
        ));
    }
    Ok(value)
}

/// Go's `strconv.ParseInt(text, 10, 64)`: an optional sign and decimal digits.
pub(crate) fn parse_int(text: &str) -> Result<i64, String> {
    let failed = |why: &str| format!("strconv.ParseInt: parsing {}: {why}", quote(text));
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(failed("invalid syntax"));
    }
    text.parse().map_err(|_| failed("value out of range"))
}

/// Go's `time.ParseDuration`: `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`, in nanoseconds.
pub(crate) fn parse_duration(original: &str) -> Result<i64, String> {
    let invalid = || format!("time: invalid duration {}", quote(original));
    let mut rest = original;
    let negative = rest.starts_with('-');
    if negative || rest.starts_with('+') {
        rest = &rest[1..];
    }
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        if !rest.starts_with(|c: char| c == '.' || c.is_ascii_digit()) {
            return Err(invalid());
        }
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let mut whole: u64 = 0;
        for digit in rest[..digits].bytes() {
            whole = whole
                .checked_mul(10)
                .and_then(|w| w.checked_add(u64::from(digit - b'0')))
                .filter(|w| *w <= 1 << 63)
                .ok_or_else(invalid)?;
        }
        let had_whole = digits > 0;
        rest = &rest[digits..];
        let (mut fraction, mut scale, mut had_fraction) = (0u64, 1f64, false);
        if let Some(after) = rest.strip_prefix('.') {
            let count = after
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after.len());
            had_fraction = count > 0;
            let mut overflow = false;
            for digit in after[..count].bytes() {
                // Go stops adding digits once they would overflow, keeping the precision it has.
                if overflow {
                    continue;
                }
                match fraction
                    .checked_mul(10)
                    .and_then(|f| f.checked_add(u64::from(digit - b'0')))
                    .filter(|f| *f <= 1 << 63)
                {
                    Some(next) => {
                        fraction = next;
                        scale *= 10.0;
                    }
                    None => overflow = true,
                }
            }
            rest = &after[count..];
        }
        if !had_whole && !had_fraction {
            return Err(invalid());
        }
        let unit_len = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        if unit_len == 0 {
            return Err(format!(
                "time: missing unit in duration {}",
                quote(original)
            ));
        }
        let unit_text = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit: u64 = match unit_text {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(format!(
                    "time: unknown unit {} in duration {}",
                    quote(unit_text),
                    quote(original)
                ))
            }
        };
        if whole > (1u64 << 63) / unit {
            return Err(invalid());
        }
        let mut value = whole * unit;
        if fraction > 0 {
            value += (fraction as f64 * (unit as f64 / scale)) as u64;
            if value > 1 << 63 {
                return Err(invalid());
            }
        }
        total = total
            .checked_add(value)
            .filter(|t| *t <= 1 << 63)
            .ok_or_else(invalid)?;
    }
    if negative {
        return Ok((total as i128).wrapping_neg() as i64);
    }
    if total > i64::MAX as u64 {
        return Err(invalid());
    }
    Ok(total as i64)
}

/// go-humanize's `ParseBytes`, which Loki's `bytes(…)` uses: a number (commas allowed) and an
/// optional SI or IEC unit, case-insensitive.
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    let digits = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(text.len());
    let number = text[..digits].replace(',', "");
    let value = parse_float(&number)?;
    let unit = text[digits..].trim().to_ascii_lowercase();
    let scale: f64 = match unit.as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "p" | "pb" => 1e15,
        "e" | "eb" => 1e18,
        "ki" | "kib" => 1024.0,
        "mi" | "mib" => 1024f64.powi(2),
        "gi" | "gib" => 1024f64.powi(3),
        "ti" | "tib" => 1024f64.powi(4),
        "pi" | "pib" => 1024f64.powi(5),
        "ei" | "eib" => 1024f64.powi(6),
        _ => return Err(format!("unhandled size name: {unit}")),
    };
    let bytes = value * scale;
    if bytes >= u64::MAX as f64 {
        return Err(format!("too large: {text}"));
    }
    Ok(bytes as u64)
}
