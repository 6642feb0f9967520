//! gRPC calls with hand-made frames over HTTP/2, for messages a well-behaved client cannot send:
//! invalid UTF-8, compressed payloads that inflate far past the limit, a lying length prefix.

use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::net::TcpStream;

/// What the server answered.
#[derive(Debug)]
pub struct Answer {
    /// `grpc-status` (from the headers of a trailers-only answer, else from the trailers).
    pub code: i32,
    /// `grpc-message`, percent-decoded.
    pub message: String,
    /// The response message bytes (without the 5-byte frame header), when there was one.
    pub body: Bytes,
}

/// One gRPC frame: the compressed flag, the length, the payload.
pub fn frame(compressed: bool, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(payload.len() + 5);
    out.put_u8(u8::from(compressed));
    out.put_u32(payload.len() as u32);
    out.put_slice(payload);
    out.freeze()
}

/// Calls `path` with `frames` as the request body and `encoding` as `grpc-encoding`.
pub async fn call(
    addr: SocketAddr,
    path: &str,
    encoding: Option<&str>,
    frames: Vec<Bytes>,
) -> Answer {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut client = client.ready().await.unwrap();
    let mut request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(encoding) = encoding {
        request = request.header("grpc-encoding", encoding);
    }
    let (response, mut body) = client
        .send_request(request.body(()).unwrap(), false)
        .unwrap();
    // The server may answer (and reset the stream) before the whole body is out; that is fine.
    let sender = tokio::spawn(async move {
        let count = frames.len();
        for (n, data) in frames.into_iter().enumerate() {
            if body.send_data(data, n + 1 == count).is_err() {
                return;
            }
        }
        if count == 0 {
            let _ = body.send_data(Bytes::new(), true);
        }
        // Keep the stream's send half alive until the data is flushed or the stream ends.
        let _ = futures::future::poll_fn(|cx| body.poll_reset(cx)).await;
    });
    let response = response.await.unwrap();
    let (parts, mut received) = response.into_parts();
    let mut message_bytes = BytesMut::new();
    let mut headers = parts.headers;
    if headers.get("grpc-status").is_none() {
        while let Some(chunk) = received.data().await {
            let chunk = chunk.unwrap();
            let _ = received.flow_control().release_capacity(chunk.len());
            message_bytes.extend_from_slice(&chunk);
        }
        headers = received.trailers().await.unwrap().unwrap_or_default();
    }
    sender.abort();
    let code = headers
        .get("grpc-status")
        .map(|value| value.to_str().unwrap().parse().unwrap())
        .expect("a grpc-status");
    let message = headers
        .get("grpc-message")
        .map(|value| percent_decode(value.to_str().unwrap()))
        .unwrap_or_default();
    let body = if message_bytes.len() >= 5 {
        message_bytes.split_off(5).freeze()
    } else {
        Bytes::new()
    };
    Answer {
        code,
        message,
        body,
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(byte) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Protobuf wire helpers: a length-delimited field and a varint.
pub fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Field `number` of wire type 2 holding `payload`.
pub fn field(number: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 6);
    varint(u64::from(number << 3 | 2), &mut out);
    varint(payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}
