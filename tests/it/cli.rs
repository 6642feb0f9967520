//! The real binary: API keys reloaded on SIGHUP and when the keys file changes, `loghaul query` /
//! `loghaul tail` output, `loghaul bench`'s paced runs, and `loghaul bench-query` on a small table.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::process::{assert_success, output_within, serve_command, Process, BINARY};
use crate::common::{metric, push_as, record, wait_until, Backend, TestDb, DEADLINE};
use loghaul::proto::v1::log_ingest_client::LogIngestClient;
use tonic::Code;

/// The `message` of every JSON line a command printed.
fn json_messages(stdout: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            record["message"].as_str().unwrap().to_owned()
        })
        .collect()
}

async fn push_code(client: &mut LogIngestClient<tonic::transport::Channel>, key: &str) -> Code {
    match push_as(client, key, vec![vec![record(format!("with {key}"))]]).await {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_keys_file_and_a_bad_file_changes_nothing() {
    let db = TestDb::create(Backend::Sqlite, "sighup").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    std::fs::write(&keys, "[keys]\nkey-one = \"team-a\"\n").unwrap();
    // Only the signal reloads here; a change of the file alone is the next test's.
    let (mut server, mut client) = serve_with_key_one(&db, &keys, "0s").await;

    // Rotate: key-two in, key-one out.
    std::fs::write(&keys, "[keys]\nkey-two = \"team-a\"\n").unwrap();
    server.signal("HUP");
    let reloaded = server.wait_for_log("API keys reloaded");
    assert_eq!(reloaded["keys"], 1);
    assert_eq!(push_code(&mut client, "key-two").await, Code::Ok);
    assert_eq!(
        push_code(&mut client, "key-one").await,
        Code::Unauthenticated
    );

    // A broken file, or one with no keys (which would open the service), keeps the keys in force.
    for broken in ["[keys\n", "[keys]\n"] {
        std::fs::write(&keys, broken).unwrap();
        server.signal("HUP");
        let failed = server.wait_for_log("API keys reload failed; the previous keys stay in force");
        assert!(
            !failed.to_string().contains("key-two"),
            "keys are never logged: {failed}"
        );
        assert_eq!(push_code(&mut client, "key-two").await, Code::Ok);
        assert_eq!(push_code(&mut client, "").await, Code::Unauthenticated);
    }
    assert_eq!(
        db.query_scalar("SELECT count(*) FROM logs WHERE tenant = 'team-a'")
            .await,
        4
    );
}

/// The keys directory of a Kubernetes Secret volume: `keys.toml -> ..data/keys.toml`, `..data` a
/// symlink to the current version's directory, swapped by a rename when the Secret changes.
struct SecretVolume {
    dir: std::path::PathBuf,
    version: u32,
}

impl SecretVolume {
    fn create(dir: &std::path::Path, keys: &str) -> SecretVolume {
        let mut volume = SecretVolume {
            dir: dir.to_owned(),
            version: 0,
        };
        volume.update(keys);
        std::os::unix::fs::symlink("..data/keys.toml", dir.join("keys.toml")).unwrap();
        volume
    }

    /// The file the service is given.
    fn path(&self) -> std::path::PathBuf {
        self.dir.join("keys.toml")
    }

    /// Writes a new version and swaps it in, as the kubelet does.
    fn update(&mut self, keys: &str) {
        self.version += 1;
        let version = format!("..v{}", self.version);
        std::fs::create_dir(self.dir.join(&version)).unwrap();
        std::fs::write(self.dir.join(&version).join("keys.toml"), keys).unwrap();
        std::os::unix::fs::symlink(&version, self.dir.join("..data_tmp")).unwrap();
        std::fs::rename(self.dir.join("..data_tmp"), self.dir.join("..data")).unwrap();
        if self.version > 1 {
            std::fs::remove_dir_all(self.dir.join(format!("..v{}", self.version - 1))).unwrap();
        }
    }
}

/// A server whose keys file (holding `key-one` only) is checked every `reload_interval`, and a
/// client for it, after checking that `key-one` is served and `key-two` is not.
async fn serve_with_key_one(
    db: &TestDb,
    keys_file: &std::path::Path,
    reload_interval: &str,
) -> (Process, LogIngestClient<tonic::transport::Channel>) {
    let server = Process::serve(
        &db.url,
        &[
            "--api-keys-file",
            keys_file.to_str().unwrap(),
            "--api-keys-reload-interval",
            reload_interval,
        ],
    );
    let mut client = LogIngestClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    assert_eq!(push_code(&mut client, "key-one").await, Code::Ok);
    assert_eq!(
        push_code(&mut client, "key-two").await,
        Code::Unauthenticated
    );
    (server, client)
}

/// Waits for a push with `key` to end with `code`.
async fn wait_for_code(
    client: &mut LogIngestClient<tonic::transport::Channel>,
    key: &str,
    code: Code,
) {
    let what = format!("a push with {key:?} to end with {code:?}");
    wait_until(&what, DEADLINE, async || {
        push_code(client, key).await == code
    })
    .await;
}

/// Waits until `server` has `count` tails open.
async fn wait_for_tails(server: &Process, count: f64) {
    let what = format!("{count} open tails");
    wait_until(&what, DEADLINE, async || {
        metric(&server.metrics().await, "loghaul_tail_subscribers") == count
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_keys_file_is_reloaded_without_a_signal_or_restart() {
    let db = TestDb::create(Backend::Sqlite, "keys_file_change")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut volume = SecretVolume::create(dir.path(), "[keys]\nkey-one = \"team-a\"\n");
    let path = volume.path();
    let (mut server, mut client) = serve_with_key_one(&db, &path, "100ms").await;

    // Rotate: key-two in, key-one out.
    volume.update("[keys]\nkey-two = \"team-a\"\n");
    wait_for_code(&mut client, "key-two", Code::Ok).await;
    assert_eq!(
        push_code(&mut client, "key-one").await,
        Code::Unauthenticated
    );
    let reloaded = server.wait_for_log("API keys reloaded");
    assert_eq!(reloaded["trigger"], "file_change", "{reloaded}");

    // A broken version is refused once and the keys in force stay.
    volume.update("[keys\n");
    let failed = server.wait_for_log("API keys reload failed; the previous keys stay in force");
    assert_eq!(failed["trigger"], "file_change", "{failed}");
    assert_eq!(push_code(&mut client, "key-two").await, Code::Ok);
    volume.update("[keys]\nkey-three = \"team-b\"\n");
    wait_for_code(&mut client, "key-three", Code::Ok).await;
    wait_for_code(&mut client, "key-two", Code::Unauthenticated).await;
    let logged = server.transcript().join("\n");
    assert_eq!(
        logged.matches("API keys reload failed").count(),
        1,
        "a refused content is not retried at every look: {logged}"
    );
    assert!(!logged.contains("key-t"), "keys are never logged: {logged}");
}

/// A keys file that lists one key twice: the start-up error and the reload log say which line of
/// which table, and never the key (toml's own message quotes it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_file_error_names_its_line_never_the_key() {
    let db = TestDb::create(Backend::Sqlite, "keys_line").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    let key = format!("k-{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
    let listed_twice =
        format!("[keys]\n{key} = \"team-a\"\nkey-one = \"team-a\"\n{key} = \"team-a\"\n");
    let says = "line 4 in [keys]: duplicate key";

    std::fs::write(&keys, &listed_twice).unwrap();
    let failed = serve_command()
        .args(["--database-url", &db.url, "--api-keys-file"])
        .arg(&keys)
        .output()
        .unwrap();
    assert!(!failed.status.success());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains(says), "{stderr}");
    assert!(
        !stderr.contains(&key[..12]),
        "the key is not shown: {stderr}"
    );

    std::fs::write(&keys, "[keys]\nkey-one = \"team-a\"\n").unwrap();
    let (mut server, mut client) = serve_with_key_one(&db, &keys, "0s").await;
    std::fs::write(&keys, &listed_twice).unwrap();
    server.signal("HUP");
    let failed = server.wait_for_log("API keys reload failed; the previous keys stay in force");
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(error.contains(says), "{failed}");
    assert_eq!(push_code(&mut client, "key-one").await, Code::Ok);
    let logged = server.transcript().join("\n");
    assert!(
        !logged.contains(&key[..12]),
        "the key is not logged: {logged}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_and_tail_commands_print_json_lines() {
    let db = TestDb::create(Backend::Sqlite, "cli_read").await.unwrap();
    let server = Process::serve(
        &db.url,
        &["--api-keys", "key-a=team-a", "--tail-poll-interval", "50ms"],
    );
    let endpoint = format!("http://{}", server.grpc);
    let mut client = LogIngestClient::connect(endpoint.clone()).await.unwrap();
    let mut records = Vec::new();
    for n in 0..250 {
        let mut r = record(format!("line {n}"));
        r.severity = if n % 5 == 0 { 17 } else { 9 };
        records.push(r);
    }
    push_as(&mut client, "key-a", vec![records]).await.unwrap();

    let output = Command::new(BINARY)
        .args([
            "query",
            "--endpoint",
            &endpoint,
            "--api-key",
            "key-a",
            "--json",
        ])
        .args(["--min-severity", "error", "--since", "1h", "--limit", "30"])
        .output()
        .unwrap();
    assert_success(&output);
    let lines: Vec<serde_json::Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 30, "--limit follows pages up to 30 (50 match)");
    for line in &lines {
        assert_eq!(line["severity"], 17);
        assert_eq!(line["service"], "checkout");
        assert_eq!(line["attributes"]["region"], "eu-west-1");
        assert!(line["ts"].as_str().unwrap().ends_with('Z'));
        assert_eq!(line["trace_id"].as_str().unwrap().len(), 32);
        assert_eq!(line["span_id"].as_str().unwrap().len(), 16);
    }

    // Human output, and a refusal without a key exits 2 with the reason.
    let output = Command::new(BINARY)
        .args([
            "query",
            "--endpoint",
            &endpoint,
            "--api-key",
            "key-a",
            "--limit",
            "1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.contains("INFO  checkout: line 249 region=eu-west-1"),
        "{text}"
    );
    // A search without --since that reaches its end says how far back the server looked.
    let output = Command::new(BINARY)
        .args(["query", "--endpoint", &endpoint, "--api-key", "key-a"])
        .args(["--service", "no-such-service"])
        .output()
        .unwrap();
    assert_success(&output);
    let note = String::from_utf8_lossy(&output.stderr);
    assert!(
        note.contains("note: searched from") && note.contains("--since"),
        "{note}"
    );
    let output = Command::new(BINARY)
        .args(["query", "--endpoint", &endpoint])
        .env_remove("LOGHAUL_API_KEY")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("missing API key"));

    // `tail --limit 3` prints the next three records and exits.
    let tail = Command::new(BINARY)
        .args([
            "tail",
            "--endpoint",
            &endpoint,
            "--api-key",
            "key-a",
            "--json",
            "--limit",
            "3",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The tail takes its starting point before the records are committed.
    wait_for_tails(&server, 1.0).await;
    let later = (0..3).map(|n| record(format!("later {n}"))).collect();
    push_as(&mut client, "key-a", vec![later]).await.unwrap();
    let output = output_within(tail, DEADLINE, "tail --limit 3 exits after three records").await;
    assert!(output.status.success());
    let messages = json_messages(&output.stdout);
    assert_eq!(messages, ["later 0", "later 1", "later 2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_resumes_after_the_server_closes_its_connection() {
    let db = TestDb::create(Backend::Sqlite, "cli_tail_resume")
        .await
        .unwrap();
    // Connections are asked to go away after 1 s and closed 1 s later: a long tail must resume.
    let server = Process::serve(
        &db.url,
        &[
            "--tail-poll-interval",
            "50ms",
            "--max-connection-age",
            "1s",
            "--max-connection-age-grace",
            "1s",
        ],
    );
    let endpoint = format!("http://{}", server.grpc);
    let tail = Command::new(BINARY)
        .args(["tail", "--endpoint", &endpoint, "--json", "--limit", "6"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_tails(&server, 1.0).await;
    for n in 0..3 {
        // A fresh connection each time, since the server closes old ones.
        let mut client = LogIngestClient::connect(endpoint.clone()).await.unwrap();
        push_as(
            &mut client,
            "",
            vec![vec![
                record(format!("r{}", 2 * n)),
                record(format!("r{}", 2 * n + 1)),
            ]],
        )
        .await
        .unwrap();
        if n == 2 {
            break;
        }
        // The next pair goes to the next connection: once the server has closed this one, its
        // tail has ended (its client gone, as far as the server knows) and the command opens a
        // new one.
        let what = format!("tail {} to end and the next to open", n + 1);
        wait_until(&what, DEADLINE, async || {
            let text = server.metrics().await;
            metric(&text, "loghaul_tails_ended_total{reason=\"client_gone\"}") > n as f64
                && metric(&text, "loghaul_tail_subscribers") == 1.0
        })
        .await;
    }
    let output = output_within(tail, DEADLINE, "the tail exits after six records").await;
    assert_success(&output);
    let messages = json_messages(&output.stdout);
    assert_eq!(
        messages,
        ["r0", "r1", "r2", "r3", "r4", "r5"],
        "every record once, across reconnects"
    );
}

#[test]
fn bench_at_a_share_of_the_maximum_measures_the_maximum_first() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("acks.csv");
    let log_arg = log.to_str().unwrap();
    let (report, stdout) = short_bench(&["--rate", "50%", "--latency-log", log_arg]);
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{stdout}");
    let (saturated, paced) = (&runs[0], &runs[1]);
    assert!(saturated["offered_per_sec"].is_null(), "{stdout}");
    let maximum = saturated["records_per_sec"].as_f64().unwrap();
    let offered = paced["offered_per_sec"].as_f64().unwrap();
    assert!((offered - maximum / 2.0).abs() < 1.0, "{stdout}");
    for run in runs {
        assert_eq!(run["verified"], true, "{stdout}");
    }
    // Paced at half the maximum, the second run gets about what it offered, not the maximum.
    let achieved = paced["records_per_sec"].as_f64().unwrap();
    assert!(achieved < offered * 1.2, "{stdout}");

    // One CSV line per acknowledgement of either run, the offered rate naming the run.
    let csv = std::fs::read_to_string(&log).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("streams,offered_per_sec,at_sec,latency_ms")
    );
    let (mut unpaced, mut at_offered) = (0, 0);
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        assert_eq!(fields.len(), 4, "{line}");
        assert_eq!(fields[0], "2");
        assert!(fields[2].parse::<f64>().unwrap() >= 0.0, "{line}");
        assert!(fields[3].parse::<f64>().unwrap() >= 0.0, "{line}");
        match fields[1] {
            "" => unpaced += 1,
            rate => {
                assert_eq!(rate, format!("{offered:.0}"));
                at_offered += 1;
            }
        }
    }
    assert!(unpaced > 0 && at_offered > 0, "{csv}");
}

/// `--curve`: the maximum, then one paced run per share, each with its share, offered rate and
/// latency percentiles in order.
#[test]
fn bench_curve_offers_each_share_of_the_maximum_in_turn() {
    let (report, stdout) = short_bench(&["--chunks-per-stream", "2", "--curve", "25,60%"]);
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3, "{stdout}");
    assert!(runs[0]["share_of_maximum"].is_null(), "{stdout}");
    let maximum = runs[0]["records_per_sec"].as_f64().unwrap();
    for (run, share) in runs[1..].iter().zip([0.25, 0.6]) {
        assert_eq!(run["share_of_maximum"].as_f64(), Some(share), "{stdout}");
        let offered = run["offered_per_sec"].as_f64().unwrap();
        assert!((offered - maximum * share).abs() < 1.0, "{stdout}");
        let achieved = run["records_per_sec"].as_f64().unwrap();
        assert!(achieved < offered * 1.2, "{stdout}");
        let latency = &run["ack_latency_ms"];
        let (p50, p99, p999, max) = (
            latency["p50"].as_f64().unwrap(),
            latency["p99"].as_f64().unwrap(),
            latency["p999"].as_f64().unwrap(),
            latency["max"].as_f64().unwrap(),
        );
        assert!(
            0.0 < p50 && p50 <= p99 && p99 <= p999 && p999 <= max,
            "{stdout}"
        );
        assert_eq!(run["verified"], true, "{stdout}");
    }
    // The table names the points by their share.
    assert!(
        stdout.contains("25 %") && stdout.contains("60 %"),
        "{stdout}"
    );

    let both = Command::new(BINARY)
        .args(["bench", "--curve", "50", "--rate", "80%"])
        .output()
        .unwrap();
    assert!(!both.status.success());
    assert!(
        String::from_utf8_lossy(&both.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&both.stderr)
    );
}

#[test]
fn bench_at_a_share_of_a_maximum_of_nothing_says_so_instead_of_pacing_at_zero() {
    // Every stream of the saturated run is refused (wrong API key), so it acknowledges nothing.
    let output = Command::new(BINARY)
        .args([
            "bench",
            "--duration",
            "1s",
            "--streams",
            "2",
            "--rate",
            "80%",
        ])
        .args(["--server-arg=--api-keys=right=team", "--api-key", "wrong"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains("no maximum to take a share of") && stderr.contains("Unauthenticated"),
        "{stderr}"
    );
}

/// SQLite's ceiling: after the run, the same number of rows inserted straight into the same file
/// by one prepared statement per row in one transaction, and the ratio of the two.
#[test]
fn bench_compare_copy_on_sqlite_measures_the_plain_insert_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("ceiling.db").display());
    let bench = Command::new(BINARY)
        .args(["bench", "--database-url", &url, "--streams", "2"])
        .args(["--records", "4000", "--records-per-chunk", "100"])
        .args(["--compare-copy", "--json"])
        .output()
        .unwrap();
    assert_success(&bench);
    let stdout = String::from_utf8_lossy(&bench.stdout);
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let run = &report["runs"][0];
    assert_eq!(run["verified"], true, "{stdout}");
    assert!(
        run["copy_records_per_sec"].as_f64().unwrap() > 0.0,
        "{stdout}"
    );
    let ratio = run["copy_ratio"].as_f64().unwrap();
    let expected =
        run["records_per_sec"].as_f64().unwrap() / run["copy_records_per_sec"].as_f64().unwrap();
    assert!((ratio - expected).abs() < 1e-9, "{stdout}");
    // The ceiling's rows went into the same table: the run's and as many again.
    let rows: i64 = tokio::runtime::Runtime::new().unwrap().block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query_scalar("SELECT count(*) FROM logs")
            .fetch_one(&mut conn)
            .await
            .unwrap()
    });
    assert_eq!(rows, 2 * run["acked"].as_i64().unwrap(), "{stdout}");
}

/// A 2 s, two-stream `bench --json` of 100-record chunks with `args` against the server it
/// starts: its report and everything it printed.
fn short_bench(args: &[&str]) -> (serde_json::Value, String) {
    let bench = Command::new(BINARY)
        .args(["bench", "--duration", "2s", "--streams", "2"])
        .args(["--records-per-chunk", "100", "--json"])
        .args(args)
        .output()
        .unwrap();
    assert_success(&bench);
    let stdout = String::from_utf8_lossy(&bench.stdout).into_owned();
    let report = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    (report, stdout)
}

/// A short `bench --protocol PROTOCOL` against the server it starts: its report.
fn bench_over(protocol: &str) -> serde_json::Value {
    short_bench(&["--protocol", protocol]).0
}

#[test]
fn bench_over_loki_pushes_records_that_are_stored() {
    let report = bench_over("loki");
    assert_eq!(report["settings"]["protocol"], "loki", "{report}");
    let run = &report["runs"][0];
    assert!(run["acked"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(run["rejected"], 0, "{report}");
    assert_eq!(run["failed_streams"], serde_json::json!([]), "{report}");
    assert_eq!(run["verified"], true, "{report}");
}

#[test]
fn bench_over_otlp_http_posts_records_that_are_stored() {
    let report = bench_over("otlp-http");
    assert_eq!(report["settings"]["protocol"], "otlp-http", "{report}");
    let run = &report["runs"][0];
    assert!(run["acked"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(run["rejected"], 0, "{report}");
    assert_eq!(run["failed_streams"], serde_json::json!([]), "{report}");
    assert_eq!(run["verified"], true, "{report}");
}

/// `bench-query --json` against the test's database with `extra` arguments: its exit status,
/// everything it printed, and its report when it succeeded.
async fn bench_query(db: &TestDb, extra: &[&str]) -> (Output, Option<serde_json::Value>) {
    let child = Command::new(BINARY)
        .args(["bench-query", "--database-url", &db.url])
        .args(["--rows", "20000", "--days", "1", "--tenants", "2"])
        .args(["--queries", "3", "--json"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = output_within(child, Duration::from_secs(120), "bench-query to finish").await;
    let report = output.status.success().then(|| {
        let stdout = String::from_utf8_lossy(&output.stdout);
        serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
    });
    (output, report)
}

/// A small `bench-query`: the rows loaded and their rollup counted, every kind of page and LogQL
/// query timed, each volume histogram answered from where it is meant to be and the rollup
/// agreeing with a scan, the report as one JSON object. `--reuse` queries the rows again without
/// loading, counts the rollup again when it is empty, and fails when it disagrees with a scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_query_times_pages_and_logql_and_checks_the_rollup_against_a_scan() {
    let Some(db) = TestDb::create(Backend::Postgres, "bench_query").await else {
        return;
    };
    let (output, report) = bench_query(&db, &[]).await;
    assert_success(&output);
    let report = report.unwrap();
    let setup = &report["setup"];
    assert_eq!(setup["rows"], 20_000, "{report}");
    assert!(setup["load_seconds"].as_f64().unwrap() > 0.0, "{setup}");
    assert!(setup["rollup_seconds"].as_f64().is_some(), "{setup}");
    assert!(setup["rollup_rows"].as_i64().unwrap() > 0, "{setup}");
    let rollup_total: i64 = db
        .query_scalar("SELECT sum(records)::int8 FROM log_volume")
        .await;
    assert_eq!(rollup_total, 20_000, "the rollup counts every row");
    let rollup_bytes = db
        .query_scalar("SELECT sum(bytes)::int8 FROM log_volume")
        .await;
    let message_bytes = db
        .query_scalar("SELECT sum(octet_length(message))::int8 FROM logs")
        .await;
    assert_eq!(rollup_bytes, message_bytes, "and their messages' bytes");

    let timings = report["timings"].as_array().unwrap();
    let kind = |kind: &str| -> Vec<&serde_json::Value> {
        timings.iter().filter(|t| t["kind"] == kind).collect()
    };
    let pages = kind("page");
    assert_eq!(pages.len(), 8, "{report}");
    for page in &pages {
        assert!(page["queries"].as_u64().unwrap() >= 3, "{page}");
        assert!(page["p50_ms"].as_f64().unwrap() > 0.0, "{page}");
    }
    assert_eq!(
        pages[0]["returned"], 100.0,
        "the newest page is full: {report}"
    );

    let logql = kind("logql");
    assert_eq!(logql.len(), 15, "{report}");
    let named = |part: &str| -> Vec<&serde_json::Value> {
        logql
            .iter()
            .copied()
            .filter(|t| t["name"].as_str().unwrap().contains(part))
            .collect()
    };
    for lines in named("newest") {
        assert!(lines["returned"].as_f64().unwrap() > 0.0, "{lines}");
        assert!(
            lines["lines_scanned"].as_f64().unwrap() >= lines["returned"].as_f64().unwrap(),
            "{lines}"
        );
    }
    let logfmt = named("logfmt")[0];
    assert!(
        logfmt["query"]
            .as_str()
            .unwrap()
            .contains("| logfmt | status >= 500"),
        "{logfmt}"
    );
    // 1 line in 10 has a status of 500 or more: reaching 100 takes about ten times as many.
    let ratio = logfmt["lines_scanned"].as_f64().unwrap() / logfmt["returned"].as_f64().unwrap();
    assert!((5.0..20.0).contains(&ratio), "{logfmt}");
    let (rollups, scans) = (named(", rollup"), named(", scan"));
    assert_eq!((rollups.len(), scans.len()), (4, 4), "{report}");
    for rollup in rollups {
        assert!(rollup["volume_rows"].as_f64().unwrap() > 0.0, "{rollup}");
        assert_eq!(rollup["lines_scanned"], 0.0, "{rollup}");
    }
    for scan in scans {
        assert!(scan["lines_scanned"].as_f64().unwrap() > 0.0, "{scan}");
        assert_eq!(scan["volume_rows"], 0.0, "{scan}");
    }
    let agreements = report["agreements"].as_array().unwrap();
    assert_eq!(agreements.len(), 4, "{report}");
    for agreement in agreements {
        assert!(agreement["rollup"].as_f64().unwrap() > 0.0, "{agreement}");
        assert_eq!(agreement["rollup"], agreement["scan"], "{agreement}");
    }

    // A reused table whose rollup is empty has it counted again.
    db.execute("DELETE FROM log_volume").await;
    let (output, report) = bench_query(&db, &["--reuse"]).await;
    assert_success(&output);
    let report = report.unwrap();
    assert!(report["setup"]["load_seconds"].is_null(), "{report}");
    assert!(
        report["setup"]["rollup_seconds"].as_f64().is_some(),
        "{report}"
    );
    assert_eq!(report["setup"]["rows"], 20_000, "{report}");
    assert_eq!(
        report["agreements"].as_array().unwrap().len(),
        4,
        "{report}"
    );

    // A rollup that counts one line too many a minute is caught before anything is timed.
    db.execute("UPDATE log_volume SET records = records + 1 WHERE tenant = 'bench-0'")
        .await;
    let (output, _) = bench_query(&db, &["--reuse"]).await;
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the rollup and a scan disagree on"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        !stdout.contains("queries") && !stdout.contains("p50"),
        "nothing is timed: {stdout}"
    );
}
