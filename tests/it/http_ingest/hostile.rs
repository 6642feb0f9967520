//! Hostile bodies on the HTTP ingest listener: broken protobuf, JSON and compression, types and
//! encodings it does not take, compression bombs, bodies over --max-request-bytes with and
//! without a length, and pushes that are small on the wire but large once decoded. Each gets a
//! clear 4xx (or, within the budget, is stored), no panic, and the server goes on serving; and
//! the memory of a process under several of them at once stays within a bound set by its budget.

use std::net::SocketAddr;

use super::{
    assert_still_serving, gzip, loki_push, otlp_request, post, snappy, status_json,
    status_protobuf, JSON, LOKI, OTLP, PROTOBUF,
};
use crate::common::process::Process;
use crate::common::{config, Backend, TestDb, TestServer, DEADLINE};
use loghaul::record::RECORD_OVERHEAD_BYTES;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MIB: usize = 1 << 20;

/// gRPC's codes, as google.rpc.Status carries them.
const INVALID_ARGUMENT: i32 = 3;
const RESOURCE_EXHAUSTED: i32 = 8;

/// A server on SQLite for one hostile test, with `max_request_bytes`.
async fn server(name: &str, max_request_bytes: &str) -> (TestDb, TestServer) {
    let db = TestDb::create(Backend::Sqlite, name).await.unwrap();
    let mut settings = config(&db);
    settings.ingest.max_request_bytes = max_request_bytes.parse().unwrap();
    let server = TestServer::start(settings).await;
    (db, server)
}

/// Bodies that do not decode get 400, each with a message saying what is wrong, in the
/// protocol's form; nothing of them is stored and the next request is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_do_not_decode_get_400() {
    let (db, server) = server("http_broken", "4MiB").await;
    let addr = server.http_ingest;

    // ExportLogsServiceRequest{resource_logs: 50 bytes announced, 2 sent}.
    let truncated = [10u8, 50, 18, 1];
    let answer = post(addr, OTLP, &[PROTOBUF], &truncated).await;
    assert_eq!(answer.status, 400, "{}", answer.text());
    let status = status_protobuf(&answer);
    assert_eq!(status.code, INVALID_ARGUMENT, "{status:?}");
    assert!(
        status.message.contains("ExportLogsServiceRequest"),
        "{status:?}"
    );
    assert_still_serving(addr, "truncated OTLP protobuf").await;

    // PushRequest{streams: 50 bytes announced, 2 sent}, snappy-compressed as Loki sends it.
    let answer = post(addr, LOKI, &[PROTOBUF], &snappy(&[10u8, 50, 10, 1])).await;
    assert_eq!(answer.status, 400, "{}", answer.text());
    assert!(answer.text().contains("PushRequest"), "{}", answer.text());
    assert_still_serving(addr, "truncated Loki protobuf").await;

    // A Loki protobuf body that is not valid snappy: 10 bytes announced, then a copy from
    // offset 0, before the start.
    let answer = post(addr, LOKI, &[PROTOBUF], &[10, 0b0000_0001, 0]).await;
    assert_eq!(answer.status, 400, "{}", answer.text());
    assert!(answer.text().contains("snappy"), "{}", answer.text());
    assert_still_serving(addr, "a Loki body that is not snappy").await;

    // Invalid JSON, both protocols.
    for bad in [&b"{\"resourceLogs\": [{"[..], b"not json", b"[]"] {
        let answer = post(addr, OTLP, &[JSON], bad).await;
        assert_eq!(answer.status, 400, "{}", answer.text());
        let status = status_json(&answer);
        assert_eq!(status["code"], INVALID_ARGUMENT, "{status}");
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .contains("not valid OTLP/JSON"),
            "{status}"
        );
        let answer = post(addr, LOKI, &[JSON], bad).await;
        assert_eq!(answer.status, 400, "{}", answer.text());
        assert!(
            answer.text().contains("not a valid Loki JSON push"),
            "{}",
            answer.text()
        );
    }
    assert_still_serving(addr, "invalid JSON").await;

    // gzip that is cut short, both protocols.
    let export = gzip(&otlp_request("checkout", &["never stored"]).encode_to_vec());
    let cut = &export[..export.len() / 2];
    let answer = post(addr, OTLP, &[PROTOBUF, ("content-encoding", "gzip")], cut).await;
    assert_eq!(answer.status, 400, "{}", answer.text());
    assert_eq!(status_protobuf(&answer).code, INVALID_ARGUMENT);
    let answer = post(addr, LOKI, &[JSON, ("content-encoding", "gzip")], cut).await;
    assert_eq!(answer.status, 400, "{}", answer.text());
    assert!(answer.text().contains("gzip"), "{}", answer.text());
    assert_still_serving(addr, "broken gzip").await;

    let messages: Vec<String> = db
        .stored()
        .await
        .into_iter()
        .map(|row| row.message)
        .collect();
    assert!(
        messages.len() == 10 && messages.iter().all(|message| message.starts_with("after ")),
        "only the follow-ups are stored: {messages:?}"
    );
    server.stop().await;
}

