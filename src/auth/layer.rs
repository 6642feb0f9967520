//! The tower layer that authenticates every gRPC call before routing, so every service behind the
//! server (LogIngest, OTLP, LogQuery) is covered without its handler doing anything.
//!
//! Exempt, by path:
//! - `grpc.health.v1.Health`: Kubernetes gRPC probes cannot send metadata, and health reveals
//!   nothing about any tenant.
//! - `grpc.reflection.*`: it describes the public API schema (the same `.proto` files that ship with
//!   the project) and no data; keeping it open lets operators run `grpcurl list` or `describe`
//!   while debugging a key problem. Every data-bearing method still needs a key.

use std::net::IpAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{Either, Ready};
use tonic::codegen::http;
use tower::{Layer, Service};

use super::{KeyStore, API_KEY_HEADER};

/// Path prefixes served without a key; see the module documentation for why.
const EXEMPT_PREFIXES: [&str; 3] = [
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
];

/// True when `path` (`/package.Service/Method`) is served without a key.
pub fn is_exempt(path: &str) -> bool {
    EXEMPT_PREFIXES
        .iter()
        .any(|prefix| path.starts_with(prefix))
}

/// The caller's address, which tonic puts into every request of a TCP (or TLS over TCP)
/// connection.
fn peer_ip(extensions: &http::Extensions) -> Option<IpAddr> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let plain = extensions.get::<TcpConnectInfo>();
    let tls = extensions
        .get::<TlsConnectInfo<TcpConnectInfo>>()
        .map(TlsConnectInfo::get_ref);
    plain
        .or(tls)
        .and_then(TcpConnectInfo::remote_addr)
        .map(|addr| addr.ip())
}

/// Adds authentication to a gRPC server: `Server::builder().layer(AuthLayer::new(keys))`.
#[derive(Clone, Debug)]
pub struct AuthLayer {
    keys: Arc<KeyStore>,
}

impl AuthLayer {
    /// A layer checking calls against `keys`.
    pub fn new(keys: Arc<KeyStore>) -> Self {
        AuthLayer { keys }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = Authenticate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Authenticate {
            inner,
            keys: Arc::clone(&self.keys),
        }
    }
}

/// The service the layer wraps around the router.
#[derive(Clone, Debug)]
pub struct Authenticate<S> {
    inner: S,
    keys: Arc<KeyStore>,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for Authenticate<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    ResBody: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Either<S::Future, Ready<Result<S::Response, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<ReqBody>) -> Self::Future {
        if is_exempt(request.uri().path()) {
            return Either::Left(self.inner.call(request));
        }
        let presented = request
            .headers()
            .get(API_KEY_HEADER)
            .map(|value| value.as_bytes());
        match self
            .keys
            .authenticate(presented, peer_ip(request.extensions()))
        {
            Ok(tenant) => {
                request.extensions_mut().insert(tenant);
                Either::Left(self.inner.call(request))
            }
            Err(failure) => {
                let status = tonic::Status::from(failure);
                Either::Right(futures::future::ready(Ok(status.into_http())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_health_and_reflection_are_exempt() {
        assert!(is_exempt("/grpc.health.v1.Health/Check"));
        assert!(is_exempt(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
        ));
        assert!(!is_exempt("/loghaul.v1.LogIngest/Push"));
        assert!(!is_exempt("/loghaul.v1.LogQuery/Query"));
        assert!(!is_exempt(
            "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
        ));
        assert!(!is_exempt("/grpc.health.v1.HealthX/Check"));
    }
}
