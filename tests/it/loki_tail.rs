//! Loki's live tail (`GET /loki/api/v1/tail`, a WebSocket) end to end, on SQLite and
//! PostgreSQL: the lines already stored since `start` first, then new lines as they are
//! committed, through the query's selector, line filters and stages; each tenant sees its own;
//! bad requests are refused before the upgrade with Loki's statuses; a tail says why it ends.

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value as Json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::common::{config, http_request, TestDb, TestServer, DEADLINE};
use crate::http_ingest::{post, JSON, LOKI};

const TAIL: &str = "/loki/api/v1/tail";
const KEYS: &str = "key-a=team-a,key-b=team-b";

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

fn now_ns() -> i64 {
    chrono::Utc::now().timestamp_micros() * 1000
}

/// Pushes one Loki stream of `lines` (at the given nanosecond times) with `key`.
async fn push(addr: SocketAddr, key: &str, labels: Json, lines: &[(i64, &str)]) {
    let values: Vec<Json> = lines
        .iter()
        .map(|(ts, line)| json!([ts.to_string(), line]))
        .collect();
    let body = json!({"streams": [{"stream": labels, "values": values}]});
    let mut headers = vec![JSON];
    if !key.is_empty() {
        headers.push(("x-api-key", key));
    }
    let answer = post(addr, LOKI, &headers, body.to_string().as_bytes()).await;
    assert_eq!(answer.status, 204, "{}", answer.text());
}

fn target(params: &[(&str, &str)]) -> String {
    let query: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    format!("{TAIL}?{query}")
}

/// Opens a tail with `key` in the `x-api-key` header (none when empty).
pub async fn connect(addr: SocketAddr, key: &str, params: &[(&str, &str)]) -> Socket {
    let mut request = format!("ws://{addr}{}", target(params))
        .into_client_request()
        .unwrap();
    if !key.is_empty() {
        request
            .headers_mut()
            .insert("x-api-key", key.parse().unwrap());
    }
    let (socket, response) =
        tokio::time::timeout(DEADLINE, tokio_tungstenite::connect_async(request))
            .await
            .expect("the tail answers")
            .expect("the tail upgrades");
    assert_eq!(response.status(), 101);
    socket
}

/// The next text message as JSON, skipping pings; panics on anything else or after `DEADLINE`.
async fn next_json(socket: &mut Socket) -> Json {
    loop {
        let message = tokio::time::timeout(DEADLINE, socket.next())
            .await
            .expect("a message within the deadline")
            .expect("the tail is still open")
            .expect("a readable message");
        match message {
            Message::Text(text) => return serde_json::from_str(&text).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected lines, got {other:?}"),
        }
    }
}

/// Every (labels, ns, line) of a tail message, in message order.
fn entries(message: &Json) -> Vec<(Json, i64, String)> {
    assert_eq!(
        message.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["streams"],
        "{message}"
    );
    message["streams"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|stream| {
            stream["values"].as_array().unwrap().iter().map(|value| {
                (
                    stream["stream"].clone(),
                    value[0].as_str().unwrap().parse::<i64>().unwrap(),
                    value[1].as_str().unwrap().to_owned(),
                )
            })
        })
        .collect()
}

/// The lines of messages read until `count` lines have come, oldest first.
async fn read_lines(socket: &mut Socket, count: usize) -> Vec<(Json, i64, String)> {
    let mut all = Vec::new();
    while all.len() < count {
        all.extend(entries(&next_json(socket).await));
    }
    all.sort_by_key(|entry| entry.1);
    all
}

// ---------------------------------------------------------------------------------------------

async fn a_tail_sends_the_stored_lines_then_the_new_ones_through_the_query(db: &TestDb) {
    let mut settings = config(db);
    settings.auth.api_keys = Some(KEYS.parse().unwrap());
    settings.query.tail_poll_interval = "50ms".parse().unwrap();
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    let earlier = now_ns() - 120 * 1_000_000_000;
    let api = json!({"service_name": "api", "level": "error"});
    push(
        addr,
        "key-a",
        api.clone(),
        &[
            (earlier, "db timeout status=503"),
            (earlier + 1_000, "cache miss status=200"),
            (earlier + 2_000, "db timeout status=504"),
        ],
    )
    .await;
    push(
        addr,
        "key-a",
        json!({"service_name": "web", "level": "error"}),
        &[(earlier + 3_000, "db timeout status=500")],
    )
    .await;
    // The same lines in another tenant must never show.
    push(
        addr,
        "key-b",
        api.clone(),
        &[(earlier, "db timeout status=599")],
    )
    .await;

    let query = r#"{service_name="api", level=~"error|fatal"} |= "db" | logfmt | status >= 500"#;
    let start = (earlier - 1_000_000_000).to_string();
    let mut tail = connect(addr, "key-a", &[("query", query), ("start", &start)]).await;
    let backfill = entries(&next_json(&mut tail).await);
    let lines: Vec<&str> = backfill.iter().map(|e| e.2.as_str()).collect();
    assert_eq!(
        lines,
        ["db timeout status=503", "db timeout status=504"],
        "the stored lines since start, oldest first"
    );
    assert_eq!(backfill[0].0["service_name"], "api");
    assert_eq!(backfill[0].0["level"], "error");
    assert_eq!(
        backfill[0].0["status"], "503",
        "logfmt's labels are the stream's"
    );

    // New lines, in two pushes: only the matching ones come, each once.
    let now = now_ns();
    push(
        addr,
        "key-a",
        api.clone(),
        &[
            (now, "db down status=500"),
            (now + 1_000, "db ok status=200"),
        ],
    )
    .await;
    push(
        addr,
        "key-a",
        json!({"service_name": "api", "level": "info"}),
        &[(now + 2_000, "db down status=501")],
    )
    .await;
    push(
        addr,
        "key-a",
        api.clone(),
        &[(now + 3_000, "db lost status=502")],
    )
    .await;
    push(addr, "key-b", api, &[(now + 4_000, "db lost status=598")]).await;
    let live = read_lines(&mut tail, 2).await;
    let lines: Vec<&str> = live.iter().map(|e| e.2.as_str()).collect();
    assert_eq!(lines, ["db down status=500", "db lost status=502"]);
    assert_eq!(live[0].1, now, "each line keeps its time, in nanoseconds");

    // Nothing else is on its way: the next message, if any came, would be a line of the above.
    let extra = tokio::time::timeout(Duration::from_millis(500), tail.next()).await;
    assert!(
        !matches!(extra, Ok(Some(Ok(Message::Text(_))))),
        "an unexpected message: {extra:?}"
    );

    tail.close(None).await.unwrap();
    server.stop().await;
}
on_both_backends!(
    loki_tail_backfill_then_live,
    a_tail_sends_the_stored_lines_then_the_new_ones_through_the_query
);

