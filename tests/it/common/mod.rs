//! Shared harness for the end-to-end tests: a real server on ephemeral ports over a real database.
//!
//! PostgreSQL tests connect to `LOGHAUL_TEST_POSTGRES_URL` (default: the local server as `postgres`,
//! then as `root`, database `test`), create a database of their own and drop it afterwards. When no
//! PostgreSQL answers they print a loud SKIPPED line, unless `LOGHAUL_REQUIRE_POSTGRES=1` (CI sets
//! it), in which case they fail.
//!
//! When that server is a Citus coordinator (its database has the `citus` extension), each test's
//! database is made a cluster of its own: created on the coordinator and on every worker it
//! lists, with the extension in each and the workers added, so the service distributes its
//! tables as it would in production. `LOGHAUL_REQUIRE_CITUS=1` fails a test whose server is not
//! Citus, so a Citus run cannot quietly test one server.

pub mod held_lock;
pub mod http;
pub mod process;
pub mod proxy;
pub mod raw_grpc;
pub mod slow_read;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use loghaul::config::ServeConfig;
use loghaul::proto::v1::log_ingest_client::LogIngestClient;
use loghaul::proto::v1::log_query_client::LogQueryClient;
use loghaul::proto::v1::{
    Filter, LogRecord, PushRequest, PushResponse, QueryRequest, StoredRecord, TailResponse,
};
use sqlx::{Connection, Row};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

/// Which database a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A database created for one test and removed when it is dropped.
pub struct TestDb {
    pub backend: Backend,
    pub url: String,
    admin_url: Option<String>,
    /// A Citus cluster's workers (host, port); the test's database is also made on each.
    citus_workers: Vec<(String, i32)>,
    name: String,
    _dir: Option<tempfile::TempDir>,
}

const POSTGRES_CANDIDATES: [&str; 2] = [
    "postgres://postgres@127.0.0.1:5432/test",
    "postgres://root@127.0.0.1:5432/test",
];

async fn postgres_admin_url() -> Option<String> {
    let candidates: Vec<String> = match std::env::var("LOGHAUL_TEST_POSTGRES_URL") {
        Ok(url) => vec![url],
        Err(_) => POSTGRES_CANDIDATES
            .iter()
            .map(|url| url.to_string())
            .collect(),
    };
    for url in candidates {
        if sqlx::PgConnection::connect(&url).await.is_ok() {
            return Some(url);
        }
    }
    None
}

fn with_database(url: &str, database: &str) -> String {
    let (base, _) = url
        .rsplit_once('/')
        .expect("a postgres url names a database");
    format!("{base}/{database}")
}

/// The workers (host, port) of the Citus cluster `admin` is the coordinator of; none when it is a
/// plain server. Panics on a plain server when
/// `LOGHAUL_REQUIRE_CITUS=1`.
async fn citus_workers(admin: &mut sqlx::PgConnection, admin_url: &str) -> Vec<(String, i32)> {
    let citus: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")
            .fetch_one(&mut *admin)
            .await
            .unwrap();
    if !citus {
        assert!(
            std::env::var("LOGHAUL_REQUIRE_CITUS").as_deref() != Ok("1"),
            "Citus is required (LOGHAUL_REQUIRE_CITUS=1) but {admin_url} has no citus extension"
        );
        return Vec::new();
    }
    let workers: Vec<(String, i32)> = sqlx::query_as(
        "SELECT nodename::text, nodeport FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary' ORDER BY nodeport",
    )
    .fetch_all(admin)
    .await
    .unwrap();
    assert!(
        !workers.is_empty(),
        "the Citus coordinator {admin_url} lists no workers"
    );
    workers
}

/// `url` with its host and port replaced.
fn with_host(url: &str, host_port: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a url has a scheme");
    let (user, rest) = rest
        .rsplit_once('@')
        .map_or(("", rest), |(user, rest)| (user, rest));
    let path = rest.find('/').map_or("", |at| &rest[at..]);
    let at = if user.is_empty() { "" } else { "@" };
    format!("{scheme}://{user}{at}{host_port}{path}")
}

