//! Who may call and how much a tenant may send (`crate::auth`).

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{ByteSize, HumanDuration, Secret};

/// The API keys, the access of a keyless service, and the default tenant rate limits.
#[derive(Clone, Debug, Args, Serialize, Deserialize)]
pub struct AuthOptions {
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
}