async fn bad_tails_are_refused_before_the_upgrade(db: &TestDb) {
    let mut settings = config(db);
    settings.auth.api_keys = Some(KEYS.parse().unwrap());
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    let refused = async |params: &[(&str, &str)], headers: &[(&str, &str)]| {
        let mut all = vec![
            ("connection", "upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ];
        all.extend_from_slice(headers);
        let answer = http_request(addr, "GET", &target(params), &all, b"")
            .await
            .unwrap();
        (answer.status, answer.text())
    };
    let selector = ("query", r#"{service_name="api"}"#);
    let key = ("x-api-key", "key-a");

    let (status, text) = refused(&[selector], &[]).await;
    assert_eq!(status, 401, "{text}");
    let (status, text) = refused(&[selector], &[("x-api-key", "nope")]).await;
    assert_eq!(status, 401, "{text}");
    let (status, text) = refused(&[("query", r#"rate({service_name="api"}[1m])"#)], &[key]).await;
    assert_eq!(status, 400);
    assert!(text.contains("log query"), "{text}");
    let (status, text) = refused(&[("query", r#"{service_name="api""#)], &[key]).await;
    assert_eq!(status, 400);
    assert!(text.contains("parse error"), "{text}");
    let (status, text) = refused(&[selector, ("delay_for", "6")], &[key]).await;
    assert_eq!(status, 400);
    assert!(text.contains("delay_for"), "{text}");
    let (status, text) = refused(&[selector, ("limit", "100000")], &[key]).await;
    assert_eq!(status, 400);
    assert!(text.contains("max entries limit"), "{text}");
    let (status, text) = refused(&[selector, ("start", "yesterday")], &[key]).await;
    assert_eq!(status, 400);
    assert!(text.contains("start"), "{text}");
    let (status, text) = refused(&[("query", r#"{service_name="api"} |~ "(""#)], &[key]).await;
    assert_eq!(status, 400, "{text}");

    // A plain GET (no upgrade) is told that the tail is a WebSocket.
    let plain = http_request(addr, "GET", &target(&[selector]), &[key], b"")
        .await
        .unwrap();
    assert_eq!(plain.status, 400, "{}", plain.text());
    assert!(plain.text().contains("WebSocket"), "{}", plain.text());

    // The server still tails after all that.
    let mut tail = connect(addr, "key-a", &[selector]).await;
    push(
        addr,
        "key-a",
        json!({"service_name": "api"}),
        &[(now_ns(), "after the refusals")],
    )
    .await;
    let lines = read_lines(&mut tail, 1).await;
    assert_eq!(lines[0].2, "after the refusals");
    server.stop().await;
}
on_both_backends!(loki_tail_refusals, bad_tails_are_refused_before_the_upgrade);

async fn a_tail_is_closed_with_going_away_when_the_service_stops(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let mut tail = connect(addr, "", &[("query", r#"{service_name="api"}"#)]).await;
    // The tail is open and polling once one line has come through it.
    push(
        addr,
        "",
        json!({"service_name": "api"}),
        &[(now_ns(), "before the stop")],
    )
    .await;
    assert_eq!(read_lines(&mut tail, 1).await[0].2, "before the stop");
    server.stop().await;
    let closed = loop {
        match tokio::time::timeout(DEADLINE, tail.next()).await {
            Ok(Some(Ok(Message::Close(frame)))) => break frame,
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    let frame = closed.expect("the close says why");
    assert_eq!(frame.code, CloseCode::Away, "{frame:?}");
    assert!(frame.reason.contains("shutting down"), "{frame:?}");
}
on_both_backends!(
    loki_tail_closed_at_shutdown,
    a_tail_is_closed_with_going_away_when_the_service_stops
);