impl TestDb {
    /// Makes the test's database a Citus cluster: the database and the extension on every
    /// worker, the extension on the coordinator, which is told its own address, and the workers
    /// added to it.
    async fn form_citus_cluster(&self) {
        // Adding a node updates catalogs the worker shares among its databases: two tests adding
        // the same worker at once fail with "tuple concurrently updated".
        static FORMING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _one_at_a_time = FORMING.lock().await;
        let admin_url = self.admin_url.as_deref().expect("a PostgreSQL database");
        for (host, port) in &self.citus_workers {
            let worker = with_host(admin_url, &format!("{host}:{port}"));
            let mut admin = sqlx::PgConnection::connect(&worker).await.unwrap();
            sqlx::query(&format!("CREATE DATABASE {}", self.name))
                .execute(&mut admin)
                .await
                .unwrap();
            let mut conn = sqlx::PgConnection::connect(&with_database(&worker, &self.name))
                .await
                .unwrap();
            sqlx::query("CREATE EXTENSION citus")
                .execute(&mut conn)
                .await
                .unwrap();
        }
        let (host, port): (String, i32) =
            sqlx::query_as("SELECT nodename::text, nodeport FROM pg_dist_node WHERE groupid = 0")
                .fetch_one(&mut sqlx::PgConnection::connect(admin_url).await.unwrap())
                .await
                .unwrap();
        let mut conn = sqlx::PgConnection::connect(&self.url).await.unwrap();
        sqlx::query("CREATE EXTENSION citus")
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("SELECT citus_set_coordinator_host($1, $2)")
            .bind(host)
            .bind(port)
            .execute(&mut conn)
            .await
            .unwrap();
        for (host, port) in &self.citus_workers {
            sqlx::query("SELECT citus_add_node($1, $2)")
                .bind(host)
                .bind(port)
                .execute(&mut conn)
                .await
                .unwrap();
        }
    }

    /// Drops the test's database, then `role` on every node (a Citus worker has its own copy of
    /// the role, which a drop on the coordinator outside the test's database leaves behind).
    pub async fn drop_with_role(self, role: &str) {
        let admin_url = self.admin_url.clone().expect("a PostgreSQL database");
        let nodes: Vec<String> = std::iter::once(admin_url.clone())
            .chain(
                self.citus_workers
                    .iter()
                    .map(|(host, port)| with_host(&admin_url, &format!("{host}:{port}"))),
            )
            .collect();
        drop(self);
        for node in nodes {
            let mut admin = sqlx::PgConnection::connect(&node).await.unwrap();
            sqlx::query(&format!("DROP ROLE IF EXISTS {role}"))
                .execute(&mut admin)
                .await
                .unwrap();
        }
    }

    /// True when the test's database is a Citus cluster.
    pub fn is_citus(&self) -> bool {
        !self.citus_workers.is_empty()
    }