/// A `Content-Type` or `Content-Encoding` the endpoint does not take gets 415 naming what it does
/// take, before the body is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_and_encodings_it_does_not_take_get_415() {
    let (db, server) = server("http_415", "4MiB").await;
    let addr = server.http_ingest;
    let export = otlp_request("checkout", &["never stored"]).encode_to_vec();
    let push = snappy(&loki_push(&[(r#"{job="x"}"#, &["never stored"])]).encode_to_vec());
    for (headers, what) in [
        (&[("content-type", "text/plain")][..], "text/plain"),
        (
            &[("content-type", "application/grpc")][..],
            "application/grpc",
        ),
        (&[PROTOBUF, ("content-encoding", "br")][..], "br"),
        (&[JSON, ("content-encoding", "compress")][..], "compress"),
    ] {
        let answer = post(addr, OTLP, headers, &export).await;
        assert_eq!(answer.status, 415, "OTLP {what}: {}", answer.text());
        // A type it does not know is answered in JSON; a known one in its own encoding.
        let message = match answer.header("content-type") {
            Some("application/x-protobuf") => status_protobuf(&answer).message,
            _ => status_json(&answer)["message"].as_str().unwrap().to_owned(),
        };
        assert!(
            message.contains("application/x-protobuf") || message.contains("gzip"),
            "OTLP {what}: {message}"
        );
        let answer = post(addr, LOKI, headers, &push).await;
        assert_eq!(answer.status, 415, "Loki {what}: {}", answer.text());
        assert!(
            answer.text().contains(what),
            "Loki {what}: {}",
            answer.text()
        );
    }
    // OTLP has no default type.
    let answer = post(addr, OTLP, &[], &export).await;
    assert_eq!(answer.status, 415, "{}", answer.text());
    assert_still_serving(addr, "unsupported types").await;
    assert_eq!(db.count().await, 2, "only the follow-ups are stored");
    server.stop().await;
}

/// A gzip stream of `len` zero bytes, written by hand, since compressing them would take long: one
/// fixed-Huffman deflate block holding a literal 0 and then matches of 258 bytes at distance 1
/// (13 bits each), inside a gzip header and trailer. About 1/160 of `len`.
fn gzip_of_zeros(len: usize) -> Vec<u8> {
    struct Bits {
        out: Vec<u8>,
        bit: u32,
    }
    impl Bits {
        /// `count` bits of `value`, least significant first (deflate's order for header bits).
        fn lsb(&mut self, value: u32, count: u32) {
            for at in 0..count {
                if self.bit == 0 {
                    self.out.push(0);
                }
                if value >> at & 1 == 1 {
                    *self.out.last_mut().unwrap() |= 1 << self.bit;
                }
                self.bit = (self.bit + 1) % 8;
            }
        }
        /// A Huffman code of `count` bits, most significant first.
        fn code(&mut self, code: u32, count: u32) {
            for at in (0..count).rev() {
                self.lsb(code >> at & 1, 1);
            }
        }
    }
    assert!(len >= 1 && len <= u32::MAX as usize);
    let mut bits = Bits {
        out: vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff],
        bit: 0,
    };
    bits.lsb(1, 1); // BFINAL
    bits.lsb(1, 2); // BTYPE 01: fixed Huffman codes
    bits.code(0x30, 8); // literal 0
    let mut left = len - 1;
    while left > 0 {
        // A match of 3 to 258 bytes at distance 1 (distance code 0: five 0 bits). The last one
        // may be short; lengths under 3 are literals.
        let run = left.min(258);
        if run < 3 {
            for _ in 0..run {
                bits.code(0x30, 8);
            }
        } else {
            let (symbol, extra, extra_bits) = length_symbol(run);
            if symbol < 280 {
                bits.code(symbol - 256, 7);
            } else {
                bits.code(symbol - 280 + 0xc0, 8);
            }
            bits.lsb(extra, extra_bits);
            bits.code(0, 5);
        }
        left -= run;
    }
    bits.code(0, 7); // end of block
    let mut out = bits.out;
    let mut crc = flate2::Crc::new();
    let zeros = vec![0u8; MIB];
    let mut left = len;
    while left > 0 {
        let n = left.min(MIB);
        crc.update(&zeros[..n]);
        left -= n;
    }
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out
}

/// Deflate's length symbol for a match of `len` (3..=258) bytes: (symbol, extra bits value,
/// number of extra bits).
fn length_symbol(len: usize) -> (u32, u32, u32) {
    const BASES: [(u32, u32); 29] = [
        (3, 0),
        (4, 0),
        (5, 0),
        (6, 0),
        (7, 0),
        (8, 0),
        (9, 0),
        (10, 0),
        (11, 1),
        (13, 1),
        (15, 1),
        (17, 1),
        (19, 2),
        (23, 2),
        (27, 2),
        (31, 2),
        (35, 3),
        (43, 3),
        (51, 3),
        (59, 3),
        (67, 4),
        (83, 4),
        (99, 4),
        (115, 4),
        (131, 5),
        (163, 5),
        (195, 5),
        (227, 5),
        (258, 0),
    ];
    let len = len as u32;
    let at = BASES
        .iter()
        .rposition(|&(base, _)| base <= len)
        .expect("a length of at least 3");
    let (base, extra_bits) = BASES[at];
    (257 + at as u32, len - base, extra_bits)
}

#[test]
fn the_handmade_gzip_inflates_to_zeros() {
    for len in [1, 2, 3, 4, 258, 259, 260, 261, 1000, 100_003] {
        let mut inflated = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(&gzip_of_zeros(len)[..]),
            &mut inflated,
        )
        .unwrap();
        assert_eq!(inflated.len(), len);
        assert!(inflated.iter().all(|&byte| byte == 0));
    }
}

/// The head of a POST on a fresh connection, `Connection: close`.
async fn open_request(addr: SocketAddr, path: &str, headers: &[&str]) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for header in headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// The status code and the answer on `stream`, read until the server closes it. A server that
/// stops reading a body part-way may reset the connection after its answer: what came before the
/// reset is the answer.
async fn answer_on(mut stream: tokio::net::TcpStream) -> (u16, String) {
    let mut response = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(DEADLINE, stream.read(&mut buffer))
            .await
            .expect("an answer without the rest of the body");
        match read {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&buffer[..n]),
            Err(err) if !response.is_empty() => {
                assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
                break;
            }
            Err(err) => panic!("no answer: {err}"),
        }
    }
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, response)
}

