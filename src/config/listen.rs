//! The listeners' addresses, one of which can also be switched off (`--console-listen off`), and
//! what the HTTP listeners tolerate from their clients.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use clap::Args;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{CorsOrigins, HumanDuration};

/// Where an optional listener binds, or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionalListen(pub Option<SocketAddr>);

impl FromStr for OptionalListen {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("off") {
            return Ok(OptionalListen(None));
        }
        text.parse()
            .map(|addr| OptionalListen(Some(addr)))
            .map_err(|_| {
                format!(
                    "invalid listen address {text:?}: write HOST:PORT (like 127.0.0.1:8080) or off"
                )
            })
    }
}

impl fmt::Display for OptionalListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(addr) => write!(f, "{addr}"),
            None => f.write_str("off"),
        }
    }
}

impl Serialize for OptionalListen {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for OptionalListen {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The addresses `serve` binds, and what its HTTP listeners tolerate (`crate::web`).
#[derive(Clone, Debug, Args, Serialize, Deserialize)]
pub struct ListenOptions {
    /// Address of the gRPC listener (LogIngest, health, reflection).
    #[arg(long, env = "LOGHAUL_LISTEN", default_value = "0.0.0.0:4317")]
    pub listen: SocketAddr,

    /// Address of the HTTP listener for /metrics, /healthz and /readyz.
    #[arg(long, env = "LOGHAUL_METRICS_LISTEN", default_value = "0.0.0.0:9464")]
    pub metrics_listen: SocketAddr,

    /// Address of the browser console and its JSON API (search, live tail, health); `off` turns
    /// it off. Loopback by default: open it to the network only where the API keys protect it.
    #[arg(long, env = "LOGHAUL_CONSOLE_LISTEN", default_value = "127.0.0.1:8080")]
    pub console_listen: OptionalListen,

    /// Address of the HTTP ingest listener: OTLP/HTTP (`POST /v1/logs`, protobuf or JSON) and
    /// the Loki push API (`POST /loki/api/v1/push`), with the same keys, limits and durable
    /// acknowledgement as gRPC; `off` turns it off.
    #[arg(long, env = "LOGHAUL_HTTP_LISTEN", default_value = "0.0.0.0:4318")]
    pub http_listen: OptionalListen,

    /// Browser origins allowed to send logs to the HTTP ingest listener (CORS, preflight
    /// included), comma-separated as browsers send them (`https://app.example.com`), or `*`;
    /// empty: none, so browsers refuse cross-origin sends.
    #[arg(long, env = "LOGHAUL_HTTP_CORS_ORIGINS", default_value = "")]
    pub http_cors_origins: CorsOrigins,

    /// Connections the HTTP ingest listener keeps open at once (every agent holds one or a few
    /// kept alive); one more takes the place of the connection idle longest, and is closed as
    /// soon as it is accepted only when every connection has a request in flight.
    #[arg(
        long,
        env = "LOGHAUL_HTTP_INGEST_MAX_CONNECTIONS",
        default_value_t = 1024
    )]
    pub http_ingest_max_connections: u32,

    /// How long the HTTP listeners (metrics, console, ingest) wait for a request's headers (also the most a
    /// kept-alive connection may sit idle) before they close the connection.
    #[arg(long, env = "LOGHAUL_HTTP_HEADER_READ_TIMEOUT", default_value = "10s")]
    pub http_header_read_timeout: HumanDuration,

    /// Connections the metrics listener, and separately the console listener, keep open at once;
    /// one more takes the place of the connection idle longest (so idle connections never keep
    /// a probe out), and is closed as soon as it is accepted only when every connection has a
    /// request in flight.
    #[arg(long, env = "LOGHAUL_HTTP_MAX_CONNECTIONS", default_value_t = 256)]
    pub http_max_connections: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_or_off() {
        let on: OptionalListen = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(on.0, Some("127.0.0.1:8080".parse().unwrap()));
        assert_eq!(on.to_string(), "127.0.0.1:8080");
        let off: OptionalListen = "OFF".parse().unwrap();
        assert_eq!(off, OptionalListen(None));
        assert_eq!(off.to_string(), "off");
        let err = "8080".parse::<OptionalListen>().unwrap_err();
        assert!(err.contains("HOST:PORT"), "{err}");
    }
}
