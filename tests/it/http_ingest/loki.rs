//! The Loki push API as Promtail, Alloy and Vector send it: snappy-compressed protobuf and JSON,
//! stored as docs/shippers.md maps streams; a stream whose labels cannot be stored has its
//! entries rejected while the other streams of the push are stored.

use serde_json::json;

use super::{loki_push, now_nanos, post, snappy, timestamp, JSON, LOKI, PROTOBUF};
use crate::common::{config, TestDb, TestServer};
use loghaul::ingest::loki::proto::{EntryAdapter, LabelPairAdapter, PushRequest, StreamAdapter};
use prost::Message;

async fn loki_snappy_protobuf_is_stored_after_commit(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let at = now_nanos();
    let push = PushRequest {
        streams: vec![StreamAdapter {
            labels: r#"{job="varlogs", level="warn", filename="/var/log/app.log"}"#.into(),
            entries: vec![
                EntryAdapter {
                    timestamp: timestamp(at),
                    line: "disk almost full".into(),
                    structured_metadata: vec![LabelPairAdapter {
                        name: "host".into(),
                        value: "node-1".into(),
                    }],
                    parsed: Vec::new(),
                },
                EntryAdapter {
                    timestamp: Some(prost_types::Timestamp {
                        seconds: (at / 1_000_000_000) as i64 + 3600,
                        nanos: 0,
                    }),
                    line: "from the future".into(),
                    ..EntryAdapter::default()
                },
            ],
            hash: 0,
        }],
        format: String::new(),
    };
    let body = snappy(&push.encode_to_vec());
    let answer = post(server.http_ingest, LOKI, &[PROTOBUF], &body).await;
    assert_eq!(
        answer.status,
        400,
        "one entry is refused: {}",
        answer.text()
    );
    assert!(
        answer.text().contains("#1 timestamp_in_future"),
        "{}",
        answer.text()
    );
    let rows = db.stored().await;
    assert_eq!(rows.len(), 1, "the valid entry is stored");
    let row = &rows[0];
    assert_eq!(
        (row.service.as_str(), row.message.as_str(), row.severity),
        ("varlogs", "disk almost full", 13)
    );
    assert_eq!(
        row.attributes,
        json!({"filename": "/var/log/app.log", "host": "node-1", "job": "varlogs", "level": "warn"}),
        "every label stays a label as sent, the one the service came from too, as in Loki"
    );
    assert_eq!(row.ts_micros, (at / 1000) as i64);

    let clean = snappy(&loki_push(&[(r#"{service_name="api"}"#, &["ok"])]).encode_to_vec());
    let answer = post(server.http_ingest, LOKI, &[PROTOBUF], &clean).await;
    assert_eq!(answer.status, 204, "{}", answer.text());
    assert_eq!(db.count().await, 2);
    server.stop().await;
}
on_both_backends!(loki_protobuf, loki_snappy_protobuf_is_stored_after_commit);

/// Both JSON forms of a push: `values` with structured metadata, and the older `entries`.
async fn loki_json_is_stored_entry_for_entry(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let at = now_nanos();
    let body = json!({"streams": [
        {"stream": {"service_name": "api", "level": "error", "env": "prod"},
         "values": [
             [at.to_string(), "first"],
             [(at + 1000).to_string(), "second", {"traceID": "0AF7651916CD43DD8448EB211C80319C", "user": "u1"}],
         ]},
        {"labels": "{app=\"legacy\"}",
         "entries": [{"ts": chrono::DateTime::from_timestamp_micros((at / 1000) as i64).unwrap().to_rfc3339(), "line": "third"}]},
    ]});
    let answer = post(
        server.http_ingest,
        LOKI,
        &[JSON],
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(answer.status, 204, "{}", answer.text());
    let rows = db.stored().await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    let (first, second, third) = (&rows[0], &rows[1], &rows[2]);
    assert_eq!(
        (
            first.service.as_str(),
            first.message.as_str(),
            first.severity
        ),
        ("api", "first", 17)
    );
    assert_eq!(first.attributes, json!({"env": "prod", "level": "error"}));
    assert_eq!(first.ts_micros, (at / 1000) as i64);
    assert_eq!(second.message, "second");
    assert_eq!(second.ts_micros, (at / 1000) as i64 + 1);
    assert_eq!(
        second.trace_id.as_deref(),
        Some("0af7651916cd43dd8448eb211c80319c")
    );
    assert_eq!(
        second.attributes,
        json!({"env": "prod", "level": "error", "user": "u1"})
    );
    assert_eq!(
        (
            third.service.as_str(),
            third.message.as_str(),
            third.severity
        ),
        ("legacy", "third", 0)
    );
    assert_eq!(third.ts_micros, (at / 1000) as i64);
    server.stop().await;
}
on_both_backends!(loki_json, loki_json_is_stored_entry_for_entry);

/// A stream with 1,000 labels and one whose labels do not parse, between two good streams: their
/// entries are rejected by position (too_many_attributes, malformed_record), the push answers 400
/// naming them, as Loki does, and the good streams are stored.
async fn a_stream_whose_labels_cannot_be_stored_is_rejected_alone(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let crowded: Vec<String> = std::iter::once(r#"job="crowded""#.to_owned())
        .chain((0..1000).map(|n| format!("label_{n}=\"v\"")))
        .collect();
    let crowded = format!("{{{}}}", crowded.join(", "));
    let push = loki_push(&[
        (r#"{job="good", env="prod"}"#, &["good-0", "good-1"]),
        (&crowded, &["crowded-2", "crowded-3"]),
        (r#"{job="broken", level="info""#, &["broken-4"]),
        (r#"{job="good"}"#, &["good-5"]),
    ]);
    let answer = post(
        server.http_ingest,
        LOKI,
        &[PROTOBUF],
        &snappy(&push.encode_to_vec()),
    )
    .await;
    assert_eq!(answer.status, 400, "{}", answer.text());
    let text = answer.text();
    assert!(text.starts_with("3 of 6 entries rejected"), "{text}");
    for rejected in [
        "#2 too_many_attributes: 1001 attributes",
        "#3 too_many_attributes",
        "#4 malformed_record: the stream's labels cannot be read",
    ] {
        assert!(text.contains(rejected), "{rejected}: {text}");
    }
    assert!(!text.contains("#0 ") && !text.contains("#5 "), "{text}");
    let messages: Vec<String> = db
        .stored()
        .await
        .into_iter()
        .map(|row| row.message)
        .collect();
    assert_eq!(messages, ["good-0", "good-1", "good-5"]);
    server.stop().await;
}
on_both_backends!(
    loki_bad_labels,
    a_stream_whose_labels_cannot_be_stored_is_rejected_alone
);
