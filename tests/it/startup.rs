//! Start-up failures of the real binary: each exits non-zero within seconds with one line that
//! names the cause, and never panics. (An unreachable PostgreSQL is covered in `process.rs`.)

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::process::{exit_status_within, serve_command, serve_command_at};
use crate::common::{Backend, TestDb};

/// Runs `loghaul serve` with `args` on ephemeral ports and returns its `error:` line, after
/// checking that it failed quickly and did not panic.
fn start_up_error(args: &[&str]) -> String {
    let started = Instant::now();
    let output = serve_command().args(args).output().unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{args:?} started: {stderr}");
    assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert!(
        took < Duration::from_secs(20),
        "{args:?} took {took:?} to fail"
    );
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{args:?}: one error line in {stderr}");
    errors[0].to_owned()
}

fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

/// The start-up error for a database file `logs.db` holding `contents`, opened with `options`.
fn sqlite_file_start_up_error(contents: &[u8], options: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("logs.db");
    std::fs::write(&file, contents).unwrap();
    start_up_error(&["--database-url", &format!("{}{options}", sqlite_url(&file))])
}

/// Needs a server that answers: against an unreachable one the error would name the URL too,
/// and the credentials would never be checked.
#[tokio::test]
async fn wrong_postgres_credentials_name_the_database_not_the_password() {
    let Some(db) = TestDb::create(Backend::Postgres, "startup_credentials").await else {
        return;
    };
    let (base, name) = db.url.rsplit_once('/').unwrap();
    let host = base.rsplit_once('@').unwrap().1;
    let error = start_up_error(&[
        "--database-url",
        &format!("postgres://no_such_role:hunter2@{host}/{name}"),
    ]);
    assert!(
        error.contains(&format!("postgres://no_such_role:***@{host}/{name}")),
        "{error}"
    );
    assert!(
        error.contains("role \"no_such_role\" does not exist")
            || error.contains("authentication failed for user \"no_such_role\""),
        "the server refused the role: {error}"
    );
    assert!(!error.contains("hunter2"), "{error}");
}

#[test]
fn a_read_only_sqlite_database_is_refused_at_start_up() {
    // Root ignores file permissions, so read-only is asked of SQLite itself.
    let error = sqlite_file_start_up_error(b"", "?mode=ro");
    assert!(
        error.contains("readonly") || error.contains("read-only"),
        "{error}"
    );
}

#[test]
fn an_unwritable_sqlite_path_is_refused_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_directory = dir.path().join("file");
    std::fs::write(&not_a_directory, b"x").unwrap();
    let error = start_up_error(&[
        "--database-url",
        &sqlite_url(&not_a_directory.join("logs.db")),
    ]);
    assert!(error.contains("file is not a directory"), "{error}");

    let error = start_up_error(&[
        "--database-url",
        &sqlite_url(&dir.path().join("missing/dir/logs.db")),
    ]);
    assert!(error.contains("missing/dir does not exist)"), "{error}");
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_at_start_up() {
    let error = sqlite_file_start_up_error(&[b'x'; 8192], "");
    assert!(
        error.contains("not a database") || error.contains("logs.db"),
        "{error}"
    );
}

#[test]
fn missing_or_invalid_tls_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url(&dir.path().join("logs.db"));
    let missing = dir.path().join("missing.pem");
    let error = start_up_error(&[
        "--database-url",
        &db,
        "--tls-cert",
        missing.to_str().unwrap(),
        "--tls-key",
        missing.to_str().unwrap(),
    ]);
    assert!(
        error.contains("cannot read --tls-cert") && error.contains("missing.pem"),
        "{error}"
    );

    let garbage = dir.path().join("garbage.pem");
    std::fs::write(
        &garbage,
        "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let key_file = dir.path().join("key.pem");
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let error = start_up_error(&[
        "--database-url",
        &db,
        "--tls-cert",
        garbage.to_str().unwrap(),
        "--tls-key",
        key_file.to_str().unwrap(),
    ]);
    assert!(error.contains("invalid TLS configuration"), "{error}");

    // A certificate with the key of another one.
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert_file = dir.path().join("cert.pem");
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    let error = start_up_error(&[
        "--database-url",
        &db,
        "--tls-cert",
        cert_file.to_str().unwrap(),
        "--tls-key",
        key_file.to_str().unwrap(),
    ]);
    assert!(error.contains("invalid TLS configuration"), "{error}");

    let error = start_up_error(&[
        "--database-url",
        &db,
        "--tls-cert",
        cert_file.to_str().unwrap(),
    ]);
    assert!(
        error.contains("--tls-cert and --tls-key go together"),
        "{error}"
    );

    let error = start_up_error(&[
        "--database-url",
        &db,
        "--tls-cert",
        cert_file.to_str().unwrap(),
        "--tls-key",
        key_file.to_str().unwrap(),
        "--tls-client-ca",
        missing.to_str().unwrap(),
    ]);
    assert!(error.contains("cannot read --tls-client-ca"), "{error}");
}

#[test]
fn a_port_in_use_is_named() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let output = serve_command_at(&address, "off")
        .args(["--database-url", &sqlite_url(&dir.path().join("logs.db"))])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen for gRPC on {address}")),
        "{stderr}"
    );
}

/// A duration past what the clock can be moved by was accepted and then panicked on every record.
#[test]
fn a_retention_of_a_hundred_million_years_is_refused_at_start_up() {
    let mut child = serve_command()
        .args(["--retention", "100000000y"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let Some(status) = exit_status_within(&mut child, Duration::from_secs(20)) else {
        child.kill().unwrap();
        child.wait().unwrap();
        panic!("a retention of a hundred million years was accepted");
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains("--retention") && stderr.contains("at most 100 years"),
        "{stderr}"
    );
}

/// Numeric options that parse but would stop the service (a billion shards aborted on allocation,
/// a hundred thousand took 1.37 GiB idle, the others were accepted and left it useless) are each
/// refused at start-up with one line naming the flag and its range.
#[test]
fn numeric_options_out_of_their_range_are_refused_at_start_up() {
    for (flag, value) in [
        ("--shards", "1000000000"),
        ("--shards", "100000"),
        ("--stream-idle-timeout", "1ns"),
        ("--max-request-bytes", "0"),
        ("--read-max-connections", "0"),
        ("--batch-max-bytes", "0"),
        ("--dedup-window", "0s"),
        ("--max-connection-age", "1ns"),
        ("--enqueue-timeout", "0s"),
        ("--tenant-buffer-share", "0"),
        ("--min-body-rate", "1"),
        ("--queue-capacity", "10000000"),
        ("--tail-queue-bytes", "2GiB"),
        ("--max-read-bytes", "0"),
        ("--max-query-bytes", "100GiB"),
        ("--max-query-series", "0"),
        ("--seal-busy-percent", "0"),
    ] {
        let error = start_up_error(&[flag, value]);
        assert!(
            error.contains(&format!("{flag} must be")) && error.contains(" to "),
            "{flag} {value}: {error}"
        );
    }
}