    /// True (after a loud line saying `why`) when the test's database is a Citus cluster and the
    /// test is one server's only.
    pub fn skipped_on_citus(&self, test: &str, why: &str) -> bool {
        if !self.is_citus() {
            return false;
        }
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "*** SKIPPED {test} on Citus: {why} ***");
        true
    }

    /// A fresh, empty database; `None` (after a loud message) when PostgreSQL is not reachable
    /// and not required.
    pub async fn create(backend: Backend, test: &str) -> Option<TestDb> {
        let name = format!("loghaul_{}_{}", test, fastrand::u32(..));
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let url = format!("sqlite://{}", dir.path().join("logs.db").display());
                Some(TestDb {
                    backend,
                    url,
                    admin_url: None,
                    citus_workers: Vec::new(),
                    name,
                    _dir: Some(dir),
                })
            }
            Backend::Postgres => {
                let Some(admin_url) = postgres_admin_url().await else {
                    if std::env::var("LOGHAUL_REQUIRE_POSTGRES").as_deref() == Ok("1") {
                        panic!(
                            "PostgreSQL is required (LOGHAUL_REQUIRE_POSTGRES=1) but not reachable"
                        );
                    }
                    // Written to the stderr handle directly: the test harness captures eprintln!
                    // of passing tests, and a skip must be seen.
                    use std::io::Write;
                    let _ = writeln!(
                        std::io::stderr(),
                        "*** SKIPPED {test} on PostgreSQL: no server answers (set LOGHAUL_TEST_POSTGRES_URL, or LOGHAUL_REQUIRE_POSTGRES=1 to fail instead) ***"
                    );
                    return None;
                };
                let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
                let citus_workers = citus_workers(&mut admin, &admin_url).await;
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut admin)
                    .await
                    .unwrap();
                let url = with_database(&admin_url, &name);
                let db = TestDb {
                    backend,
                    url,
                    admin_url: Some(admin_url),
                    citus_workers,
                    name,
                    _dir: None,
                };
                if db.is_citus() {
                    db.form_citus_cluster().await;
                }
                Some(db)
            }
        }
    }

    /// Rows in `logs`.
    pub async fn count(&self) -> i64 {
        self.query_scalar("SELECT count(*) FROM logs").await
    }

    /// One number from a query.
    pub async fn query_scalar(&self, sql: &str) -> i64 {
        match self.backend {
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
                sqlx::query(sql).fetch_one(&mut conn).await.unwrap().get(0)
            }
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&self.url).await.unwrap();
                sqlx::query(sql).fetch_one(&mut conn).await.unwrap().get(0)
            }
        }
    }

    /// Runs one statement (DDL, say) on the database.
    pub async fn execute(&self, sql: &str) {
        match self.backend {
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
                sqlx::query(sql).execute(&mut conn).await.unwrap();
            }
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&self.url).await.unwrap();
                sqlx::query(sql).execute(&mut conn).await.unwrap();
            }
        }
    }

    /// Every stored row, as the fields a client sent (its stream's labels and its own attributes
    /// in one map), ordered by message.
    pub async fn stored(&self) -> Vec<StoredRow> {
        let sql_pg = "SELECT tenant, (extract(epoch from ts) * 1000000)::bigint AS ts_micros, severity, service, message, (labels || attributes)::text AS attributes, encode(trace_id_bytes, 'hex') AS trace_id, encode(span_id_bytes, 'hex') AS span_id FROM logs ORDER BY message";
        let sql_lite = "SELECT tenant, ts AS ts_micros, severity, service, message, json_patch(labels, attributes) AS attributes, trace_id, span_id FROM logs ORDER BY message";
        macro_rules! collect {
            ($conn:expr, $sql:expr) => {
                sqlx::query($sql)
                    .fetch_all(&mut $conn)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|row| StoredRow {
                        tenant: row.get("tenant"),
                        ts_micros: row.get("ts_micros"),
                        severity: i64::from(row.get::<i16, _>("severity")),
                        service: row.get("service"),
                        message: row.get("message"),
                        attributes: serde_json::from_str(row.get::<&str, _>("attributes")).unwrap(),
                        trace_id: row.get("trace_id"),
                        span_id: row.get("span_id"),
                    })
                    .collect()
            };
        }
        match self.backend {
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
                collect!(conn, sql_lite)
            }
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&self.url).await.unwrap();
                collect!(conn, sql_pg)
            }
        }
    }
}

