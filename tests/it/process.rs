//! The real binary as an operator runs it: SIGTERM under load, `loghaul migrate`, start-up errors.

use std::process::Command;
use std::time::Duration;

use crate::common::process::{assert_success, serve_command, Process, BINARY};
use crate::common::{chunk, metric, open_push, wait_until, Backend, TestDb, DEADLINE};
use loghaul::proto::v1::log_ingest_client::LogIngestClient;

async fn sigterm_under_load_loses_no_acknowledged_record(db: &TestDb) {
    let mut server = Process::serve(&db.url, &["--shutdown-grace", "10s"]);
    let endpoint = format!("http://{}", server.grpc);
    let mut feeders = Vec::new();
    let mut streams = Vec::new();
    for stream in 0..8 {
        let client = LogIngestClient::connect(endpoint.clone()).await.unwrap();
        let (chunks, answer) = open_push(client, 2);
        streams.push(answer);
        feeders.push(tokio::spawn(async move {
            for n in 0..40 {
                if chunks
                    .send(chunk(&format!("{stream}-{n}"), 100))
                    .await
                    .is_err()
                {
                    break;
                }
                // Paced, so that the streams are still sending when SIGTERM comes.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }
    wait_until("8 streams open on the server", DEADLINE, async || {
        metric(&server.metrics().await, "loghaul_active_streams") == 8.0
    })
    .await;
    server.signal("TERM");
    for feeder in feeders {
        feeder.await.unwrap();
    }
    let mut acknowledged = 0;
    for stream in streams {
        // Streams open at SIGTERM are allowed to finish within the grace period.
        let response = stream
            .await
            .unwrap()
            .expect("an open stream finishes during the grace");
        assert_eq!(response.rejected, 0);
        acknowledged += response.accepted as i64;
    }
    assert_eq!(acknowledged, 8 * 40 * 100);
    let status = server.wait(Duration::from_secs(30));
    assert!(
        status.success(),
        "exit status {status:?}; logs: {:#?}",
        server.logs()
    );
    assert_eq!(
        db.count().await,
        acknowledged,
        "every acknowledged record is stored"
    );
    // A new stream after shutdown is refused: nothing listens any more.
    assert!(LogIngestClient::connect(endpoint).await.is_err());
}
on_both_backends!(sigterm, sigterm_under_load_loses_no_acknowledged_record);

async fn migrate_creates_the_schema_and_is_idempotent(db: &TestDb) {
    for _ in 0..2 {
        let output = Command::new(BINARY)
            .args(["migrate", "--database-url", &db.url])
            .output()
            .unwrap();
        assert_success(&output);
    }
    assert_eq!(db.count().await, 0);
}
on_both_backends!(migrate, migrate_creates_the_schema_and_is_idempotent);

#[test]
fn an_unreachable_database_is_a_clear_error_at_start_up() {
    let output = serve_command()
        .args([
            "--database-url",
            "postgres://loghaul:secret-password@127.0.0.1:1/logs",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot connect to postgres://loghaul:***@127.0.0.1:1/logs"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("secret-password"),
        "passwords never reach logs: {stderr}"
    );
}

#[test]
fn a_bad_flag_value_says_how_to_write_it() {
    let output = Command::new(BINARY)
        .args(["serve", "--batch-linger", "soon"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("write it like 50ms, 5s, 2m"), "{stderr}");
}

#[test]
fn a_config_file_sets_options_and_rejects_unknown_keys() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("loghaul.toml");
    std::fs::write(&file, "batch-max-rows = 10\nbogus-knob = 1\n").unwrap();
    let output = Command::new(BINARY)
        .args(["serve", "--config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown key \"bogus-knob\""), "{stderr}");
}

/// The start-up warning of a keyless service says whom it serves, and the quick start (a keyless
/// server, `loghaul send` on the same machine) works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_service_says_whom_it_serves_and_local_clients_get_in() {
    let db = TestDb::create(Backend::Sqlite, "access_warning")
        .await
        .unwrap();
    // Flags, environment, and the mode the warning names.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 4] = [
        (&[], &[], "loopback-only"),
        (&["--allow-unauthenticated"], &[], "open"),
        (&[], &[("LOGHAUL_ALLOW_UNAUTHENTICATED", "true")], "open"),
        (
            &[],
            &[("LOGHAUL_ALLOW_UNAUTHENTICATED", "false")],
            "loopback-only",
        ),
    ];
    for (extra, env, mode) in cases {
        let server = Process::serve_with_env(&db.url, extra, env);
        let warning = server
            .transcript()
            .iter()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .find(|event| event["mode"].is_string())
            .unwrap_or_else(|| panic!("{extra:?} {env:?}: no mode in {:#?}", server.transcript()));
        assert_eq!(warning["mode"], mode, "{extra:?} {env:?}: {warning}");
        assert_eq!(warning["level"], "WARN", "{warning}");
        let message = warning["message"].as_str().unwrap();
        let hints: &[&str] = match mode {
            "open" => &["anyone", "tenant \"default\""],
            _ => &[
                "loopback",
                "--api-keys",
                "--api-keys-file",
                "--allow-unauthenticated",
            ],
        };
        for hint in hints {
            assert!(message.contains(hint), "{message}");
        }
    }

    let server = Process::serve(&db.url, &[]);
    let endpoint = format!("http://{}", server.grpc);
    let output = tokio::task::spawn_blocking(move || {
        let mut send = Command::new(BINARY)
            .args(["send", "--endpoint", &endpoint])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .env_remove("LOGHAUL_API_KEY")
            .spawn()
            .unwrap();
        use std::io::Write;
        send.stdin
            .take()
            .unwrap()
            .write_all(b"card declined\n")
            .unwrap();
        send.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert_success(&output);
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("accepted 1 rejected 0"),
        "{output:?}"
    );
}
