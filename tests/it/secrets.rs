//! Secrets never reach the service's output: a real server with a PostgreSQL password in its
//! URL, keys in a file and in the environment, debug logging, good and bad keys, a database
//! connection killed under it, a broken keys file reloaded, a failed start-up; then every line
//! it wrote to stdout and stderr, and its metrics, are searched for each secret.

use std::time::Duration;

use crate::common;
use crate::common::process::{serve_command, Process};
use crate::common::{http_get, push_as, query_all, record, Backend, TestDb};
use loghaul::proto::v1::log_ingest_client::LogIngestClient;
use loghaul::proto::v1::log_query_client::LogQueryClient;
use loghaul::proto::v1::Filter;
use sqlx::Connection;

fn secret(prefix: &str) -> String {
    format!(
        "{prefix}{:016x}{:016x}",
        fastrand::u64(..),
        fastrand::u64(..)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_and_keys_never_appear_in_logs_or_errors() {
    let Some(db) = TestDb::create(Backend::Postgres, "secrets").await else {
        return;
    };
    let (base, name) = db.url.rsplit_once('/').unwrap();
    let host = base.rsplit_once('@').unwrap().1;
    let role = format!("loghaul_secret_{:08x}", fastrand::u32(..));
    let password = secret("pw-");
    let mut admin = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::query(&format!("CREATE ROLE {role} LOGIN PASSWORD '{password}'"))
        .execute(&mut admin)
        .await
        .unwrap();
    sqlx::query(&format!("ALTER DATABASE {name} OWNER TO {role}"))
        .execute(&mut admin)
        .await
        .unwrap();
    // The running server takes its password as a URL parameter, the failed start-up below in
    // the credentials: both spellings must be redacted.
    let url = format!("postgres://{role}@{host}/{name}?sslmode=disable&password={password}");

    let good = secret("k-good-");
    let other = secret("k-other-");
    let inline = secret("k-inline-");
    let bad = secret("k-bad-");
    let dir = tempfile::tempdir().unwrap();
    let keys_file = dir.path().join("keys.toml");
    std::fs::write(
        &keys_file,
        format!("[keys]\n\"{good}\" = \"acme\"\n\"{other}\" = \"beta\"\n"),
    )
    .unwrap();
    let inline_env = format!("{inline}=gamma");
    let mut server = Process::serve_with_env(
        &url,
        &["--api-keys-file", keys_file.to_str().unwrap()],
        &[
            ("RUST_LOG", "debug"),
            ("LOGHAUL_API_KEYS", inline_env.as_str()),
        ],
    );
    let endpoint = format!("http://{}", server.grpc);
    let mut ingest = LogIngestClient::connect(endpoint.clone()).await.unwrap();
    let mut query = LogQueryClient::connect(endpoint).await.unwrap();

    for key in [&good, &inline] {
        let response = push_as(&mut ingest, key, vec![vec![record("with a good key")]])
            .await
            .unwrap();
        assert_eq!(response.accepted, 1);
    }
    let almost = format!("{good}x");
    for key in [bad.as_str(), almost.as_str(), ""] {
        let status = push_as(&mut ingest, key, vec![vec![record("refused")]])
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated);
        assert!(!status.message().contains(&good) && !status.message().contains(&bad));
        let status = query_all(&mut query, key, Filter::default(), 10)
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated);
    }
    assert_eq!(
        query_all(&mut query, &other, Filter::default(), 10)
            .await
            .unwrap()
            .len(),
        0
    );

    // A database error under the running service: its connections are killed mid-flight.
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1")
        .bind(&role)
        .execute(&mut admin)
        .await
        .unwrap();
    let response = push_as(&mut ingest, &good, vec![vec![record("after the kill")]])
        .await
        .unwrap();
    assert_eq!(response.accepted, 1);

    // A keys file broken on a line holding a key, reloaded: the error must not quote it.
    std::fs::write(
        &keys_file,
        format!("[keys]\n\"{good}\" = \"acme\n\"{other}\" = beta\n"),
    )
    .unwrap();
    server.signal("HUP");
    server.wait_for_log("API keys reload failed; the previous keys stay in force");

    let metrics = http_get(server.http, "/metrics").await.unwrap().1;
    server.signal("TERM");
    assert!(server.wait(Duration::from_secs(30)).success());
    let mut output = server.transcript();
    assert!(output.len() > 10, "the server logged: {output:#?}");
    assert!(
        output.iter().any(|line| line.contains(&format!(
            "postgres://{role}@{host}/{name}?sslmode=disable&password=***"
        ))),
        "the URL is logged, redacted: {output:#?}"
    );

    // A start-up that fails on the credentials: a role that does not exist, with a password.
    let failed = serve_command()
        .arg("--database-url")
        .arg(format!(
            "postgres://{role}_missing:{password}@{host}/{name}"
        ))
        .env("RUST_LOG", "debug")
        .env("LOGHAUL_API_KEYS", &inline_env)
        .output()
        .unwrap();
    assert!(!failed.status.success());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        stderr.contains("***@"),
        "the URL is shown redacted: {stderr}"
    );
    output.extend(stderr.lines().map(str::to_owned));
    output.extend(
        String::from_utf8_lossy(&failed.stdout)
            .lines()
            .map(str::to_owned),
    );
    output.push(metrics);

    // `--help` shows each option's environment variable, never its value, in every command.
    for command in [
        "serve",
        "migrate",
        "send",
        "bench",
        "query",
        "tail",
        "bench-query",
        "bench-shipper",
        "chaos",
    ] {
        let help = std::process::Command::new(common::process::BINARY)
            .args([command, "--help"])
            .env("LOGHAUL_DATABASE_URL", &url)
            .env("LOGHAUL_API_KEYS", &inline_env)
            .env("LOGHAUL_API_KEY", &good)
            .output()
            .unwrap();
        assert!(help.status.success(), "{command} --help failed");
        output.extend(
            String::from_utf8_lossy(&help.stdout)
                .lines()
                .map(|line| format!("{command} --help: {line}")),
        );
    }

    for (what, value) in [
        ("the database password", &password),
        ("a key from the file", &good),
        ("another key from the file", &other),
        ("a key from the environment", &inline),
        ("a key a client sent", &bad),
    ] {
        let leaks: Vec<&String> = output.iter().filter(|line| line.contains(value)).collect();
        assert!(leaks.is_empty(), "{what} appears in the output: {leaks:#?}");
    }

    // The role owns the database and its tables: drop them first, then the role, which then
    // owns nothing (REASSIGN OWNED would hand them back, but crashes a Citus 13.2 coordinator).
    drop(admin);
    db.drop_with_role(&role).await;
}
