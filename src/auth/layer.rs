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
pub(crate) fn is_exempt(path: &str) -> bool {
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
pub(crate) struct AuthLayer {
    keys: Arc<KeyStore>,
}

impl AuthLayer {
    /// A layer checking calls against `keys`.
    pub(crate) fn new(keys: Arc<KeyStore>) -> Self {
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
pub(crate) struct Authenticate<S> {
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
    use super::super::keys::KeySources;
    use super::super::{AuthMetrics, OpenAccess};
    use super::*;
    use crate::observability::metrics::Registry;

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

    /// Calls `path` through the layer of a keyless service as a TCP peer at `peer`; returns the
    /// gRPC status the layer answered with, or `None` when the call reached the service.
    async fn call_as(access: OpenAccess, path: &str, peer: &str) -> Option<(String, String)> {
        let metrics = Arc::new(AuthMetrics::register(&Registry::new()));
        let store = Arc::new(KeyStore::load(KeySources::default(), access, metrics).unwrap());
        let inner = tower::service_fn(|_request: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(tonic::body::Body::default()))
        });
        let mut service = AuthLayer::new(store).layer(inner);
        let mut request = http::Request::builder().uri(path).body(()).unwrap();
        request
            .extensions_mut()
            .insert(tonic::transport::server::TcpConnectInfo {
                local_addr: None,
                remote_addr: Some(peer.parse().unwrap()),
            });
        let response = Service::call(&mut service, request).await.unwrap();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|value| value.to_str().unwrap().to_owned())
        };
        header("grpc-status").map(|code| (code, header("grpc-message").unwrap_or_default()))
    }

    /// The peer address is what tonic attaches to each request; no traffic from another
    /// machine is needed to see the layer refuse one.
    #[tokio::test]
    async fn a_keyless_service_serves_loopback_and_refuses_other_peers() {
        const PUSH: &str = "/loghaul.v1.LogIngest/Push";
        for peer in ["127.0.0.1:5000", "[::1]:5000", "[::ffff:127.0.0.1]:5000"] {
            assert_eq!(call_as(OpenAccess::LoopbackOnly, PUSH, peer).await, None);
        }
        let refused = call_as(OpenAccess::LoopbackOnly, PUSH, "203.0.113.9:5000").await;
        let (code, message) = refused.expect("a remote peer is refused");
        assert_eq!(code, (tonic::Code::PermissionDenied as i32).to_string());
        let message = percent_decoded(&message);
        for hint in ["--api-keys", "--api-keys-file", "--allow-unauthenticated"] {
            assert!(message.contains(hint), "{message}");
        }
        for path in [
            "/loghaul.v1.LogQuery/Query",
            "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        ] {
            assert!(call_as(OpenAccess::LoopbackOnly, path, "[2001:db8::7]:1")
                .await
                .is_some());
        }
        // Kubernetes probes come from the node, not from loopback: health stays open.
        let health = "/grpc.health.v1.Health/Check";
        assert_eq!(
            call_as(OpenAccess::LoopbackOnly, health, "203.0.113.9:5000").await,
            None
        );
        assert_eq!(
            call_as(OpenAccess::Anyone, PUSH, "203.0.113.9:5000").await,
            None,
            "--allow-unauthenticated serves everyone"
        );
    }

    /// gRPC percent-encodes `grpc-message`.
    fn percent_decoded(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut at = 0;
        while at < bytes.len() {
            match (bytes[at], text.get(at + 1..at + 3)) {
                (b'%', Some(hex)) if u8::from_str_radix(hex, 16).is_ok() => {
                    out.push(u8::from_str_radix(hex, 16).unwrap());
                    at += 3;
                }
                (byte, _) => {
                    out.push(byte);
                    at += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}