impl Drop for TestDb {
    /// Drops the test's PostgreSQL database, even when the test panicked. Drop cannot await, so a
    /// short-lived thread with its own runtime does it.
    fn drop(&mut self) {
        let Some(admin_url) = self.admin_url.take() else {
            return;
        };
        let name = self.name.clone();
        // The coordinator first: its sessions hold connections to the workers' databases.
        let workers = self
            .citus_workers
            .drain(..)
            .map(|(host, port)| with_host(&admin_url, &format!("{host}:{port}")));
        let admins: Vec<String> = std::iter::once(admin_url.clone()).chain(workers).collect();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                for admin_url in admins {
                    let mut admin = sqlx::PgConnection::connect(&admin_url).await?;
                    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut admin)
                        .await?;
                }
                Ok::<(), sqlx::Error>(())
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("warning: could not drop test database {}", self.name);
        }
    }
}

/// A row read back from `logs`.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRow {
    pub tenant: String,
    pub ts_micros: i64,
    pub severity: i64,
    pub service: String,
    pub message: String,
    pub attributes: serde_json::Value,
    pub trace_id: Option<String>,
    pub span_id: Option<String>,
}

/// A store on the test's database, with its schema in place.
pub async fn migrated(db: &TestDb) -> loghaul::storage::Store {
    let store = loghaul::storage::Store::connect(
        &db.url,
        loghaul::storage::PoolOptions {
            max_connections: 2,
            acquire_timeout: Duration::from_secs(5),
        },
    )
    .await
    .unwrap();
    store.migrate().await.unwrap();
    store
}

