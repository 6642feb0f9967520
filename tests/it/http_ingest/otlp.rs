//! OTLP/HTTP bodies as exporters send them: protobuf (gzip), and OTLP/JSON written by hand after
//! the specification's logs example, stored field by field as docs/opentelemetry.md maps them;
//! and records as Fluent Bit's `opentelemetry` output sends them (a severity text, no number).

use std::collections::BTreeMap;

use serde_json::json;

use super::{gzip, now_nanos, post, text, JSON, OTLP, PROTOBUF};
use crate::common::{config, TestDb, TestServer};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

async fn otlp_http_protobuf_is_stored_after_commit(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let at = now_nanos();
    let request = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: text("checkout"),
                    ..KeyValue::default()
                }],
                ..Resource::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: vec![
                    LogRecord {
                        time_unix_nano: at,
                        severity_number: 17,
                        body: text("payment failed"),
                        trace_id: vec![0xab; 16],
                        span_id: vec![0xcd; 8],
                        ..LogRecord::default()
                    },
                    LogRecord {
                        severity_number: 99,
                        body: text("bad severity"),
                        ..LogRecord::default()
                    },
                ],
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    };
    let answer = post(
        server.http_ingest,
        OTLP,
        &[PROTOBUF, ("content-encoding", "gzip")],
        &gzip(&request.encode_to_vec()),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(
        answer.header("content-type"),
        Some("application/x-protobuf")
    );
    let response = ExportLogsServiceResponse::decode(&answer.body[..]).unwrap();
    let partial = response.partial_success.unwrap();
    assert_eq!(partial.rejected_log_records, 1);
    assert!(partial.error_message.contains("#1 invalid_severity"));
    // The answer came after the commit: the row is there at once.
    let rows = db.stored().await;
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(
        (row.service.as_str(), row.message.as_str(), row.severity),
        ("checkout", "payment failed", 17)
    );
    assert_eq!(row.ts_micros, (at / 1000) as i64);
    assert_eq!(row.trace_id.as_deref(), Some("ab".repeat(16).as_str()));
    assert_eq!(row.span_id.as_deref(), Some("cd".repeat(8).as_str()));
    server.stop().await;
}
on_both_backends!(otlp_protobuf, otlp_http_protobuf_is_stored_after_commit);

/// The logs example of the OTLP specification (opentelemetry-proto's examples/logs.json), as an
/// exporter writes it: hex ids, 64-bit integers as strings, every kind of value. Two additions:
/// an `intValue` written as a number (which the JSON mapping also allows) and a second resource
/// attribute. `TIME` is replaced by now, in nanoseconds, as a string.
const SPEC_EXAMPLE: &str = r#"{
  "resourceLogs": [
    {
      "resource": {
        "attributes": [
          {"key": "service.name", "value": {"stringValue": "my.service"}},
          {"key": "host.name", "value": {"stringValue": "web-7"}}
        ]
      },
      "scopeLogs": [
        {
          "scope": {
            "name": "my.library",
            "version": "1.0.0",
            "attributes": [
              {"key": "my.scope.attribute", "value": {"stringValue": "some scope attribute"}}
            ]
          },
          "logRecords": [
            {
              "timeUnixNano": "TIME",
              "observedTimeUnixNano": "TIME",
              "severityNumber": 10,
              "severityText": "Information",
              "traceId": "5B8EFFF798038103D269B633813FC60C",
              "spanId": "EEE19B7EC3C1B174",
              "body": {"stringValue": "Example log record"},
              "attributes": [
                {"key": "string.attribute", "value": {"stringValue": "some string"}},
                {"key": "boolean.attribute", "value": {"boolValue": true}},
                {"key": "int.attribute", "value": {"intValue": "10"}},
                {"key": "int.number.attribute", "value": {"intValue": 10}},
                {"key": "double.attribute", "value": {"doubleValue": 637.704}},
                {"key": "array.attribute", "value": {"arrayValue": {"values": [{"stringValue": "many"}, {"stringValue": "values"}]}}},
                {"key": "map.attribute", "value": {"kvlistValue": {"values": [{"key": "some.map.key", "value": {"stringValue": "some value"}}]}}}
              ]
            }
          ]
        }
      ]
    }
  ]
}"#;

async fn the_specifications_json_example_is_stored_field_by_field(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let at = now_nanos();
    let body = SPEC_EXAMPLE.replace("TIME", &at.to_string());
    let answer = post(server.http_ingest, OTLP, &[JSON], body.as_bytes()).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let response: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    assert!(
        response
            .get("partialSuccess")
            .is_none_or(|partial| partial.is_null()),
        "everything was stored: {response}"
    );

    let rows = db.stored().await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row.tenant, "default");
    assert_eq!(row.service, "my.service");
    assert_eq!(row.message, "Example log record");
    assert_eq!(row.severity, 10);
    assert_eq!(row.ts_micros, (at / 1000) as i64);
    assert_eq!(
        row.trace_id.as_deref(),
        Some("5b8efff798038103d269b633813fc60c")
    );
    assert_eq!(row.span_id.as_deref(), Some("eee19b7ec3c1b174"));
    assert_eq!(
        row.attributes,
        json!({
            "resource.host.name": "web-7",
            "scope.name": "my.library",
            "scope.version": "1.0.0",
            "scope.my.scope.attribute": "some scope attribute",
            "string.attribute": "some string",
            "boolean.attribute": "true",
            "int.attribute": "10",
            "int.number.attribute": "10",
            "double.attribute": "637.704",
            "array.attribute": r#"["many","values"]"#,
            "map.attribute": r#"{"some.map.key":"some value"}"#,
            // 10 is INFO2: "Information" says more than the number, so it is kept.
            "severity_text": "Information",
        })
    );
    server.stop().await;
}
on_both_backends!(
    otlp_json_spec_example,
    the_specifications_json_example_is_stored_field_by_field
);

