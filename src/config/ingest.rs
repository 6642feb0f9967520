//! What an ingest request and its connection may do: body pace, message sizes, connection age.

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{ByteSize, HumanDuration};

/// The limits every ingest protocol (gRPC, OTLP/HTTP, Loki push) applies to its clients.
#[derive(Clone, Debug, Args, Serialize, Deserialize)]
pub struct IngestOptions {
    /// Slowest a request body (an HTTP body, a gRPC message) may arrive once it has started, in
    /// bytes per second averaged from its start; a slower one is cut off (HTTP 408, gRPC
    /// DEADLINE_EXCEEDED) and its claim on the budget released. 0 turns it off.
    #[arg(long, env = "LOGHAUL_MIN_BODY_RATE", default_value = "64KiB")]
    pub min_body_rate: ByteSize,

    /// How long a body may arrive at any rate before --min-body-rate applies.
    #[arg(long, env = "LOGHAUL_MIN_BODY_RATE_GRACE", default_value = "5s")]
    pub min_body_rate_grace: HumanDuration,

    /// Largest log message accepted; longer records are rejected individually.
    #[arg(long, env = "LOGHAUL_MAX_MESSAGE_BYTES", default_value = "256KiB")]
    pub max_message_bytes: ByteSize,

    /// Largest gRPC message (after decompression); a larger one ends its stream with RESOURCE_EXHAUSTED.
    #[arg(long, env = "LOGHAUL_MAX_REQUEST_BYTES", default_value = "4MiB")]
    pub max_request_bytes: ByteSize,

    /// Connections older than this are asked to reconnect (GOAWAY), so long-lived streams spread
    /// over replicas added later; 0s turns it off.
    #[arg(long, env = "LOGHAUL_MAX_CONNECTION_AGE", default_value = "10m")]
    pub max_connection_age: HumanDuration,

    /// After GOAWAY, how long a connection's open streams may go on before it is closed.
    #[arg(long, env = "LOGHAUL_MAX_CONNECTION_AGE_GRACE", default_value = "30s")]
    pub max_connection_age_grace: HumanDuration,

    /// A Push stream that sends no message for this long is ended with DEADLINE_EXCEEDED after
    /// what it sent is committed, so idle clients cannot hold streams forever; 0s turns it off.
    #[arg(long, env = "LOGHAUL_STREAM_IDLE_TIMEOUT", default_value = "60s")]
    pub stream_idle_timeout: HumanDuration,
}
