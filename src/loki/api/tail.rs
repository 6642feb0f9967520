//! `GET /loki/api/v1/tail`: Loki's live tail over a WebSocket, what Grafana's live view and
//! `logcli query --tail` open. The request is checked before the upgrade, so a bad key, query or
//! parameter gets the same answer as on the other endpoints (401, 400, 429); once upgraded, each
//! text message is `{"streams": [...]}` in Loki's shape: first the lines already stored since
//! `start` (at most `limit`), then the lines as they are committed. A tail that has to end (the
//! client reads too slowly, the service shuts down, the database fails) says why in its close
//! frame.

use std::time::Duration;

use axum::body::Body;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{close_code, CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::Response;
use chrono::{TimeDelta, Utc};
use futures::{SinkExt, StreamExt};

use super::answer;
use super::{logql, Call};
use crate::error::HttpError;
use crate::error::QueryError;
use crate::loki::logql::ast::Query;
use crate::loki::tail::LokiTail;

/// The longest `delay_for` Loki accepts, in seconds.
const MAX_DELAY_FOR: u64 = 5;

/// How often an idle tail pings its client, so that a peer gone without a close is noticed.
const PING_INTERVAL: Duration = Duration::from_secs(30);

/// The most a client may send in one message: it has nothing to say beyond pings and a close.
const MAX_CLIENT_MESSAGE: usize = 64 << 10;

/// The tail endpoint.
pub(super) async fn tail(
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    call: Call,
) -> Response<Body> {
    let mut opened = None;
    let slot = &mut opened;
    let response = call
        .answer("tail", |reads, tenant, params, answer| async move {
            let Query::Log(query) = logql(&params)? else {
                return Err(HttpError::BadRequest(
                    "tail takes a log query, such as {service_name=\"api\"}, not a metric query"
                        .into(),
                ));
            };
            let limit = params.limit()?;
            let now = Utc::now();
            let start = params.time("start", now - TimeDelta::hours(1))?;
            delay_for(params.get("delay_for"))?;
            let upgrade = upgrade.map_err(|rejection| {
                HttpError::BadRequest(format!(
                    "the tail is a WebSocket: connect with ws:// or wss:// ({rejection})"
                ))
            })?;
            let tail = reads.loki_tail(&tenant, &query, start, limit).await?;
            *slot = Some((upgrade, tail));
            // Not sent: the upgrade answers instead.
            Ok(answer)
        })
        .await;
    match opened {
        Some((upgrade, tail)) => upgrade
            .max_message_size(MAX_CLIENT_MESSAGE)
            .on_upgrade(move |socket| follow(socket, tail)),
        None => response,
    }
}

/// Checks `delay_for`, which Loki uses to wait for lines that arrive out of order. Lines here
/// are delivered as they are committed, so the wait is accepted and not needed.
fn delay_for(text: Option<&str>) -> Result<(), HttpError> {
    let Some(text) = text else { return Ok(()) };
    match text.parse::<u64>() {
        Ok(seconds) if seconds <= MAX_DELAY_FOR => Ok(()),
        Ok(_) => Err(HttpError::BadRequest(format!(
            "delay_for can't be greater than {MAX_DELAY_FOR}"
        ))),
        Err(_) => Err(HttpError::BadRequest(format!(
            "invalid delay_for {text:?}: expected a whole number of seconds"
        ))),
    }
}

/// Sends the backfill, then each batch of new lines, until the client goes or the tail ends.
async fn follow(socket: WebSocket, mut tail: LokiTail) {
    let (mut sink, mut incoming) = socket.split();
    let backfill = std::mem::take(&mut tail.backfill);
    if !backfill.streams.is_empty() && sink.send(text(answer::tail(backfill))).await.is_err() {
        return;
    }
    let mut pings =
        tokio::time::interval_at(tokio::time::Instant::now() + PING_INTERVAL, PING_INTERVAL);
    let end = loop {
        tokio::select! {
            lines = tail.next() => match lines {
                Some(Ok(lines)) => {
                    if sink.send(text(answer::tail(lines))).await.is_err() {
                        return;
                    }
                }
                Some(Err(err)) => break Some(err),
                None => break None,
            },
            message = incoming.next() => match message {
                // Pings are answered by the socket itself; anything else is ignored.
                Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                Some(Ok(_)) => {}
            },
            _ = pings.tick() => {
                if sink.send(Message::Ping(Default::default())).await.is_err() {
                    return;
                }
            }
        }
    };
    // Why it ended is counted where every tail ends (`loghaul_tails_ended_total`).
    let frame = end.map(|err| CloseFrame {
        code: close_code_of(&err),
        reason: close_reason(&err.to_string()).into(),
    });
    let _ = sink.send(Message::Close(frame)).await;
}

fn text(json: serde_json::Value) -> Message {
    Message::Text(json.to_string().into())
}

/// The close code that tells a client whether to come back: 1001 when the service is going
/// away (reconnect elsewhere), 1008 when the client could not keep up, 1011 otherwise.
fn close_code_of(err: &HttpError) -> u16 {
    match err {
        HttpError::Query(QueryError::ShuttingDown) => close_code::AWAY,
        HttpError::Query(QueryError::SubscriberTooSlow(_)) => close_code::POLICY,
        _ => close_code::ERROR,
    }
}

/// `text` cut to what a close frame holds (123 bytes), on a character boundary.
fn close_reason(text: &str) -> String {
    let mut end = text.len().min(123);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_for_is_checked_as_loki_checks_it() {
        assert!(delay_for(None).is_ok());
        assert!(delay_for(Some("0")).is_ok());
        assert!(delay_for(Some("5")).is_ok());
        let too_long = delay_for(Some("6")).unwrap_err().to_string();
        assert!(too_long.contains("greater than 5"), "{too_long}");
        assert!(delay_for(Some("soon")).is_err());
    }

    #[test]
    fn a_close_reason_fits_its_frame_on_a_character_boundary() {
        let long = "é".repeat(100);
        let reason = close_reason(&long);
        assert!(reason.len() <= 123);
        assert_eq!(reason.chars().count(), 61);
        assert_eq!(close_reason("short"), "short");
    }
}
