//! Protected mode: a service with no API keys serves only clients on its own machine unless it was
//! started with `--allow-unauthenticated` (Redis's "protected mode"). The quick start on one
//! machine needs no set-up, and forgetting the keys on a server never leaves it open to the
//! network.

use std::net::IpAddr;

use crate::config::AuthOptions;

/// Whom a service without API keys serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpenAccess {
    /// Loopback clients only: the default.
    LoopbackOnly,
    /// Every client that can reach the port (`--allow-unauthenticated`).
    Anyone,
}

impl From<&AuthOptions> for OpenAccess {
    fn from(config: &AuthOptions) -> Self {
        if config.allow_unauthenticated {
            OpenAccess::Anyone
        } else {
            OpenAccess::LoopbackOnly
        }
    }
}

impl OpenAccess {
    /// True when a service without keys serves a call from `peer`. A call whose peer is unknown
    /// is not served unless everyone is.
    pub(crate) fn admits(self, peer: Option<IpAddr>) -> bool {
        match self {
            OpenAccess::Anyone => true,
            OpenAccess::LoopbackOnly => peer.is_some_and(is_loopback),
        }
    }
}

/// 127.0.0.0/8, `::1`, and IPv4-mapped loopback (`::ffff:127.0.0.1`, how a dual-stack listener
/// sees an IPv4 loopback client).
pub(crate) fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().unwrap())
    }

    #[test]
    fn only_loopback_peers_are_served_without_keys() {
        for peer in ["127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"] {
            assert!(OpenAccess::LoopbackOnly.admits(ip(peer)), "{peer}");
        }
        for peer in [
            "192.0.2.2",
            "10.0.0.1",
            "0.0.0.0",
            "::",
            "fd00::2",
            "fe80::1",
            "::ffff:10.0.0.1",
            // IPv4-compatible (deprecated) addresses are not mapped ones.
            "::127.0.0.1",
        ] {
            assert!(!OpenAccess::LoopbackOnly.admits(ip(peer)), "{peer}");
        }
        assert!(
            !OpenAccess::LoopbackOnly.admits(None),
            "unknown peers fail closed"
        );
    }

    #[test]
    fn allow_unauthenticated_serves_everyone() {
        for peer in [ip("192.0.2.2"), ip("::1"), None] {
            assert!(OpenAccess::Anyone.admits(peer), "{peer:?}");
        }
    }
}
