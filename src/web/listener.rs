//! The accept loop of the service's HTTP listeners (metrics and probes, the console, HTTP
//! ingest): axum routers served over HTTP/1.1 by hyper with a deadline for request headers and a
//! cap on open connections ([`super::slots`]: at the cap, the connection idle longest makes room),
//! so clients that connect and never finish a request cannot pile up, nor keep a probe out.
//!
//! `axum::serve` has neither knob, which is why the loop is here.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use bytes::Bytes;
use futures::TryFutureExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::slots::{Busy, Slot, Slots};

use super::metrics::ListenerMetrics;
use crate::config::ListenOptions;

/// What one HTTP listener tolerates from its clients.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HttpLimits {
    /// How long a connection may take to send a request's headers, counted from the connection
    /// (or the previous response) on; hyper closes it after that.
    pub header_read_timeout: Duration,
    /// Connections open at once; one more takes the place of the connection idle longest, and
    /// is closed as soon as it is accepted only when every connection has a request in flight.
    pub max_connections: u32,
}

impl From<&ListenOptions> for HttpLimits {
    fn from(config: &ListenOptions) -> Self {
        HttpLimits {
            header_read_timeout: config.http_header_read_timeout.0,
            max_connections: config.http_max_connections,
        }
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then lets the open connections finish
/// their request in flight and waits for them. `name` labels the listener's series in `metrics`
/// (`loghaul_http_*{listener}`), so it must be one of a few fixed names. With `tls`, every
/// connection speaks TLS first. Handlers can read the peer address with axum's
/// `ConnectInfo<SocketAddr>`.
pub(crate) async fn serve_http(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    tls: Option<TlsAcceptor>,
    name: &'static str,
    metrics: Arc<ListenerMetrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Slots::new(limits.max_connections as usize, name, Arc::clone(&metrics));
    let closing = CancellationToken::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    accept_failed(err, name).await;
                    continue;
                }
            },
        };
        // Dropping the stream closes it: a client over the limit learns at once, instead of
        // waiting in a queue that would itself be unbounded.
        let Some(slot) = slots.admit() else { continue };
        let connection = Connection {
            peer,
            app: app.clone(),
            builder: builder.clone(),
            closing: closing.clone(),
            slot,
            name,
            metrics: Arc::clone(&metrics),
        };
        match tls.clone() {
            None => tokio::spawn(connection.serve(stream)),
            Some(acceptor) => tokio::spawn(async move {
                let handshake = tokio::time::timeout(
                    crate::tls::HTTP_HANDSHAKE_TIMEOUT,
                    acceptor.accept(stream),
                );
                // A handshake is no request in flight: it makes room like an idle connection.
                let handshake = tokio::select! {
                    handshake = handshake => handshake,
                    () = connection.slot.activity().told_to_leave() => return,
                };
                match handshake {
                    Ok(Ok(stream)) => connection.serve(stream).await,
                    Ok(Err(err)) => {
                        tracing::debug!(listener = name, error = %err, "TLS handshake failed");
                    }
                    Err(_) => tracing::debug!(listener = name, "TLS handshake timed out"),
                }
            }),
        };
    }
    drop(listener);
    closing.cancel();
    slots.closed().await;
    Ok(())
}

/// One accepted connection, holding its slot until it ends.
struct Connection {
    peer: SocketAddr,
    app: Router,
    builder: http1::Builder,
    closing: CancellationToken,
    slot: Slot,
    name: &'static str,
    metrics: Arc<ListenerMetrics>,
}

impl Connection {
    async fn serve<S>(self, stream: S)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            peer,
            app,
            builder,
            closing,
            slot,
            name,
            metrics,
        } = self;
        let open = metrics.connections.handle(name);
        open.add(1.0);
        let activity = Arc::clone(slot.activity());
        let service = {
            let activity = Arc::clone(&activity);
            tower::service_fn(move |mut request: hyper::Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                let busy = activity.begin();
                app.clone()
                    .oneshot(request)
                    .map_ok(move |response| response.map(|body| Tracked { body, _busy: busy }))
            })
        };
        // Upgrades are what Loki's tail WebSocket needs; once a connection is upgraded this
        // future ends and the socket is its handler's, bounded by the handler's own limits.
        let connection = builder
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
            .with_upgrades();
        tokio::pin!(connection);
        let outcome = tokio::select! {
            outcome = connection.as_mut() => outcome,
            () = closing.cancelled() => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
            () = activity.told_to_leave() => {
                // Only this task polls the connection, which is where requests begin and end, so
                // no request can start between this check and the close.
                if activity.is_idle() {
                    Ok(())
                } else {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            }
        };
        if let Err(err) = outcome {
            if err.is_timeout() {
                metrics.header_timeouts.increment_static([name], 1);
            } else {
                tracing::debug!(listener = name, error = %err, "HTTP connection ended with an error");
            }
        }
        open.add(-1.0);
        drop(slot);
    }
}

/// An answer's body, which keeps its request in flight until hyper has sent it all (or dropped
/// it), so that a connection streaming an answer is never taken for an idle one.
struct Tracked {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Per-connection failures (the peer gave up before it was accepted) are not the listener's;
/// anything else (out of file descriptors, say) would fail again at once, so it waits a little.
async fn accept_failed(err: std::io::Error, name: &'static str) {
    use std::io::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(listener = name, error = %err, "cannot accept HTTP connections; retrying in 1s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