/// Pushes `total` records `msg-000000`… into `shipper` on a thread of its own, pausing 10 ms every
/// 500, so that a run lasts long enough for what a test does in its middle.
pub fn push_paced(shipper: &loghaul::client::Shipper, total: usize) -> std::thread::JoinHandle<()> {
    let shipper = shipper.clone();
    std::thread::spawn(move || {
        for n in 0..total {
            shipper.push(record(format!("msg-{n:06}"))).unwrap();
            if n % 500 == 0 {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    })
}

/// Options with test-friendly defaults: loopback listeners, two shards, short linger.
pub fn config(db: &TestDb) -> ServeConfig {
    let mut config = ServeArgs::parse_from(["serve"]).serve;
    config.storage.database_url = db.url.clone();
    config.pipeline.shards = 2;
    config.pipeline.batch_linger = "20ms".parse().unwrap();
    config.shutdown_grace = "5s".parse().unwrap();
    config
}

#[derive(Parser)]
struct ServeArgs {
    #[command(flatten)]
    serve: ServeConfig,
}

/// A server running in this process.
pub struct TestServer {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    /// The console and its JSON API.
    pub console: SocketAddr,
    /// HTTP ingest: OTLP/HTTP and the Loki push API.
    pub http_ingest: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), loghaul::serve::ServeError>>,
}

impl TestServer {
    /// Starts `loghaul::serve::run` on ephemeral loopback ports and waits until it answers.
    pub async fn start(config: ServeConfig) -> TestServer {
        let grpc_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let console_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc = grpc_listener.local_addr().unwrap();
        let http = http_listener.local_addr().unwrap();
        let console = console_listener.local_addr().unwrap();
        let ingest_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http_ingest = ingest_listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let listeners = loghaul::serve::Listeners {
            grpc: grpc_listener,
            http: http_listener,
            console: Some(console_listener),
            http_ingest: Some(ingest_listener),
        };
        let task = tokio::spawn(loghaul::serve::run(config, listeners, async move {
            let _ = stopped.await;
        }));
        let server = TestServer {
            grpc,
            http,
            console,
            http_ingest,
            stop: Some(stop),
            task,
        };
        server.wait_ready().await;
        server
    }

    async fn wait_ready(&self) {
        wait_until("the server to become ready", DEADLINE, async || {
            matches!(http_get(self.http, "/readyz").await, Ok((200, _)))
        })
        .await;
    }

    /// A client on a fresh connection.
    pub async fn client(&self) -> LogIngestClient<Channel> {
        LogIngestClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap()
    }

    /// A query client on a fresh connection.
    pub async fn query_client(&self) -> LogQueryClient<Channel> {
        LogQueryClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap()
    }

    /// A tail of every record of the default tenant, on a fresh connection, started.
    pub async fn tail_everything(&self) -> tonic::Streaming<loghaul::proto::v1::TailResponse> {
        self.query_client()
            .await
            .tail(loghaul::proto::v1::TailRequest::default())
            .await
            .unwrap()
            .into_inner()
    }

    /// The Prometheus text of /metrics: this server's series alone, from its own registry.
    pub async fn metrics(&self) -> String {
        http_get(self.http, "/metrics").await.unwrap().1
    }

    /// Asks the server to shut down (as SIGTERM does) without waiting.
    pub fn request_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Shuts down and waits for the drain to finish.
    pub async fn stop(mut self) {
        self.request_shutdown();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the server stops within 30 s")
            .expect("the server task does not panic")
            .expect("the server stops cleanly");
    }
}

/// How long a test waits for something that should happen soon: generous, so that a slow or busy
/// machine passes, since a wait ends as soon as its condition holds.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Polls `condition` every 20 ms until it holds; panics naming `what` when it still does not
/// after `deadline`. What a test waits for (a tail connected, a queue full, rows stored) is
/// observed, never assumed after a sleep.
pub async fn wait_until(what: &str, deadline: Duration, mut condition: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !condition().await {
        assert!(
            started.elapsed() < deadline,
            "waited {deadline:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The value of one series (name and labels exactly as rendered) in Prometheus text; 0 when the
/// series is absent, as Prometheus reads a counter never incremented.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|line| line.starts_with(series) && line[series.len()..].starts_with(' '))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or(0.0)
}

/// The sum of every series of the metric `name`, whatever their labels.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A minimal HTTP/1.0 GET, enough for the probes and /metrics.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: loghaul\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// An HTTP answer: status, headers (names in lower case) and body.
#[derive(Debug)]
pub struct HttpAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpAnswer {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`), the body sent whole with
/// its length: enough to speak to the HTTP ingest listener as an exporter would.
pub async fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<HttpAnswer> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    // What curl and the exporters send, unless the test names another.
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let split = response
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of headers in the answer"))?;
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let mut body = response[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(name, value)| name == "transfer-encoding" && value.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Ok(HttpAnswer {
        status,
        headers,
        body,
    })
}

/// The payload of a chunked body.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = body.windows(2).position(|window| window == b"\r\n") {
        let size = std::str::from_utf8(&body[..end])
            .ok()
            .and_then(|text| usize::from_str_radix(text.split(';').next()?.trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 || body.len() < end + 2 + size {
            break;
        }
        out.extend_from_slice(&body[end + 2..end + 2 + size]);
        body = &body[(end + 4 + size).min(body.len())..];
    }
    out
}

/// A loopback address no one listens on now (bound, then released), for a server started later.
pub fn free_address() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A realistic record whose message is `message`.
pub fn record(message: impl Into<String>) -> LogRecord {
    let now = chrono::Utc::now();
    LogRecord {
        timestamp: Some(prost_types::Timestamp {
            seconds: now.timestamp(),
            nanos: now.timestamp_subsec_micros() as i32 * 1000,
        }),
        severity: 9,
        service: "checkout".into(),
        message: message.into(),
        attributes: [("region".to_string(), "eu-west-1".to_string())].into(),
        trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        span_id: "00f067aa0ba902b7".into(),
    }
}

/// Sends the chunks as one Push stream and returns the server's answer.
pub async fn push(
    client: &mut LogIngestClient<Channel>,
    chunks: Vec<Vec<LogRecord>>,
) -> Result<PushResponse, tonic::Status> {
    push_as(client, "", chunks).await
}

/// A Push request of `count` records with messages `{tag}-0`, `{tag}-1`…
pub fn chunk(tag: &str, count: usize) -> PushRequest {
    PushRequest {
        records: (0..count).map(|n| record(format!("{tag}-{n}"))).collect(),
        ..Default::default()
    }
}

/// A Push stream fed through the returned sender, buffering `capacity` chunks; the task ends with
/// the server's answer once the sender is dropped or the server ends the stream.
pub fn open_push(
    mut client: LogIngestClient<Channel>,
    capacity: usize,
) -> (
    tokio::sync::mpsc::Sender<PushRequest>,
    JoinHandle<Result<PushResponse, tonic::Status>>,
) {
    let (chunks, outgoing) = tokio::sync::mpsc::channel(capacity);
    let answer = tokio::spawn(async move {
        client
            .push(tokio_stream::wrappers::ReceiverStream::new(outgoing))
            .await
            .map(tonic::Response::into_inner)
    });
    (chunks, answer)
}

/// `message` wrapped in a request carrying `key` as `x-api-key` (none when `key` is empty).
pub fn with_key<T>(key: &str, message: T) -> tonic::Request<T> {
    let key = (!key.is_empty()).then_some(key);
    loghaul::proto::api_key::request_with_key(message, key).unwrap()
}

/// Sends the chunks as one Push stream with an API key.
pub async fn push_as(
    client: &mut LogIngestClient<Channel>,
    key: &str,
    chunks: Vec<Vec<LogRecord>>,
) -> Result<PushResponse, tonic::Status> {
    let requests = chunks.into_iter().map(|records| PushRequest {
        records,
        ..Default::default()
    });
    client
        .push(with_key(key, tokio_stream::iter(requests)))
        .await
        .map(tonic::Response::into_inner)
}

/// Every record matching `filter` for the key's tenant, following cursors with pages of `page_size`.
pub async fn query_all(
    client: &mut LogQueryClient<Channel>,
    key: &str,
    filter: Filter,
    page_size: u32,
) -> Result<Vec<StoredRecord>, tonic::Status> {
    let mut records = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = client
            .query(with_key(
                key,
                QueryRequest {
                    filter: Some(filter.clone()),
                    page_size,
                    cursor,
                },
            ))
            .await?
            .into_inner();
        records.extend(page.records);
        if page.next_cursor.is_empty() {
            return Ok(records);
        }
        cursor = page.next_cursor;
    }
}

/// Reads a Tail to its end: the records it still brought, and the status it ended with. Panics
/// when it ends without one, or sends nothing for `DEADLINE`.
pub async fn read_tail_to_status(
    tail: &mut tonic::Streaming<TailResponse>,
) -> (usize, tonic::Status) {
    let mut received = 0;
    loop {
        match tokio::time::timeout(DEADLINE, tail.message())
            .await
            .expect("the tail ends")
        {
            Ok(Some(message)) => received += message.records.len(),
            Ok(None) => panic!("the tail ended without a status"),
            Err(status) => return (received, status),
        }
    }
}

/// A record stamped `age` ago.
pub fn record_at(message: impl Into<String>, age: Duration) -> LogRecord {
    let ts = chrono::Utc::now() - chrono::TimeDelta::from_std(age).unwrap();
    let mut record = record(message);
    record.timestamp = Some(prost_types::Timestamp {
        seconds: ts.timestamp(),
        nanos: ts.timestamp_subsec_micros() as i32 * 1000,
    });
    record
}

/// Runs a test body on SQLite and, when reachable, PostgreSQL: a module `$name` with the tests
/// `sqlite` and `postgres`.
macro_rules! on_both_backends {
    ($name:ident, $body:ident) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                if let Some(db) = $crate::common::TestDb::create(
                    $crate::common::Backend::Sqlite,
                    stringify!($name),
                )
                .await
                {
                    $body(&db).await;
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if let Some(db) = $crate::common::TestDb::create(
                    $crate::common::Backend::Postgres,
                    stringify!($name),
                )
                .await
                {
                    $body(&db).await;
                }
            }
        }
    };
}
