//! A minimal HTTP/1.0 client for the console API: enough for JSON answers and a Server-Sent
//! Events stream, without pulling an HTTP client into the dependencies.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An answer: status, headers (names lowercased) and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|err| panic!("not JSON ({err}): {}", self.body))
    }
}

fn request(path: &str, headers: &[(&str, &str)]) -> String {
    let mut text = format!("GET {path} HTTP/1.0\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        text.push_str("Host: 127.0.0.1\r\n");
    }
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text
}

/// `GET path` with the given headers; `key` (when not empty) as `x-api-key`.
pub async fn get(addr: SocketAddr, path: &str, key: &str, headers: &[(&str, &str)]) -> Answer {
    let mut all: Vec<(&str, &str)> = headers.to_vec();
    if !key.is_empty() {
        all.push(("x-api-key", key));
    }
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(request(path, &all).as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("an answer within 30 s")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete answer");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// An open event stream.
pub struct EventStream {
    stream: TcpStream,
    /// Everything read so far.
    pub text: String,
}

impl EventStream {
    /// Opens `GET path` with `key` and returns the stream once the headers arrived.
    pub async fn open(addr: SocketAddr, path: &str, key: &str) -> EventStream {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(
                request(path, &[("x-api-key", key), ("accept", "text/event-stream")]).as_bytes(),
            )
            .await
            .unwrap();
        let mut events = EventStream {
            stream,
            text: String::new(),
        };
        events.wait_for("\r\n\r\n", Duration::from_secs(30)).await;
        assert!(
            events.text.starts_with("HTTP/1.0 200") || events.text.starts_with("HTTP/1.1 200"),
            "{}",
            events.text
        );
        events
    }

    /// Reads until the text read so far contains `needle`, failing after `limit`.
    pub async fn wait_for(&mut self, needle: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut buffer = [0u8; 8192];
        while !self.text.contains(needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            let read = tokio::time::timeout(left, self.stream.read(&mut buffer))
                .await
                .unwrap_or_else(|_| panic!("{needle:?} within {limit:?}; read: {}", self.text))
                .unwrap();
            assert!(
                read > 0,
                "the stream ended before {needle:?}: {}",
                self.text
            );
            self.text
                .push_str(&String::from_utf8_lossy(&buffer[..read]));
        }
    }

    /// Reads whatever arrives within `window`.
    pub async fn read_for(&mut self, window: Duration) {
        let deadline = Instant::now() + window;
        let mut buffer = [0u8; 8192];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.stream.read(&mut buffer)).await {
                Ok(Ok(read)) if read > 0 => self
                    .text
                    .push_str(&String::from_utf8_lossy(&buffer[..read])),
                _ => return,
            }
        }
    }

    /// Reads until the server ends the stream, failing after `limit`.
    pub async fn read_to_end(&mut self, limit: Duration) {
        let sent = read_until_closed(&mut self.stream, limit).await;
        self.text.push_str(&String::from_utf8_lossy(&sent));
    }

    /// The JSON data of every event of this type, in order.
    pub fn events(&self, kind: &str) -> Vec<serde_json::Value> {
        let mut found = Vec::new();
        for block in self.text.split("\n\n") {
            let mut event = "message";
            let mut data = String::new();
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event:") {
                    event = value.trim();
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push_str(value.trim_start());
                }
            }
            if event == kind && !data.is_empty() {
                found.push(serde_json::from_str(&data).unwrap());
            }
        }
        found
    }
}

/// Reads until the server closes `stream` (a reset counts) and returns what it sent before;
/// panics if the connection is still open after `limit`.
pub async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> Vec<u8> {
    let mut sent = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Err(_) => panic!(
                "the connection is still open after {limit:?}; received {:?}",
                String::from_utf8_lossy(&sent)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => return sent,
            Ok(Ok(read)) => sent.extend_from_slice(&buffer[..read]),
        }
    }
}

/// Opens a kept-alive HTTP/1.1 connection and has one `GET path` answered on it; `None` when
/// the server closed the connection instead of answering.
pub async fn kept_alive(addr: SocketAddr, path: &str) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut text = String::new();
    let mut buffer = [0u8; 4096];
    loop {
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .filter_map(|line| line.split_once(':'))
                .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, value)| value.trim().parse::<usize>().ok())
                .expect("a content-length");
            if body.len() >= length {
                assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                return Some(stream);
            }
        }
        let read = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buffer))
            .await
            .expect("an answer or a close within 30 s");
        match read {
            Ok(0) | Err(_) => return None,
            Ok(read) => text.push_str(&String::from_utf8_lossy(&buffer[..read])),
        }
    }
}
