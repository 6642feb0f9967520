//! TLS on the gRPC port with certificates generated here: TLS pushes work, plaintext is refused,
//! and with `--tls-client-ca` only clients holding a certificate signed by that CA get in.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::process::{assert_success, BINARY};
use crate::common::{config, push, record, Backend, TestDb, TestServer};
use loghaul::proto::v1::log_ingest_client::LogIngestClient;
use loghaul::tls::ClientTlsArgs;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tonic::transport::Channel;

/// A CA and the PEM files of certificates it signed, in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "loghaul test CA");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), cert.pem()).unwrap();
        Pki {
            dir,
            issuer: Issuer::new(params, key),
        }
    }

    fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Signs a certificate for `name` (server or client use) and returns (cert, key) files.
    fn issue(&self, name: &str, usage: ExtendedKeyUsagePurpose) -> (PathBuf, PathBuf) {
        let mut params =
            CertificateParams::new(vec![name.to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![usage];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let cert_path = self.dir.path().join(format!("{name}.pem"));
        let key_path = self.dir.path().join(format!("{name}.key"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }
}

async fn tls_server(db: &TestDb, pki: &Pki, client_ca: Option<&Path>) -> TestServer {
    let (cert, key) = pki.issue("localhost", ExtendedKeyUsagePurpose::ServerAuth);
    let mut config = config(db);
    config.tls.tls_cert = Some(cert);
    config.tls.tls_key = Some(key);
    config.tls.tls_client_ca = client_ca.map(Path::to_owned);
    TestServer::start(config).await
}

async fn tls_client(
    server: &TestServer,
    tls: &ClientTlsArgs,
) -> Result<LogIngestClient<Channel>, String> {
    let endpoint = tls
        .endpoint(&format!("https://{}", server.grpc))
        .map_err(|err| err.to_string())?;
    let channel = endpoint
        .connect()
        .await
        .map_err(|err| loghaul::tls::error_chain(&err))?;
    Ok(LogIngestClient::new(channel))
}

/// Pushes one record and returns the outcome as text (the status or transport error on failure).
async fn try_push(client: Result<LogIngestClient<Channel>, String>) -> Result<u64, String> {
    let mut client = client?;
    push(&mut client, vec![vec![record("over tls")]])
        .await
        .map(|response| response.accepted)
        .map_err(|status| format!("{status:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_over_tls_are_stored_and_plaintext_clients_are_refused() {
    let db = TestDb::create(Backend::Sqlite, "tls_push").await.unwrap();
    let pki = Pki::new();
    let server = tls_server(&db, &pki, None).await;
    let trusting = ClientTlsArgs {
        tls_ca: Some(pki.ca()),
        ..ClientTlsArgs::default()
    };
    assert_eq!(try_push(tls_client(&server, &trusting).await).await, Ok(1));

    // A plaintext HTTP/2 client gets no answer from a TLS port: its call fails.
    let plaintext = LogIngestClient::connect(format!("http://{}", server.grpc))
        .await
        .map_err(|err| err.to_string());
    let refused = try_push(plaintext).await;
    assert!(refused.is_err(), "{refused:?}");

    // A client that does not trust the server's CA refuses the server.
    let other_ca = Pki::new();
    let distrusting = ClientTlsArgs {
        tls_ca: Some(other_ca.ca()),
        ..ClientTlsArgs::default()
    };
    let refused = try_push(tls_client(&server, &distrusting).await).await;
    assert!(refused.is_err(), "{refused:?}");

    // The command-line client speaks TLS with the same options.
    let lines = pki.dir.path().join("lines.log");
    std::fs::write(&lines, "first\nsecond\nthird\n").unwrap();
    let sent = Command::new(BINARY)
        .args(["send", "--endpoint", &format!("https://{}", server.grpc)])
        .arg("--tls-ca")
        .arg(pki.ca())
        .arg(&lines)
        .output()
        .unwrap();
    assert_success(&sent);
    assert_eq!(db.count().await, 1 + 3);
    let read = Command::new(BINARY)
        .args(["query", "--endpoint", &format!("https://{}", server.grpc)])
        .arg("--tls-ca")
        .arg(pki.ca())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&read.stdout);
    assert!(
        read.status.success() && printed.contains("second"),
        "{printed}{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let bench = Command::new(BINARY)
        .args(["bench", "--endpoint", &format!("https://{}", server.grpc)])
        .args([
            "--streams",
            "1",
            "--records",
            "200",
            "--records-per-chunk",
            "100",
        ])
        .arg("--tls-ca")
        .arg(pki.ca())
        .output()
        .unwrap();
    assert_success(&bench);
    assert_eq!(db.count().await, 1 + 3 + 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_only_clients_holding_a_certificate_it_signed_get_in() {
    let db = TestDb::create(Backend::Sqlite, "tls_mtls").await.unwrap();
    let pki = Pki::new();
    let server = tls_server(&db, &pki, Some(&pki.ca())).await;

    let anonymous = ClientTlsArgs {
        tls_ca: Some(pki.ca()),
        ..ClientTlsArgs::default()
    };
    let refused = try_push(tls_client(&server, &anonymous).await).await;
    assert!(
        refused.is_err(),
        "a client without a certificate: {refused:?}"
    );

    let stranger_ca = Pki::new();
    let (cert, key) = stranger_ca.issue("stranger", ExtendedKeyUsagePurpose::ClientAuth);
    let stranger = ClientTlsArgs {
        tls_ca: Some(pki.ca()),
        tls_cert: Some(cert),
        tls_key: Some(key),
    };
    let refused = try_push(tls_client(&server, &stranger).await).await;
    assert!(
        refused.is_err(),
        "a certificate signed by another CA: {refused:?}"
    );

    let (cert, key) = pki.issue("app", ExtendedKeyUsagePurpose::ClientAuth);
    let member = ClientTlsArgs {
        tls_ca: Some(pki.ca()),
        tls_cert: Some(cert),
        tls_key: Some(key),
    };
    assert_eq!(try_push(tls_client(&server, &member).await).await, Ok(1));
    assert_eq!(db.count().await, 1, "only the authenticated push is stored");
    server.stop().await;
}

/// The HTTP ingest port takes the same certificate: an OTLP/HTTP export over HTTPS is stored, and
/// a plaintext request on that port gets no answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_ingest_port_speaks_tls_with_the_same_certificate() {
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
    use tokio_rustls::rustls::{ClientConfig, RootCertStore};

    let Some(db) = TestDb::create(Backend::Sqlite, "tls_http_ingest").await else {
        return;
    };
    let pki = Pki::new();
    let server = tls_server(&db, &pki, None).await;
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(pki.ca()).unwrap())
        .unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let tcp = tokio::net::TcpStream::connect(server.http_ingest)
        .await
        .unwrap();
    let mut tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let body = r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"over https"}}]}]}]}"#;
    let request = format!(
        "POST /v1/logs HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    // A TLS peer may close without close_notify once the answer is sent; what was read counts.
    let _ = tls.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let rows = db.stored().await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].message, "over https");

    let plaintext =
        crate::common::http_request(server.http_ingest, "POST", "/v1/logs", &[], b"").await;
    assert!(
        plaintext.map_or(true, |answer| answer.status == 0),
        "a plaintext request on the TLS port must get no HTTP answer"
    );
    server.stop().await;
}
