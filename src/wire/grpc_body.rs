//! gRPC messages read off a request body one at a time, and the one-message answer.
//!
//! The ingest methods read their bodies themselves instead of through tonic's decoder, for memory:
//! tonic keeps a buffer as large as the largest message a stream has sent (and another for its
//! decompressed form) for the life of the stream, outside any budget, and decodes a whole message
//! before the handler can weigh it. Here the handler reads a message's 5-byte prefix while holding
//! nothing, claims budget for the message's size, and only then reads it into a buffer of its own
//! that is gone once the message is decoded, charging the bytes as they arrive (no slower than
//! `--min-body-rate`); decompression grows the claim as it goes.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body as _, Frame, SizeHint};
use prost::Message;
use tonic::body::Body;
use tonic::codegen::http::{self, HeaderMap, HeaderValue};
use tonic::metadata::MetadataValue;
use tonic::Status;

use super::body_rate::BodyPace;
use super::inflate::{inflate, Compression};
use crate::error::IngestError;
use crate::pipeline::Meter;

/// Makes a type with an `async fn serve(self, http::Request<Body>) -> http::Response<Body>` a
/// tonic service named `$name`: the router hands it the raw request, body unread.
macro_rules! serve_raw_grpc {
    ($service:ty, $name:expr) => {
        impl tonic::server::NamedService for $service {
            const NAME: &'static str = $name;
        }

        impl tower::Service<tonic::codegen::http::Request<tonic::body::Body>> for $service {
            type Response = tonic::codegen::http::Response<tonic::body::Body>;
            type Error = std::convert::Infallible;
            type Future = std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
            >;

            fn poll_ready(
                &mut self,
                _cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Result<(), Self::Error>> {
                std::task::Poll::Ready(Ok(()))
            }

            fn call(
                &mut self,
                request: tonic::codegen::http::Request<tonic::body::Body>,
            ) -> Self::Future {
                let service = self.clone();
                Box::pin(async move { Ok(service.serve(request).await) })
            }
        }
    };
}
pub(crate) use serve_raw_grpc;

/// Bytes of the length-prefix before every gRPC message.
const PREFIX_BYTES: usize = 5;

/// How a request's messages are compressed (`grpc-encoding`); an unsupported encoding is refused as
/// the gRPC specification asks.
pub(crate) fn message_encoding(headers: &HeaderMap) -> Result<Option<Compression>, Status> {
    match headers.get("grpc-encoding").map(HeaderValue::as_bytes) {
        None | Some(b"identity") => Ok(None),
        Some(b"gzip") => Ok(Some(Compression::Gzip)),
        Some(b"zstd") => Ok(Some(Compression::Zstd)),
        Some(other) => {
            let mut status = Status::unimplemented(format!(
                "grpc-encoding {} is not supported; use gzip, zstd or identity",
                String::from_utf8_lossy(other)
            ));
            status.metadata_mut().insert(
                "grpc-accept-encoding",
                MetadataValue::from_static("gzip,zstd,identity"),
            );
            Err(status)
        }
    }
}

/// The prefix of the next message: its size on the wire and whether it is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Prefix {
    /// Whether the message is compressed with the request's encoding.
    pub compressed: bool,
    /// Its length on the wire.
    pub len: usize,
}

/// Reads gRPC-framed messages off a request body.
pub(crate) struct MessageReader {
    body: Body,
    /// Bytes received and not yet consumed: at most one HTTP/2 frame between messages.
    pending: BytesMut,
    encoding: Option<Compression>,
    max_message_bytes: usize,
    pace: BodyPace,
}

impl MessageReader {
    /// A reader of `body`, whose messages may be `max_message_bytes` long, before and after
    /// decompression (`--max-request-bytes`), and must arrive at `pace`.
    pub(crate) fn new(
        body: Body,
        encoding: Option<Compression>,
        max_message_bytes: usize,
        pace: BodyPace,
    ) -> Self {
        MessageReader {
            body,
            pending: BytesMut::new(),
            encoding,
            max_message_bytes,
            pace,
        }
    }