async fn a_json_record_that_does_not_deserialize_is_rejected_alone(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let at = now_nanos().to_string();
    let record = |body: &str, trace_id: &str| {
        json!({
            "timeUnixNano": at,
            "severityNumber": 9,
            "traceId": trace_id,
            "body": {"stringValue": body},
        })
    };
    let body = json!({"resourceLogs": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]},
        "scopeLogs": [{"logRecords": [
            record("first", "0af7651916cd43dd8448eb211c80319c"),
            record("bad id", "zz"),
            record("third", ""),
        ]}],
    }]});
    let answer = post(
        server.http_ingest,
        OTLP,
        &[JSON],
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let response: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    let partial = &response["partialSuccess"];
    assert_eq!(partial["rejectedLogRecords"], 1, "{response}");
    let message = partial["errorMessage"].as_str().unwrap();
    assert!(message.contains("#1 malformed_record"), "{message}");

    let rows = db.stored().await;
    let stored: Vec<(&str, Option<&str>)> = rows
        .iter()
        .map(|row| (row.message.as_str(), row.trace_id.as_deref()))
        .collect();
    assert_eq!(
        stored,
        [
            ("first", Some("0af7651916cd43dd8448eb211c80319c")),
            ("third", None)
        ]
    );
    assert!(rows.iter().all(|row| row.service == "api"));
    server.stop().await;
}
on_both_backends!(
    otlp_json_bad_record,
    a_json_record_that_does_not_deserialize_is_rejected_alone
);

/// What Fluent Bit's `opentelemetry` output sends for a tailed line with a `level` key: a
/// severity text and no number, and `service.name` as a record attribute because a tail input has
/// no resource. Each protocol (gRPC, OTLP/HTTP protobuf, OTLP/JSON) stores the level the text
/// names and the record's service.
async fn a_severity_text_without_a_number_is_stored_as_its_level(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let at = now_nanos();
    let record = |body: &str, severity_text: &str| LogRecord {
        time_unix_nano: at,
        severity_text: severity_text.into(),
        body: text(body),
        attributes: vec![
            KeyValue {
                key: "service.name".into(),
                value: text("checkout"),
                ..KeyValue::default()
            },
            KeyValue {
                key: "level".into(),
                value: text(severity_text),
                ..KeyValue::default()
            },
        ],
        ..LogRecord::default()
    };
    let unnamed_resource = |records: Vec<LogRecord>| ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    };

    let mut grpc = LogsServiceClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    let answer = grpc
        .export(unnamed_resource(vec![record("over gRPC", "WARN")]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.partial_success, None);

    let protobuf = unnamed_resource(vec![
        record("over OTLP/HTTP", "warning"),
        record("unknown level", "loud"),
    ]);
    let answer = post(
        server.http_ingest,
        OTLP,
        &[PROTOBUF],
        &protobuf.encode_to_vec(),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());

    let json_record = |body: &str, severity: serde_json::Value| {
        let mut record = json!({
            "timeUnixNano": at.to_string(),
            "body": {"stringValue": body},
            "attributes": [{"key": "service.name", "value": {"stringValue": "checkout"}}],
        });
        record
            .as_object_mut()
            .unwrap()
            .extend(severity.as_object().unwrap().clone());
        record
    };
    let body = json!({"resourceLogs": [{"scopeLogs": [{"logRecords": [
        json_record("over OTLP/JSON", json!({"severityText": "Error"})),
        json_record("INFO alone", json!({"severityText": "INFO"})),
        json_record("the number wins", json!({"severityNumber": 5, "severityText": "ERROR"})),
    ]}]}]});
    let answer = post(
        server.http_ingest,
        OTLP,
        &[JSON],
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());

    // By message in Rust's order: the stores sort text by their own collations.
    let stored: BTreeMap<String, (i64, String, serde_json::Value)> = db
        .stored()
        .await
        .into_iter()
        .map(|row| (row.message, (row.severity, row.service, row.attributes)))
        .collect();
    let expected: BTreeMap<String, (i64, String, serde_json::Value)> = [
        ("over gRPC", 13, json!({"level": "WARN"})),
        (
            "over OTLP/HTTP",
            13,
            json!({"level": "warning", "severity_text": "warning"}),
        ),
        (
            "unknown level",
            0,
            json!({"level": "loud", "severity_text": "loud"}),
        ),
        ("over OTLP/JSON", 17, json!({})), // `Error` is ERROR's name in another case
        ("INFO alone", 9, json!({})),
        ("the number wins", 5, json!({"severity_text": "ERROR"})),
    ]
    .into_iter()
    .map(|(message, severity, attributes)| {
        (
            message.to_owned(),
            (severity, "checkout".to_owned(), attributes),
        )
    })
    .collect();
    assert_eq!(stored, expected);
    server.stop().await;
}
on_both_backends!(
    otlp_severity_text,
    a_severity_text_without_a_number_is_stored_as_its_level
);
