//! `loghaul send --follow` as a real process: a growing file is shipped as it grows, across a
//! rename-and-recreate rotation and a truncation, each line exactly once; SIGTERM flushes and
//! prints the summary.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::process::{assert_success, output_within, Process, BINARY};
use crate::common::{wait_until, Backend, TestDb, DEADLINE};

fn append(path: &std::path::Path, lines: std::ops::Range<usize>) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for n in lines {
        writeln!(file, "line {n:05}").unwrap();
    }
}

async fn wait_for_count(db: &TestDb, expected: i64) {
    let what = format!("{expected} rows stored");
    wait_until(&what, Duration::from_secs(60), async || {
        let count = db.count().await;
        assert!(
            count <= expected,
            "{count} rows stored, {expected} expected"
        );
        count == expected
    })
    .await;
}

/// Where the process `pid` is in its open file `path`, from /proc (`None` while it has no such
/// file open).
fn read_position(pid: u32, path: &std::path::Path) -> Option<u64> {
    let path = path.canonicalize().ok()?;
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()? {
        let fd = fd.ok()?;
        if std::fs::read_link(fd.path()).ok()? != path {
            continue;
        }
        let info =
            std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_str()?))
                .ok()?;
        return info
            .lines()
            .find_map(|line| line.strip_prefix("pos:"))
            .and_then(|pos| pos.trim().parse().ok());
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_survives_rotation_and_truncation() {
    let db = TestDb::create(Backend::Sqlite, "send_follow")
        .await
        .unwrap();
    let server = Process::serve(&db.url, &[]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    append(&log, 0..100);
    let sender = Command::new(BINARY)
        .args([
            "send",
            "--follow",
            "--poll-interval",
            "50ms",
            "--service",
            "app",
        ])
        .args(["--endpoint", &format!("http://{}", server.grpc)])
        .arg(&log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_count(&db, 100).await;

    append(&log, 100..250);
    wait_for_count(&db, 250).await;

    // Rotation: renamed away, a last line still written to the old file, then a new file.
    let mut old = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::fs::rename(&log, dir.path().join("app.log.1")).unwrap();
    writeln!(old, "line {:05}", 250).unwrap();
    drop(old);
    // The line written after the rename is read from the old file while no new one exists.
    wait_for_count(&db, 251).await;
    append(&log, 251..300);
    wait_for_count(&db, 300).await;

    // Truncation in place, seen by the sender (it reads from the start again), then new lines.
    std::fs::write(&log, "").unwrap();
    wait_until(
        "the sender to read the truncated file from its start",
        DEADLINE,
        async || read_position(sender.id(), &log) == Some(0),
    )
    .await;
    append(&log, 300..320);
    wait_for_count(&db, 320).await;

    let status = Command::new("kill")
        .args(["-TERM", &sender.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = output_within(sender, DEADLINE, "send exits on SIGTERM").await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_success(&output);
    assert_eq!(stdout.trim(), "accepted 320 rejected 0");
    assert_eq!(
        db.query_scalar("SELECT count(DISTINCT message) FROM logs WHERE service = 'app'")
            .await,
        320
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_fails_after_the_flush_timeout_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    append(&log, 0..10);
    let nobody = common::free_address();
    let started = Instant::now();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(BINARY)
            .args(["send", "--flush-timeout", "2s"])
            .args(["--endpoint", &format!("http://{nobody}")])
            .arg(&log)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("10 records not stored") && stderr.contains("connect"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "gave up after the flush timeout"
    );
}
