//! The Rust client: a [`Client`] names a server, a [`Shipper`] ships records to it from any
//! thread without blocking, and [`LoghaulLayer`] turns `tracing` events into records.
//!
//! ```no_run
//! use loghaul_client::{Client, LoghaulLayer, ShipperConfig};
//! use tracing_subscriber::prelude::*;
//!
//! let client = Client::builder("http://127.0.0.1:4317").api_key("secret").build()?;
//! let shipper = client.shipper(ShipperConfig::default())?;
//! tracing_subscriber::registry().with(LoghaulLayer::new(shipper.clone(), "checkout")).init();
//! tracing::info!(order = 42, "paid");
//! shipper.close(std::time::Duration::from_secs(5));
//! # Ok::<(), loghaul_client::ClientError>(())
//! ```
//!
//! [`Client::builder_balanced`] names several replicas of one service: the shipper spreads its
//! streams over those that answer, so one replica going away only moves its streams.
//!
//! Every chunk carries the shipper's random producer id and a sequence number, so the server
//! stores a chunk sent again (after a lost acknowledgement, a reset stream or a restarted server)
//! only once, within its dedup window.

pub mod backoff;
pub mod buffer;
pub mod codec;
pub mod deadline;
pub mod layer;
pub mod shipper;
pub mod stats;

use std::fmt;
use std::time::Duration;

use tonic::transport::{ClientTlsConfig, Endpoint};

pub use buffer::FullPolicy;
pub use layer::LoghaulLayer;
pub use shipper::{PushError, RecordRejection, Shipper, ShipperConfig};
pub use stats::ShipperStats;

use loghaul_proto::api_key::{request_with_key, InvalidApiKey};

/// Why a client or shipper could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint is not a valid URI.
    #[error("invalid endpoint {endpoint:?}: {source}")]
    Endpoint {
        /// What was given.
        endpoint: String,
        /// The parser's error.
        source: tonic::transport::Error,
    },
    /// The API key cannot be sent as metadata.
    #[error(transparent)]
    ApiKey(#[from] InvalidApiKey),
    /// A balanced client was given no endpoint.
    #[error("no endpoint given")]
    NoEndpoint,
    /// The shipper's thread could not be started.
    #[error("cannot start the shipper thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// Builds a [`Client`].
#[derive(Clone)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    api_key: Option<String>,
    connect_timeout: Duration,
    tls: Option<ClientTlsConfig>,
}

impl ClientBuilder {
    /// The API key, sent as `x-api-key` with every stream.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Speaks TLS with these settings (an `http://` endpoint is taken as `https://`).
    pub fn tls(mut self, config: ClientTlsConfig) -> Self {
        self.tls = Some(config);
        self
    }

    /// How long one connection attempt may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Checks the endpoints and key; connects nothing yet.
    pub fn build(self) -> Result<Client, ClientError> {
        request_with_key((), self.api_key.as_deref())?;
        let endpoints = self
            .endpoints
            .iter()
            .map(|endpoint| self.endpoint(endpoint))
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err(ClientError::NoEndpoint);
        }
        Ok(Client {
            endpoints,
            api_key: self.api_key,
        })
    }

    fn endpoint(&self, given: &str) -> Result<Endpoint, ClientError> {
        let invalid = |source| ClientError::Endpoint {
            endpoint: given.to_owned(),
            source,
        };
        let url = match (&self.tls, given.strip_prefix("http://")) {
            (Some(_), Some(rest)) => format!("https://{rest}"),
            _ => given.to_owned(),
        };
        let mut endpoint = Endpoint::from_shared(url).map_err(invalid)?;
        if let Some(tls) = self.tls.clone() {
            endpoint = endpoint.tls_config(tls).map_err(invalid)?;
        }
        Ok(endpoint
            .connect_timeout(self.connect_timeout)
            // A server that vanished without closing the connection (a dead host, a partition)
            // is noticed by keep-alive pings instead of waiting for the ack timeout.
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true)
            .tcp_nodelay(true))
    }
}

/// A loghaul server to ship to.
#[derive(Clone)]
pub struct Client {
    /// One server, or replicas of one service to spread streams over.
    endpoints: Vec<Endpoint>,
    api_key: Option<String>,
}

/// How an API key shows in `Debug`: whether there is one, never what it is.
fn redacted_key(key: &Option<String>) -> Option<&'static str> {
    key.as_ref().map(|_| "***")
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("endpoints", &self.endpoints)
            .field("api_key", &redacted_key(&self.api_key))
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field(
                "endpoints",
                &self.endpoints.iter().map(Endpoint::uri).collect::<Vec<_>>(),
            )
            .field("api_key", &redacted_key(&self.api_key))
            .finish()
    }
}

impl Client {
    /// Starts building a client for `endpoint` (`http://host:4317`).
    pub fn builder(endpoint: impl Into<String>) -> ClientBuilder {
        Client::builder_balanced([endpoint])
    }

    /// Starts building a client for several replicas of one service (`http://a:4317`,
    /// `http://b:4317`): each stream goes to the least busy replica that answers, and streams
    /// move off one that fails. The replicas must share one database, so a chunk retried on
    /// another is still stored once.
    pub fn builder_balanced<I, E>(endpoints: I) -> ClientBuilder
    where
        I: IntoIterator<Item = E>,
        E: Into<String>,
    {
        ClientBuilder {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            api_key: None,
            connect_timeout: Duration::from_secs(5),
            tls: None,
        }
    }

    /// Starts a shipper on a thread of its own.
    pub fn shipper(&self, config: ShipperConfig) -> Result<Shipper, ClientError> {
        Ok(Shipper::start(
            self.endpoints.clone(),
            self.api_key.clone(),
            config,
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_api_key() {
        let builder = Client::builder("http://127.0.0.1:4317").api_key("k-very-secret");
        let client = builder.clone().build().unwrap();
        for shown in [format!("{builder:?}"), format!("{client:?}")] {
            assert!(!shown.contains("k-very-secret"), "{shown}");
            assert!(shown.contains("api_key: Some(\"***\")"), "{shown}");
        }
    }
}
