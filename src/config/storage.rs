//! Where records are written: the database and the writers' connections to it.

use clap::Args;
use serde::{Deserialize, Serialize};

/// The store `serve` opens at start-up (the read pool is sized by [`super::QueryOptions`]).
#[derive(Clone, Debug, Args, Serialize, Deserialize)]
pub struct StorageOptions {
    /// Where logs are stored: sqlite://FILE (created if missing) or postgres://USER@HOST/DB.
    #[arg(
        long,
        env = "LOGHAUL_DATABASE_URL",
        default_value = "sqlite://loghaul.db",
        // The URL may hold a password; `--help` must not print it.
        hide_env_values = true
    )]
    pub database_url: String,

    /// Database connections; 0 means shards + 2 (PostgreSQL). SQLite always writes through one.
    #[arg(long, env = "LOGHAUL_DB_MAX_CONNECTIONS", default_value_t = 0)]
    pub db_max_connections: u32,
}