/// Over --max-request-bytes (4 MiB, the default), as sent or once inflated: 413 naming the
/// limit, and no more of the body read or inflated than the limit. A length announced over the
/// limit is refused before the body is sent (this test never sends it); a chunked body, which
/// announces none, is refused once it passes the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bombs_and_bodies_over_the_limit_get_413() {
    const LIMIT: usize = 4 * MIB;
    let (db, server) = server("http_413", "4MiB").await;
    let addr = server.http_ingest;

    // ~200 MB of zeros in about 1.3 MB of gzip, within the limit as sent.
    let bomb = gzip_of_zeros(200_000_000);
    assert!(bomb.len() < LIMIT, "{}", bomb.len());
    let answer = post(addr, OTLP, &[PROTOBUF, ("content-encoding", "gzip")], &bomb).await;
    assert_eq!(answer.status, 413, "{}", answer.text());
    let status = status_protobuf(&answer);
    assert_eq!(status.code, RESOURCE_EXHAUSTED, "{status:?}");
    assert!(status.message.contains("--max-request-bytes"), "{status:?}");
    assert_eq!(answer.header("retry-after"), None, "not to be retried");
    assert_still_serving(addr, "a gzip bomb on OTLP").await;
    let answer = post(addr, LOKI, &[JSON, ("content-encoding", "gzip")], &bomb).await;
    assert_eq!(answer.status, 413, "{}", answer.text());
    assert!(
        answer.text().contains("--max-request-bytes"),
        "{}",
        answer.text()
    );
    assert_still_serving(addr, "a gzip bomb on Loki").await;

    // Snappy states the decompressed length first: a claim of 1 GiB is refused unread.
    let mut huge_claim = Vec::new();
    let mut claim = 1u64 << 30;
    while claim >= 0x80 {
        huge_claim.push(claim as u8 | 0x80);
        claim >>= 7;
    }
    huge_claim.push(claim as u8);
    huge_claim.extend_from_slice(&[0; 64]);
    let answer = post(addr, LOKI, &[PROTOBUF], &huge_claim).await;
    assert_eq!(answer.status, 413, "{}", answer.text());
    assert!(
        answer.text().contains("--max-request-bytes"),
        "{}",
        answer.text()
    );
    assert_still_serving(addr, "a snappy body claiming 1 GiB").await;

    // A Content-Length over the limit: answered before a byte of the body is sent.
    for (path, content_type) in [(OTLP, "application/x-protobuf"), (LOKI, "application/json")] {
        let stream = open_request(
            addr,
            path,
            &[
                &format!("Content-Type: {content_type}"),
                &format!("Content-Length: {}", 1u64 << 30),
            ],
        )
        .await;
        let (status, response) = answer_on(stream).await;
        assert_eq!(status, 413, "{path}: {response}");
        assert!(response.contains("--max-request-bytes"), "{response}");
    }
    assert_still_serving(addr, "a Content-Length over the limit").await;

    // No Content-Length: chunks of 64 KiB up to the limit, then one byte more (and no end).
    for (path, content_type) in [(OTLP, "application/x-protobuf"), (LOKI, "application/json")] {
        let mut stream = open_request(
            addr,
            path,
            &[
                &format!("Content-Type: {content_type}"),
                "Transfer-Encoding: chunked",
            ],
        )
        .await;
        let piece = vec![b'a'; 64 * 1024];
        for _ in 0..LIMIT / piece.len() {
            stream
                .write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                .await
                .unwrap();
            stream.write_all(&piece).await.unwrap();
            stream.write_all(b"\r\n").await.unwrap();
        }
        stream.write_all(b"1\r\na").await.unwrap();
        let (status, response) = answer_on(stream).await;
        assert_eq!(status, 413, "{path}: {response}");
        assert!(response.contains("--max-request-bytes"), "{response}");
    }
    assert_still_serving(addr, "a chunked body over the limit").await;
    assert_eq!(db.count().await, 10, "only the follow-ups are stored");
    server.stop().await;
}