    /// Waits for the next message's prefix; `None` when the client ended the stream.
    pub(crate) async fn next_prefix(&mut self) -> Result<Option<Prefix>, IngestError> {
        while self.pending.len() < PREFIX_BYTES {
            let Some(data) = self.next_data().await? else {
                if self.pending.is_empty() {
                    return Ok(None);
                }
                return Err(IngestError::Malformed(
                    "the stream ended inside a message's length prefix".into(),
                ));
            };
            self.pending.extend_from_slice(&data);
        }
        let compressed = match self.pending[0] {
            0 => false,
            1 if self.encoding.is_some() => true,
            1 => {
                return Err(IngestError::Malformed(
                    "a message is marked compressed but the request names no grpc-encoding".into(),
                ))
            }
            flag => {
                return Err(IngestError::Malformed(format!(
                    "invalid compression flag {flag} in a message prefix"
                )))
            }
        };
        let len = u32::from_be_bytes([
            self.pending[1],
            self.pending[2],
            self.pending[3],
            self.pending[4],
        ]) as usize;
        if len > self.max_message_bytes {
            return Err(IngestError::RequestTooLarge {
                detail: format!("a message of {len} bytes"),
                limit: self.max_message_bytes as u64,
            });
        }
        self.pending.advance(PREFIX_BYTES);
        Ok(Some(Prefix { compressed, len }))
    }

    /// Reads the message `prefix` announced, decompressed, charging `meter` for every byte as it
    /// arrives; a message slower than the pace is cut off.
    pub(crate) async fn read_message(
        &mut self,
        prefix: Prefix,
        meter: &mut Meter<'_>,
    ) -> Result<Bytes, IngestError> {
        let mut clock = self.pace.start();
        let mut message = BytesMut::with_capacity(prefix.len);
        while message.len() < prefix.len {
            if self.pending.is_empty() {
                let Some(data) = clock.next(self.next_data()).await?? else {
                    return Err(IngestError::Malformed(format!(
                        "the stream ended {} bytes into a message of {}",
                        message.len(),
                        prefix.len
                    )));
                };
                clock.received(data.len());
                self.pending = BytesMut::from(data);
            }
            let take = (prefix.len - message.len()).min(self.pending.len());
            meter.charge(take).await?;
            message.extend_from_slice(&self.pending.split_to(take));
        }
        if self.pending.is_empty() {
            // Let the frame buffer go with the message instead of keeping its capacity.
            self.pending = BytesMut::new();
        }
        let message = message.freeze();
        match (prefix.compressed, self.encoding) {
            (true, Some(encoding)) => {
                let inflated = inflate(&message, encoding, self.max_message_bytes, meter).await?;
                meter.release(message.len());
                Ok(inflated)
            }
            _ => Ok(message),
        }
    }

    /// The next data frame's bytes; `None` at the end of the body. Trailers are ignored.
    async fn next_data(&mut self) -> Result<Option<Bytes>, IngestError> {
        loop {
            let frame = std::future::poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx)).await;
            match frame {
                None => return Ok(None),
                Some(Err(status)) => return Err(IngestError::Stream(status)),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if !data.is_empty() {
                            return Ok(Some(data));
                        }
                    }
                }
            }
        }
    }
}

/// The answer to a gRPC call: the message and an OK status, or the status alone (trailers-only).
pub(crate) fn answer<M: Message>(outcome: Result<M, Status>) -> http::Response<Body> {
    let message = match outcome {
        Ok(message) => message,
        Err(status) => return status.into_http(),
    };
    let encoded = message.encode_to_vec();
    let mut framed = BytesMut::with_capacity(PREFIX_BYTES + encoded.len());
    framed.extend_from_slice(&[0]);
    framed.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    framed.extend_from_slice(&encoded);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let body = OneMessage {
        message: Some(framed.freeze()),
        trailers: Some(trailers),
    };
    let mut response = http::Response::new(Body::new(body));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    response
}

/// A body of one data frame, then the trailers.
struct OneMessage {
    message: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl http_body::Body for OneMessage {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(message) = self.message.take() {
            return Poll::Ready(Some(Ok(Frame::data(message))));
        }
        Poll::Ready(
            self.trailers
                .take()
                .map(|trailers| Ok(Frame::trailers(trailers))),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.message.is_none() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.message.as_ref().map_or(0, |m| m.len() as u64))
    }
}
