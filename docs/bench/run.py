#!/usr/bin/env python3
"""Runs loghaul's benchmarks and writes their tables into docs/benchmarks.md and docs/scaling.md.

    cargo build --release --features bench
    python3 docs/bench/run.py run        # the benchmarks, one JSON file per command
    python3 docs/bench/run.py render     # the tables, from those files, into the document
    python3 docs/bench/run.py all        # both

`run` starts the release binary's `bench` and `bench-shipper` commands with `--json` and saves
each report, with the command and the machine's facts, to a results directory
(target/bench-results by default). `render` turns a results directory into Markdown tables and
writes each between its `<!-- bench:begin NAME -->` and `<!-- bench:end NAME -->` markers, so a
rerun regenerates them. Python 3 standard library only; PostgreSQL benchmarks need `psql` and a
server that lets the given role create databases (each run gets a fresh one, dropped after).
The `citus` benchmark also needs `--citus URL`: a Citus coordinator whose `postgres` database
lists its workers (each run's database is made on every node, with the extension, and dropped).
"""

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RESULTS = ROOT / "target" / "bench-results"
DEFAULT_DOC = ROOT / "docs" / "benchmarks.md"
DEFAULT_BINARY = ROOT / "target" / "release" / "loghaul"
DEFAULT_POSTGRES = "postgres://postgres@127.0.0.1:5432"

SCALING_STREAMS = [1, 4, 16, 64, 256, 1024]
# The stream count the others are compared with, and the share of its throughput the larger
# counts are held to.
SCALING_BASE = 16
SCALING_TARGET = 0.9
# Records each stream count writes: the same work for every count, so that a count is not compared
# on a table of another size (with a fixed duration, 1,024 streams' pushes in flight drain for
# another 25 s and write twice the rows of 16 streams).
SCALING_RECORDS = 4_000_000
# The ingest protocols compared, as `--protocol` and the report spell them, and as the table does.
PROTOCOLS = {
    "native": "Push (native, gRPC)",
    "otlp": "OTLP/gRPC `Export`",
    "otlp-http": "OTLP/HTTP `/v1/logs`",
    "loki": "Loki push (snappy protobuf)",
}
# The share of OTLP/gRPC's throughput the HTTP protocols are held to.
HTTP_TARGET = 0.8
# The latency curve: shares of the maximum offered, and the p99 each is held to (ms).
CURVE_SHARES = [25, 50, 75, 90]
CURVE_TARGETS = {50: 100.0, 75: 250.0}
CURVE_FIGURE = "latency-curve.svg"
# Large requests sent all at once to a small budget: how many at once, each of how many records
# of about how many bytes (3.6 MB on the wire; Loki's snappy 2.5 MB, 3.9 MB inflated), the budget,
# and the protocols.
LARGE_COUNTS = [1, 3, 8, 64]
LARGE_RECORDS = 3300
LARGE_MESSAGE_BYTES = 1000
LARGE_BUDGET = "16MiB"
LARGE_PROTOCOLS = ["native", "otlp-http", "loki"]
MEMORY_BUDGETS = ["16MiB", "64MiB", "128MiB"]
MEMORY_STREAMS = 64
# Replicas of the service on one PostgreSQL: how many are compared, the streams spread over them,
# and the share of one replica's throughput three are held to.
REPLICAS = [1, 3]
REPLICA_STREAMS = 24
REPLICA_TARGET = 0.95
# One PostgreSQL against a Citus cluster: streams, each sending as a tenant of its own, since
# tenants are what Citus spreads over its workers.
CITUS_STREAMS = 16
STORES = {"postgres": "PostgreSQL, one server", "citus": "Citus, coordinator and 2 workers"}


# ---------------------------------------------------------------------------------------------
# What is run


class Job:
    """One command: `args` follow the binary; a PostgreSQL job (`postgres` True, or "citus" for
    the Citus cluster) gets `--database-url` appended."""

    def __init__(self, benchmark, name, params, args, postgres=False):
        self.order = 0
        self.benchmark = benchmark
        self.name = name
        self.params = params
        self.args = args
        self.postgres = postgres


def alternated(benchmark, key, options, repeat, args, postgres=lambda option: False):
    """One job per option per repetition, the options in turn within each repetition, so that
    their ratios are taken run for run: `args(option)` and `postgres(option)` give each job's."""
    return [
        Job(
            benchmark,
            f"{option}-{i}",
            {key: option, "rep": i},
            args(option),
            postgres=postgres(option),
        )
        for i in range(1, repeat + 1)
        for option in options
    ]


