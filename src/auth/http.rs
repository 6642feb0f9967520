//! Who is calling over HTTP, by one rule on every HTTP listener (the ingest port's pushes and
//! Loki API, and the console): where a request carries its key, and which `Host` names a keyless
//! service answers to.
//!
//! The key is read from `x-api-key`, `Authorization: Bearer KEY`, or the password of
//! `Authorization: Basic` (which Loki clients such as Promtail, Fluent Bit and Grafana Alloy
//! offer). No answer ever asks for Basic credentials (`WWW-Authenticate: Basic`), so a browser
//! never keeps a key to attach to a request on its own.

use std::net::IpAddr;

use axum::http::{header, HeaderMap};
use base64::Engine;

use super::{AuthFailure, AuthMetrics, API_KEY_HEADER};

/// The key the request presents, in the first of the places clients put it.
pub(crate) fn presented_key(headers: &HeaderMap) -> Option<Vec<u8>> {
    if let Some(key) = headers.get(API_KEY_HEADER) {
        return Some(key.as_bytes().to_vec());
    }
    let authorization = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, credentials) = split_scheme(authorization)?;
    if scheme.eq_ignore_ascii_case(b"bearer") {
        return Some(credentials.to_vec());
    }
    if scheme.eq_ignore_ascii_case(b"basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(credentials)
            .ok()?;
        let colon = decoded.iter().position(|&byte| byte == b':')?;
        return Some(decoded[colon + 1..].to_vec());
    }
    None
}

/// `Scheme credentials` → (scheme, credentials), spaces around the credentials trimmed.
fn split_scheme(value: &[u8]) -> Option<(&[u8], &[u8])> {
    let space = value.iter().position(|&byte| byte == b' ')?;
    let credentials = value[space + 1..].trim_ascii();
    (!credentials.is_empty()).then_some((&value[..space], credentials))
}

/// Refuses a request addressed to a name other than `localhost` (or `*.localhost`) and an IP
/// address, counting the refusal. A web page elsewhere can point a name of its own at this
/// machine (DNS rebinding) and make its reader's browser send requests there, under that name;
/// a name cannot be rebound to an IP address, and the loopback names never leave the machine. A
/// request without `Host` (HTTP/1.0) comes from no browser and passes.
pub(crate) fn check_host(headers: &HeaderMap, metrics: &AuthMetrics) -> Result<(), AuthFailure> {
    let Some(host) = headers.get(header::HOST) else {
        return Ok(());
    };
    if host.to_str().is_ok_and(is_local_or_ip) {
        Ok(())
    } else {
        Err(AuthFailure::ForeignHost.counted(metrics))
    }
}

/// True for `localhost`, `*.localhost` and IP literals, with or without a port.
fn is_local_or_ip(host: &str) -> bool {
    if let Some(rest) = host.strip_prefix('[') {
        return rest
            .split_once(']')
            .is_some_and(|(ip, _)| ip.parse::<IpAddr>().is_ok());
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost") || name.parse::<IpAddr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observability::metrics::Registry;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn the_key_comes_from_any_header_an_exporter_can_set() {
        assert_eq!(
            presented_key(&headers(&[("x-api-key", "k1")])).unwrap(),
            b"k1"
        );
        assert_eq!(
            presented_key(&headers(&[("authorization", "Bearer  k2 ")])).unwrap(),
            b"k2"
        );
        // "promtail:k3", as Loki clients send basic_auth.
        assert_eq!(
            presented_key(&headers(&[("authorization", "basic cHJvbXRhaWw6azM=")])).unwrap(),
            b"k3"
        );
        assert_eq!(
            presented_key(&headers(&[
                ("x-api-key", "first"),
                ("authorization", "Bearer second")
            ]))
            .unwrap(),
            b"first"
        );
        for refused in ["Bearer", "Basic !!!", "Basic bm9jb2xvbg==", "Digest abc"] {
            assert_eq!(
                presented_key(&headers(&[("authorization", refused)])),
                None,
                "{refused}"
            );
        }
        assert_eq!(presented_key(&HeaderMap::new()), None);
    }

    #[test]
    fn only_loopback_names_and_ip_literals_count_as_local() {
        let registry = Registry::new();
        let metrics = AuthMetrics::register(&registry);
        let check_host = |headers: &HeaderMap| check_host(headers, &metrics);
        for host in [
            "localhost",
            "localhost:8080",
            "LOCALHOST:1",
            "app.localhost:3",
            "127.0.0.1:8080",
            "10.1.2.3",
            "[::1]:8080",
            "[fe80::1]",
        ] {
            assert!(is_local_or_ip(host), "{host}");
            assert!(check_host(&headers(&[("host", host)])).is_ok(), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "[evil]:80",
            "127.0.0.1.nip.io",
        ] {
            assert!(!is_local_or_ip(host), "{host}");
            assert_eq!(
                check_host(&headers(&[("host", host)])),
                Err(AuthFailure::ForeignHost),
                "{host}"
            );
        }
        assert!(check_host(&HeaderMap::new()).is_ok());
        assert!(registry
            .render()
            .contains("loghaul_auth_failures_total{reason=\"foreign_host\"} 5"));
    }
}
