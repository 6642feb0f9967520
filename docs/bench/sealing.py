#!/usr/bin/env python3
"""What sealing costs and gives on PostgreSQL: reads over sealed hours against the same reads over
heap hours, and ingest while a seal runs against ingest without one.

    python3 docs/bench/sealing.py --loghaul target/release/loghaul [--rows 2000000] \\
        [--records 3000000] [--rounds 3] [--json FILE] [--render]
    python3 docs/bench/sealing.py --from FILE --render     # the tables from a saved run

- `reads`: two databases made for the run (dropped after it), each loaded by
  `loghaul bench-query --rows N` (synthetic rows over 6 days, 10 tenants). One of them is sealed
  by `loghaul serve --seal-after 1h --seal-interval 5s --seal-busy-percent 100` until no hour
  older than two holds heap rows; the other stays heap, and is served with `--seal-after 0s`
  until every past hour has the indexes a server gives it. Then `bench-query --reuse --json`
  runs on each, alternated, for `--rounds` rounds: each kind of read's p50 and p99 are the
  medians over the rounds.
- `ingest`: a database for each round. Each round preloads an hour to seal (`loghaul bench --protocol loki
  --records M --backdate Kh`, a different hour each round, sealing off), then times
  `loghaul bench --protocol loki --streams 8 --duration 15s` three times: with sealing off, and
  with `--seal-after 1h --seal-interval 1s`, paced (the default `--seal-busy-percent`) and at full
  speed (100), whose first run starts one second after the server does and rewrites the preloaded
  hour while the load runs. Each round starts with the next mode. The figure is records/s
  acknowledged; the ratio is of the medians.

`--render` writes the tables between the `<!-- bench:begin sealing -->` and
`<!-- bench:end sealing -->` markers of docs/benchmarks.md. Needs `psql`, and the
`citus_columnar` extension in the PostgreSQL server (`--postgres-url`, or
`LOGHAUL_TEST_POSTGRES_URL`, or the local server).
"""

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "loki_conformance"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import conformance  # noqa: E402
import run as bench  # noqa: E402

BLOCK = "sealing"


def past_heap_hours(older_than, condition="true"):
    """SQL counting the hour partitions that hold heap rows, began more than `older_than` ago
    (a PostgreSQL interval) and meet `condition` (on `c`, the partition's pg_class row)."""
    return f"""
SELECT count(*) FROM pg_partition_tree('logs') t JOIN pg_class c ON c.oid = t.relid
JOIN pg_am a ON a.oid = c.relam
WHERE t.isleaf AND a.amname = 'heap' AND c.relname ~ '^logs_p[0-9]{{8}}_h[0-9]{{2}}$'
  AND to_timestamp(substr(c.relname, 7, 8) || substr(c.relname, 17, 2), 'YYYYMMDDHH24')
      < now() - interval '{older_than}'
  AND pg_relation_size(c.oid) > 0 AND {condition}
"""


# Hours older than this hold no heap row once the sealer has caught up (--seal-after 1h, plus the
# hour still being written).
DUE_HEAP_HOURS = past_heap_hours("2 hours")
# Past hours still without both indexes a server gives them five minutes after they end.
UNINDEXED_HOURS = past_heap_hours("1 hour 5 minutes", """(
    SELECT count(*) FROM pg_index x JOIN pg_class xc ON xc.oid = x.indexrelid
    WHERE x.indrelid = c.oid AND x.indisvalid
      AND xc.relname IN (c.relname || '_service', c.relname || '_labels')) < 2""")
TIERS = """
SELECT a.amname, count(*), sum(pg_total_relation_size(c.oid))::bigint
FROM pg_partition_tree('logs') t JOIN pg_class c ON c.oid = t.relid JOIN pg_am a ON a.oid = c.relam
WHERE t.isleaf GROUP BY 1
"""


def loghaul(args, *argv):
    done = subprocess.run([args.loghaul, *argv], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"loghaul {' '.join(argv[:2])} exited {done.returncode}:\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")
    return bench.last_json_line(done.stdout)


def tiers(url):
    """{access method: {"partitions": n, "bytes": b}} of the leaf partitions of `logs`."""
    out = {}
    for line in conformance.psql_value(url, TIERS).splitlines():
        method, count, size = line.split("|")
        out[method] = {"partitions": int(count), "bytes": int(size)}
    return out


