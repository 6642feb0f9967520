//! Every knob of `loghaul serve`, its default, and how flags, environment and a TOML file combine.
//!
//! Precedence, highest first: a command-line flag, its `LOGHAUL_*` environment twin, the `--config`
//! file (same names as the flags, `batch-max-rows = 5000`), the built-in default.
//!
//! The options come in sections, one per part of the service that reads them ([`PipelineOptions`],
//! [`QueryOptions`], …), and only start-up sees the whole [`ServeConfig`]. The sections live here
//! rather than beside their readers because those readers depend on this module (for [`ByteSize`],
//! [`HumanDuration`] and the other option types), so this module naming them would be a cycle.

mod auth;
mod ingest;
pub mod listen;
pub mod origins;
mod pipeline;
mod query;
mod ranges;
#[cfg(test)]
mod reference;
mod retention;
mod sealing;
pub mod secret;
mod storage;
mod tls;
pub mod units;

use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, ValueEnum};
use serde::{Deserialize, Serialize};

pub use auth::AuthOptions;
pub use ingest::IngestOptions;
pub use listen::{ListenOptions, OptionalListen};
pub use origins::CorsOrigins;
pub use pipeline::PipelineOptions;
pub use query::QueryOptions;
pub use retention::RetentionOptions;
pub use sealing::SealingOptions;
pub use secret::Secret;
pub use storage::StorageOptions;
pub use tls::TlsOptions;
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
// Each section is read by one part of the service, which is handed only that section; flags,
// environment variables and `--config` keys stay flat (`#[command(flatten)]`, `#[serde(flatten)]`),
// so unknown `--config` keys are refused by `merge_toml` (serde's `deny_unknown_fields` cannot be
// combined with `flatten`).
#[derive(Clone, Debug, Args, Serialize, Deserialize)]
pub struct ServeConfig {
    /// Listen addresses and HTTP connection limits.
    #[command(flatten)]
    #[serde(flatten)]
    pub listeners: ListenOptions,

    /// The database the pipeline writes to.
    #[command(flatten)]
    #[serde(flatten)]
    pub storage: StorageOptions,

    /// Shards, batching and the ingest memory budget.
    #[command(flatten)]
    #[serde(flatten)]
    pub pipeline: PipelineOptions,

    /// Body pace, message sizes and connection age of ingest requests.
    #[command(flatten)]
    #[serde(flatten)]
    pub ingest: IngestOptions,

    /// On SIGTERM/SIGINT: how long open streams and HTTP ingest requests in flight may take to
    /// finish before the final flush.
    #[arg(long, env = "LOGHAUL_SHUTDOWN_GRACE", default_value = "20s")]
    pub shutdown_grace: HumanDuration,

    /// Certificates of the ingest ports.
    #[command(flatten)]
    #[serde(flatten)]
    pub tls: TlsOptions,

    /// Format of the service's own logs (level from RUST_LOG, default info).
    #[arg(long, env = "LOGHAUL_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// API keys, keyless access and tenant rate limits.
    #[command(flatten)]
    #[serde(flatten)]
    pub auth: AuthOptions,

    /// How long records and dedup keys are kept.
    #[command(flatten)]
    #[serde(flatten)]
    pub retention: RetentionOptions,

    /// When past hours are sealed into compressed columnar partitions.
    #[command(flatten)]
    #[serde(flatten)]
    pub sealing: SealingOptions,

