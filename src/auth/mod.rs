//! Who is calling: API keys map to tenants, checked once per request by a tower layer on the gRPC
//! server, so no handler can forget it.
//!
//! - [`keys`]: parsing the keys file and the inline `key=tenant,…` list into an immutable
//!   [`keys::KeyRing`] that stores only SHA-256 digests of the keys.
//! - [`store`]: the current key ring behind an atomic pointer swap, reloaded on SIGHUP and when
//!   the keys file changes, without a lock on the request path.
//! - [`layer`]: the tower layer that authenticates every call and puts the [`Tenant`] into the
//!   request extensions; handlers read it back with [`tenant_of`].
//! - [`protected`]: without keys, whom the service serves (loopback clients unless
//!   `--allow-unauthenticated`).
//! - [`metrics`]: the series of refusals and keys, and each tenant's, resolved when it is set up.
//! - [`http`]: the same over HTTP, for every HTTP listener: where the key is read from, and which
//!   `Host` names a keyless service answers to.

pub(crate) mod http;
pub(crate) mod keys;
pub(crate) mod layer;
pub(crate) mod metrics;
pub(crate) mod protected;
pub(crate) mod store;

use std::sync::Arc;
use std::time::Duration;

use crate::ratelimit::RateLimiter;

pub(crate) use self::metrics::{AuthMetrics, TenantMetrics};
pub(crate) use layer::AuthLayer;
pub(crate) use protected::OpenAccess;
pub(crate) use store::KeyStore;

/// The tenant of calls when no API keys are configured.
pub(crate) const DEFAULT_TENANT: &str = "default";

pub(crate) use crate::proto::api_key::{request_with_key, API_KEY_HEADER};

/// The authenticated caller: its name and, when it has limits, its ingest rate limiter.
#[derive(Clone, Debug)]
pub struct Tenant {
    name: Arc<str>,
    limiter: Option<Arc<RateLimiter>>,
    metrics: Arc<TenantMetrics>,
}

impl Tenant {
    /// A tenant with an optional rate limiter, counting its records in `metrics`.
    pub fn new(
        name: Arc<str>,
        limiter: Option<Arc<RateLimiter>>,
        metrics: Arc<TenantMetrics>,
    ) -> Self {
        Tenant {
            name,
            limiter,
            metrics,
        }
    }

    /// The series counting the tenant's records.
    pub fn metrics(&self) -> &Arc<TenantMetrics> {
        &self.metrics
    }

    /// The tenant's name, as stored with its records.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Charges `records` records of `bytes` bytes against the tenant's rate limits; on refusal,
    /// returns how long until that many tokens are available.
    pub fn admit(&self, records: u64, bytes: u64) -> Result<(), Duration> {
        match &self.limiter {
            Some(limiter) => limiter.admit(records, bytes),
            None => Ok(()),
        }
    }

    /// True when the tenant has ingest rate limits.
    #[cfg(test)]
    pub fn is_limited(&self) -> bool {
        self.limiter.is_some()
    }
}

/// Why a call was refused before reaching its handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    /// No `x-api-key` metadata.
    #[error("missing API key: send it in the x-api-key metadata (over HTTP: the x-api-key header, or Authorization: Bearer KEY)")]
    MissingKey,
    /// A key that maps to no tenant (never echoed back or logged).
    #[error("unknown API key")]
    UnknownKey,
    /// The request did not pass through the auth layer (a wiring bug): fail closed.
    #[error("the request carries no tenant; the server is misconfigured")]
    NoTenant,
    /// No key is configured and the caller is not on the server's machine (protected mode).
    #[error("this server has no API keys, so it serves only clients on its own machine (loopback); configure keys on the server with --api-keys or --api-keys-file and send one in the x-api-key metadata, or start the server with --allow-unauthenticated to serve every client as tenant \"default\"")]
    NotLoopback,
    /// A Loki `X-Scope-OrgID` header names a tenant other than the key's.
    #[error("X-Scope-OrgID names a tenant other than the API key's; drop the header, or send the key of that tenant")]
    OrgIdMismatch,
    /// Without keys, a request addressed to a name that is neither loopback nor an IP address:
    /// what a web page that rebound its own name to this machine sends.
    #[error("this server has no API keys, so it answers only requests addressed to localhost or an IP address, and the Host header named another host (as a web page that points its own name at this machine does); send to localhost or the server's address, or configure API keys (--api-keys, --api-keys-file) to serve it under a name")]
    ForeignHost,
    /// Without keys, a request from a web page (`Origin`) that `--http-cors-origins` does not
    /// list.
    #[error("this server has no API keys, so it serves no web page that --http-cors-origins does not list, and the Origin header named one; list the page's origin in --http-cors-origins, or configure API keys (--api-keys, --api-keys-file)")]
    ForeignOrigin,
    /// Without keys, a Loki `X-Scope-OrgID` naming a tenant other than `default`, and no
    /// `--allow-org-id-tenants`.
    #[error("X-Scope-OrgID names a tenant other than \"default\", and this server has no API keys to tell tenants apart; drop the header, start the server with --allow-org-id-tenants to let the header name the tenant, or configure API keys")]
    OrgIdWithoutKeys,
}

impl AuthFailure {
    /// The `reason` label of `loghaul_auth_failures_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthFailure::MissingKey => "missing_key",
            AuthFailure::UnknownKey => "unknown_key",
            AuthFailure::NoTenant => "no_tenant",
            AuthFailure::NotLoopback => "not_loopback",
            AuthFailure::OrgIdMismatch => "org_id_mismatch",
            AuthFailure::ForeignHost => "foreign_host",
            AuthFailure::ForeignOrigin => "foreign_origin",
            AuthFailure::OrgIdWithoutKeys => "org_id_without_keys",
        }
    }

    /// The failure, counted in `loghaul_auth_failures_total{reason}` of `metrics`.
    pub(crate) fn counted(self, metrics: &AuthMetrics) -> Self {
        metrics.failures.increment_static([self.as_str()], 1);
        self
    }
}

/// The tenant the auth layer attached to a request. Every service (ingest, OTLP, query) calls this
/// first; a request that somehow skipped the layer is refused rather than served as anyone.
pub(crate) fn tenant_of<T>(request: &tonic::Request<T>) -> Result<Tenant, tonic::Status> {
    request
        .extensions()
        .get::<Tenant>()
        .cloned()
        .ok_or_else(|| AuthFailure::NoTenant.into())
}
