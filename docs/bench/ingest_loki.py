#!/usr/bin/env python3
"""Ingest against Grafana Loki: the same Loki-push load into Loki and into loghaul on PostgreSQL.

    python3 docs/bench/ingest_loki.py --loki loki.xz --loki-config loki.yaml \\
        --loghaul target/release/loghaul [--duration 15s] [--rounds 3] [--json FILE] [--render]
    python3 docs/bench/ingest_loki.py --from FILE --render     # the table from a saved run

Each round runs `loghaul bench --json --protocol loki --streams 8 --duration D` twice: once
against a fresh Loki (single binary, the given config as it is, its data in a directory made for
the round), once against a loghaul server the benchmark starts on a PostgreSQL database made for
the round (dropped after it). The rounds alternate which goes first, and the ratio is taken round
for round, so that the machine's drift falls on both. The figure is the records each
acknowledged per second of the run. Loki's ingester keeps what it acknowledged in memory and in a
write-ahead log, and writes chunks later, at a flush; loghaul acknowledges once it is committed.

`--render` writes the table between the `<!-- bench:begin ingest-loki -->` and
`<!-- bench:end ingest-loki -->` markers of docs/benchmarks.md. Needs `psql` and a PostgreSQL
server whose role may create databases (`--postgres-url`, `LOGHAUL_TEST_POSTGRES_URL`, or the local
server).
"""

import argparse
import datetime
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "loki_conformance"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import conformance  # noqa: E402
import loki_query  # noqa: E402
import run as bench  # noqa: E402

BLOCK = "ingest-loki"
STREAMS = 8


def load(args, target):
    """One benchmark run: `target` is extra arguments naming where the load goes."""
    command = [args.loghaul, "bench", "--json", "--protocol", "loki", "--streams", str(STREAMS),
               "--duration", args.duration, *target]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    run = bench.last_json_line(done.stdout)["runs"][0]
    if run["rejected"] or run["failed_streams"]:
        raise RuntimeError(f"the load was not all accepted: {run}")
    return {"records_per_sec": run["records_per_sec"], "acked": run["acked"]}


def into_loki(args):
    workdir = tempfile.mkdtemp(prefix="ingest-loki-")
    try:
        loki = conformance.Loki(loki_query.loki_binary(args.loki, workdir), args.loki_config, workdir,
                                multi_tenant=False, patterns=False)
        result = load(args, ["--endpoint", f"http://{loki.http}", "--http-endpoint", f"http://{loki.http}"])
        if loki.died():
            raise RuntimeError(f"Loki exited during the run:\n{loki.tail()}")
        return result
    finally:
        for process in reversed(conformance.STARTED):
            process.stop()
        conformance.STARTED.clear()
        shutil.rmtree(workdir, ignore_errors=True)


def into_loghaul(args, admin_url):
    database = f"loghaul_ingest_{os.getpid()}_{random.randrange(10**6)}"
    created = conformance.psql(admin_url, f"CREATE DATABASE {database}")
    if created.returncode != 0:
        raise RuntimeError(f"CREATE DATABASE failed: {created.stderr.strip()}")
    try:
        return load(args, ["--database-url", conformance.with_database(admin_url, database)])
    finally:
        conformance.psql(admin_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def render_block(report):
    rounds = report["rounds"]
    lines = ["| round | first | Loki records/s | loghaul (PostgreSQL) records/s | loghaul ÷ Loki |",
             "|---|---|---|---|---|"]
    for n, r in enumerate(rounds, 1):
        lines.append(f"| {n} | {r['first']} | {r['loki']['records_per_sec']:,.0f} | "
                     f"{r['loghaul']['records_per_sec']:,.0f} | {r['ratio']:.2f} |")
    median = statistics.median(r["ratio"] for r in rounds)
    lines.append("")
    lines.append(f"loghaul ÷ Loki, median of the rounds' ratios: **{median:.2f}**.")
    lines.append("")
    lines.append(bench.made_by(report))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench.store_arguments(parser)
    parser.add_argument("--duration", default="15s", help="each run's load (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="default %(default)s")
    bench.report_arguments(parser)
    args = parser.parse_args()
    if args.source:
        report = json.loads(Path(args.source).read_text())
    else:
        if not (args.loki and args.loki_config and args.loghaul):
            parser.error("--loki, --loki-config and --loghaul are needed to run")
        admin_url = conformance.postgres_admin_url(args.postgres_url)
        report = {"benchmark": BLOCK,
                  "command": f"python3 docs/bench/ingest_loki.py --duration {args.duration} --rounds {args.rounds}",
                  "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "machine": bench.machine_facts(bench.postgres_facts(admin_url.rpartition("/")[0])),
                  "rounds": []}
        for n in range(args.rounds):
            order = ["loki", "loghaul"] if n % 2 == 0 else ["loghaul", "loki"]
            measured = {}
            for store in order:
                measured[store] = into_loki(args) if store == "loki" else into_loghaul(args, admin_url)
                print(f"round {n + 1}: {store} {measured[store]['records_per_sec']:,.0f} records/s",
                      file=sys.stderr, flush=True)
            measured["first"] = order[0]
            measured["ratio"] = measured["loghaul"]["records_per_sec"] / measured["loki"]["records_per_sec"]
            report["rounds"].append(measured)
    bench.publish(args, report, BLOCK, render_block)


if __name__ == "__main__":
    main()
