//! The real binary as a child process, for tests that signal it, measure its memory, or check
//! what the binary itself serves.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BINARY: &str = env!("CARGO_BIN_EXE_loghaul");

/// Loopback with a port the system picks.
pub const EPHEMERAL: &str = "127.0.0.1:0";

/// Fails the test, showing what the command printed, unless it exited successfully.
pub fn assert_success(output: &Output) {
    assert!(
        output.status.success(),
        "{:?}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `loghaul serve` with gRPC, metrics and HTTP ingest on ephemeral loopback ports, the console off, and no API
/// keys (nor --allow-unauthenticated) taken from the developer's environment.
pub fn serve_command() -> Command {
    serve_command_at(EPHEMERAL, "off")
}

/// Like [`serve_command`], with gRPC on `listen` and the console on `console` (flags given twice
/// are refused, so these two are chosen here rather than appended).
pub fn serve_command_at(listen: &str, console: &str) -> Command {
    let mut command = Command::new(BINARY);
    command
        .args(["serve", "--listen", listen, "--metrics-listen", EPHEMERAL])
        .args(["--console-listen", console, "--http-listen", EPHEMERAL])
        .env_remove("LOGHAUL_API_KEYS")
        .env_remove("LOGHAUL_ALLOW_UNAUTHENTICATED")
        .env_remove("LOGHAUL_ALLOW_ORG_ID_TENANTS");
    command
}

/// A `loghaul serve` process on ephemeral ports; killed on drop if still running.
pub struct Process {
    child: Child,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub console: SocketAddr,
    /// HTTP ingest: OTLP/HTTP and the Loki push API.
    pub http_ingest: SocketAddr,
    lines: std::sync::mpsc::Receiver<String>,
    transcript: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// How long a test waits for a log line: a migration on a Citus cluster of a busy machine takes
/// tens of seconds, and a server that exits is seen at once.
const LOG_WAIT: Duration = Duration::from_secs(60);

impl Process {
    /// Starts `loghaul serve` on `database_url` with `extra` flags, and two shards unless `extra`
    /// says how many.
    pub fn serve(database_url: &str, extra: &[&str]) -> Process {
        Process::spawn(EPHEMERAL, database_url, extra, &[])
    }

    /// Like [`Process::serve`], with gRPC on `listen` (a fixed port survives a restart).
    pub fn serve_at(listen: &str, database_url: &str, extra: &[&str]) -> Process {
        Process::spawn(listen, database_url, extra, &[])
    }

    /// As [`Process::serve`], with environment variables; stdout and stderr are both captured.
    pub fn serve_with_env(database_url: &str, extra: &[&str], env: &[(&str, &str)]) -> Process {
        Process::spawn(EPHEMERAL, database_url, extra, env)
    }

    fn spawn(listen: &str, database_url: &str, extra: &[&str], env: &[(&str, &str)]) -> Process {
        let shards: &[&str] = if extra.contains(&"--shards") {
            &[]
        } else {
            &["--shards", "2"]
        };
        let mut child = serve_command_at(listen, EPHEMERAL)
            .args(["--database-url", database_url, "--log-format", "json"])
            .args(shards)
            .args(extra)
            .envs(env.iter().copied())
            .stderr(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the binary starts");
        let (sender, lines) = std::sync::mpsc::channel();
        let transcript = std::sync::Arc::default();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        forward_lines(stdout, sender.clone(), std::sync::Arc::clone(&transcript));
        forward_lines(stderr, sender, std::sync::Arc::clone(&transcript));
        let mut process = Process {
            child,
            grpc: "0.0.0.0:0".parse().unwrap(),
            http: "0.0.0.0:0".parse().unwrap(),
            console: "0.0.0.0:0".parse().unwrap(),
            http_ingest: "0.0.0.0:0".parse().unwrap(),
            lines,
            transcript,
        };
        let serving = process.wait_for_log("loghaul is serving");
        let addr = |field: &str| serving[field].as_str().unwrap().parse().unwrap();
        process.grpc = addr("grpc");
        process.http = addr("http");
        process.console = addr("console");
        process.http_ingest = addr("http_ingest");
        process
    }

    /// Waits up to [`LOG_WAIT`] for a JSON log event with this message and returns it.
    pub fn wait_for_log(&mut self, message: &str) -> serde_json::Value {
        let deadline = Instant::now() + LOG_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = self.lines.recv_timeout(left) else {
                self.fail_waiting_for(message);
            };
            let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if event["message"] == message {
                return event;
            }
        }
    }

    /// Fails the test, saying whether the server still runs and what it logged last, so that a
    /// start-up that failed reads differently from one that was slow.
    fn fail_waiting_for(&mut self, message: &str) -> ! {
        let state = match self.child.try_wait() {
            Ok(Some(status)) => format!("it exited with {status}"),
            _ => format!("it still runs after {LOG_WAIT:?}"),
        };
        let transcript = self.transcript();
        let last = &transcript[transcript.len().saturating_sub(20)..];
        panic!(
            "the server did not log {message:?}: {state}; its last lines:\n{}",
            last.join("\n")
        );
    }

    /// The Prometheus text of this process's /metrics.
    pub async fn metrics(&self) -> String {
        super::http_get(self.http, "/metrics").await.unwrap().1
    }

    /// Sends a signal by name (TERM, KILL…).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the exit, failing the test after `limit`.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        exit_status_within(&mut self.child, limit)
            .unwrap_or_else(|| panic!("the server did not exit within {limit:?}"))
    }

    /// Everything the process wrote to stdout and stderr so far.
    pub fn transcript(&self) -> Vec<String> {
        self.transcript.lock().unwrap().clone()
    }

    /// What the server logged since the last call.
    pub fn logs(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }
}

impl Process {
    /// Resident memory now and at its peak, in bytes, from /proc.
    pub fn rss(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let field = |name: &str| -> u64 {
            let line = status.lines().find(|line| line.starts_with(name)).unwrap();
            line.split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<u64>()
                .unwrap()
                * 1024
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

/// Waits up to `limit` for `child` to exit: its status, or `None` if it still runs.
pub fn exit_status_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if started.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` to exit and returns its output, failing the test with `expectation` after
/// `limit`.
pub async fn output_within(child: Child, limit: Duration, expectation: &str) -> Output {
    tokio::time::timeout(
        limit,
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    .expect(expectation)
    .unwrap()
    .unwrap()
}

fn forward_lines(
    output: impl std::io::Read + Send + 'static,
    sender: std::sync::mpsc::Sender<String>,
    transcript: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            transcript.lock().unwrap().push(line.clone());
            let _ = sender.send(line);
        }
    });
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