def jobs(duration, repeat, shipper_records):
    """Every benchmark's commands, in the order they run (pairs alternated run for run)."""
    d = ["--duration", duration]
    out = {}
    # Each repetition runs every stream count in turn, so that a count is compared with the base
    # count of its own repetition.
    for benchmark, postgres in [("scaling", False), ("scaling-postgres", True)]:
        out[benchmark] = [
            Job(
                benchmark,
                f"streams-{n}-{i}",
                {"streams": n, "rep": i},
                ["bench", "--json", "--records", str(SCALING_RECORDS), "--streams", str(n)],
                postgres=postgres,
            )
            for i in range(1, repeat + 1)
            for n in SCALING_STREAMS
        ]
    out["copy"] = [
        Job(
            "copy",
            f"run-{i}",
            {"rep": i},
            ["bench", "--json", *d, "--streams", "8", "--compare-copy"],
            postgres=True,
        )
        for i in range(1, repeat + 1)
    ]
    out["sqlite-ceiling"] = [
        Job(
            "sqlite-ceiling",
            f"run-{i}",
            {"rep": i},
            ["bench", "--json", *d, "--streams", "8", "--compare-copy"],
        )
        for i in range(1, repeat + 1)
    ]
    out["protocol"] = alternated(
        "protocol",
        "protocol",
        PROTOCOLS,
        repeat,
        lambda protocol: ["bench", "--json", *d, "--streams", "16", "--protocol", protocol],
    )
    shares = ",".join(str(share) for share in CURVE_SHARES)
    out["curve"] = alternated(
        "curve",
        "database",
        ["sqlite", "postgres"],
        repeat,
        # Two chunks per stream: an acknowledgement every 2,000 records, so that even the 25 %
        # point has enough of them for a p99.9.
        lambda _: ["bench", "--json", *d, "--streams", "16", "--chunks-per-stream", "2"]
        + ["--curve", shares],
        postgres=lambda database: database == "postgres",
    )
    out["large-requests"] = [
        Job(
            "large-requests",
            f"{protocol}-{n}-{i}",
            {"protocol": protocol, "requests": n, "rep": i},
            [
                "bench",
                "--json",
                "--protocol",
                protocol,
                "--streams",
                str(n),
                "--records-per-chunk",
                str(LARGE_RECORDS),
                "--message-bytes",
                str(LARGE_MESSAGE_BYTES),
                "--attributes",
                "2",
                "--chunks-per-stream",
                "1",
                "--records",
                str(n * LARGE_RECORDS),
                f"--server-arg=--max-buffered-bytes={LARGE_BUDGET}",
            ],
        )
        for i in range(1, repeat + 1)
        for protocol in LARGE_PROTOCOLS
        for n in LARGE_COUNTS
    ]
    out["memory"] = [
        Job(
            "memory",
            f"budget-{budget}",
            {"budget": budget, "streams": MEMORY_STREAMS},
            [
                "bench",
                "--json",
                *d,
                "--streams",
                str(MEMORY_STREAMS),
                f"--server-arg=--max-buffered-bytes={budget}",
            ],
        )
        for budget in MEMORY_BUDGETS
    ]
    out["replicas"] = alternated(
        "replicas",
        "replicas",
        REPLICAS,
        repeat,
        lambda n: ["bench", "--json", *d, "--streams", str(REPLICA_STREAMS), "--replicas", str(n)],
        postgres=lambda _: True,
    )
    out["citus"] = alternated(
        "citus",
        "store",
        STORES,
        repeat,
        lambda _: ["bench", "--json", *d, "--streams", str(CITUS_STREAMS)]
        + ["--tenants", str(CITUS_STREAMS)],
        postgres=lambda store: "citus" if store == "citus" else True,
    )
    out["shipper"] = [
        Job(
            "shipper",
            f"run-{i}",
            {"rep": i},
            ["bench-shipper", "--records", str(shipper_records)],
        )
        for i in range(1, repeat + 1)
    ]
    return out


# ---------------------------------------------------------------------------------------------
# Machine facts


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def memory_gib():
    try:
        with open("/proc/meminfo", encoding="utf-8") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1048576, 1)
    except OSError:
        pass
    return None


def load_average():
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def psql(base_url, database, sql):
    """Runs one statement with psql and returns its unaligned output."""
    done = subprocess.run(
        ["psql", f"{base_url}/{database}", "-X", "-v", "ON_ERROR_STOP=1", "-Atc", sql],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip() or f"psql exited with {done.returncode}")
    return done.stdout.strip()


POSTGRES_SETTINGS = ["shared_buffers", "max_wal_size", "checkpoint_timeout", "autovacuum"]


def postgres_facts(base_url):
    columns = ["server_version", *POSTGRES_SETTINGS]
    sql = "SELECT " + ", ".join(f"current_setting('{name}')" for name in columns)
    values = psql(base_url, "postgres", sql).split("|")
    return {"version": values[0].split()[0], "settings": dict(zip(POSTGRES_SETTINGS, values[1:]))}


def machine_facts(postgres):
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "memory_gib": memory_gib(),
        "postgres": postgres,
    }


# ---------------------------------------------------------------------------------------------
# run


def fresh_database(base_url):
    """Creates loghaul_bench_N for the first N not taken and returns its name."""
    for n in range(1, 1000):
        name = f"loghaul_bench_{n}"
        try:
            psql(base_url, "postgres", f"CREATE DATABASE {name}")
            return name
        except RuntimeError as err:
            if "already exists" not in str(err):
                raise
    raise RuntimeError("no free loghaul_bench_N database name")


def drop_database(base_url, name, force=False):
    # A Citus worker keeps connections from the coordinator to each database open for a while.
    sql = f"DROP DATABASE IF EXISTS {name}" + (" WITH (FORCE)" if force else "")
    try:
        psql(base_url, "postgres", sql)
    except RuntimeError as err:
        print(f"  could not drop {name}: {err}", file=sys.stderr)


def with_node(base_url, host, port):
    """`base_url` (postgres://user@host:port) pointing at another node."""
    scheme, rest = base_url.split("://", 1)
    user = rest.rsplit("@", 1)[0] + "@" if "@" in rest else ""
    return f"{scheme}://{user}{host}:{port}"


