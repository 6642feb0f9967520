#!/usr/bin/env python3
"""Disk per log line: loghaul on PostgreSQL after sealing against Grafana Loki after a flush.

    python3 docs/bench/storage.py --loki loki.xz --loki-config loki.yaml \\
        --loghaul target/release/loghaul [--records 2000000] [--json FILE] [--render]
    python3 docs/bench/storage.py --from FILE --render     # the table from a saved run

Two data sets, each pushed to a fresh Loki, to a fresh loghaul on a PostgreSQL database made for
the run (dropped after it) and to a fresh loghaul on SQLite, all through Loki's push API:

- `bench`: `loghaul bench --protocol loki --streams 8 --records N --backdate 2h`, the load
  generator's records (8 services, attributes and trace context as structured metadata), stamped
  two hours back so that their hour is past. The same command, so the same records, to each.
- `conformance`: the Loki conformance test's data set (tests/loki_conformance/data.py) at
  `--scale` (default 700, about 200,000 entries): JSON, logfmt and plain lines with repeated keys,
  15 streams, two tenants, over the hour before the current one.

loghaul runs with `--seal-after 1s --seal-busy-percent 100`, so the hour is sealed at full speed as
soon as the sealer looks. Its figure is the bytes of its log partitions (`pg_total_relation_size`
of every partition of `logs`, indexes and TOAST included) once no heap partition holds a row; the
per-minute rollup (`log_volume`) is given beside it. Loki's is the bytes of its chunks directory
after `POST /flush`, once it stops growing, as its own dashboards count stored chunks; its TSDB
index and WAL are given beside it. SQLite's is its database file with its write-ahead log, once
its server has stopped. `--render` writes the table between the
`<!-- bench:begin storage -->` and `<!-- bench:end storage -->` markers of docs/benchmarks.md.
Needs `psql`, and the `citus_columnar` extension in the PostgreSQL server (`--postgres-url`, or
`LOGHAUL_TEST_POSTGRES_URL`, or the local server).
"""

import argparse
import datetime
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "loki_conformance"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import conformance  # noqa: E402
import data  # noqa: E402
import loki_query  # noqa: E402
import run as bench  # noqa: E402

BLOCK = "storage"
SEAL_FLAGS = ["--seal-after", "1s", "--seal-interval", "1s", "--seal-busy-percent", "100"]


def directory_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def flush_loki(loki, workdir, seconds=300):
    """Flushes Loki's ingester and waits until its chunks directory has stopped growing."""
    request = urllib.request.Request(f"http://{loki.http}/flush", method="POST")
    with urllib.request.urlopen(request, timeout=60) as answer:
        if answer.status not in (200, 204):
            raise RuntimeError(f"Loki /flush answered {answer.status}")
    chunks = os.path.join(workdir, "chunks")
    deadline = time.monotonic() + seconds
    last, stable_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        size = directory_bytes(chunks)
        if size != last:
            last, stable_since = size, time.monotonic()
        elif size > 0 and time.monotonic() - stable_since > 10:
            return
        time.sleep(1)
    raise RuntimeError(f"Loki's chunks directory still changing after {seconds} s")


def loki_bytes(workdir):
    index = sum(directory_bytes(os.path.join(workdir, d)) for d in ("tsdb-shipper-active", "tsdb-shipper-cache", "index"))
    return {"chunks": directory_bytes(os.path.join(workdir, "chunks")), "index": index,
            "wal": directory_bytes(os.path.join(workdir, "wal"))}


LEAVES = """
    SELECT c.oid, am.amname FROM pg_class c JOIN pg_am am ON am.oid = c.relam
    WHERE c.relkind = 'r' AND c.oid IN (
        SELECT inhrelid FROM pg_inherits WHERE inhparent = 'logs'::regclass
        UNION ALL
        SELECT i2.inhrelid FROM pg_inherits i1 JOIN pg_inherits i2 ON i2.inhparent = i1.inhrelid
        WHERE i1.inhparent = 'logs'::regclass)"""


def loghaul_bytes(url):
    sealed = int(conformance.psql_value(url, f"SELECT coalesce(sum(pg_total_relation_size(oid)), 0) FROM ({LEAVES}) x "
                             f"WHERE amname = 'columnar'"))
    empty = int(conformance.psql_value(url, f"SELECT coalesce(sum(pg_total_relation_size(oid)), 0) FROM ({LEAVES}) x "
                            f"WHERE amname = 'heap'"))
    volume = int(conformance.psql_value(url, "SELECT pg_total_relation_size('log_volume')"))
    return {"partitions": sealed, "empty_partitions": empty, "rollup": volume}


