//! TLS for the gRPC and HTTP ingest ports (rustls): the server's certificate and optional
//! client-certificate authentication, and the matching options of the command-line clients.
//!
//! Files are read and checked here, before anything listens, so that a missing, unreadable or
//! malformed file stops the service at start-up with the file and the option named.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

/// A TLS handshake must finish within this, so a client that connects and sends nothing cannot
/// hold a connection slot.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {option} {path}: {source}")]
    Read {
        /// The option naming the file.
        option: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file holds no PEM block of the expected kind.
    #[error("{option} {path} holds no PEM {kind} (a block starting -----BEGIN {kind}-----)")]
    NoPem {
        /// The option naming the file.
        option: &'static str,
        /// The file.
        path: PathBuf,
        /// What was expected: `CERTIFICATE` or `PRIVATE KEY`.
        kind: &'static str,
    },
    /// rustls refused the certificates or key.
    #[error("invalid TLS configuration ({files}): {detail}")]
    Invalid {
        /// The files involved.
        files: String,
        /// What rustls said.
        detail: String,
    },
    /// `--tls-cert` and `--tls-key` must be given together.
    #[error("--tls-cert and --tls-key go together")]
    Incomplete,
}

/// The server side of TLS, from `--tls-cert`, `--tls-key` and optionally `--tls-client-ca`.
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<ServerTlsConfig, TlsError> {
    let cert_pem = read_pem(cert, "--tls-cert", "CERTIFICATE")?;
    let key_pem = read_pem(key, "--tls-key", "PRIVATE KEY")?;
    let mut config = ServerTlsConfig::new()
        .identity(Identity::from_pem(cert_pem, key_pem))
        .timeout(HANDSHAKE_TIMEOUT);
    let mut files = format!("--tls-cert {}, --tls-key {}", cert.display(), key.display());
    if let Some(ca) = client_ca {
        let ca_pem = read_pem(ca, "--tls-client-ca", "CERTIFICATE")?;
        config = config.client_ca_root(Certificate::from_pem(ca_pem));
        files.push_str(&format!(", --tls-client-ca {}", ca.display()));
    }
    // Builds the rustls acceptor once, so that a key that does not match its certificate, or a
    // certificate rustls cannot parse, is a start-up error rather than a failed handshake later.
    tonic::transport::Server::builder()
        .tls_config(config.clone())
        .map_err(|err| TlsError::Invalid {
            files,
            detail: error_chain(&err),
        })?;
    Ok(config)
}

