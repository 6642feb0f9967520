//! Every knob of `loghaul serve`, its default, and how flags, environment and a TOML file combine.
//!
//! Precedence, highest first: a command-line flag, its `LOGHAUL_*` environment twin, the `--config`
//! file (same names as the flags, `batch-max-rows = 5000`), the built-in default.

pub mod listen;
pub mod origins;
mod ranges;
pub mod reference;
pub mod secret;
pub mod units;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, ValueEnum};
use serde::{Deserialize, Serialize};

pub use listen::OptionalListen;
pub use origins::CorsOrigins;
pub use secret::Secret;
pub use units::{ByteSize, HumanDuration};

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file named by `--config`.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("config file {path} is not valid TOML: {source}")]
    Parse {
        /// The file named by `--config`.
        path: PathBuf,
        /// The parser's error.
        source: toml::de::Error,
    },
    /// A key in the file names no option.
    #[error(
        "config file {path}: unknown key {key:?} (keys are the flag names, like batch-max-rows)"
    )]
    UnknownKey {
        /// The file named by `--config`.
        path: PathBuf,
        /// The offending key.
        key: String,
    },
    /// A value in the file has the wrong type or form.
    #[error("config file {path}: {message}")]
    Value {
        /// The file named by `--config`.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// A combination of values that cannot work.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// How the service writes its own logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Options of `loghaul serve`.
#[derive(Clone, Debug, Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
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

    /// Where logs are stored: sqlite://FILE (created if missing) or postgres://USER@HOST/DB.
    #[arg(
        long,
        env = "LOGHAUL_DATABASE_URL",
        default_value = "sqlite://loghaul.db",
        // The URL may hold a password; `--help` must not print it.
        hide_env_values = true
    )]
    pub database_url: String,

    /// Number of shards (queue + batching task + writer each); 0 means one per CPU core.
    #[arg(long, env = "LOGHAUL_SHARDS", default_value_t = 0)]
    pub shards: usize,

    /// A shard flushes once it holds this many records.
    #[arg(long, env = "LOGHAUL_BATCH_MAX_ROWS", default_value_t = 20000)]
    pub batch_max_rows: usize,

    /// A shard flushes once its records hold this many bytes.
    #[arg(long, env = "LOGHAUL_BATCH_MAX_BYTES", default_value = "16MiB")]
    pub batch_max_bytes: ByteSize,

    /// A shard flushes when its oldest buffered record has waited this long. Under load batches
    /// fill while the previous one is written, so this only bounds how long a record in a quiet
    /// shard waits for company before it is written.
    #[arg(long, env = "LOGHAUL_BATCH_LINGER", default_value = "10ms")]
    pub batch_linger: HumanDuration,

    /// Chunks (PushRequest messages) each shard's queue holds before senders wait.
    #[arg(long, env = "LOGHAUL_QUEUE_CAPACITY", default_value_t = 64)]
    pub queue_capacity: usize,

    /// How long a request may wait for room (in the memory budget or its shard's queue) while that
    /// room does not move at all, before it ends with RESOURCE_EXHAUSTED (HTTP 503); waiting in
    /// line behind requests that are being served is not limited.
    #[arg(long, env = "LOGHAUL_ENQUEUE_TIMEOUT", default_value = "5s")]
    pub enqueue_timeout: HumanDuration,

    /// Bytes the whole process may hold for ingest: requests being read and decoded, and records
    /// in queues and batches. Requests claim room before they are read and wait, in order and
    /// holding nothing, while there is none.
    #[arg(long, env = "LOGHAUL_MAX_BUFFERED_BYTES", default_value = "64MiB")]
    pub max_buffered_bytes: ByteSize,

    /// Percent of --max-buffered-bytes that one tenant's requests may claim while they are read
    /// and decoded (its records queued for the database do not count), so that one tenant's slow
    /// or stuck clients never hold the room of the others.
    #[arg(long, env = "LOGHAUL_TENANT_BUFFER_SHARE", default_value_t = 50)]
    pub tenant_buffer_share: u8,

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

    /// How long a batch is retried against an unreachable database before its streams get UNAVAILABLE.
    #[arg(long, env = "LOGHAUL_STORE_RETRY_TIMEOUT", default_value = "15s")]
    pub store_retry_timeout: HumanDuration,

    /// Database connections; 0 means shards + 2 (PostgreSQL). SQLite always writes through one.
    #[arg(long, env = "LOGHAUL_DB_MAX_CONNECTIONS", default_value_t = 0)]
    pub db_max_connections: u32,

    /// Connections older than this are asked to reconnect (GOAWAY), so long-lived streams spread
    /// over replicas added later; 0s turns it off.
    #[arg(long, env = "LOGHAUL_MAX_CONNECTION_AGE", default_value = "10m")]
    pub max_connection_age: HumanDuration,

    /// After GOAWAY, how long a connection's open streams may go on before it is closed.
    #[arg(long, env = "LOGHAUL_MAX_CONNECTION_AGE_GRACE", default_value = "30s")]
    pub max_connection_age_grace: HumanDuration,

    /// On SIGTERM/SIGINT: how long open streams and HTTP ingest requests in flight may take to
    /// finish before the final flush.
    #[arg(long, env = "LOGHAUL_SHUTDOWN_GRACE", default_value = "20s")]
    pub shutdown_grace: HumanDuration,

    /// A Push stream that sends no message for this long is ended with DEADLINE_EXCEEDED after
    /// what it sent is committed, so idle clients cannot hold streams forever; 0s turns it off.
    #[arg(long, env = "LOGHAUL_STREAM_IDLE_TIMEOUT", default_value = "60s")]
    pub stream_idle_timeout: HumanDuration,

    /// PEM certificate chain of the gRPC and HTTP ingest ports; with --tls-key they speak only TLS.
    #[arg(long, env = "LOGHAUL_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, env = "LOGHAUL_TLS_KEY")]
    pub tls_key: Option<PathBuf>,

    /// PEM CA certificates; when set, clients must present a certificate signed by one of them.
    #[arg(long, env = "LOGHAUL_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,

    /// Format of the service's own logs (level from RUST_LOG, default info).
    #[arg(long, env = "LOGHAUL_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// TOML file mapping API keys to tenants (`[keys]` "KEY" = "TENANT") with optional per-tenant
    /// limits (`[tenants.NAME]` records-per-second, bytes-per-second, burst); re-read on SIGHUP
    /// and when its content changes.
    #[arg(long, env = "LOGHAUL_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,

    /// How often --api-keys-file is checked for new content, which is then loaded as on SIGHUP
    /// (so a key rotated in a mounted Secret takes effect without a restart); 0s: only on SIGHUP.
    #[arg(long, env = "LOGHAUL_API_KEYS_RELOAD_INTERVAL", default_value = "5s")]
    pub api_keys_reload_interval: HumanDuration,

    /// API keys as `key1=tenant_a,key2=tenant_b` (prefer the environment variable or the keys
    /// file: flags show in process lists). With no keys at all every call is tenant "default",
    /// and only loopback clients are served unless --allow-unauthenticated.
    #[arg(long, env = "LOGHAUL_API_KEYS", hide_env_values = true)]
    pub api_keys: Option<Secret>,

    /// With no API keys, serve clients on other machines too (as tenant "default"); without this
    /// a keyless service refuses them with PERMISSION_DENIED. No effect when keys are configured.
    #[arg(long, env = "LOGHAUL_ALLOW_UNAUTHENTICATED", default_value_t = false)]
    pub allow_unauthenticated: bool,

    /// With no API keys, let Loki's X-Scope-OrgID header name the tenant (at most 64 such
    /// tenants), as a single-binary Loki does; without this a keyless service refuses an
    /// X-Scope-OrgID other than "default". No effect when keys are configured.
    #[arg(long, env = "LOGHAUL_ALLOW_ORG_ID_TENANTS", default_value_t = false)]
    pub allow_org_id_tenants: bool,

    /// Records per second each tenant may send, unless its keys-file entry says otherwise; 0: unlimited.
    #[arg(long, env = "LOGHAUL_TENANT_RECORDS_PER_SECOND", default_value_t = 0.0)]
    pub tenant_records_per_second: f64,

    /// Bytes per second each tenant may send (records' stored size), unless its keys-file entry
    /// says otherwise; 0: unlimited.
    #[arg(long, env = "LOGHAUL_TENANT_BYTES_PER_SECOND", default_value = "0")]
    pub tenant_bytes_per_second: ByteSize,

    /// Burst of the tenant rate limits: a tenant idle this long may send this long's worth at once.
    #[arg(long, env = "LOGHAUL_TENANT_BURST", default_value = "2s")]
    pub tenant_burst: HumanDuration,

    /// Records older than this are deleted (PostgreSQL: whole daily partitions dropped) and refused
    /// at ingest with timestamp_too_old; 0s keeps everything.
    #[arg(long, env = "LOGHAUL_RETENTION", default_value = "7d")]
    pub retention: HumanDuration,

    /// How often retention runs (and PostgreSQL partitions are created ahead).
    #[arg(long, env = "LOGHAUL_RETENTION_INTERVAL", default_value = "10m")]
    pub retention_interval: HumanDuration,

    /// How long a chunk's (producer_id, sequence) is remembered, so a retry within it is stored
    /// once; keys older than this are deleted by the retention task (a retry after that is
    /// stored again).
    #[arg(long, env = "LOGHAUL_DEDUP_WINDOW", default_value = "24h")]
    pub dedup_window: HumanDuration,

    /// Connections for Query and Tail, separate from the writers so reads never wait behind ingest.
    #[arg(long, env = "LOGHAUL_READ_MAX_CONNECTIONS", default_value_t = 4)]
    pub read_max_connections: u32,

    /// How long one read may take: a Query page (or a console page) past it ends with
    /// DEADLINE_EXCEEDED (HTTP 504) and its database work is stopped, and so is a Tail poll (a
    /// tail ends after several in a row). PostgreSQL sessions get a statement_timeout a second
    /// above it, so even a query the service lost track of is cancelled by the server.
    #[arg(long, env = "LOGHAUL_QUERY_TIMEOUT", default_value = "10s")]
    pub query_timeout: HumanDuration,

    /// Reads (Query and console pages, Tail polls) one tenant may have running at once; one more
    /// waits up to 250 ms for a slot, then gets RESOURCE_EXHAUSTED (HTTP 429). Keep it below
    /// --read-max-connections, so that one tenant never holds every read connection.
    #[arg(
        long,
        env = "LOGHAUL_MAX_CONCURRENT_READS_PER_TENANT",
        default_value_t = 2
    )]
    pub max_concurrent_reads_per_tenant: usize,

    /// Memory the reads of every tenant together may hold: LogQL queries' series and points,
    /// log lines, Query and console pages, and answers until they are sent. A read that would take
    /// more is stopped and refused with 503 and Retry-After (RESOURCE_EXHAUSTED over gRPC); the
    /// service's memory stays within about this much above what ingest holds.
    #[arg(long, env = "LOGHAUL_MAX_READ_BYTES", default_value = "256MiB")]
    pub max_read_bytes: ByteSize,

    /// Memory one read may hold: a LogQL query's series × steps, their labels and its answer. A
    /// read past it is stopped and refused with 400 (RESOURCE_EXHAUSTED over gRPC) naming this
    /// option. A quarter of --max-read-bytes by default, so that four of the largest reads fit at
    /// once; at least twice --max-page-bytes, which a page reserves.
    #[arg(long, env = "LOGHAUL_MAX_QUERY_BYTES", default_value = "64MiB")]
    pub max_query_bytes: ByteSize,

    /// Tails (gRPC and console) open at once on this server; one more gets RESOURCE_EXHAUSTED
    /// (HTTP 429). Each polls the database every --tail-poll-interval.
    #[arg(long, env = "LOGHAUL_MAX_TAILS", default_value_t = 256)]
    pub max_tails: usize,

    /// Tails one tenant may have open at once; one more gets RESOURCE_EXHAUSTED (HTTP 429).
    #[arg(long, env = "LOGHAUL_MAX_TAILS_PER_TENANT", default_value_t = 32)]
    pub max_tails_per_tenant: usize,

    /// How far back a Query (or console search) without `from` reads: from this long before `to`,
    /// or before now. The answer says where it started (`default_from`). 0s: no bound, back to
    /// the oldest record.
    #[arg(long, env = "LOGHAUL_QUERY_DEFAULT_RANGE", default_value = "24h")]
    pub query_default_range: HumanDuration,

    /// Largest Query page or Tail message (console pages and tail events too), as encoded; a page
    /// that reaches it stops early and its cursor continues after its last record. A record
    /// larger than this still goes out, alone. Keep it under the clients' message limit (4 MiB
    /// for most gRPC clients).
    #[arg(long, env = "LOGHAUL_MAX_PAGE_BYTES", default_value = "2MiB")]
    pub max_page_bytes: ByteSize,

    /// How often a Tail polls the database for new records: the bound on its delivery delay.
    #[arg(long, env = "LOGHAUL_TAIL_POLL_INTERVAL", default_value = "500ms")]
    pub tail_poll_interval: HumanDuration,

    /// Most bytes of records queued for one tail subscriber (gRPC, console or Loki), counted
    /// as encoded until its connection has taken them; a tail reads the database only as far
    /// as its queue has room, and a tail message holds at most a quarter of it (and at most
    /// --max-page-bytes). A subscriber whose queue stays full for 5s is dropped as too slow
    /// (RESOURCE_EXHAUSTED, a console error event, WebSocket close 1008) and its queue
    /// released. 64KiB to 1GiB.
    #[arg(long, env = "LOGHAUL_TAIL_QUEUE_BYTES", default_value = "4MiB")]
    pub tail_queue_bytes: ByteSize,

    /// TOML file with any of these options (keys are the flag names without dashes prefix).
    #[arg(long, env = "LOGHAUL_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
}

