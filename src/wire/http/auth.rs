//! Who is calling the HTTP ingest listener (pushes, Loki's query API and its tail): the key, read
//! as every HTTP listener reads it ([`crate::auth::http`]); Loki's `X-Scope-OrgID`; and, on a
//! service without keys, whether the request may come from a web page.
//!
//! With keys the key is the protection: a page cannot send one (a WebSocket handshake carries no
//! header a page sets, and a cross-site request with one needs a CORS preflight that only
//! `--http-cors-origins` passes), so `Host` and `Origin` are not looked at, and a deployment
//! reached by a Service name or through an ingress works as it is. Without keys nothing tells a
//! browser's request from a shipper's but the browser's own headers:
//!
//! - `Origin` (which a browser sends on a page's cross-site requests, on its POSTs, and on every
//!   WebSocket handshake, which CORS does not cover) must be absent or listed in
//!   `--http-cors-origins`. This port serves no page, so no other origin has a reason to call it;
//!   shippers, `logcli` and Grafana's server send none.
//! - `Host` must be a loopback name or an IP address ([`crate::auth::http::check_host`]) while
//!   the service serves loopback clients only, which closes DNS rebinding. Under
//!   `--allow-unauthenticated` remote shippers reach the port by name, so the name is not checked:
//!   that mode is open to whoever reaches the port, pages included.
//! - `X-Scope-OrgID` may name no tenant but `default`, unless `--allow-org-id-tenants`.

use std::net::IpAddr;
use std::sync::Arc;

use axum::http::{header, HeaderMap};

use super::cors::Cors;
use crate::auth::http::{check_host, presented_key};
use crate::auth::{AuthFailure, KeyStore, OpenAccess, Tenant};
use crate::error::HttpError;

/// Loki's tenant header.
pub(crate) const ORG_ID_HEADER: &str = "x-scope-orgid";

/// How the HTTP ingest listener tells who is calling.
#[derive(Debug)]
pub(crate) struct HttpAuth {
    keys: Arc<KeyStore>,
    cors: Arc<Cors>,
    /// `--allow-org-id-tenants`: without keys, `X-Scope-OrgID` names the tenant.
    org_id_tenants: bool,
}

impl HttpAuth {
    /// Callers checked against `keys`; `cors` lists the web pages a keyless service serves.
    pub(crate) fn new(keys: Arc<KeyStore>, cors: Arc<Cors>, org_id_tenants: bool) -> Self {
        HttpAuth {
            keys,
            cors,
            org_id_tenants,
        }
    }

    /// The tenant of a request from `peer` with `headers`.
    pub(crate) fn tenant(&self, headers: &HeaderMap, peer: IpAddr) -> Result<Tenant, HttpError> {
        let presented = presented_key(headers);
        let tenant = self.keys.authenticate(presented.as_deref(), Some(peer))?;
        let open = self.keys.is_open();
        if open {
            self.check_browser(headers)?;
        }
        let Some(org) = headers.get(ORG_ID_HEADER) else {
            return Ok(tenant);
        };
        let org = org
            .to_str()
            .map_err(|_| HttpError::BadRequest("X-Scope-OrgID is not ASCII".into()))?
            .trim();
        if open && self.org_id_tenants {
            return self.keys.org_tenant(org).map_err(HttpError::BadRequest);
        }
        if org == &**tenant.name() {
            return Ok(tenant);
        }
        let failure = if open {
            AuthFailure::OrgIdWithoutKeys
        } else {
            AuthFailure::OrgIdMismatch
        };
        Err(failure.counted(self.keys.metrics()).into())
    }

    /// What a service without keys refuses of a web page; see the module documentation.
    fn check_browser(&self, headers: &HeaderMap) -> Result<(), AuthFailure> {
        if headers.contains_key(header::ORIGIN) && self.cors.allowed(headers).is_none() {
            return Err(AuthFailure::ForeignOrigin.counted(self.keys.metrics()));
        }
        if self.keys.open_access() == OpenAccess::LoopbackOnly {
            check_host(headers, self.keys.metrics())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::keys::KeySources;
    use crate::auth::{AuthMetrics, DEFAULT_TENANT};
    use crate::observability::metrics::Registry;

    fn auth(keys: Option<&str>, access: OpenAccess, cors: &str, org_id_tenants: bool) -> HttpAuth {
        let sources = KeySources {
            inline: keys.map(str::to_owned),
            ..KeySources::default()
        };
        let metrics = Arc::new(AuthMetrics::register(&Registry::new()));
        let store = Arc::new(KeyStore::load(sources, access, metrics).unwrap());
        let cors = Arc::new(Cors::new(cors.parse().unwrap()));
        HttpAuth::new(store, cors, org_id_tenants)
    }

    fn tenant(auth: &HttpAuth, pairs: &[(&'static str, &str)]) -> Result<String, String> {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, value.parse().unwrap());
        }
        auth.tenant(&headers, "127.0.0.1".parse().unwrap())
            .map(|tenant| tenant.name().to_string())
            .map_err(|err| err.kind().to_owned())
    }

    #[test]
    fn a_keyless_service_refuses_what_only_a_web_page_sends() {
        let keyless = auth(None, OpenAccess::LoopbackOnly, "https://app.example", false);
        let served = |headers| tenant(&keyless, headers);
        assert_eq!(served(&[]), Ok(DEFAULT_TENANT.into()));
        assert_eq!(served(&[("host", "localhost:4318")]), Ok("default".into()));
        assert_eq!(served(&[("host", "[::1]:4318")]), Ok("default".into()));
        assert_eq!(
            served(&[("origin", "https://app.example")]),
            Ok("default".into())
        );
        for refused in [
            &[("host", "evil.example:4318")][..],
            &[("origin", "http://evil.example")],
            &[("origin", "http://127.0.0.1:4318")],
            &[("origin", "null")],
            &[("x-scope-orgid", "team-x")],
        ] {
            assert_eq!(served(refused), Err("forbidden".into()), "{refused:?}");
        }
        assert_eq!(
            served(&[("x-scope-orgid", "default")]),
            Ok("default".into())
        );
    }

    #[test]
    fn names_are_checked_only_where_no_key_and_no_remote_client_is_expected() {
        let open = auth(None, OpenAccess::Anyone, "", false);
        let name = [("host", "loghaul.logging.svc:4318")];
        assert_eq!(tenant(&open, &name), Ok("default".into()));
        assert_eq!(
            tenant(&open, &[("origin", "http://evil.example")]),
            Err("forbidden".into())
        );
        let keyed = auth(Some("k1=team-a"), OpenAccess::LoopbackOnly, "", false);
        for headers in [
            &[("x-api-key", "k1"), ("host", "logs.example.com")][..],
            &[("x-api-key", "k1"), ("origin", "https://grafana.example")],
            &[("x-api-key", "k1"), ("x-scope-orgid", "team-a")],
        ] {
            assert_eq!(tenant(&keyed, headers), Ok("team-a".into()), "{headers:?}");
        }
        assert_eq!(
            tenant(&keyed, &[("x-api-key", "k1"), ("x-scope-orgid", "team-b")]),
            Err("forbidden".into())
        );
        let named = auth(None, OpenAccess::LoopbackOnly, "", true);
        assert_eq!(
            tenant(&named, &[("x-scope-orgid", "team-x")]),
            Ok("team-x".into())
        );
    }
}
