//! Who is calling, from what HTTP exporters can send: the key in `x-api-key`, in
//! `Authorization: Bearer KEY`, or as the password of `Authorization: Basic` (which Loki clients
//! such as Promtail, Fluent Bit and Grafana Alloy offer); and Loki's `X-Scope-OrgID`, which may
//! only name the tenant the key already gives, unless no key is configured.

use std::net::IpAddr;

use axum::http::HeaderMap;
use base64::Engine;

use super::reply::HttpError;
use crate::auth::{AuthFailure, KeyStore, Tenant, API_KEY_HEADER};
use crate::observability::metrics::metrics;

/// Loki's tenant header.
pub const ORG_ID_HEADER: &str = "x-scope-orgid";

/// The tenant of a request from `peer` with `headers`.
pub fn tenant(keys: &KeyStore, headers: &HeaderMap, peer: IpAddr) -> Result<Tenant, HttpError> {
    let presented = presented_key(headers);
    let tenant = keys.authenticate(presented.as_deref(), Some(peer))?;
    let Some(org) = headers.get(ORG_ID_HEADER) else {
        return Ok(tenant);
    };
    let org = org
        .to_str()
        .map_err(|_| HttpError::BadRequest("X-Scope-OrgID is not ASCII".into()))?
        .trim();
    if keys.is_open() {
        return keys.org_tenant(org).map_err(HttpError::BadRequest);
    }
    if org == &**tenant.name() {
        return Ok(tenant);
    }
    metrics()
        .auth_failures
        .increment_static([AuthFailure::OrgIdMismatch.as_str()], 1);
    Err(AuthFailure::OrgIdMismatch.into())
}

/// The key the request presents, in the first of the places clients put it.
fn presented_key(headers: &HeaderMap) -> Option<Vec<u8>> {
    if let Some(key) = headers.get(API_KEY_HEADER) {
        return Some(key.as_bytes().to_vec());
    }
    let authorization = headers.get(axum::http::header::AUTHORIZATION)?.as_bytes();
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
