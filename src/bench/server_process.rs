//! A `loghaul serve` child process started by the benchmark, so its memory is measured alone and
//! it competes for the CPU the way a real deployment does.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running server.
pub(crate) struct ServerProcess {
    child: Child,
    /// gRPC address.
    pub grpc: String,
    /// Metrics address.
    pub http: String,
    /// HTTP ingest address (OTLP/HTTP, Loki push), or `off`.
    pub http_ingest: String,
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerProcessError {
    /// The binary could not be run.
    #[error("cannot start the server: {0}")]
    Spawn(#[from] std::io::Error),
    /// It exited or never said it was serving.
    #[error("the server did not start: {0}")]
    NotServing(String),
}

impl ServerProcess {
    /// Starts this binary as `serve` on ephemeral loopback ports with `extra` arguments.
    pub(crate) fn start(database_url: &str, extra: &[String]) -> Result<Self, ServerProcessError> {
        Self::start_listening("127.0.0.1:0", database_url, extra)
    }

    /// Starts this binary as `serve` with gRPC on `listen` (metrics and HTTP ingest on ephemeral
    /// ports).
    pub(crate) fn start_listening(
        listen: &str,
        database_url: &str,
        extra: &[String],
    ) -> Result<Self, ServerProcessError> {
        let binary = std::env::current_exe()?;
        let mut child = Command::new(binary)
            .args([
                "serve",
                "--listen",
                listen,
                "--metrics-listen",
                "127.0.0.1:0",
                // The benchmark needs no console, and must not take a port someone else uses.
                "--console-listen",
                "off",
                "--http-listen",
                "127.0.0.1:0",
            ])
            .args(["--log-format", "json", "--database-url", database_url])
            .args(extra)
            .env("RUST_LOG", "warn,loghaul::serve=info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let (sender, lines) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            // Keep draining so the server never blocks on a full pipe; forward warnings.
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("\"WARN\"") || line.contains("\"ERROR\"") {
                    eprintln!("server: {line}");
                }
                let _ = sender.send(line);
            }
        });
        loop {
            let line = match lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => line,
                Err(_) => {
                    let _ = child.kill();
                    return Err(ServerProcessError::NotServing(
                        "no \"loghaul is serving\" line within 60 s".into(),
                    ));
                }
            };
            let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if event["message"] == "loghaul is serving" {
                let field = |name: &str| event[name].as_str().unwrap_or_default().to_owned();
                return Ok(ServerProcess {
                    grpc: field("grpc"),
                    http: field("http"),
                    http_ingest: field("http_ingest"),
                    child,
                });
            }
            if event["level"] == "ERROR" {
                let _ = child.kill();
                return Err(ServerProcessError::NotServing(line));
            }
        }
    }

    /// The most memory the process has held so far (VmHWM), where /proc exists.
    pub(crate) fn peak_rss_bytes(&self) -> Option<u64> {
        peak_rss_of(self.child.id())
    }

    /// CPU time (user and system) the process has used so far, where /proc exists.
    pub(crate) fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // After the command name in parentheses (which may hold spaces): state is field 3, utime
        // and stime are fields 14 and 15.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // SAFETY: sysconf reads a constant of the system; no memory is involved.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (per_second > 0).then(|| ticks as f64 / per_second as f64)
    }

    /// SIGTERM, then waits for a clean exit.
    pub(crate) fn stop(mut self) -> Result<(), ServerProcessError> {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) with a pid this process spawned and still owns; no memory is involved.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let status = self.child.wait()?;
        if status.success() {
            Ok(())
        } else {
            Err(ServerProcessError::NotServing(format!(
                "the server exited with {status}"
            )))
        }
    }
}

impl ServerProcess {
    /// SIGKILL: no drain, no goodbye; waits until the process is gone.
    pub(crate) fn kill(mut self) -> Result<(), ServerProcessError> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// VmHWM of a process, in bytes.
pub(crate) fn peak_rss_of(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmHWM:").map(|kib| kib * 1024)
}

fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