impl ServeConfig {
    /// Fills every option not given on the command line or in the environment from `--config`.
    pub fn merge_file(self, matches: &ArgMatches) -> Result<Self, ConfigError> {
        let Some(path) = self.config.clone() else {
            return Ok(self);
        };
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        let given_explicitly = |id: &str| {
            matches!(
                matches.value_source(id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        };
        let mut merged = self.merge_toml(&path, &text, given_explicitly)?;
        merged.config = Some(path);
        Ok(merged)
    }

    /// Overlays the keys of a TOML document on the options for which `given_explicitly` is false.
    pub fn merge_toml(
        self,
        path: &Path,
        text: &str,
        given_explicitly: impl Fn(&str) -> bool,
    ) -> Result<Self, ConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })?;
        let value_error = |message: String| ConfigError::Value {
            path: path.to_owned(),
            message,
        };
        let serde_json::Value::Object(mut fields) =
            serde_json::to_value(&self).map_err(|err| value_error(err.to_string()))?
        else {
            unreachable!("a struct serializes to a JSON object");
        };
        for (key, value) in table {
            let id = key.replace('-', "_");
            if !fields.contains_key(&id) {
                return Err(ConfigError::UnknownKey {
                    path: path.to_owned(),
                    key,
                });
            }
            if !given_explicitly(&id) {
                let value =
                    serde_json::to_value(value).map_err(|err| value_error(err.to_string()))?;
                fields.insert(id, value);
            }
        }
        serde_json::from_value(serde_json::Value::Object(fields))
            .map_err(|err| value_error(err.to_string()))
    }

    /// Checks every numeric option against its sane range, and combinations that parse but cannot
    /// work, with a one-line message saying which knob to change.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_ranges()?;
        let fail = |message: &str| Err(ConfigError::Invalid(message.to_owned()));
        if self.max_request_bytes.0 > self.max_buffered_bytes.0 {
            return fail("--max-request-bytes must not exceed --max-buffered-bytes, or one request could never be buffered");
        }
        if self.max_tails_per_tenant > self.max_tails {
            return fail("--max-tails-per-tenant must not exceed --max-tails");
        }
        if self.max_query_bytes.0 > self.max_read_bytes.0 {
            return fail(
                "--max-query-bytes must not exceed --max-read-bytes, or one read could never run",
            );
        }
        if self.max_query_bytes.0 < self.max_page_bytes.0.saturating_mul(2) {
            return fail(
                "--max-query-bytes must be at least twice --max-page-bytes, which a page reserves",
            );
        }
        let mut bound = vec![self.listen, self.metrics_listen];
        for (flag, addr) in [
            ("--console-listen", self.console_listen.0),
            ("--http-listen", self.http_listen.0),
        ] {
            let Some(addr) = addr else { continue };
            if addr.port() != 0 && bound.contains(&addr) {
                return Err(ConfigError::Invalid(format!(
                    "{flag} must differ from the other listen addresses (--listen, --metrics-listen, --console-listen, --http-listen)"
                )));
            }
            bound.push(addr);
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return fail("--tls-cert and --tls-key go together");
        }
        if self.tls_client_ca.is_some() && self.tls_cert.is_none() {
            return fail("--tls-client-ca needs --tls-cert and --tls-key");
        }
        Ok(())
    }

    /// Every numeric option within the range where the service still does its job: a value that
    /// parses but would stop it (a zero budget, a 1 ns timeout, a billion shards) is refused at
    /// start-up rather than found out under load.
    fn check_ranges(&self) -> Result<(), ConfigError> {
        use ranges::{bytes, count, duration, GIB, KIB, MIB};
        use std::time::Duration as D;
        let (ms, s, min, h, d) = (
            D::from_millis,
            D::from_secs,
            |n: u64| D::from_secs(60 * n),
            |n: u64| D::from_secs(3600 * n),
            |n: u64| D::from_secs(86_400 * n),
        );
        count("--shards", self.shards, 0..=1024, "0 (one per core)")?;
        count("--batch-max-rows", self.batch_max_rows, 1..=1_000_000, "")?;
        bytes("--batch-max-bytes", self.batch_max_bytes, KIB..=GIB, "")?;
        duration("--batch-linger", self.batch_linger, ms(0)..=s(60), None)?;
        count("--queue-capacity", self.queue_capacity, 1..=65_536, "")?;
        duration(
            "--enqueue-timeout",
            self.enqueue_timeout,
            ms(100)..=h(1),
            None,
        )?;
        bytes(
            "--max-buffered-bytes",
            self.max_buffered_bytes,
            16 * KIB..=4 * GIB - 1,
            "",
        )?;
        count(
            "--tenant-buffer-share",
            self.tenant_buffer_share.into(),
            10..=100,
            "",
        )?;
        bytes(
            "--min-body-rate",
            self.min_body_rate,
            KIB..=GIB,
            "0 (no minimum)",
        )?;
        duration(
            "--min-body-rate-grace",
            self.min_body_rate_grace,
            ms(100)..=min(10),
            None,
        )?;
        bytes("--max-message-bytes", self.max_message_bytes, 64..=GIB, "")?;
        bytes("--max-request-bytes", self.max_request_bytes, KIB..=GIB, "")?;
        duration(
            "--store-retry-timeout",
            self.store_retry_timeout,
            s(1)..=d(1),
            None,
        )?;
        count(
            "--db-max-connections",
            self.db_max_connections as usize,
            0..=1000,
            "0 (shards + 2)",
        )?;
        duration(
            "--max-connection-age",
            self.max_connection_age,
            s(1)..=d(30),
            Some("0s (never)"),
        )?;
        duration(
            "--max-connection-age-grace",
            self.max_connection_age_grace,
            s(1)..=h(1),
            None,
        )?;
        duration("--shutdown-grace", self.shutdown_grace, ms(0)..=h(1), None)?;
        duration(
            "--stream-idle-timeout",
            self.stream_idle_timeout,
            s(1)..=d(1),
            Some("0s (never)"),
        )?;
        duration(
            "--http-header-read-timeout",
            self.http_header_read_timeout,
            ms(100)..=min(10),
            None,
        )?;
        count(
            "--http-max-connections",
            self.http_max_connections as usize,
            1..=1_000_000,
            "",
        )?;
        count(
            "--http-ingest-max-connections",
            self.http_ingest_max_connections as usize,
            1..=1_000_000,
            "",
        )?;
        duration(
            "--api-keys-reload-interval",
            self.api_keys_reload_interval,
            ms(100)..=d(1),
            Some("0s (only on SIGHUP)"),
        )?;
        if !(self.tenant_records_per_second.is_finite() && self.tenant_records_per_second >= 0.0) {
            return Err(ConfigError::Invalid(
                "--tenant-records-per-second must be 0 (unlimited) or a positive number".into(),
            ));
        }
        duration("--tenant-burst", self.tenant_burst, ms(100)..=h(1), None)?;
        if !self.retention.0.is_zero() && self.retention.0 < h(1) {
            return Err(ConfigError::Invalid(
                "--retention must be at least 1h (or 0s to keep everything)".into(),
            ));
        }
        duration(
            "--retention-interval",
            self.retention_interval,
            ms(100)..=d(1),
            None,
        )?;
        duration("--dedup-window", self.dedup_window, min(1)..=d(365), None)?;
        count(
            "--read-max-connections",
            self.read_max_connections as usize,
            1..=1000,
            "",
        )?;
        duration("--query-timeout", self.query_timeout, ms(100)..=h(1), None)?;
        count(
            "--max-concurrent-reads-per-tenant",
            self.max_concurrent_reads_per_tenant,
            1..=1000,
            "",
        )?;
        count("--max-tails", self.max_tails, 1..=100_000, "")?;
        count(
            "--max-tails-per-tenant",
            self.max_tails_per_tenant,
            1..=100_000,
            "",
        )?;
        bytes(
            "--max-page-bytes",
            self.max_page_bytes,
            16 * KIB..=64 * MIB,
            "",
        )?;
        bytes("--max-read-bytes", self.max_read_bytes, MIB..=64 * GIB, "")?;
        bytes(
            "--max-query-bytes",
            self.max_query_bytes,
            MIB..=64 * GIB,
            "",
        )?;
        duration(
            "--tail-poll-interval",
            self.tail_poll_interval,
            ms(10)..=min(1),
            None,
        )?;
        bytes(
            "--tail-queue-bytes",
            self.tail_queue_bytes,
            64 * KIB..=GIB,
            "",
        )?;
        Ok(())
    }

    /// Bytes of --max-buffered-bytes one tenant's requests in progress may claim.
    pub fn tenant_buffer_bytes(&self) -> usize {
        self.max_buffered_bytes.as_usize() / 100 * usize::from(self.tenant_buffer_share)
    }

    /// The number of shards to run: the configured count, or one per CPU core.
    pub fn shard_count(&self) -> usize {
        if self.shards > 0 {
            return self.shards;
        }
        std::thread::available_parallelism().map_or(2, usize::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        serve: ServeConfig,
    }

    fn defaults() -> ServeConfig {
        Wrapper::parse_from(["loghaul"]).serve
    }

    #[test]
    fn file_values_fill_what_flags_left_at_default() {
        let text = "batch-max-rows = 123\nbatch-linger = \"7ms\"\nmax-buffered-bytes = \"32MiB\"\n";
        let merged = defaults()
            .merge_toml(Path::new("x.toml"), text, |_| false)
            .unwrap();
        assert_eq!(merged.batch_max_rows, 123);
        assert_eq!(merged.batch_linger.0, std::time::Duration::from_millis(7));
        assert_eq!(merged.max_buffered_bytes.0, 32 << 20);
    }

    #[test]
    fn explicit_flags_beat_the_file() {
        let mut config = defaults();
        config.batch_max_rows = 9;
        let merged = config
            .merge_toml(Path::new("x.toml"), "batch-max-rows = 123", |id| {
                id == "batch_max_rows"
            })
            .unwrap();
        assert_eq!(merged.batch_max_rows, 9);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        let err = defaults()
            .merge_toml(Path::new("x.toml"), "batch-max-rowz = 1", |_| false)
            .unwrap_err();
        assert!(
            err.to_string().contains("unknown key \"batch-max-rowz\""),
            "{err}"
        );
        let err = defaults()
            .merge_toml(Path::new("x.toml"), "batch-linger = \"soon\"", |_| false)
            .unwrap_err();
        assert!(err.to_string().contains("invalid duration"), "{err}");
    }

    #[test]
    fn impossible_combinations_are_refused() {
        let mut config = defaults();
        config.max_request_bytes = ByteSize(128 << 20);
        assert!(config.validate().is_err());
        assert!(defaults().validate().is_ok());
        let mut config = defaults();
        config.console_listen = config.metrics_listen.to_string().parse().unwrap();
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("--console-listen"), "{err}");
    }

    #[test]
    fn a_tail_queue_outside_its_range_is_refused_naming_the_option() {
        for size in ["0", "63KiB", "2GiB"] {
            let mut config = defaults();
            config.tail_queue_bytes = size.parse().unwrap();
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains("--tail-queue-bytes"), "{size}: {err}");
        }
        for size in ["64KiB", "1GiB"] {
            let mut config = defaults();
            config.tail_queue_bytes = size.parse().unwrap();
            assert!(config.validate().is_ok(), "{size}");
        }
    }

    #[test]
    fn one_read_fits_the_reads_together_and_holds_a_page() {
        let mut config = defaults();
        config.max_query_bytes = ByteSize(512 << 20);
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("--max-read-bytes"), "{err}");
        let mut config = defaults();
        config.max_page_bytes = ByteSize(40 << 20);
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("twice --max-page-bytes"), "{err}");
        config.max_query_bytes = ByteSize(80 << 20);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn the_console_is_on_loopback_by_default_and_can_be_turned_off() {
        assert_eq!(defaults().console_listen.to_string(), "127.0.0.1:8080");
        let merged = defaults()
            .merge_toml(Path::new("x.toml"), "console-listen = \"off\"", |_| false)
            .unwrap();
        assert_eq!(merged.console_listen, OptionalListen(None));
    }
}