def serve_until_done(args, url, options, waiting, what):
    """Runs a server with `options` on `url` until `waiting` counts nothing left; its seconds."""
    server = subprocess.Popen(
        [args.loghaul, "serve", "--database-url", url, "--listen", "127.0.0.1:0",
         "--metrics-listen", "127.0.0.1:0", "--http-listen", "off", "--console-listen", "off",
         *options],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.monotonic()
    try:
        while int(conformance.psql_value(url, waiting)) > 0:
            if server.poll() is not None:
                raise RuntimeError(f"the {what} server exited {server.returncode}")
            if time.monotonic() - started > args.timeout:
                raise RuntimeError(f"hours still not {what} after {args.timeout} s")
            time.sleep(2)
        return time.monotonic() - started
    finally:
        server.terminate()
        server.wait(60)


def seal_all(args, url):
    """Seals every due hour of `url`, as a server does; the seconds it took."""
    return serve_until_done(args, url, ["--seal-after", "1h", "--seal-interval", "5s",
                                        "--seal-busy-percent", "100"], DUE_HEAP_HOURS, "sealed")


def index_all(args, url):
    """Gives every past hour of `url` the indexes a server that does not seal gives it; the
    seconds it took."""
    return serve_until_done(args, url, ["--seal-after", "0s", "--seal-interval", "5s"],
                            UNINDEXED_HOURS, "indexed")


def measure_reads(args, admin_url):
    suffix = f"{os.getpid()}_{random.randrange(10**6)}"
    names = {"heap": f"loghaul_seal_reads_heap_{suffix}", "sealed": f"loghaul_seal_reads_sealed_{suffix}"}
    urls = {tier: conformance.with_database(admin_url, name) for tier, name in names.items()}
    try:
        for name in names.values():
            conformance.psql_value(admin_url, f"CREATE DATABASE {name}")
        for tier, url in urls.items():
            print(f"== reads: loading {args.rows:,} rows into the {tier} database", flush=True)
            loghaul(args, "bench-query", "--database-url", url, "--rows", str(args.rows),
                    "--queries", "10", "--json")
        seconds = seal_all(args, urls["sealed"])
        print(f"== reads: sealed in {seconds:.0f} s", flush=True)
        # The heap is read as a server leaves it: past hours indexed.
        indexed = index_all(args, urls["heap"])
        print(f"== reads: heap hours indexed in {indexed:.0f} s", flush=True)
        runs = {tier: [] for tier in urls}
        for r in range(args.rounds):
            for tier, url in urls.items():
                runs[tier].append(loghaul(args, "bench-query", "--database-url", url, "--reuse",
                                          "--queries", str(args.queries), "--json"))
            print(f"== reads: round {r + 1} of {args.rounds}", flush=True)
        kinds = {}
        for tier, reports in runs.items():
            for report in reports:
                for t in report["timings"]:
                    entry = kinds.setdefault(t["name"], {})
                    entry.setdefault(tier, {"p50_ms": [], "p99_ms": []})
                    entry[tier]["p50_ms"].append(t["p50_ms"])
                    entry[tier]["p99_ms"].append(t["p99_ms"])
        return {"rows": args.rows, "seal_seconds": seconds, "index_seconds": indexed,
                "tiers": {tier: tiers(url) for tier, url in urls.items()},
                "kinds": [{"name": name, **{tier: {k: statistics.median(v) for k, v in values.items()}
                                            for tier, values in entry.items()}}
                          for name, entry in kinds.items()]}
    finally:
        for name in names.values():
            conformance.psql(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def measure_ingest(args, admin_url):
    sealing = ["--server-arg=--seal-after=1h", "--server-arg=--seal-interval=1s"]
    modes = {"off": ["--server-arg=--seal-after=0s"],
             "paced": sealing,
             "full speed": [*sealing, "--server-arg=--seal-busy-percent=100"]}
    rates = {mode: [] for mode in modes}
    for r in range(args.rounds):
        # A database of its own each round: every run adds to the hour being written, and a
        # table that grows from round to round would make each round slower than the one before.
        name = f"loghaul_seal_ingest_{os.getpid()}_{random.randrange(10**6)}"
        url = conformance.with_database(admin_url, name)
        common = ["bench", "--database-url", url, "--protocol", "loki", "--streams", "8", "--json"]
        try:
            conformance.psql_value(admin_url, f"CREATE DATABASE {name}")
            loghaul(args, *common, "--records", str(args.records), "--backdate", f"{r + 3}h",
                    *modes["off"])
            # Each round starts with another mode: every run adds to the hour being written, and
            # a mode always run first would always get the emptiest table.
            order = list(modes)[r % len(modes):] + list(modes)[:r % len(modes)]
            for mode in order:
                report = loghaul(args, *common, "--duration", args.duration, *modes[mode])
                rates[mode].append(report["runs"][0]["records_per_sec"])
        finally:
            conformance.psql(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        print(f"== ingest: round {r + 1} of {args.rounds}: "
              + ", ".join(f"{m} {v[-1]:,.0f}/s" for m, v in rates.items()), flush=True)
    return {"records": args.records, "duration": args.duration, "rates": rates}


def render_block(report):
    reads, ingest = report.get("reads"), report.get("ingest")
    lines = []
    if reads:
        lines += [f"Reads, `bench-query` over {reads['rows']:,} rows: heap hours against the same rows "
                  f"sealed (sealing took {reads['seal_seconds']:.0f} s; "
                  + "; ".join(f"{tier}: " + ", ".join(
                      f"{method} {v['partitions']} partitions {v['bytes'] / 2**20:.0f} MiB"
                      for method, v in sorted(t.items()))
                      for tier, t in reads["tiers"].items()) + ").",
                  "",
                  "| read | heap p50 ms | sealed p50 ms | sealed ÷ heap | heap p99 ms | sealed p99 ms |",
                  "|---|---|---|---|---|---|"]
        ratios = []
        for k in reads["kinds"]:
            if "heap" not in k or "sealed" not in k:
                continue
            h, s = k["heap"], k["sealed"]
            ratios.append(s["p50_ms"] / h["p50_ms"])
            lines.append(f"| {k['name']} | {h['p50_ms']:.2f} | {s['p50_ms']:.2f} | "
                         f"{ratios[-1]:.2f} | {h['p99_ms']:.2f} | {s['p99_ms']:.2f} |")
        lines += ["", f"Sealed ÷ heap, p50: median {statistics.median(ratios):.2f} over {len(ratios)} "
                  f"kinds of read, at or under 1 on {sum(r <= 1 for r in ratios)}.", ""]
    if ingest:
        off = statistics.median(ingest["rates"]["off"])
        lines += [f"Ingest (Loki push, 8 streams, {ingest['duration']}) while a seal rewrites "
                  f"{ingest['records']:,} rows of a past hour, against no seal: paced is the "
                  "default `--seal-busy-percent`, full speed is 100.",
                  "",
                  "| sealing | records/s (rounds) | median | ÷ off |",
                  "|---|---|---|---|",
                  *[f"| {mode} | {', '.join(f'{v:,.0f}' for v in values)} | "
                    f"{statistics.median(values):,.0f} | {statistics.median(values) / off:.2f} |"
                    for mode, values in ingest["rates"].items()],
                  ""]
    lines.append(bench.made_by(report))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench.store_arguments(parser, loki=False)
    parser.add_argument("--rows", type=int, default=2_000_000, help="bench-query rows (default %(default)s)")
    parser.add_argument("--queries", type=int, default=100, help="bench-query queries per kind (default %(default)s)")
    parser.add_argument("--records", type=int, default=3_000_000,
                        help="records of the hour a seal rewrites during the ingest runs (default %(default)s)")
    parser.add_argument("--duration", default="15s", help="each ingest run (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, medians taken (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds the sealing may take")
    parser.add_argument("--only", choices=["reads", "ingest"], help="one part")
    bench.report_arguments(parser)
    args = parser.parse_args()
    if args.source:
        report = json.loads(Path(args.source).read_text())
    else:
        if not args.loghaul:
            parser.error("--loghaul is needed to run")
        admin_url = conformance.postgres_admin_url(args.postgres_url)
        command = (f"python3 docs/bench/sealing.py --rows {args.rows} --records {args.records} "
                   f"--rounds {args.rounds}" + (f" --only {args.only}" if args.only else ""))
        report = {"benchmark": BLOCK, "command": command,
                  "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "machine": bench.machine_facts(bench.postgres_facts(admin_url.rpartition("/")[0]))}
        if args.only != "ingest":
            report["reads"] = measure_reads(args, admin_url)
        if args.only != "reads":
            report["ingest"] = measure_ingest(args, admin_url)
    bench.publish(args, report, BLOCK, render_block)


if __name__ == "__main__":
    main()
