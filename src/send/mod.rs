//! `loghaul send`: ships lines from files or stdin through a [`Shipper`], so a failed stream is
//! retried and a retried chunk is stored once; `--follow` tails a growing file like `tail -F`.
//!
//! A line that is a JSON object with `timestamp`, `severity`, `service`, `message`, `attributes`
//! maps onto those fields; any other line is the message.

pub(crate) mod follow;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::DateTime;

use crate::client::{Client, ClientError, FullPolicy, RecordRejection, Shipper, ShipperConfig};
use crate::config::HumanDuration;
use crate::model::severity::Severity;
use crate::model::time;
use crate::proto::v1::LogRecord;

/// Options of `loghaul send`.
#[derive(Clone, Debug, clap::Args)]
pub struct SendArgs {
    /// Server to send to; replicas of one service comma-separated (streams are spread over them).
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
    /// Keep reading the (single) file as it grows, across rotation (rename and re-create) and
    /// truncation, like `tail -F`, until interrupted; the file is read from its beginning.
    #[arg(long, short = 'F')]
    pub follow: bool,
    /// How often --follow looks for new lines and for rotation.
    #[arg(long, default_value = "250ms")]
    pub poll_interval: HumanDuration,
    /// At the end (or on SIGINT/SIGTERM with --follow): how long to wait for the last
    /// acknowledgements before giving up on them.
    #[arg(long, default_value = "30s")]
    pub flush_timeout: HumanDuration,
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
    /// The options cannot work together.
    #[error("{0}")]
    Usage(String),
    /// The endpoint or key is unusable, or the shipper could not start.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A TLS file is missing or malformed.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// Interrupted (SIGINT/SIGTERM) before every input line was read; what was read is shipped.
    #[error("interrupted: {sent} lines shipped before the signal")]
    Interrupted {
        /// Lines acknowledged.
        sent: u64,
    },
    /// Records were not acknowledged: the server refused the stream for good, or stayed
    /// unreachable past the flush timeout.
    #[error("{failed} records not stored: {reason}")]
    NotStored {
        /// Records given up.
        failed: u64,
        /// The last failure seen.
        reason: String,
    },
}

/// What the server said about the records sent.
#[derive(Clone, Debug, Default)]
pub struct SendSummary {
    /// Records stored.
    pub accepted: u64,
    /// Records refused.
    pub rejected: u64,
    /// The first refusals, by line number among the non-empty lines (from 0).
    pub rejections: Vec<RecordRejection>,
}

/// Sends every line (following the file with `--follow` until `stop` is set) and returns the
/// server's summary.
pub async fn send(args: SendArgs, stop: Arc<AtomicBool>) -> Result<SendSummary, SendError> {
    if args.follow && args.files.len() != 1 {
        return Err(SendError::Usage("--follow needs exactly one file".into()));
    }
    let mut builder = Client::builder_balanced(args.endpoint.split(',').map(str::trim));
    if let Some(key) = &args.api_key {
        builder = builder.api_key(key.clone());
    }
    if let Some(tls) = args.tls.client_config(&args.endpoint)? {
        builder = builder.tls(tls);
    }
    let client = builder.build()?;
    let shipper = client.shipper(ShipperConfig {
        // A command has nothing better to do than wait for room: it never drops a line.
        when_full: FullPolicy::Block(Duration::MAX),
        service: args.service.clone(),
        ..ShipperConfig::default()
    })?;
    let reader = {
        let (shipper, args, stop) = (shipper.clone(), args.clone(), Arc::clone(&stop));
        tokio::task::spawn_blocking(move || read_all(&args, &shipper, &stop))
    };
    // A reader waiting for room (the server is away) must still notice the signal.
    let interrupter = {
        let (shipper, stop) = (shipper.clone(), Arc::clone(&stop));
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            shipper.stop_taking();
        })
    };
    let read = reader.await.expect("the line reader does not panic");
    interrupter.abort();
    let stats = shipper.close_async(args.flush_timeout.0).await;
    read?;
    if stats.failed > 0 {
        return Err(SendError::NotStored {
            failed: stats.failed,
            reason: shipper.last_error().unwrap_or_default(),
        });
    }
    if stop.load(Ordering::Relaxed) && !args.follow {
        return Err(SendError::Interrupted {
            sent: stats.acknowledged,
        });
    }
    Ok(SendSummary {
        accepted: stats.acknowledged,
        rejected: stats.rejected,
        rejections: shipper.rejections(),
    })
}

/// Reads the inputs on a blocking thread, pushing one record per non-empty line.
fn read_all(args: &SendArgs, shipper: &Shipper, stop: &AtomicBool) -> Result<(), SendError> {
    let service = args.service.clone().unwrap_or_default();
    let mut push = |line: &str| {
        if !line.trim().is_empty() {
            // Under the Block policy a push fails only once the shipper is closed.
            let _ = shipper.push(parse_line(line, &service));
        }
    };
    if args.follow {
        let path = &args.files[0];
        return follow::follow(path, args.poll_interval.0, stop, &mut push).map_err(|source| {
            SendError::Read {
                path: path.clone(),
                source,
            }
        });
    }
    let read = |path: PathBuf, input: Box<dyn BufRead>, push: &mut dyn FnMut(&str)| {
        for line in input.lines() {
            let line = line.map_err(|source| SendError::Read {
                path: path.clone(),
                source,
            })?;
            push(&line);
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        Ok::<(), SendError>(())
    };
    if args.files.is_empty() {
        return read(
            "-".into(),
            Box::new(BufReader::new(std::io::stdin())),
            &mut push,
        );
    }
    for path in &args.files {
        let file = std::fs::File::open(path).map_err(|source| SendError::Read {
            path: path.clone(),
            source,
        })?;
        read(path.clone(), Box::new(BufReader::new(file)), &mut push)?;
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
    Some(time::to_proto(ts))
}

/// A level name (`warn`, `ERROR`, `information`…; 0 for any other text) or an OpenTelemetry
/// severity number (-1 past `i32`, which validation refuses).
fn parse_severity(value: &serde_json::Value) -> i32 {
    if let Some(number) = value.as_i64() {
        return i32::try_from(number).unwrap_or(-1);
    }
    value
        .as_str()
        .and_then(Severity::from_name)
        .map_or(0, Severity::number)
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
