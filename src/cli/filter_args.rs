//! The filter flags shared by `loghaul query` and `loghaul tail`.

use chrono::Utc;
use tonic::transport::Channel;

use crate::config::HumanDuration;
use crate::model::severity::Severity;
use crate::model::time;
use crate::proto::v1::log_query_client::LogQueryClient;
use crate::proto::v1::Filter;

/// Why a read command failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A flag value is malformed.
    #[error("{0}")]
    Usage(String),
    /// The endpoint is malformed or unreachable.
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// The transport error.
        source: crate::tls::ConnectError,
    },
    /// The server refused the call.
    #[error("the server refused the request: {}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    /// Writing the output failed (a closed pipe, say).
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

/// Connection and filter flags.
#[derive(Clone, Debug, clap::Args)]
pub struct ReadArgs {
    /// Server to read from.
    #[arg(
        long,
        env = "LOGHAUL_ENDPOINT",
        default_value = "http://127.0.0.1:4317"
    )]
    pub endpoint: String,
    /// API key, sent as `x-api-key`.
    #[arg(long, env = "LOGHAUL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// TLS to the server.
    #[command(flatten)]
    pub tls: crate::tls::ClientTlsArgs,
    /// Only this service (repeat for several).
    #[arg(long = "service")]
    pub services: Vec<String>,
    /// Only records from this long ago on (`15m`, `2h`, `7d`).
    #[arg(long, conflicts_with = "from")]
    pub since: Option<HumanDuration>,
    /// Only records at or after this time (RFC 3339, `2026-11-29T10:00:00Z`).
    #[arg(long)]
    pub from: Option<String>,
    /// Only records before this time (RFC 3339).
    #[arg(long)]
    pub to: Option<String>,
    /// Only records at least this severe: trace, debug, info, warn, error, fatal, or a number.
    #[arg(long)]
    pub min_severity: Option<String>,
    /// Only records whose message contains this text (case-sensitive).
    #[arg(long)]
    pub contains: Option<String>,
    /// Only records with this attribute value, `key=value` (repeat for several).
    #[arg(long = "attr")]
    pub attrs: Vec<String>,
    /// One JSON object per line instead of human-readable lines.
    #[arg(long)]
    pub json: bool,
}

fn rfc3339(flag: &str, text: &str) -> Result<prost_types::Timestamp, ReadError> {
    time::parse_rfc3339(&format!("--{flag}"), text).map_err(ReadError::Usage)
}

impl ReadArgs {
    /// The wire filter the flags describe.
    pub fn filter(&self) -> Result<Filter, ReadError> {
        let mut filter = Filter {
            services: self.services.clone(),
            contains: self.contains.clone().unwrap_or_default(),
            ..Filter::default()
        };
        if let Some(since) = self.since {
            let since = chrono::TimeDelta::from_std(since.0)
                .map_err(|_| ReadError::Usage("--since is too long".into()))?;
            filter.from = Some(time::to_proto(Utc::now() - since));
        }
        if let Some(from) = &self.from {
            filter.from = Some(rfc3339("from", from)?);
        }
        if let Some(to) = &self.to {
            filter.to = Some(rfc3339("to", to)?);
        }
        if let Some(severity) = &self.min_severity {
            filter.min_severity = Severity::parse_min(severity).ok_or_else(|| {
                ReadError::Usage(format!(
                    "--min-severity {severity:?}: use trace, debug, info, warn, error, fatal or a number 0..=24"
                ))
            })?;
        }
        for attr in &self.attrs {
            let Some((key, value)) = attr.split_once('=') else {
                return Err(ReadError::Usage(format!(
                    "--attr {attr:?}: write it key=value"
                )));
            };
            filter.attributes.insert(key.to_owned(), value.to_owned());
        }
        Ok(filter)
    }

    /// A client connected to `--endpoint`.
    pub async fn connect(&self) -> Result<LogQueryClient<Channel>, ReadError> {
        let connect_error = |source| ReadError::Connect {
            endpoint: self.endpoint.clone(),
            source,
        };
        let channel = self
            .tls
            .endpoint(&self.endpoint)
            .map_err(connect_error)?
            .connect()
            .await
            .map_err(|err| connect_error(err.into()))?;
        Ok(LogQueryClient::new(channel))
    }

    /// Wraps a message in a request carrying the API key.
    pub fn request<T>(&self, message: T) -> Result<tonic::Request<T>, ReadError> {
        crate::auth::request_with_key(message, self.api_key.as_deref())
            .map_err(|err| ReadError::Usage(err.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        read: ReadArgs,
    }

    fn parse(args: &[&str]) -> Result<Filter, ReadError> {
        let mut argv = vec!["loghaul"];
        argv.extend_from_slice(args);
        Wrapper::parse_from(argv).read.filter()
    }

    #[test]
    fn flags_become_a_filter() {
        let filter = parse(&[
            "--service",
            "a",
            "--service",
            "b",
            "--min-severity",
            "warn",
            "--contains",
            "late",
            "--attr",
            "region=eu",
            "--from",
            "2026-11-29T10:00:00Z",
            "--to",
            "2026-11-29T11:00:00Z",
        ])
        .unwrap();
        assert_eq!(filter.services, vec!["a", "b"]);
        assert_eq!(filter.min_severity, 13);
        assert_eq!(filter.contains, "late");
        assert_eq!(filter.attributes["region"], "eu");
        assert_eq!(filter.from.unwrap().seconds, 1_795_946_400);
        assert_eq!(filter.to.unwrap().seconds, 1_795_950_000);
    }

    #[test]
    fn malformed_values_say_how_to_write_them() {
        assert!(parse(&["--attr", "novalue"])
            .unwrap_err()
            .to_string()
            .contains("key=value"));
        assert!(parse(&["--min-severity", "loud"]).is_err());
        let err = parse(&["--from", "yesterday"]).unwrap_err();
        assert!(err.to_string().contains("write it like 2026"), "{err}");
        let since = parse(&["--since", "15m"]).unwrap();
        let age = Utc::now().timestamp() - since.from.unwrap().seconds;
        assert!((899..=901).contains(&age), "{age}");
    }
}