    /// Read connections, timeouts and limits of Query, Tail and the console.
    #[command(flatten)]
    #[serde(flatten)]
    pub query: QueryOptions,

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
        if self.ingest.max_request_bytes.0 > self.pipeline.max_buffered_bytes.0 {
            return fail("--max-request-bytes must not exceed --max-buffered-bytes, or one request could never be buffered");
        }
        if self.query.max_tails_per_tenant > self.query.max_tails {
            return fail("--max-tails-per-tenant must not exceed --max-tails");
        }
        if self.query.max_query_bytes.0 > self.query.max_read_bytes.0 {
            return fail(
                "--max-query-bytes must not exceed --max-read-bytes, or one read could never run",
            );
        }
        if self.query.max_query_bytes.0 < self.query.max_page_bytes.0.saturating_mul(2) {
            return fail(
                "--max-query-bytes must be at least twice --max-page-bytes, which a page reserves",
            );
        }
        let mut bound = vec![self.listeners.listen, self.listeners.metrics_listen];
        for (flag, addr) in [
            ("--console-listen", self.listeners.console_listen.0),
            ("--http-listen", self.listeners.http_listen.0),
        ] {
            let Some(addr) = addr else { continue };
            if addr.port() != 0 && bound.contains(&addr) {
                return Err(ConfigError::Invalid(format!(
                    "{flag} must differ from the other listen addresses (--listen, --metrics-listen, --console-listen, --http-listen)"
                )));
            }
            bound.push(addr);
        }
        if self.tls.tls_cert.is_some() != self.tls.tls_key.is_some() {
            return fail("--tls-cert and --tls-key go together");
        }
        if self.tls.tls_client_ca.is_some() && self.tls.tls_cert.is_none() {
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
        count(
            "--shards",
            self.pipeline.shards,
            0..=1024,
            "0 (one per core)",
        )?;
        count(
            "--batch-max-rows",
            self.pipeline.batch_max_rows,
            1..=1_000_000,
            "",
        )?;
        bytes(
            "--batch-max-bytes",
            self.pipeline.batch_max_bytes,
            KIB..=GIB,
            "",
        )?;
        duration(
            "--batch-linger",
            self.pipeline.batch_linger,
            ms(0)..=s(60),
            None,
        )?;
        count(
            "--queue-capacity",
            self.pipeline.queue_capacity,
            1..=65_536,
            "",
        )?;
        duration(
            "--enqueue-timeout",
            self.pipeline.enqueue_timeout,
            ms(100)..=h(1),
            None,
        )?;
        bytes(
            "--max-buffered-bytes",
            self.pipeline.max_buffered_bytes,
            16 * KIB..=4 * GIB - 1,
            "",
        )?;
        count(
            "--tenant-buffer-share",
            self.pipeline.tenant_buffer_share.into(),
            10..=100,
            "",
        )?;
        bytes(
            "--min-body-rate",
            self.ingest.min_body_rate,
            KIB..=GIB,
            "0 (no minimum)",
        )?;
        duration(
            "--min-body-rate-grace",
            self.ingest.min_body_rate_grace,
            ms(100)..=min(10),
            None,
        )?;
        bytes(
            "--max-message-bytes",
            self.ingest.max_message_bytes,
            64..=GIB,
            "",
        )?;
        bytes(
            "--max-request-bytes",
            self.ingest.max_request_bytes,
            KIB..=GIB,
            "",
        )?;
        duration(
            "--store-retry-timeout",
            self.pipeline.store_retry_timeout,
            s(1)..=d(1),
            None,
        )?;
        count(
            "--db-max-connections",
            self.storage.db_max_connections as usize,
            0..=1000,
            "0 (shards + 2)",
        )?;
        duration(
            "--max-connection-age",
            self.ingest.max_connection_age,
            s(1)..=d(30),
            Some("0s (never)"),
        )?;
        duration(
            "--max-connection-age-grace",
            self.ingest.max_connection_age_grace,
            s(1)..=h(1),
            None,
        )?;
        duration("--shutdown-grace", self.shutdown_grace, ms(0)..=h(1), None)?;
        duration(
            "--stream-idle-timeout",
            self.ingest.stream_idle_timeout,
            s(1)..=d(1),
            Some("0s (never)"),
        )?;
        duration(
            "--http-header-read-timeout",
            self.listeners.http_header_read_timeout,
            ms(100)..=min(10),
            None,
        )?;
        count(
            "--http-max-connections",
            self.listeners.http_max_connections as usize,
            1..=1_000_000,
            "",
        )?;
        count(
            "--http-ingest-max-connections",
            self.listeners.http_ingest_max_connections as usize,
            1..=1_000_000,
            "",
        )?;
        duration(
            "--api-keys-reload-interval",
            self.auth.api_keys_reload_interval,
            ms(100)..=d(1),
            Some("0s (only on SIGHUP)"),
        )?;
        if !(self.auth.tenant_records_per_second.is_finite()
            && self.auth.tenant_records_per_second >= 0.0)
        {
            return Err(ConfigError::Invalid(
                "--tenant-records-per-second must be 0 (unlimited) or a positive number".into(),
            ));
        }
        duration(
            "--tenant-burst",
            self.auth.tenant_burst,
            ms(100)..=h(1),
            None,
        )?;
        if !self.retention.retention.0.is_zero() && self.retention.retention.0 < h(1) {
            return Err(ConfigError::Invalid(
                "--retention must be at least 1h (or 0s to keep everything)".into(),
            ));
        }
        duration(
            "--retention-interval",
            self.retention.retention_interval,
            ms(100)..=d(1),
            None,
        )?;
        duration(
            "--seal-after",
            self.sealing.seal_after,
            ms(1000)..=d(30),
            Some("0s (sealing off)"),
        )?;
        duration(
            "--seal-interval",
            self.sealing.seal_interval,
            ms(100)..=d(1),
            None,
        )?;
        count(
            "--seal-busy-percent",
            self.sealing.seal_busy_percent.into(),
            1..=100,
            "",
        )?;
        duration(
            "--dedup-window",
            self.retention.dedup_window,
            min(1)..=d(365),
            None,
        )?;
        count(
            "--read-max-connections",
            self.query.read_max_connections as usize,
            1..=1000,
            "",
        )?;
        duration(
            "--query-timeout",
            self.query.query_timeout,
            ms(100)..=h(1),
            None,
        )?;
        count(
            "--max-concurrent-reads-per-tenant",
            self.query.max_concurrent_reads_per_tenant,
            1..=1000,
            "",
        )?;
        count("--max-tails", self.query.max_tails, 1..=100_000, "")?;
        count(
            "--max-tails-per-tenant",
            self.query.max_tails_per_tenant,
            1..=100_000,
            "",
        )?;
        bytes(
            "--max-page-bytes",
            self.query.max_page_bytes,
            16 * KIB..=64 * MIB,
            "",
        )?;
        bytes(
            "--max-read-bytes",
            self.query.max_read_bytes,
            MIB..=64 * GIB,
            "",
        )?;
        bytes(
            "--max-query-bytes",
            self.query.max_query_bytes,
            MIB..=64 * GIB,
            "",
        )?;
        count(
            "--max-query-series",
            self.query.max_query_series,
            1..=1_000_000,
            "",
        )?;
        duration(
            "--tail-poll-interval",
            self.query.tail_poll_interval,
            ms(10)..=min(1),
            None,
        )?;
        bytes(
            "--tail-queue-bytes",
            self.query.tail_queue_bytes,
            64 * KIB..=GIB,
            "",
        )?;
        Ok(())
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
        assert_eq!(merged.pipeline.batch_max_rows, 123);
        assert_eq!(
            merged.pipeline.batch_linger.0,
            std::time::Duration::from_millis(7)
        );
        assert_eq!(merged.pipeline.max_buffered_bytes.0, 32 << 20);
    }