/// 100,000 streams of one line each, small on the wire (4 MB of protobuf, 7 MB of JSON) and
/// about 20 MB once decoded, since every record is charged RECORD_OVERHEAD_BYTES whatever its
/// size. What one request may hold is half of --max-buffered-bytes: with 256 MiB (128 MiB a
/// request) both encodings are stored whole; with 16 MiB (8 MiB a request, under the records'
/// fixed overhead alone) both are refused with 413, "too large once decoded", nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_streams_are_stored_or_refused_as_the_budget_says() {
    const STREAMS: usize = 100_000;
    let at = super::now_nanos();
    let labels: Vec<String> = (0..STREAMS).map(|n| format!("{{job=\"s{n}\"}}")).collect();
    let lines: Vec<String> = (0..STREAMS).map(|n| format!("line-{n}")).collect();
    let push = loghaul::ingest::loki::proto::PushRequest {
        streams: labels
            .iter()
            .zip(&lines)
            .map(
                |(labels, line)| loghaul::ingest::loki::proto::StreamAdapter {
                    labels: labels.clone(),
                    entries: vec![loghaul::ingest::loki::proto::EntryAdapter {
                        timestamp: super::timestamp(at),
                        line: line.clone(),
                        ..Default::default()
                    }],
                    hash: 0,
                },
            )
            .collect(),
        format: String::new(),
    };
    let protobuf = push.encode_to_vec();
    let snappy_body = snappy(&protobuf);
    let json_body = serde_json::json!({
        "streams": (0..STREAMS)
            .map(|n| serde_json::json!({
                "stream": {"job": format!("s{n}")},
                "values": [[at.to_string(), lines[n]]],
            }))
            .collect::<Vec<_>>()
    })
    .to_string();
    // What a push is charged at most: its body, its protobuf, and its records (a record's size is
    // the fixed overhead plus its service, message and attributes, here "{}").
    let records: usize = lines
        .iter()
        .enumerate()
        .map(|(n, line)| RECORD_OVERHEAD_BYTES + format!("s{n}").len() + line.len() + 2)
        .sum();
    let most = json_body.len().max(snappy_body.len()) + protobuf.len() + records;
    // And at least: the records' fixed overhead alone.
    let least = STREAMS * RECORD_OVERHEAD_BYTES;

    for (budget, stored) in [(256 * MIB, true), (16 * MIB, false)] {
        let per_request = budget / 2;
        if stored {
            assert!(most < per_request, "{most} bytes fit in {per_request}");
        } else {
            assert!(
                least > per_request,
                "{least} bytes do not fit in {per_request}"
            );
        }
        let db = TestDb::create(Backend::Sqlite, "http_streams")
            .await
            .unwrap();
        let mut settings = config(&db);
        settings.ingest.max_request_bytes = "16MiB".parse().unwrap();
        settings.pipeline.max_buffered_bytes = format!("{}MiB", budget / MIB).parse().unwrap();
        let server = TestServer::start(settings).await;
        let addr = server.http_ingest;
        for (name, content_type, body) in [
            ("protobuf", PROTOBUF, snappy_body.as_slice()),
            ("JSON", JSON, json_body.as_bytes()),
        ] {
            let answer = post(addr, LOKI, &[content_type], body).await;
            if stored {
                assert_eq!(answer.status, 204, "{name}: {}", answer.text());
            } else {
                assert_eq!(answer.status, 413, "{name}: {}", answer.text());
                assert!(
                    answer.text().contains("too large once decoded"),
                    "{name}: {}",
                    answer.text()
                );
            }
        }
        let expected = if stored { 2 * STREAMS as i64 } else { 0 };
        assert_eq!(db.count().await, expected, "budget {budget}");
        assert_still_serving(addr, "100,000 streams").await;
        server.stop().await;
    }
}

