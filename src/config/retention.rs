//! How long records and dedup keys are kept (`crate::retention`).

use clap::Args;
use serde::{Deserialize, Serialize};

use super::HumanDuration;

/// The options `RetentionConfig` is made from.
#[derive(Clone, Debug, Args, Serialize, Deserialize)]
pub struct RetentionOptions {
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
}
