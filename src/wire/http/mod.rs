//! HTTP plumbing every protocol on the ingest listener shares: who a request is from ([`auth`]),
//! its body read under the limits and the budget ([`body`]), which browser origins may send
//! ([`cors`]), and the answers ([`reply`]). [`Reception`] is the first two steps, in the order a
//! request takes them, before its protocol's decoder.

pub(crate) mod auth;
pub(crate) mod body;
pub(crate) mod cors;
pub(crate) mod reply;

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::http::HeaderMap;
use bytes::Bytes;

use crate::auth::Tenant;
use crate::error::HttpError;
use crate::pipeline::{Ingress, Meter};
use crate::wire::inflate::Compression;
use auth::HttpAuth;
use body::BodyLimits;

/// The steps every HTTP ingest request takes before its protocol's decoder: who it is from, and
/// its body under the limits and the budget.
#[derive(Clone, Debug)]
pub struct Reception {
    ingress: Ingress,
    auth: Arc<HttpAuth>,
    body: BodyLimits,
}

impl Reception {
    /// Requests fed to `ingress`, authenticated by `auth`, their bodies read within `body`.
    pub(crate) fn new(ingress: Ingress, auth: Arc<HttpAuth>, body: BodyLimits) -> Self {
        Reception {
            ingress,
            auth,
            body,
        }
    }

    /// The request's tenant.
    pub fn authenticate(&self, headers: &HeaderMap, peer: IpAddr) -> Result<Tenant, HttpError> {
        self.auth.tenant(headers, peer)
    }

    /// The most a body may be, as sent and once inflated.
    pub fn max_body_bytes(&self) -> usize {
        self.body.max_bytes
    }

    /// `tenant`'s body, inflated per `compression`, and the meter that holds it.
    pub async fn read(
        &self,
        tenant: &Tenant,
        headers: &HeaderMap,
        body: Body,
        compression: Option<Compression>,
    ) -> Result<(Bytes, Meter<'_>), HttpError> {
        let mut meter = self.ingress.meter(tenant.name());
        let body = body::read(body, headers, compression, self.body, &mut meter).await?;
        Ok((body, meter))
    }
}
