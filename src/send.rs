//! `loghaul send`: streams lines from files or stdin to a server over one Push stream.
//!
//! A line that is a JSON object with `timestamp`, `severity`, `service`, `message`, `attributes`
//! maps onto those fields; any other line is the message.

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::DateTime;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::auth::{request_with_key, InvalidApiKey};
use crate::proto::v1::log_ingest_client::LogIngestClient;
use crate::proto::v1::{LogRecord, PushRequest, PushResponse};

/// Records per PushRequest message.
const RECORDS_PER_CHUNK: usize = 500;

/// Options of `loghaul send`.
#[derive(Clone, Debug, clap::Args)]
pub struct SendArgs {
    /// Server to send to.
    #[arg(
        long,
        env = "LOGHAUL_ENDPOINT",
        default_value = "http://127.0.0.1:4317"
    )]
    pub endpoint: String,
    /// Service name for lines that do not name one.
    #[arg(long, env = "LOGHAUL_SERVICE")]
    pub service: Option<String>,
    /// API key, sent as `x-api-key`.
    #[arg(long, env = "LOGHAUL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// TLS to the server.
    #[command(flatten)]
    pub tls: crate::tls::ClientTlsArgs,
    /// Files to read; none means stdin.
    pub files: Vec<PathBuf>,
}

/// Why sending failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The endpoint is malformed or unreachable.
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// The transport error.
        source: crate::tls::ConnectError,
    },
    /// The API key cannot be sent as metadata.
    #[error(transparent)]
    ApiKey(#[from] InvalidApiKey),
    /// The server ended the stream with an error.
    #[error("the server refused the stream: {0}")]
    Status(#[from] tonic::Status),
}

/// Sends every line and returns the server's summary.
pub async fn send(args: SendArgs) -> Result<PushResponse, SendError> {
    let connect_error = |source| SendError::Connect {
        endpoint: args.endpoint.clone(),
        source,
    };
    let channel = args
        .tls
        .endpoint(&args.endpoint)
        .map_err(connect_error)?
        .connect()
        .await
        .map_err(|err| connect_error(err.into()))?;
    let mut client = LogIngestClient::new(channel);
    let (chunks, outgoing) = mpsc::channel::<PushRequest>(4);
    let request = request_with_key(ReceiverStream::new(outgoing), args.api_key.as_deref())?;
    let service = args.service.clone().unwrap_or_default();
    let files = args.files.clone();
    let reader = tokio::spawn(async move {
        if files.is_empty() {
            return read_lines(BufReader::new(tokio::io::stdin()), &service, &chunks)
                .await
                .map_err(|source| SendError::Read {
                    path: "-".into(),
                    source,
                });
        }
        for path in files {
            let file = tokio::fs::File::open(&path)
                .await
                .map_err(|source| SendError::Read {
                    path: path.clone(),
                    source,
                })?;
            read_lines(BufReader::new(file), &service, &chunks)
                .await
                .map_err(|source| SendError::Read { path, source })?;
        }
        Ok(())
    });
    let response = client.push(request).await;
    // A read error is the more useful message when both fail.
    match reader.await {
        Ok(Err(err)) => return Err(err),
        Err(join) => panic!("the line reader panicked: {join}"),
        Ok(Ok(())) => {}
    }
    Ok(response?.into_inner())
}

async fn read_lines(
    input: impl AsyncBufRead + Unpin,
    service: &str,
    chunks: &mpsc::Sender<PushRequest>,
) -> std::io::Result<()> {
    let mut lines = input.lines();
    let mut records = Vec::with_capacity(RECORDS_PER_CHUNK);
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        records.push(parse_line(&line, service));
        if records.len() == RECORDS_PER_CHUNK {
            let full = std::mem::replace(&mut records, Vec::with_capacity(RECORDS_PER_CHUNK));
            if chunks.send(PushRequest { records: full }).await.is_err() {
                // The stream ended early; its status tells the user why.
                return Ok(());
            }
        }
    }
    if !records.is_empty() {
        let _ = chunks.send(PushRequest { records }).await;
    }
    Ok(())
}

/// Turns one input line into a record.
pub fn parse_line(line: &str, default_service: &str) -> LogRecord {
    let plain = || LogRecord {
        service: default_service.to_owned(),
        message: line.to_owned(),
        ..LogRecord::default()
    };
    let Ok(serde_json::Value::Object(fields)) = serde_json::from_str::<serde_json::Value>(line)
    else {
        return plain();
    };
    let text = |key: &str| fields.get(key).and_then(|value| value.as_str());
    let mut record = plain();
    record.message = match fields.get("message") {
        Some(serde_json::Value::String(message)) => message.clone(),
        Some(other) => other.to_string(),
        None => line.to_owned(),
    };
    if let Some(service) = text("service") {
        record.service = service.to_owned();
    }
    record.timestamp = fields.get("timestamp").and_then(parse_timestamp);
    record.severity = fields.get("severity").map_or(0, parse_severity);
    if let Some(serde_json::Value::Object(attributes)) = fields.get("attributes") {
        record.attributes = attributes
            .iter()
            .map(|(key, value)| {
                let value = match value {
                    serde_json::Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                (key.clone(), value)
            })
            .collect::<BTreeMap<_, _>>();
    }
    record.trace_id = text("trace_id").unwrap_or_default().to_owned();
    record.span_id = text("span_id").unwrap_or_default().to_owned();
    record
}

/// RFC 3339 text, or a number of seconds since the epoch.
fn parse_timestamp(value: &serde_json::Value) -> Option<prost_types::Timestamp> {
    let ts = match value {
        serde_json::Value::String(text) => DateTime::parse_from_rfc3339(text).ok()?.to_utc(),
        serde_json::Value::Number(number) => {
            let seconds = number.as_f64()?;
            DateTime::from_timestamp_micros((seconds * 1e6) as i64)?
        }
        _ => return None,
    };
    Some(prost_types::Timestamp {
        seconds: ts.timestamp(),
        nanos: ts.timestamp_subsec_nanos() as i32,
    })
}

/// A name (`warn`, `ERROR`, `information`…) or an OpenTelemetry severity number.
pub fn parse_severity(value: &serde_json::Value) -> i32 {
    if let Some(number) = value.as_i64() {
        return i32::try_from(number).unwrap_or(-1);
    }
    let name = value.as_str().unwrap_or_default().to_ascii_lowercase();
    match name.as_str() {
        "trace" => 1,
        "debug" => 5,
        "info" | "information" | "notice" => 9,
        "warn" | "warning" => 13,
        "error" | "err" => 17,
        "fatal" | "critical" | "crit" | "emergency" | "alert" => 21,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_are_messages() {
        let record = parse_line("disk almost full", "api");
        assert_eq!(record.message, "disk almost full");
        assert_eq!(record.service, "api");
        assert_eq!(record.timestamp, None);
    }

    #[test]
    fn json_lines_map_onto_fields() {
        let line = r#"{"timestamp":"2026-11-29T10:00:00.5Z","severity":"warn","service":"billing","message":"late","attributes":{"region":"eu","retries":3}}"#;
        let record = parse_line(line, "api");
        assert_eq!(record.service, "billing");
        assert_eq!(record.message, "late");
        assert_eq!(record.severity, 13);
        let ts = record.timestamp.unwrap();
        assert_eq!((ts.seconds, ts.nanos), (1_795_946_400, 500_000_000));
        assert_eq!(record.attributes["region"], "eu");
        assert_eq!(record.attributes["retries"], "3");
    }

    #[test]
    fn a_json_array_is_just_a_message() {
        assert_eq!(parse_line("[1,2]", "").message, "[1,2]");
    }
}