def citus_nodes(base_url):
    """The coordinator's own (host, port) and its workers', from its `postgres` database."""
    rows = psql(base_url, "postgres", "SELECT groupid, nodename, nodeport FROM pg_dist_node ORDER BY groupid")
    nodes = [line.split("|") for line in rows.splitlines() if line]
    coordinator = [(host, port) for group, host, port in nodes if group == "0"]
    workers = [(host, port) for group, host, port in nodes if group != "0"]
    if not coordinator or not workers:
        raise RuntimeError(f"{base_url} is not a Citus coordinator with workers: {nodes}")
    return coordinator[0], workers


def fresh_citus_database(base_url):
    """A fresh database made a Citus cluster: on every worker, with the extension, and added."""
    (host, port), workers = citus_nodes(base_url)
    name = fresh_database(base_url)
    for worker in workers:
        url = with_node(base_url, *worker)
        psql(url, "postgres", f"CREATE DATABASE {name}")
        psql(url, name, "CREATE EXTENSION citus")
    psql(base_url, name, "CREATE EXTENSION citus")
    psql(base_url, name, f"SELECT citus_set_coordinator_host('{host}', {port})")
    for worker_host, worker_port in workers:
        psql(base_url, name, f"SELECT citus_add_node('{worker_host}', {worker_port})")
    return name


def drop_citus_database(base_url, name):
    drop_database(base_url, name, force=True)
    try:
        _, workers = citus_nodes(base_url)
    except RuntimeError as err:
        print(f"  could not list the workers to drop {name}: {err}", file=sys.stderr)
        return
    for worker in workers:
        drop_database(with_node(base_url, *worker), name, force=True)


def last_json_line(stdout):
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON object on the output's last lines")


def run_job(job, binary, urls, facts, timeout):
    args = list(job.args)
    database = None
    citus = job.postgres == "citus"
    base_url = urls["citus" if citus else "postgres"]
    if job.postgres:
        database = fresh_citus_database(base_url) if citus else fresh_database(base_url)
        args += ["--database-url", f"{base_url}/{database}"]
    command = "loghaul " + shlex.join(args)
    print(f"$ {command}", file=sys.stderr, flush=True)
    result = {
        "benchmark": job.benchmark,
        "name": job.name,
        "order": job.order,
        "params": job.params,
        "command": command,
        "machine": facts,
        "load_average": load_average(),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    began = time.monotonic()
    try:
        done = subprocess.run(
            [str(binary), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            timeout=timeout,
        )
        result["seconds"] = round(time.monotonic() - began, 1)
        if done.returncode != 0:
            result["error"] = f"exit {done.returncode}: " + done.stderr.strip()[-2000:]
        else:
            result["report"] = last_json_line(done.stdout)
            settings = result["report"].get("settings", {})
            if not job.postgres and str(settings.get("database", "")).startswith("sqlite://"):
                # The benchmark's scratch file, deleted with its temporary directory.
                settings["database"] = "sqlite (a temporary file)"
            # The human-readable table the command printed, for whoever reads the file.
            result["output"] = done.stdout.splitlines()[:-1]
    except (subprocess.TimeoutExpired, ValueError) as err:
        result["seconds"] = round(time.monotonic() - began, 1)
        result["error"] = str(err)
    finally:
        if database:
            (drop_citus_database if citus else drop_database)(base_url, database)
    if "error" in result:
        print(f"  failed: {result['error'][:500]}", file=sys.stderr)
    else:
        for line in result["output"]:
            print(f"  {line}", file=sys.stderr)
    return result


def parse_seconds(text):
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)?", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration like 15s or 2m")
    value, unit = float(match.group(1)), match.group(2) or "s"
    return value * {"ms": 0.001, "s": 1, "m": 60}[unit]


