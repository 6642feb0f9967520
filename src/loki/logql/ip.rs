//! `ip("…")` of line and label filters: an address, a CIDR range or a `from-to` range, IPv4 or
//! IPv6, looked for in a text the way Loki's `ip` matcher looks: at each place that starts like
//! an address, the longest run of address characters is read as one.

use std::net::IpAddr;

/// The addresses an `ip("…")` pattern stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum IpPattern {
    /// `192.168.0.1`
    Single(IpAddr),
    /// `192.168.0.0/16`: the address's first `bits` bits.
    Prefix(IpAddr, u8),
    /// `192.168.0.1-192.168.0.9`, both ends included.
    Range(IpAddr, IpAddr),
}

/// Why a pattern is none of the three, in Loki's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("ip: invalid pattern: {0:?}")]
pub(crate) struct InvalidPattern(String);

impl IpPattern {
    /// Reads `pattern` as an address, then a CIDR range, then a range, as Loki tries them.
    pub(crate) fn parse(pattern: &str) -> Result<Self, InvalidPattern> {
        let invalid = || InvalidPattern(pattern.to_owned());
        if let Some(address) = address(pattern) {
            return Ok(IpPattern::Single(address));
        }
        if let Some((address_text, bits)) = pattern.split_once('/') {
            let address = address(address_text).ok_or_else(invalid)?;
            let width = if address.is_ipv4() { 32 } else { 128 };
            // Go reads the bits as a plain decimal, without sign or leading zero.
            let plain = !bits.is_empty()
                && bits.bytes().all(|b| b.is_ascii_digit())
                && (bits == "0" || !bits.starts_with('0'));
            let bits: u8 = bits.parse().ok().filter(|_| plain).ok_or_else(invalid)?;
            if bits > width {
                return Err(invalid());
            }
            return Ok(IpPattern::Prefix(address, bits));
        }
        if let Some((from, to)) = pattern.split_once('-') {
            let (from, to) = (
                address(from).ok_or_else(invalid)?,
                address(to).ok_or_else(invalid)?,
            );
            if from.is_ipv4() != to.is_ipv4() || to < from {
                return Err(invalid());
            }
            return Ok(IpPattern::Range(from, to));
        }
        Err(invalid())
    }

    /// True when `address` is one the pattern stands for; an address of the other family never
    /// is.
    pub(crate) fn contains(&self, address: IpAddr) -> bool {
        match *self {
            IpPattern::Single(single) => single == address,
            IpPattern::Range(from, to) => {
                from.is_ipv4() == address.is_ipv4() && from <= address && address <= to
            }
            IpPattern::Prefix(network, bits) => match (network, address) {
                (IpAddr::V4(network), IpAddr::V4(address)) => {
                    let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
                    u32::from(network) & mask == u32::from(address) & mask
                }
                (IpAddr::V6(network), IpAddr::V6(address)) => {
                    let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
                    u128::from(network) & mask == u128::from(address) & mask
                }
                _ => false,
            },
        }
    }

    /// True when `text` holds an address the pattern stands for.
    pub(crate) fn found_in(&self, text: &str) -> bool {
        const V4: &[u8] = b"0123456789.";
        const V6: &[u8] = b"0123456789abcdefABCDEF:.";
        let bytes = text.as_bytes();
        let n = bytes.len();
        let mut at = 0;
        while at < n {
            let charset = if at + 3 < n && ipv4_hint(&bytes[at..at + 4]) {
                V4
            } else if at + 4 < n && ipv6_hint(&bytes[at..at + 5]) {
                V6
            } else {
                at += 1;
                continue;
            };
            let length = bytes[at..]
                .iter()
                .position(|b| !charset.contains(b))
                .unwrap_or(n - at);
            if address(&text[at..at + length]).is_some_and(|found| self.contains(found)) {
                return true;
            }
            // Loki steps past the run and the byte after it.
            at += length + 1;
        }
        false
    }
}

/// An address as Go's `netip.ParseAddr` reads one (no zone, since no text found has one).
fn address(text: &str) -> Option<IpAddr> {
    text.parse().ok()
}

fn ipv4_hint(b: &[u8]) -> bool {
    b[0].is_ascii_digit() && (b[1] == b'.' || b[2] == b'.' || b[3] == b'.')
}

fn ipv6_hint(b: &[u8]) -> bool {
    let hex = |at: usize| b[at].is_ascii_hexdigit();
    (b[0] == b':' && b[1] == b':' && hex(2))
        || (hex(0) && b[1] == b':')
        || (hex(0) && hex(1) && b[2] == b':')
        || (hex(0) && hex(1) && hex(2) && b[3] == b':')
        || (hex(0) && hex(1) && hex(2) && hex(3) && b[4] == b':')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loki 3.7.6's answers for these lines and patterns.
    #[test]
    fn addresses_are_found_as_loki_finds_them() {
        let lines = [
            "client 10.0.1.5 ok",
            "from 192.168.0.3 x",
            "v6 2001:db8::1 y",
            "v6b ::1 z",
            "bad 010.0.1.5 q",
            "x1.2.3.4y",
            "mapped ::ffff:10.0.1.7",
            "none here",
            "addr=192.168.0.10 end",
            "10.0.1.256",
            "1.2.3.4.5",
        ];
        let found = |pattern: &str| -> Vec<&str> {
            let pattern = IpPattern::parse(pattern).unwrap();
            lines
                .iter()
                .copied()
                .filter(|line| pattern.found_in(line))
                .collect()
        };
        assert_eq!(found("10.0.1.0/24"), ["client 10.0.1.5 ok"]);
        assert_eq!(found("192.168.0.1-192.168.0.9"), ["from 192.168.0.3 x"]);
        assert_eq!(found("2001:db8::/32"), ["v6 2001:db8::1 y"]);
        assert_eq!(found("::1"), ["v6b ::1 z"]);
        assert_eq!(found("1.2.3.4"), ["x1.2.3.4y"]);
        assert_eq!(found("::ffff:10.0.1.7"), ["mapped ::ffff:10.0.1.7"]);
        assert!(found("10.0.1.7").is_empty());
        assert_eq!(
            found("192.168.0.0/16"),
            ["from 192.168.0.3 x", "addr=192.168.0.10 end"]
        );
    }

    #[test]
    fn patterns_that_are_no_address_or_range_are_refused() {
        for bad in [
            "10.0.1.5/33",
            "10.0.1.256",
            "10.0.1.5-10.0.1.1",
            "x",
            "",
            "10.0.0.0/08",
            "1.2.3.4-::1",
        ] {
            let err = IpPattern::parse(bad).unwrap_err();
            assert_eq!(err.to_string(), format!("ip: invalid pattern: {bad:?}"));
        }
        assert_eq!(
            IpPattern::parse("::/0").unwrap(),
            IpPattern::Prefix("::".parse().unwrap(), 0)
        );
        assert!(IpPattern::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
    }
}