def loki_stored(base, tenants, start_ns, end_ns):
    """Lines Loki holds in [start, end): it drops an entry whose stream, time and line it has."""
    total = 0
    for tenant in tenants:
        headers = {"X-Scope-OrgID": tenant} if tenant else {}
        status, body = conformance.get(base, "/loki/api/v1/query", [
            ("query", f'sum(count_over_time({{service_name=~".+"}}[{(end_ns - start_ns) // 10**9}s]))'),
            ("time", str(end_ns))], headers)
        if status != 200:
            raise RuntimeError(f"Loki's count: {status} {body[:300]!r}")
        result = json.loads(body)["data"]["result"]
        total += int(float(result[0]["value"][1])) if result else 0
    return total


def push_bench(args, http):
    """Runs the load generator against a Loki push endpoint; returns the records it acknowledged."""
    command = [args.loghaul, "bench", "--protocol", "loki", "--streams", "8",
               "--records", str(args.records), "--backdate", "2h", "--json",
               "--endpoint", f"http://{http}", "--http-endpoint", f"http://{http}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    run = report["runs"][0]
    if run["rejected"] or run["failed_streams"]:
        raise RuntimeError(f"the load was not all accepted: {run}")
    return run["acked"]


def push_conformance(args, targets):
    anchor = time.time_ns() // (3600 * 10**9) * 3600 * 10**9
    streams = data.generate(anchor, args.scale)
    for tenant, body in loki_query.push_requests(streams):
        for name, base in targets.items():
            status, text = conformance.push(base, tenant, body)
            if status not in (200, 204):
                raise RuntimeError(f"push to {name} as {tenant}: {status} {text[:300]!r}")
    counts = data.entry_counts(streams)
    for name, base in targets.items():
        loki_query.wait_for_data(name, base, counts, anchor)
    return sum(counts.values())


def measure(args, dataset, admin_url):
    """Pushes the data set to a fresh Loki and to loghaul with sealing off, then starts loghaul
    again with sealing on (as an hour is sealed once it is over), waits for the seal and flushes
    Loki."""
    workdir = tempfile.mkdtemp(prefix=f"storage-bench-{dataset}-")
    database = f"loghaul_storage_{os.getpid()}_{random.randrange(10**6)}"
    created = conformance.psql(admin_url, f"CREATE DATABASE {database}")
    if created.returncode != 0:
        raise RuntimeError(f"CREATE DATABASE failed: {created.stderr.strip()}")
    url = conformance.with_database(admin_url, database)
    try:
        loki_dir = os.path.join(workdir, "loki-data")
        os.makedirs(loki_dir)
        loki = conformance.Loki(loki_query.loki_binary(args.loki, workdir), args.loki_config, loki_dir,
                                multi_tenant=dataset != "bench")
        loghaul = conformance.Loghaul("loghaul-postgres", args.loghaul, url, extra=["--seal-after", "0s"])
        sqlite_file = os.path.join(workdir, "loghaul.db")
        sqlite = conformance.Loghaul("loghaul-sqlite", args.loghaul, f"sqlite://{sqlite_file}")
        pushed_at = time.time_ns()
        if dataset == "bench":
            lines = {"loki": push_bench(args, loki.http), "loghaul": push_bench(args, loghaul.http),
                     "sqlite": push_bench(args, sqlite.http)}
            tenants, start = [None], pushed_at - 3 * 3600 * 10**9
        else:
            count = push_conformance(args, {"loki": loki.http, "loghaul": loghaul.http, "sqlite": sqlite.http})
            lines = {"loki": count, "loghaul": count, "sqlite": count}
            tenants, start = list(data.TENANTS), pushed_at - 3 * 3600 * 10**9
        loghaul.stop()
        # Stopped, SQLite has checkpointed its write-ahead log into the file.
        sqlite.stop()
        sqlite_bytes = sum(os.path.getsize(path) for path in
                           (sqlite_file, sqlite_file + "-wal", sqlite_file + "-shm") if os.path.exists(path))
        sealer = conformance.Loghaul("loghaul-sealer", args.loghaul, url, extra=SEAL_FLAGS)
        started = time.monotonic()
        conformance.wait_until_sealed(url, lines["loghaul"], seconds=1800)
        sealed_after = time.monotonic() - started
        flush_loki(loki, loki_dir)
        with urllib.request.urlopen(f"http://{sealer.metrics}/metrics", timeout=10) as answer:
            metrics = answer.read().decode()
        seal = {name: sum(float(line.split()[-1]) for line in metrics.splitlines()
                          if line.startswith(f"loghaul_{name} ") or line.startswith(f"loghaul_{name}{{"))
                for name in ("seal_duration_seconds_sum", "rows_sealed_total", "partitions_sealed_total")}
        stored = {"loghaul": int(conformance.psql_value(url, "SELECT count(*) FROM logs")),
                  "loki": loki_stored(loki.http, tenants, start, time.time_ns())}
        result = {"dataset": dataset, "lines": lines, "stored": stored,
                  "seal_wait_seconds": round(sealed_after, 1), "seal": seal,
                  "loghaul_bytes": loghaul_bytes(url), "loki_bytes": loki_bytes(loki_dir),
                  "sqlite_bytes": sqlite_bytes}
        for process in (loki, sealer):
            if process.died():
                raise RuntimeError(f"{process.name} exited during the run:\n{process.tail()}")
        return result
    finally:
        for process in reversed(conformance.STARTED):
            process.stop()
        conformance.STARTED.clear()
        conformance.psql(admin_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        shutil.rmtree(workdir, ignore_errors=True)


def per_line(result, store):
    """Bytes per line sent: the disk the same load takes (Loki holds fewer lines than it was sent
    when some repeat an earlier line of their stream at the same instant)."""
    if store == "sqlite":
        return result["sqlite_bytes"] / result["lines"]["sqlite"]
    key = {"loghaul": ("loghaul_bytes", "partitions"), "loki": ("loki_bytes", "chunks")}[store]
    return result[key[0]][key[1]] / result["lines"][store]


def render_block(report):
    lines = ["| data set | lines sent | loghaul holds | sealed | bytes/line | Loki holds | chunks | bytes/line | ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        ours, theirs = per_line(r, "loghaul"), per_line(r, "loki")
        lines.append(f"| {r['dataset']} | {r['lines']['loghaul']:,} | {r['stored']['loghaul']:,} | "
                     f"{r['loghaul_bytes']['partitions'] / 2**20:.1f} MiB | {ours:.1f} | {r['stored']['loki']:,} | "
                     f"{r['loki_bytes']['chunks'] / 2**20:.1f} MiB | {theirs:.1f} | {ours / theirs:.2f}× |")
    lines.append("")
    lines.append("Beside those: loghaul's per-minute rollup " + ", ".join(
        f"{r['dataset']} {r['loghaul_bytes']['rollup'] / 2**20:.1f} MiB" for r in report["results"])
        + ", and its empty hourly partitions (created ahead, two small BRIN indexes each) "
        + ", ".join(f"{r['dataset']} {r['loghaul_bytes']['empty_partitions'] / 2**20:.1f} MiB"
                    for r in report["results"])
        + "; Loki's TSDB index " + ", ".join(
        f"{r['dataset']} {r['loki_bytes']['index'] / 2**10:.0f} KiB" for r in report["results"]) + ". "
        + "Sealing took " + ", ".join(
        f"{r['dataset']} {r['seal']['seal_duration_seconds_sum']:.1f} s for {r['seal']['rows_sealed_total']:,.0f} rows"
        for r in report["results"]) + ".")
    if all("sqlite_bytes" in r for r in report["results"]):
        lines.append("")
        lines.append("loghaul on SQLite, which keeps every row as it was written (no sealing), the same "
                     "lines in its database file: " + ", ".join(
                         f"{r['dataset']} {r['sqlite_bytes'] / 2**20:.1f} MiB, {per_line(r, 'sqlite'):.0f} "
                         f"bytes per line ({per_line(r, 'sqlite') / per_line(r, 'loki'):.1f}× Loki's)"
                         for r in report["results"]) + ".")
    lines.append("")
    lines.append(bench.made_by(report))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench.store_arguments(parser)
    parser.add_argument("--records", type=int, default=2_000_000, help="bench data set records (default %(default)s)")
    parser.add_argument("--scale", type=int, default=700, help="conformance data set scale (default %(default)s)")
    parser.add_argument("--only", choices=["bench", "conformance"], help="one data set")
    bench.report_arguments(parser)
    args = parser.parse_args()
    if args.source:
        report = json.loads(Path(args.source).read_text())
    else:
        if not (args.loki and args.loki_config and args.loghaul):
            parser.error("--loki, --loki-config and --loghaul are needed to run")
        admin_url = conformance.postgres_admin_url(args.postgres_url)
        command = f"python3 docs/bench/storage.py --records {args.records} --scale {args.scale}"
        report = {"benchmark": BLOCK, "command": command,
                  "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "machine": bench.machine_facts(bench.postgres_facts(admin_url.rpartition("/")[0])),
                  "results": [measure(args, dataset, admin_url)
                              for dataset in ([args.only] if args.only else ["bench", "conformance"])]}
    bench.publish(args, report, BLOCK, render_block)


if __name__ == "__main__":
    main()
