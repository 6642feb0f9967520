//! The certificates of the ingest ports (`crate::tls` loads them).

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

/// The PEM files TLS is served with; all absent means plain TCP.
#[derive(Clone, Debug, Args, Serialize, Deserialize)]
pub struct TlsOptions {
    /// PEM certificate chain of the gRPC and HTTP ingest ports; with --tls-key they speak only TLS.
    #[arg(long, env = "LOGHAUL_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, env = "LOGHAUL_TLS_KEY")]
    pub tls_key: Option<PathBuf>,

    /// PEM CA certificates; when set, clients must present a certificate signed by one of them.
    #[arg(long, env = "LOGHAUL_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
}