def command_run(options):
    binary = Path(options.binary)
    if not binary.exists():
        sys.exit(f"{binary} does not exist: run `cargo build --release --features bench` first (or pass --binary)")
    seconds = parse_seconds(options.duration)
    every = jobs(options.duration, options.repeat, options.shipper_records)
    chosen = options.only.split(",") if options.only else list(every)
    unknown = [name for name in chosen if name not in every]
    if unknown:
        sys.exit(f"unknown benchmark(s) {unknown}; choose from {list(every)}")
    postgres = None
    if not options.no_postgres:
        if shutil.which("psql") is None:
            print("psql not found: skipping the PostgreSQL benchmarks", file=sys.stderr)
        else:
            try:
                postgres = postgres_facts(options.postgres)
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                print(f"PostgreSQL not usable ({err}): skipping its benchmarks", file=sys.stderr)
    citus = None
    if postgres and options.citus:
        try:
            citus = {"version": psql(options.citus, "postgres", "SELECT extversion FROM pg_extension WHERE extname = 'citus'")}
            citus_nodes(options.citus)
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            print(f"Citus not usable ({err}): skipping its benchmark", file=sys.stderr)
            citus = None
    facts = machine_facts(postgres)
    facts["citus"] = citus
    results = Path(options.results)
    results.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    for benchmark in chosen:
        todo = [job for job in every[benchmark] if postgres or not job.postgres]
        if benchmark == "citus" and not citus:
            todo = []
        if not todo:
            needs = "a Citus coordinator (--citus)" if benchmark == "citus" else "PostgreSQL"
            print(f"skipping {benchmark}: it needs {needs}", file=sys.stderr)
            continue
        for stale in results.glob(f"{benchmark}-*.json"):
            stale.unlink()
        print(f"== {benchmark}", file=sys.stderr, flush=True)
        for order, job in enumerate(todo):
            job.order = order
            # A --curve command measures five times; COPY and the count add some more.
            timeout = 8 * seconds + 600
            urls = {"postgres": options.postgres, "citus": options.citus}
            result = run_job(job, binary, urls, facts, timeout)
            path = results / f"{benchmark}-{job.name}.json"
            path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    minutes = (time.monotonic() - started) / 60
    print(f"done in {minutes:.1f} min; results in {results}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# render


def load_results(results):
    by_benchmark = {}
    for path in sorted(Path(results).glob("*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        by_benchmark.setdefault(result["benchmark"], []).append(result)
    for results in by_benchmark.values():
        results.sort(key=lambda r: r.get("order", 0))
    return by_benchmark


def rate(value):
    return "-" if value is None else f"{value:,.0f}"


def ms(value):
    return "-" if value is None else f"{value:.1f}"


def mib(value):
    return "-" if value is None else f"{value / 1048576:.0f} MiB"


def ratio(value):
    return "-" if value is None else f"{value:.2f}"


def median_of(values, show):
    """`median (a, b, c)` in the order the runs were made."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"**{show(statistics.median(values))}** ({', '.join(show(v) for v in values)})"


def facts_line(results):
    machine = results[0]["machine"]
    dates = sorted({r["started"][:10] for r in results})
    loads = [r["load_average"] for r in results if r.get("load_average") is not None]
    parts = [
        f"{' to '.join([dates[0], dates[-1]] if len(dates) > 1 else dates)}",
        f"{machine['cores']} cores ({machine['cpu']})",
    ]
    if machine.get("memory_gib"):
        parts.append(f"{machine['memory_gib']} GiB of memory")
    if any("postgres://" in r["command"] for r in results) and machine.get("postgres"):
        pg = machine["postgres"]
        settings = ", ".join(f"{k} {v}" for k, v in pg["settings"].items())
        parts.append(f"PostgreSQL {pg['version']} ({settings})")
    if loads:
        span = f"{min(loads)}" if min(loads) == max(loads) else f"{min(loads)}–{max(loads)}"
        parts.append(f"1-minute load average at the start of each command {span}")
    return "Measured " + "; ".join(parts) + "."


def commands_block(results):
    # A command repeated for each repetition is listed once, in the order it first ran.
    lines = list(dict.fromkeys(f"$ {r['command']}" for r in results))
    return "```\n" + "\n".join(lines) + "\n```"


def failures(results):
    failed = [r for r in results if "error" in r]
    return "".join(f"\n\nFailed: `{r['command']}`: {r['error'][:300]}" for r in failed)


def runs_of(result):
    return result.get("report", {}).get("runs", [])


def failed(runs):
    """Streams that ended with an error (RESOURCE_EXHAUSTED after the enqueue timeout, say)."""
    return sum(count for run in runs for _, count in run.get("failed_streams", []))


def verified(runs):
    flags = [run.get("verified") for run in runs]
    if all(flag is True for flag in flags):
        return "yes"
    return "NO" if any(flag is False for flag in flags) else "-"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def render_scaling(results):
    """One row per stream count: medians over the repetitions, and each repetition's throughput
    against the base count's in the same repetition."""
    by_rep = {}
    for result in results:
        for run in runs_of(result):
            by_rep.setdefault(result["params"].get("rep", 1), {})[run["streams"]] = run
    rows = []
    for streams in sorted({n for runs in by_rep.values() for n in runs}):
        runs = [runs[streams] for _, runs in sorted(by_rep.items()) if streams in runs]
        shares = [
            run["records_per_sec"] / base["records_per_sec"]
            for rep_runs in by_rep.values()
            if (run := rep_runs.get(streams)) and (base := rep_runs.get(SCALING_BASE))
            and base["records_per_sec"]
        ]
        rows.append(
            [
                streams,
                median_of([run["records_per_sec"] for run in runs], rate),
                median_of(shares, ratio) if streams != SCALING_BASE else "1",
                ms(statistics.median(run["ack_latency_ms"]["p50"] for run in runs)),
                ms(statistics.median(run["ack_latency_ms"]["p99"] for run in runs)),
                mib(max(run["server_peak_rss_bytes"] for run in runs)),
                failed(runs),
                verified(runs),
            ]
        )
    header = [
        "streams",
        "records/s, median (runs)",
        f"÷ {SCALING_BASE} streams",
        "ack p50 ms",
        "ack p99 ms",
        "server peak RSS (max)",
        "failed streams (all runs)",
        "count verified",
    ]
    ordered = sorted(results, key=lambda r: (r["params"].get("rep", 1), r["params"]["streams"]))
    return table(header, rows), ordered


def render_copy(results, ceiling="COPY rows/s"):
    rows, through, copies, ratios = [], [], [], []
    for result in results:
        for run in runs_of(result):
            through.append(run["records_per_sec"])
            copies.append(run["copy_records_per_sec"])
            ratios.append(run["copy_ratio"])
            rows.append(
                [
                    result["params"]["rep"],
                    rate(run["records_per_sec"]),
                    rate(run["copy_records_per_sec"]),
                    ratio(run["copy_ratio"]),
                    ms(run["ack_latency_ms"]["p99"]),
                    failed([run]),
                    verified([run]),
                ]
            )
    if rows:
        rows.append(
            [
                "median",
                f"**{rate(statistics.median(through))}**",
                f"**{rate(statistics.median(copies))}**",
                f"**{ratio(statistics.median(ratios))}**",
                "",
                "",
                "",
            ]
        )
    header = [
        "run",
        "loghaul records/s",
        ceiling,
        "ratio",
        "ack p99 ms",
        "failed streams",
        "count verified",
    ]
    return table(header, rows), results


def per_record_us(seconds, run):
    """CPU microseconds per acknowledged record."""
    if seconds is None or not run.get("acked"):
        return None
    return seconds * 1e6 / run["acked"]


def render_protocol(results):
    runs_by = {}
    for result in results:
        for run in runs_of(result):
            runs_by.setdefault(result["params"]["protocol"], []).append(run)
    def shares(protocol, base):
        return run_for_run(results, "protocol", protocol, base)

    micros = lambda v: f"{v:.2f}"

    def against(protocol, base):
        return "—" if protocol == base else median_of(shares(protocol, base), ratio)

    rows = []
    for protocol, name in PROTOCOLS.items():
        runs = runs_by.get(protocol, [])
        if not runs:
            continue
        rows.append(
            [
                name,
                median_of([run["records_per_sec"] for run in runs], rate),
                against(protocol, "native"),
                against(protocol, "otlp"),
                median_of([run["ack_latency_ms"]["p50"] for run in runs], ms),
                median_of([run["ack_latency_ms"]["p99"] for run in runs], ms),
                median_of([per_record_us(run.get("client_cpu_sec"), run) for run in runs], micros),
                median_of([per_record_us(run.get("server_cpu_sec"), run) for run in runs], micros),
                median_of([run["server_peak_rss_bytes"] for run in runs], mib),
                failed(runs),
                verified(runs),
            ]
        )
    header = [
        "protocol",
        "records/s",
        "÷ Push",
        "÷ OTLP/gRPC",
        "p50 ms",
        "p99 ms",
        "client CPU µs/record",
        "server CPU µs/record",
        "server peak RSS",
        "failed",
        "count verified",
    ]
    text = table(header, rows)
    verdicts = []
    for protocol in ["otlp-http", "loki"]:
        ratios = shares(protocol, "otlp")
        if ratios:
            median = statistics.median(ratios)
            verdict = "meets" if median >= HTTP_TARGET else "misses"
            verdicts.append(f"{PROTOCOLS[protocol]} {ratio(median)} ({verdict})")
    if verdicts:
        text += (
            f"\n\nHTTP ingest against OTLP/gRPC, median of the run-for-run ratios (target: at "
            f"least {HTTP_TARGET:.2f}): " + "; ".join(verdicts) + "."
        )
    return text, results


def run_for_run(results, key, option, base):
    """Each repetition's ratio of `option`'s throughput to `base`'s, in the order they ran."""
    reps = {}
    for result in results:
        for run in runs_of(result):
            reps.setdefault(result["params"]["rep"], {})[result["params"][key]] = run
    return [
        rep[option]["records_per_sec"] / rep[base]["records_per_sec"]
        for _, rep in sorted(reps.items())
        if option in rep and base in rep and rep[base]["records_per_sec"]
    ]


def render_compared(results, key, names, base):
    """One row per `key` value (named by `names`): medians over the runs, and against `base`."""
    micros = lambda v: f"{v:.2f}"
    rows = []
    for option, name in names.items():
        runs = [run for result in results if result["params"][key] == option for run in runs_of(result)]
        if not runs:
            continue
        rows.append(
            [
                name,
                median_of([run["records_per_sec"] for run in runs], rate),
                "—" if option == base else median_of(run_for_run(results, key, option, base), ratio),
                median_of([run["ack_latency_ms"]["p99"] for run in runs], ms),
                median_of([per_record_us(run.get("server_cpu_sec"), run) for run in runs], micros),
                median_of([run["server_peak_rss_bytes"] for run in runs], mib),
                failed(runs),
                verified(runs),
            ]
        )
    header = [
        key,
        "records/s",
        f"÷ {names[base].split(',')[0]}",
        "ack p99 ms",
        "server CPU µs/record",
        "server peak RSS",
        "failed",
        "count verified",
    ]
    ordered = sorted(results, key=lambda r: r["order"])
    return table(header, rows), ordered


def render_replicas(results):
    names = {n: f"{n} replica{'s' if n > 1 else ''}" for n in REPLICAS}
    text, ordered = render_compared(results, "replicas", names, 1)
    ratios = run_for_run(results, "replicas", 3, 1)
    if ratios:
        median = statistics.median(ratios)
        verdict = "meets" if median >= REPLICA_TARGET else "misses"
        text += (
            f"\n\nThree replicas against one, median of the run-for-run ratios: {ratio(median)} "
            f"(target: at least {REPLICA_TARGET:.2f}; {verdict}). Server CPU and memory are the "
            "replicas' together."
        )
    return text, ordered


def render_citus(results):
    text, ordered = render_compared(results, "store", STORES, "postgres")
    citus = results[0]["machine"].get("citus") if results else None
    if citus:
        text += f"\n\nCitus {citus['version']}; both stores on this machine's cores, on loopback."
    return text, ordered


DATABASES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


def curve_points(results, database):
    """{share: [paced run of each command]} and the saturated runs, for one database."""
    points, maxima = {}, []
    for result in results:
        if result["params"]["database"] != database:
            continue
        for run in runs_of(result):
            share = run.get("share_of_maximum")
            if share is None:
                maxima.append(run)
            else:
                points.setdefault(round(share * 100), []).append(run)
    return points, maxima


def render_curve(results):
    rows, verdicts = [], []
    for database, name in DATABASES.items():
        points, maxima = curve_points(results, database)
        if not points:
            continue
        rows.append(
            [
                name,
                "maximum",
                median_of([run["records_per_sec"] for run in maxima], rate),
                "",
                median_of([run["ack_latency_ms"]["p50"] for run in maxima], ms),
                median_of([run["ack_latency_ms"]["p99"] for run in maxima], ms),
                median_of([run["ack_latency_ms"]["p999"] for run in maxima], ms),
                failed(maxima),
                verified(maxima),
            ]
        )
        for share in sorted(points):
            runs = points[share]
            rows.append(
                [
                    name,
                    f"{share} %",
                    median_of([run["records_per_sec"] for run in runs], rate),
                    median_of(
                        [100 * run["records_per_sec"] / run["offered_per_sec"] for run in runs],
                        lambda v: f"{v:.1f} %",
                    ),
                    median_of([run["ack_latency_ms"]["p50"] for run in runs], ms),
                    median_of([run["ack_latency_ms"]["p99"] for run in runs], ms),
                    median_of([run["ack_latency_ms"]["p999"] for run in runs], ms),
                    failed(runs),
                    verified(runs),
                ]
            )
            target = CURVE_TARGETS.get(share)
            if target is not None:
                met = sum(run["ack_latency_ms"]["p99"] < target for run in runs)
                verdict = "meets" if 2 * met > len(runs) else "misses"
                verdicts.append(
                    f"{name} at {share} %: p99 below {target:.0f} ms in {met} of {len(runs)} runs ({verdict})"
                )
    header = [
        "database",
        "offered",
        "records/s",
        "sustained",
        "ack p50 ms",
        "ack p99 ms",
        "ack p99.9 ms",
        "failed streams",
        "count verified",
    ]
    text = table(header, rows)
    if verdicts:
        text += "\n\nTargets: " + "; ".join(verdicts) + "."
    text += f"\n\n![p50 and p99 ack latency against the offered share of the maximum](bench/{CURVE_FIGURE})"
    return text, results


def curve_svg(results):
    """The curve as an SVG line chart: p99 (solid) and p50 (dashed) medians per database against
    the offered share, each run's p99 as a dot, and the targets as crosses."""
    width, height, left, right, top, bottom = 640, 360, 60, 150, 20, 50
    series = []
    for database, name in DATABASES.items():
        points, _ = curve_points(results, database)
        if points:
            series.append((name, points))
    highest = max(
        [run["ack_latency_ms"]["p99"] for _, points in series for runs in points.values() for run in runs]
        + list(CURVE_TARGETS.values())
    )
    step = next((s for s in [10, 25, 50, 100, 250, 500, 1000, 2500, 5000] if highest / s <= 8), 10000)
    y_max = step * (int(highest // step) + 1)

    def x(share):
        return left + (width - left - right) * share / 100

    def y(value):
        return top + (height - top - bottom) * (1 - value / y_max)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for tick in range(0, y_max + 1, step):
        out.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick}</text>'
        )
    for share in range(0, 101, 25):
        out.append(
            f'<text x="{x(share):.1f}" y="{height - bottom + 18}" text-anchor="middle">{share} %</text>'
        )
    out.append(
        f'<line x1="{left}" x2="{width - right}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="black"/>'
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{y(0):.1f}" stroke="black"/>'
        f'<text x="{(left + width - right) / 2}" y="{height - 10}" text-anchor="middle">offered load, share of the maximum</text>'
        f'<text x="16" y="{(top + height - bottom) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 16 {(top + height - bottom) / 2})">ack latency, ms</text>'
    )
    colours = ["#1f77b4", "#d62728"]
    for index, (name, points) in enumerate(series):
        colour = colours[index % len(colours)]
        for quantile, dash in [("p99", ""), ("p50", ' stroke-dasharray="5,4"')]:
            line = " ".join(
                f"{x(share):.1f},{y(statistics.median(run['ack_latency_ms'][quantile] for run in runs)):.1f}"
                for share, runs in sorted(points.items())
            )
            out.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        for share, runs in sorted(points.items()):
            for run in runs:
                out.append(
                    f'<circle cx="{x(share):.1f}" cy="{y(run["ack_latency_ms"]["p99"]):.1f}" r="2.5" fill="{colour}"/>'
                )
        legend_y = top + 20 + 40 * index
        out.append(
            f'<line x1="{width - right + 15}" x2="{width - right + 40}" y1="{legend_y}" y2="{legend_y}" stroke="{colour}" stroke-width="2"/>'
            f'<text x="{width - right + 45}" y="{legend_y + 4}">{name} p99</text>'
            f'<line x1="{width - right + 15}" x2="{width - right + 40}" y1="{legend_y + 16}" y2="{legend_y + 16}" stroke="{colour}" stroke-width="2" stroke-dasharray="5,4"/>'
            f'<text x="{width - right + 45}" y="{legend_y + 20}">{name} p50</text>'
        )
    for share, target in CURVE_TARGETS.items():
        cx, cy = x(share), y(target)
        out.append(
            f'<path d="M{cx - 5:.1f},{cy - 5:.1f} L{cx + 5:.1f},{cy + 5:.1f} M{cx - 5:.1f},{cy + 5:.1f} L{cx + 5:.1f},{cy - 5:.1f}" stroke="black" stroke-width="1.5"/>'
        )
    legend_y = top + 20 + 40 * len(series)
    out.append(
        f'<path d="M{width - right + 22},{legend_y - 5} L{width - right + 32},{legend_y + 5} M{width - right + 22},{legend_y + 5} L{width - right + 32},{legend_y - 5}" stroke="black" stroke-width="1.5"/>'
        f'<text x="{width - right + 45}" y="{legend_y + 4}">p99 target</text>'
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def render_large_requests(results):
    """Per protocol and count: the time from the first send to the last answer, against the time
    that many take one after another (the same repetition's single request, times the count) plus
    a second."""
    single = {}
    for result in results:
        params = result["params"]
        for run in runs_of(result):
            if params["requests"] == 1:
                single[(params["protocol"], params["rep"])] = run["elapsed_sec"]
    rows = []
    for protocol in LARGE_PROTOCOLS:
        for n in LARGE_COUNTS:
            chosen = [
                (result, run)
                for result in results
                if result["params"]["protocol"] == protocol and result["params"]["requests"] == n
                for run in runs_of(result)
            ]
            if not chosen:
                continue
            elapsed = [run["elapsed_sec"] for _, run in chosen]
            bounds = [
                n * single[(protocol, result["params"]["rep"])] + 1.0
                for result, _ in chosen
                if (protocol, result["params"]["rep"]) in single
            ]
            within = sum(
                1 for (_, run), bound in zip(chosen, bounds) if run["elapsed_sec"] <= bound
            )
            chunk = chosen[0][0].get("report", {}).get("settings", {}).get("chunk_bytes")
            rows.append(
                [
                    PROTOCOLS.get(protocol, protocol),
                    n,
                    "-" if chunk is None else f"{chunk / 1e6:.2f} MB",
                    median_of(elapsed, lambda v: f"{v:.2f}"),
                    median_of(bounds, lambda v: f"{v:.2f}") if n > 1 else "",
                    f"{within} of {len(bounds)}" if n > 1 else "",
                    mib(max(run["server_peak_rss_bytes"] for _, run in chosen)),
                    failed([run for _, run in chosen]),
                    verified([run for _, run in chosen]),
                ]
            )
    header = [
        "protocol",
        "at once",
        "each, on the wire",
        "first send to last answer, s: median (runs)",
        "bound: at once × one alone + 1 s",
        "runs within the bound",
        "server peak RSS (max)",
        "failed (all runs)",
        "count verified",
    ]
    return table(header, rows), results


def render_memory(results):
    order = {budget: i for i, budget in enumerate(MEMORY_BUDGETS)}
    ordered = sorted(results, key=lambda r: order.get(r["params"]["budget"], 99))
    rows = []
    for result in ordered:
        for run in runs_of(result):
            rows.append(
                [
                    f"`{result['params']['budget']}`",
                    run["streams"],
                    rate(run["records_per_sec"]),
                    mib(run["server_peak_rss_bytes"]),
                    failed([run]),
                ]
            )
    header = ["`--max-buffered-bytes`", "streams", "records/s", "server peak RSS", "failed streams"]
    return table(header, rows), ordered


def render_shipper(results):
    rows, rates = [], []
    for result in results:
        report = result.get("report")
        if not report:
            continue
        stats = report["stats"]
        rates.append(report["records_per_sec"])
        stored = report.get("stored_delta")
        rows.append(
            [
                result["params"]["rep"],
                rate(report["records_per_sec"]),
                f"{report['elapsed_sec']:.1f}",
                f"{stats['acknowledged']:,}",
                "-" if stored is None else f"{stored:,}",
                stats["streams"],
            ]
        )
    if rows:
        rows.append(["median", f"**{rate(statistics.median(rates))}**", "", "", "", ""])
    header = ["run", "records/s", "seconds", "acknowledged", "stored", "streams opened"]
    return table(header, rows), results


RENDERERS = {
    "scaling": render_scaling,
    "scaling-postgres": render_scaling,
    "copy": render_copy,
    "sqlite-ceiling": lambda results: render_copy(results, "plain INSERT rows/s"),
    "protocol": render_protocol,
    "curve": render_curve,
    "large-requests": render_large_requests,
    "memory": render_memory,
    "shipper": render_shipper,
    "replicas": render_replicas,
    "citus": render_citus,
}


# Documents beside the main one that hold benchmark blocks of their own.
EXTRA_DOCS = ["scaling.md"]

# Figures written beside the document, from the same results as its tables.
FIGURES = {"curve": (CURVE_FIGURE, curve_svg)}


def render_block(name, results):
    text, ordered = RENDERERS[name](results)
    return "\n\n".join([facts_line(results), text, commands_block(ordered)]) + failures(results)


def write_block(doc, name, body):
    """Writes `body` between the `<!-- bench:begin NAME -->` and `<!-- bench:end NAME -->` markers
    of `doc` (a script's own table, outside `render`'s set)."""
    text = Path(doc).read_text(encoding="utf-8")
    begin, end = f"<!-- bench:begin {name} -->", f"<!-- bench:end {name} -->"
    if begin not in text or end not in text:
        raise RuntimeError(f"{doc} has no {begin} … {end} markers")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    Path(doc).write_text(f"{head}{begin}\n{body}\n{end}{tail}", encoding="utf-8")


def report_arguments(parser):
    """The options every script with a table of its own takes: save the run, render a saved one."""
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--from", dest="source", help="report a saved --json file instead of running")
    parser.add_argument("--render", action="store_true", help="write the table into --doc")
    parser.add_argument("--doc", default=str(DEFAULT_DOC), help="default: %(default)s")


def store_arguments(parser, loki=True):
    """loghaul's binary and the PostgreSQL the run's databases are made in, and Loki's binary and
    config for the scripts compared with it."""
    if loki:
        parser.add_argument("--loki", help="Loki's binary, or loki.xz")
        parser.add_argument("--loki-config", help="Loki's config, with DATA_DIR to replace")
    parser.add_argument("--loghaul", help="loghaul's binary (a release build with the bench feature)")
    parser.add_argument("--postgres-url", default=os.environ.get("LOGHAUL_TEST_POSTGRES_URL"),
                        help="a server whose role may create and drop the run's databases (default: "
                        "postgres@ or root@127.0.0.1:5432/test)")


def publish(args, report, block, render):
    """Saves a run's report to `--json`, prints its table, and with `--render` writes the table
    into `--doc` between the block's markers."""
    if args.json and not args.source:
        Path(args.json).write_text(json.dumps(report, indent=1))
    table = render(report)
    print(table)
    if args.render:
        write_block(args.doc, block, table)


def made_by(report):
    """The line under a script's table: the command, when, and on what."""
    machine = report["machine"]
    return (f"`{report['command']}`, {report['started']}: {machine['cores']} cores ({machine['cpu']}), "
            f"PostgreSQL {machine['postgres']['version']}.")


def command_render(options):
    """Writes each benchmark's block between its markers, in the document given and in the
    documents beside it that hold markers too (docs/scaling.md)."""
    main_doc = Path(options.doc)
    docs = [main_doc] + [main_doc.parent / name for name in EXTRA_DOCS if name != main_doc.name]
    texts = {doc: doc.read_text(encoding="utf-8") for doc in docs if doc.exists()}
    found = load_results(options.results)
    if not found:
        sys.exit(f"no results in {options.results}: run `{Path(__file__).name} run` first")
    for name in RENDERERS:
        begin, end = f"<!-- bench:begin {name} -->", f"<!-- bench:end {name} -->"
        holders = [doc for doc, text in texts.items() if begin in text and end in text]
        if not holders:
            print(f"no document has {begin} … {end} markers: {name} not written", file=sys.stderr)
            continue
        if name not in found:
            print(f"no results for {name}: its table is left as it was", file=sys.stderr)
            continue
        block = render_block(name, found[name])
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
        for doc in holders:
            texts[doc] = pattern.sub(lambda _: f"{begin}\n{block}\n{end}", texts[doc], count=1)
        if name in FIGURES:
            file_name, draw = FIGURES[name]
            figure = main_doc.parent / "bench" / file_name
            figure.write_text(draw(found[name]), encoding="utf-8")
            print(f"wrote {figure}", file=sys.stderr)
    for doc, text in texts.items():
        doc.write_text(text, encoding="utf-8")
        print(f"wrote {doc}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    results = dict(default=str(DEFAULT_RESULTS), help="results directory (default: %(default)s)")
    doc = dict(default=str(DEFAULT_DOC), help="document to write the tables into")
    for mode in ["run", "all"]:
        p = sub.add_parser(mode, help="run the benchmarks" + (", then render" if mode == "all" else ""))
        p.add_argument("--results", **results)
        p.add_argument("--binary", default=str(DEFAULT_BINARY), help="the loghaul binary")
        p.add_argument(
            "--duration",
            default=os.environ.get("LOGHAUL_BENCH_DURATION", "15s"),
            help="--duration of each measurement (env LOGHAUL_BENCH_DURATION; default %(default)s)",
        )
        p.add_argument(
            "--repeat",
            type=int,
            default=int(os.environ.get("LOGHAUL_BENCH_REPEAT", "3")),
            help="runs of the benchmarks reported as medians (env LOGHAUL_BENCH_REPEAT; default %(default)s)",
        )
        p.add_argument(
            "--shipper-records",
            type=int,
            default=int(os.environ.get("LOGHAUL_BENCH_SHIPPER_RECORDS", "1000000")),
            help="records per bench-shipper run (env LOGHAUL_BENCH_SHIPPER_RECORDS; default %(default)s)",
        )
        p.add_argument("--only", help="comma-separated benchmarks: " + ",".join(RENDERERS))
        p.add_argument(
            "--postgres",
            default=os.environ.get("LOGHAUL_BENCH_POSTGRES", DEFAULT_POSTGRES),
            help="server URL without a database; a fresh database is created per run "
            "(env LOGHAUL_BENCH_POSTGRES; default %(default)s)",
        )
        p.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL benchmarks")
        p.add_argument(
            "--citus",
            default=os.environ.get("LOGHAUL_BENCH_CITUS"),
            help="a Citus coordinator's URL without a database, whose postgres database lists "
            "its workers; the citus benchmark is skipped without it (env LOGHAUL_BENCH_CITUS)",
        )
        if mode == "all":
            p.add_argument("--doc", **doc)
    p = sub.add_parser("render", help="write the tables from a results directory")
    p.add_argument("--results", **results)
    p.add_argument("--doc", **doc)
    options = parser.parse_args()
    if options.mode in ("run", "all"):
        command_run(options)
    if options.mode in ("render", "all"):
        command_render(options)


if __name__ == "__main__":
    main()