/// The same certificate, key and client CA for the HTTP ingest listener, which hyper serves over
/// a rustls acceptor of its own (HTTP/1.1 only).
pub fn http_acceptor(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    use std::sync::Arc;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls::server::WebPkiClientVerifier;
    use tokio_rustls::rustls::{RootCertStore, ServerConfig};

    let mut files = format!("--tls-cert {}, --tls-key {}", cert.display(), key.display());
    let invalid = |files: &str, detail: String| TlsError::Invalid {
        files: files.to_owned(),
        detail,
    };
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&read_pem(cert, "--tls-cert", "CERTIFICATE")?)
            .collect::<Result<_, _>>()
            .map_err(|err| invalid(&files, err.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(&read_pem(key, "--tls-key", "PRIVATE KEY")?)
        .map_err(|err| invalid(&files, err.to_string()))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|err| invalid(&files, err.to_string()))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            files.push_str(&format!(", --tls-client-ca {}", ca.display()));
            let mut roots = RootCertStore::empty();
            for root in
                CertificateDer::pem_slice_iter(&read_pem(ca, "--tls-client-ca", "CERTIFICATE")?)
            {
                let root = root.map_err(|err| invalid(&files, err.to_string()))?;
                roots
                    .add(root)
                    .map_err(|err| invalid(&files, err.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|err| invalid(&files, err.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|err| invalid(&files, err.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// How long a TLS handshake on an HTTP listener may take.
pub const HTTP_HANDSHAKE_TIMEOUT: Duration = HANDSHAKE_TIMEOUT;

/// TLS options of the command-line clients (`send`, `query`, `tail`, `bench --endpoint`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ClientTlsArgs {
    /// PEM CA certificate(s) to verify the server with; implies TLS. An `https://` endpoint
    /// without it trusts the system's roots.
    #[arg(long, env = "LOGHAUL_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// PEM client certificate, for a server started with --tls-client-ca (with --tls-key).
    #[arg(long, env = "LOGHAUL_CLIENT_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "LOGHAUL_CLIENT_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
}

impl ClientTlsArgs {
    /// True when the client speaks TLS to `endpoint`: an `https://` endpoint or any TLS option.
    pub fn enabled_for(&self, endpoint: &str) -> bool {
        endpoint.starts_with("https://")
            || self.tls_ca.is_some()
            || self.tls_cert.is_some()
            || self.tls_key.is_some()
    }

    /// The TLS settings for `endpoint`, or `None` for plaintext.
    pub fn client_config(&self, endpoint: &str) -> Result<Option<ClientTlsConfig>, TlsError> {
        if !self.enabled_for(endpoint) {
            return Ok(None);
        }
        let mut config = ClientTlsConfig::new().timeout(HANDSHAKE_TIMEOUT);
        config = match &self.tls_ca {
            Some(ca) => config.ca_certificate(Certificate::from_pem(read_pem(
                ca,
                "--tls-ca",
                "CERTIFICATE",
            )?)),
            None => config.with_native_roots(),
        };
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                let cert = read_pem(cert, "--tls-cert", "CERTIFICATE")?;
                let key = read_pem(key, "--tls-key", "PRIVATE KEY")?;
                config = config.identity(Identity::from_pem(cert, key));
            }
            (None, None) => {}
            _ => return Err(TlsError::Incomplete),
        }
        Ok(Some(config))
    }

    /// An endpoint for `url`, with TLS when [`Self::enabled_for`] says so. An `http://` URL is
    /// switched to `https://` when TLS is on, since the options say what the user meant.
    pub fn endpoint(&self, url: &str) -> Result<Endpoint, ConnectError> {
        let config = self.client_config(url)?;
        let url = match (&config, url.strip_prefix("http://")) {
            (Some(_), Some(rest)) => format!("https://{rest}"),
            _ => url.to_owned(),
        };
        let endpoint = Endpoint::from_shared(url)?;
        Ok(match config {
            Some(config) => endpoint.tls_config(config)?,
            None => endpoint,
        })
    }
}

/// Why a client could not build its endpoint.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A TLS file is missing or malformed.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The endpoint URL or TLS settings were refused by the transport.
    #[error("{}", error_chain(.0))]
    Transport(#[from] tonic::transport::Error),
    /// A plaintext HTTP endpoint (the benchmark's OTLP/HTTP and Loki posts) is not a usable URL
    /// or could not be reached.
    #[error("{endpoint}: {detail}")]
    Http {
        /// The URL.
        endpoint: String,
        /// What went wrong.
        detail: String,
    },
}

fn read_pem(path: &Path, option: &'static str, kind: &'static str) -> Result<Vec<u8>, TlsError> {
    let pem = std::fs::read(path).map_err(|source| TlsError::Read {
        option,
        path: path.to_owned(),
        source,
    })?;
    // "PRIVATE KEY" also matches "RSA PRIVATE KEY" and "EC PRIVATE KEY" blocks.
    let marker = format!("-----BEGIN {kind}-----");
    let alternative = format!(" {kind}-----");
    let text = String::from_utf8_lossy(&pem);
    if !text.contains(&marker) && !text.contains(&alternative) {
        return Err(TlsError::NoPem {
            option,
            path: path.to_owned(),
            kind,
        });
    }
    Ok(pem)
}

/// An error and its sources on one line: tonic's own message is often just "transport error".
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_non_pem_files_name_the_option_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let err = server_config(&missing, &missing, None).unwrap_err();
        assert!(
            err.to_string().starts_with("cannot read --tls-cert ")
                && err.to_string().contains("missing.pem"),
            "{err}"
        );
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").unwrap();
        let err = server_config(&garbage, &garbage, None).unwrap_err();
        assert!(
            err.to_string().contains(
                "holds no PEM CERTIFICATE (a block starting -----BEGIN CERTIFICATE-----)"
            ),
            "{err}"
        );
    }

    #[test]
    fn clients_use_tls_only_when_asked() {
        let plain = ClientTlsArgs::default();
        assert!(!plain.enabled_for("http://127.0.0.1:4317"));
        assert!(plain.enabled_for("https://logs.example:4317"));
        let with_ca = ClientTlsArgs {
            tls_ca: Some("ca.pem".into()),
            ..ClientTlsArgs::default()
        };
        assert!(with_ca.enabled_for("http://127.0.0.1:4317"));
        let half = ClientTlsArgs {
            tls_cert: Some("c.pem".into()),
            ..ClientTlsArgs::default()
        };
        assert!(matches!(
            half.client_config("https://x"),
            Err(TlsError::Incomplete)
        ));
    }
}