/// A gzip bomb, a body announced at 1 GiB, and four large bodies (2 MB each: OTLP protobuf,
/// OTLP/JSON, Loki snappy), all at once, on a process of the test's own with a 32 MiB budget:
/// the bomb and the announced body get 413, the bodies are stored, and the process's peak memory
/// stays within a bound set by the budget. What they need together (each body about twice its
/// size while it is decoded, the bomb its gzip and 4 MiB inflated: about 22 MB) fits in the
/// budget, so none waits for room and the outcome is the same every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_within_the_budget_under_bombs_and_large_bodies_at_once() {
    const BUDGET: u64 = 32 * MIB as u64;
    // PostgreSQL, as the other memory tests: the server's memory is then the ingest path's, not
    // also a SQLite page cache (64 MiB, filled by what is written).
    let Some(db) = TestDb::create(Backend::Postgres, "http_memory").await else {
        return;
    };
    let mut server = Process::serve(&db.url, &["--max-buffered-bytes", "32MiB"]);
    let addr = server.http_ingest;
    let (baseline, _) = server.rss();

    let bomb = gzip_of_zeros(200_000_000);
    // 10 records of 200 KB (under --max-message-bytes), 2 MB a request.
    let big = |tag: &str| -> Vec<String> {
        (0..10)
            .map(|n| format!("{tag}-{n} {}", "x".repeat(200_000)))
            .collect()
    };
    let protobuf = |tag: &str| {
        let messages = big(tag);
        let messages: Vec<&str> = messages.iter().map(String::as_str).collect();
        otlp_request("checkout", &messages).encode_to_vec()
    };
    let json = |tag: &str| {
        let messages = big(tag);
        let messages: Vec<&str> = messages.iter().map(String::as_str).collect();
        serde_json::to_vec(&otlp_request("checkout", &messages)).unwrap()
    };
    let loki = |tag: &str| {
        let lines = big(tag);
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        snappy(&loki_push(&[(r#"{job="big"}"#, &lines)]).encode_to_vec())
    };
    type Request = (
        &'static str,
        &'static str,
        Vec<(&'static str, &'static str)>,
        Vec<u8>,
        u16,
    );
    let requests: Vec<Request> = vec![
        (
            "gzip bomb",
            OTLP,
            vec![PROTOBUF, ("content-encoding", "gzip")],
            bomb,
            413,
        ),
        (
            "OTLP protobuf 1",
            OTLP,
            vec![PROTOBUF],
            protobuf("protobuf-1"),
            200,
        ),
        (
            "OTLP protobuf 2",
            OTLP,
            vec![PROTOBUF],
            protobuf("protobuf-2"),
            200,
        ),
        ("OTLP JSON", OTLP, vec![JSON], json("json"), 200),
        ("Loki snappy", LOKI, vec![PROTOBUF], loki("loki"), 204),
    ];
    let announced = tokio::spawn(async move {
        let stream = open_request(
            addr,
            OTLP,
            &[
                "Content-Type: application/x-protobuf",
                "Content-Length: 1073741824",
            ],
        )
        .await;
        answer_on(stream).await
    });
    let sent: Vec<_> = requests
        .into_iter()
        .map(|(name, path, headers, body, expected)| {
            tokio::spawn(async move {
                let answer = post(addr, path, &headers, &body).await;
                (name, expected, answer)
            })
        })
        .collect();
    for request in sent {
        let (name, expected, answer) = request.await.unwrap();
        assert_eq!(answer.status, expected, "{name}: {}", answer.text());
    }
    let (status, response) = announced.await.unwrap();
    assert_eq!(status, 413, "{response}");
    let (_, peak) = server.rss();
    // Requests hold at most the budget: every byte is charged before it is held. Up to as much
    // again is not charged while it lives, because it is a copy or the slack of a growing
    // buffer of what is: the inflate buffer, which doubles as it fills; a batch's rows encoded
    // as statement parameters and then in the connection's send buffer. The fixed 64 MiB is for
    // the allocator (freed pages it has not returned yet, one heap per thread) and hyper's read
    // buffers. The bomb inflated whole would need 200 MB on its own, and the announced length
    // allocated, 1 GiB.
    let limit = baseline + 2 * BUDGET + 64 * MIB as u64;
    eprintln!(
        "RSS baseline {} MiB, peak {} MiB, limit {} MiB",
        baseline >> 20,
        peak >> 20,
        limit >> 20
    );
    assert!(
        peak < limit,
        "peak RSS {} MiB over the {} MiB bound",
        peak >> 20,
        limit >> 20
    );
    assert_eq!(db.count().await, 4 * 10);
    assert_still_serving(addr, "bombs and large bodies at once").await;
    server.signal("TERM");
    assert!(server.wait(std::time::Duration::from_secs(30)).success());
}
