//! When past hours are sealed into compressed columnar partitions (`crate::sealing`).

use clap::Args;
use serde::{Deserialize, Serialize};

use super::HumanDuration;

/// The options `SealingConfig` is made from.
#[derive(Clone, Debug, Args, Serialize, Deserialize)]
pub struct SealingOptions {
    /// PostgreSQL: an hour is rewritten into a compressed columnar partition once it has been
    /// over this long (the grace for late rows, which still land afterwards); 0s turns sealing
    /// off. Needs the citus_columnar extension; without it partitions stay heap.
    #[arg(long, env = "LOGHAUL_SEAL_AFTER", default_value = "1h")]
    pub seal_after: HumanDuration,

    /// How often the sealer looks for hours to seal.
    #[arg(long, env = "LOGHAUL_SEAL_INTERVAL", default_value = "5m")]
    pub seal_interval: HumanDuration,

    /// Percent of the time a seal keeps its database session busy: it copies a large hour a
    /// slice at a time and rests in between, so that ingest keeps the cores. 100 seals at full
    /// speed; raise it when loghaul_seal_lag_seconds grows.
    #[arg(long, env = "LOGHAUL_SEAL_BUSY_PERCENT", default_value_t = 10)]
    pub seal_busy_percent: u8,
}
