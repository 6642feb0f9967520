//! Holds a Push stream's first bytes back until its handler has taken budget for them.
//!
//! A handler reserves budget before it reads a message, so that a message is only decoded into
//! memory the budget accounts for. Taken at the start of a stream, that reservation would let
//! streams that open and send nothing hold the budget (10,000 such streams held it long enough
//! for the others to time out). With this gate the handler waits for the client's first bytes
//! without holding anything, then reserves, then opens the gate; the bytes wait meanwhile in the
//! gate (one HTTP/2 frame at most) and behind flow control.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::task::AtomicWaker;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::Notify;
use tonic::codegen::http;
use tonic::server::NamedService;
use tower::Service;

/// The handler's side of one stream's gate, found in the request's extensions.
#[derive(Debug, Default)]
pub struct Gate {
    arrived: AtomicBool,
    arrival: Notify,
    opened: AtomicBool,
    body_waker: AtomicWaker,
}

impl Gate {
    /// Resolves once the client has sent something (or ended its stream). The body is read only
    /// while the stream's `message()` is polled, so poll that concurrently.
    pub async fn arrived(&self) {
        let notified = self.arrival.notified();
        if self.arrived.load(Ordering::Acquire) {
            return;
        }
        notified.await;
    }

    /// Lets the held bytes and everything after them through.
    pub fn open(&self) {
        self.opened.store(true, Ordering::Release);
        self.body_waker.wake();
    }

    fn arrive(&self) {
        if !self.arrived.swap(true, Ordering::AcqRel) {
            self.arrival.notify_waiters();
        }
    }
}

/// A gRPC service whose request bodies are gated; see the module docs.
#[derive(Clone, Debug)]
pub struct GateFirstMessage<S> {
    inner: S,
}

impl<S> GateFirstMessage<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        GateFirstMessage { inner }
    }
}

impl<S: NamedService> NamedService for GateFirstMessage<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B: Body> Service<http::Request<B>> for GateFirstMessage<S>
where
    S: Service<http::Request<GatedBody<B>>, Error = Infallible>,
{
    type Response = S::Response;
    type Error = Infallible;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let gate = Arc::new(Gate::default());
        let (mut parts, body) = request.into_parts();
        parts.extensions.insert(Arc::clone(&gate));
        let body = GatedBody {
            inner: body,
            gate,
            held: None,
        };
        self.inner.call(http::Request::from_parts(parts, body))
    }
}

/// A request body that, until its gate opens, keeps its first frame to itself.
pub struct GatedBody<B: Body> {
    inner: B,
    gate: Arc<Gate>,
    held: Option<Frame<B::Data>>,
}

impl<B: Body + Unpin> Body for GatedBody<B>
where
    B::Data: Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if this.gate.opened.load(Ordering::Acquire) {
            if let Some(frame) = this.held.take() {
                return Poll::Ready(Some(Ok(frame)));
            }
            return Pin::new(&mut this.inner).poll_frame(cx);
        }
        if this.held.is_none() {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    this.held = Some(frame);
                    this.gate.arrive();
                }
                // The end of the stream or an error carries no bytes to account for.
                ended => {
                    this.gate.arrive();
                    return ended;
                }
            }
        }
        this.gate.body_waker.register(cx.waker());
        // Opened between the check above and the registration: do not miss the wake-up.
        if this.gate.opened.load(Ordering::Acquire) {
            return Poll::Ready(this.held.take().map(Ok));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use bytes::Bytes;
    use futures::task::noop_waker;

    use super::*;

    /// A body that has `frames` ready, then ends.
    struct Ready(VecDeque<Bytes>);

    impl Body for Ready {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(
                self.get_mut()
                    .0
                    .pop_front()
                    .map(|data| Ok(Frame::data(data))),
            )
        }
    }

    fn poll(body: &mut GatedBody<Ready>) -> Poll<Option<Bytes>> {
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        Pin::new(body)
            .poll_frame(&mut cx)
            .map(|frame| frame.map(|frame| frame.unwrap().into_data().unwrap()))
    }

    fn gated(frames: &[&'static str]) -> GatedBody<Ready> {
        GatedBody {
            inner: Ready(
                frames
                    .iter()
                    .map(|f| Bytes::from_static(f.as_bytes()))
                    .collect(),
            ),
            gate: Arc::new(Gate::default()),
            held: None,
        }
    }

    #[tokio::test]
    async fn the_first_frame_waits_for_the_gate_and_nothing_is_lost() {
        let mut body = gated(&["one", "two"]);
        assert!(poll(&mut body).is_pending(), "held until the gate opens");
        assert!(poll(&mut body).is_pending());
        body.gate.arrived().await;
        body.gate.open();
        assert_eq!(
            poll(&mut body),
            Poll::Ready(Some(Bytes::from_static(b"one")))
        );
        assert_eq!(
            poll(&mut body),
            Poll::Ready(Some(Bytes::from_static(b"two")))
        );
        assert_eq!(poll(&mut body), Poll::Ready(None));
    }

    #[tokio::test]
    async fn an_empty_stream_ends_at_once_and_counts_as_arrived() {
        let mut body = gated(&[]);
        assert_eq!(poll(&mut body), Poll::Ready(None));
        body.gate.arrived().await;
    }
}