    /// The sections are a layout of the Rust code only: the file's keys stay the flat flag names.
    #[test]
    fn every_flag_is_a_top_level_key_of_the_config_file() {
        let serde_json::Value::Object(fields) = serde_json::to_value(defaults()).unwrap() else {
            panic!("a struct serializes to a JSON object");
        };
        assert!(
            fields.values().all(|value| !value.is_object()),
            "{fields:?}"
        );
        let command = ServeConfig::augment_args(clap::Command::new("serve"));
        let mut flags: Vec<String> = command
            .get_arguments()
            .filter_map(|arg| arg.get_long())
            .filter(|&flag| flag != "config")
            .map(|flag| flag.replace('-', "_"))
            .collect();
        let mut keys: Vec<String> = fields.keys().cloned().collect();
        flags.sort();
        keys.sort();
        assert_eq!(flags, keys);
    }

    #[test]
    fn explicit_flags_beat_the_file() {
        let mut config = defaults();
        config.pipeline.batch_max_rows = 9;
        let merged = config
            .merge_toml(Path::new("x.toml"), "batch-max-rows = 123", |id| {
                id == "batch_max_rows"
            })
            .unwrap();
        assert_eq!(merged.pipeline.batch_max_rows, 9);
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
        config.ingest.max_request_bytes = ByteSize(128 << 20);
        assert!(config.validate().is_err());
        assert!(defaults().validate().is_ok());
        let mut config = defaults();
        config.listeners.console_listen =
            config.listeners.metrics_listen.to_string().parse().unwrap();
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("--console-listen"), "{err}");
    }

    #[test]
    fn a_tail_queue_outside_its_range_is_refused_naming_the_option() {
        for size in ["0", "63KiB", "2GiB"] {
            let mut config = defaults();
            config.query.tail_queue_bytes = size.parse().unwrap();
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains("--tail-queue-bytes"), "{size}: {err}");
        }
        for size in ["64KiB", "1GiB"] {
            let mut config = defaults();
            config.query.tail_queue_bytes = size.parse().unwrap();
            assert!(config.validate().is_ok(), "{size}");
        }
    }

    #[test]
    fn one_read_fits_the_reads_together_and_holds_a_page() {
        let mut config = defaults();
        config.query.max_query_bytes = ByteSize(512 << 20);
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("--max-read-bytes"), "{err}");
        let mut config = defaults();
        config.query.max_page_bytes = ByteSize(40 << 20);
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("twice --max-page-bytes"), "{err}");
        config.query.max_query_bytes = ByteSize(80 << 20);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn the_console_is_on_loopback_by_default_and_can_be_turned_off() {
        assert_eq!(
            defaults().listeners.console_listen.to_string(),
            "127.0.0.1:8080"
        );
        let merged = defaults()
            .merge_toml(Path::new("x.toml"), "console-listen = \"off\"", |_| false)
            .unwrap();
        assert_eq!(merged.listeners.console_listen, OptionalListen(None));
    }
}
