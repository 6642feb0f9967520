#!/usr/bin/env python3
"""Times loghaul's LogQL metric queries against Grafana Loki's, on the same data and machine.

    python3 docs/bench/loki_query.py --loki loki.xz --loki-config loki.yaml \\
        --loghaul target/release/loghaul [--scale 700] [--rounds 3] [--json FILE] [--render]
    python3 docs/bench/loki_query.py --from FILE --render     # the table from a saved run

Starts Grafana Loki, loghaul on SQLite and loghaul on PostgreSQL (a database made for the run and
dropped after it) as the Loki conformance test does (tests/loki_conformance), pushes its data set
made `--scale` times larger to all three, and asks each every metric query of its checks: the
`m_` range queries and the instant metric queries. Each round asks every query of the three
stores one after the other, the order rotated from round to round; a request is timed wall-clock,
from sending it to reading the last byte of its answer. The report is, per query, each store's
median time, loghaul's ratio to Loki on each store, and whether loghaul's answer (from the first
round) is Loki's after the conformance test's normalisation. `--render` writes the table between
the `<!-- bench:begin loki-query -->` and `<!-- bench:end loki-query -->` markers of
docs/benchmarks.md, adding a section with the markers if the document has none.

Neither store answers from a results cache: loghaul has none, and Loki is started with
`-querier.cache-results=false -querier.cache-instant-metric-results=false`, which its running
config (`/config`) is checked to show. Python 3 standard library only; needs `psql`.
"""

import argparse
import datetime
import json
import lzma
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "loki_conformance"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare  # noqa: E402
import conformance  # noqa: E402
import data  # noqa: E402
import run as bench  # noqa: E402
from checks import CHECKS  # noqa: E402

BLOCK = "loki-query"
STORES = ["loki", "sqlite", "postgres"]
NAMES = {"loki": "Loki", "sqlite": "loghaul on SQLite", "postgres": "loghaul on PostgreSQL"}
LOKI_FLAGS = ["-querier.cache-results=false", "-querier.cache-instant-metric-results=false"]
# Entries per push request: well under the request sizes both servers accept.
PUSH_ENTRIES = 5000

SECTION = """## LogQL metric queries against Grafana Loki

Every metric query of the [Loki conformance test](grafana.md) (`tests/loki_conformance/checks.py`:
the `m_` range queries and the `i_` instant ones), asked of Grafana Loki, loghaul on SQLite and
loghaul on PostgreSQL, each holding the same data on the same machine: the conformance data set
with every stream's entries multiplied (`--scale`), two tenants and 15 streams over one hour. Loki
is the single binary with the reference configuration, its results cache off, the hour's entries
still in its ingester's memory, as the last hour's logs are; loghaul has no results cache, and
runs with the series limit of Loki's configuration (`--max-query-series` set to its
`max_query_series`). The hour is past, so loghaul on PostgreSQL has given it its
[indexes](architecture.md#storage-and-indexes) before the first query (the script waits for
them), and does not seal it during the run (`--seal-after 0s`); a query over the hour still being
written reads the whole hour. Each round asks every query of the three in turn, the order rotated
from round to round, three rounds; a time is the wall-clock time of one HTTP request, from sending it to reading the last byte of the
answer, and the table gives each store's median. A ratio is loghaul's median over Loki's: below 1,
loghaul answered faster. "Same answer" compares the first round's answers as the conformance test
does; a query that differs is listed with its reason in [Grafana](grafana.md). The rows are sorted
by the larger of the two ratios, worst first. A time with a status in brackets was not answered
with 200 (a query loghaul refuses, say), and has no ratio; a query a store does not answer within
`--timeout` (default 30 s) is not asked again in the later rounds.

```sh
cargo build --release
python3 docs/bench/loki_query.py --loki loki.xz --loki-config loki.yaml \\
    --loghaul target/release/loghaul --json loki-query.json --render
```

`--loki` is Loki's binary, or `loki.xz`; `--loki-config` its configuration with `DATA_DIR` to
replace, as the conformance test takes them. `--postgres-url` (or `LOGHAUL_TEST_POSTGRES_URL`) names
the PostgreSQL server whose role may create the run's database, dropped after it. `--scale`
(default 700, about 200,000 entries), `--rounds` (default 3) and `--only ID,ID…` change what is
run; `--from FILE --render` writes the table from a saved `--json` file without running anything.

<!-- bench:begin loki-query -->
<!-- bench:end loki-query -->
"""


# ---------------------------------------------------------------------------------------------
# The stores


class _LokiFlags(conformance.Process):
    def __init__(self, name, argv, env=None):
        super().__init__(name, argv + LOKI_FLAGS, env)


class Loki(conformance.Loki, _LokiFlags):
    """The conformance test's Loki, started with LOKI_FLAGS after its config: `conformance.Loki`
    hands its command line to the next class of this one's method order, `_LokiFlags`."""


def loki_series_limit(config):
    """Loki's `max_query_series` in `config` (500, its default, when not set): loghaul is run
    with the same limit, so that neither refuses what the other answers for that reason."""
    found = re.search(r"^\s*max_query_series:\s*(\d+)", Path(config).read_text(), re.M)
    return int(found.group(1)) if found else 500


def loki_binary(path, directory):
    """An executable Loki: `path` itself, or `path` unpacked into `directory` if it is .xz."""
    if not path.endswith(".xz"):
        return path
    binary = os.path.join(directory, "loki")
    with lzma.open(path) as packed, open(binary, "wb") as out:
        shutil.copyfileobj(packed, out, 1 << 20)
    os.chmod(binary, 0o755)
    return binary


def check_no_results_cache(loki):
    """Fails unless Loki's running config has its query results caches off."""
    with urllib.request.urlopen(f"http://{loki.http}/config", timeout=10) as answer:
        config = answer.read().decode()
    for key in ("cache_results", "cache_instant_metric_results"):
        values = re.findall(rf"^\s*{key}:\s*(\S+)", config, re.MULTILINE)
        if values != ["false"]:
            raise RuntimeError(f"Loki's running config has {key}: {values or 'nothing'}")


def version(binary):
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
        return done.stdout.strip() or None
    except OSError:
        return None


def peak_rss(process):
    try:
        with open(f"/proc/{process.process.pid}/status", encoding="utf-8") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# ---------------------------------------------------------------------------------------------
# Data


def push_requests(streams):
    """(tenant, body) pairs of at most PUSH_ENTRIES entries each, every stream's entries in
    order across them."""
    for tenant in data.TENANTS:
        batch, size = [], 0
        for s in (s for s in streams if s.tenant == tenant):
            for i in range(0, len(s.entries), PUSH_ENTRIES):
                part = data.Stream(tenant, s.labels)
                part.entries = s.entries[i:i + PUSH_ENTRIES]
                batch.append(part)
                size += len(part.entries)
                if size >= PUSH_ENTRIES:
                    yield tenant, data.push_bodies(batch)[tenant]
                    batch, size = [], 0
        if batch:
            yield tenant, data.push_bodies(batch)[tenant]


def stored_count(base, tenant, anchor_ns):
    """The entries a store counts for `tenant` over the data's hour, or None."""
    status, body = conformance.get(base, "/loki/api/v1/query", [
        ("query", 'sum(count_over_time({service_name=~".+"}[2h]))'),
        ("time", str(anchor_ns + 1))], {"X-Scope-OrgID": tenant})
    if status != 200:
        return None
    result = json.loads(body)["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def wait_for_data(name, base, counts, anchor_ns, seconds=300):
    deadline = time.monotonic() + seconds
    while True:
        got = {tenant: stored_count(base, tenant, anchor_ns) for tenant in counts}
        if got == counts:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} counts {got} entries of {counts} pushed after {seconds} s")
        time.sleep(1)


def wait_for_index(store, anchor_ns):
    """Waits until loghaul on PostgreSQL has given the data's hour its indexes, which it does
    once the hour has been over for five minutes."""
    due = anchor_ns / 1e9 + 5 * 60
    deadline = max(time.time(), due) + 120
    while True:
        with urllib.request.urlopen(f"http://{store.metrics}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        if re.search(r"^loghaul_hours_indexed_total [1-9]", text, re.M):
            return
        if time.time() > deadline:
            raise RuntimeError("loghaul on PostgreSQL did not index the data's hour")
        time.sleep(2)


# ---------------------------------------------------------------------------------------------
# Queries


def metric_checks(only=None):
    """The checks that ask a metric query: the `m_` ones and the instant metric queries (every
    instant query whose LogQL is not a log selector). The `err_` checks time nothing useful."""
    chosen = []
    for check in CHECKS:
        if check["path"] not in ("query_range", "query") or check["id"].startswith("err_"):
            continue
        query = dict(check["params"]).get("query", "")
        if check["id"].startswith("m_") or not query.lstrip().startswith("{"):
            chosen.append(check)
    if only:
        wanted = set(only.split(","))
        unknown = wanted - {c["id"] for c in chosen}
        if unknown:
            raise SystemExit(f"not metric checks: {', '.join(sorted(unknown))}")
        chosen = [c for c in chosen if c["id"] in wanted]
    return chosen


def short_diff(expected, actual, most=40_000):
    """The conformance test's diff of two answers, unless they are too long for a line diff
    (its time grows with the square of their length): then their sizes only."""
    sizes = [len(json.dumps(answer)) for answer in (expected, actual)]
    if max(sizes) > most:
        return [f"answers of {sizes[0]:,} and {sizes[1]:,} bytes (Loki first), too long to diff"]
    return compare.diff(expected, actual)


def timed(base, check, anchor_ns, timeout):
    params = conformance.absolute(check["params"], anchor_ns)
    headers = {"X-Scope-OrgID": check["tenant"], **check["headers"]}
    started = time.perf_counter()
    status, body = conformance.get(base, "/loki/api/v1/" + check["path"], params, headers, timeout)
    return time.perf_counter() - started, status, body


def measure(checks, targets, anchor_ns, rounds, timeout):
    """{id: {"times": {store: [s…]}, "status": {store: [code…]}, "same": {store: bool},
    "errors": {store: text}}}. Status 0: no answer within `timeout` (or the connection closed
    without one); such a query is not asked again in the later rounds, which would only wait
    for the same timeout again."""
    results = {c["id"]: {"times": {s: [] for s in STORES}, "status": {s: [] for s in STORES},
                         "same": {}, "diff": {}, "errors": {}} for c in checks}
    for r in range(rounds):
        order = STORES[r % len(STORES):] + STORES[:r % len(STORES)]
        started = time.monotonic()
        for check in checks:
            result = results[check["id"]]
            if any(0 in codes for codes in result["status"].values()):
                continue
            answers = {}
            for store in order:
                seconds, status, body = timed(targets[store], check, anchor_ns, timeout)
                result["times"][store].append(seconds)
                result["status"][store].append(status)
                if status != 200 and store not in result["errors"]:
                    result["errors"][store] = body.decode(errors="replace").strip()[:300]
                if r == 0:
                    answers[store] = conformance.normalise(check, status, body)
            if r == 0:
                result["same"] = {s: compare.equal(answers["loki"], answers[s]) for s in STORES[1:]}
                # What differed, for the reader of the JSON file: the table says only "no".
                result["diff"] = {s: short_diff(answers["loki"], answers[s])
                                  for s in STORES[1:] if not result["same"][s]}
        print(f"== round {r + 1} of {rounds} ({', '.join(order)}): {time.monotonic() - started:.0f}s",
              flush=True)
    return results


# ---------------------------------------------------------------------------------------------
# The report


def rows_of(report):
    """Per query: id, medians, ratios (None unless both answered 200 every round), statuses."""
    rows = []
    for query in report["queries"]:
        medians = {s: statistics.median(query["times"][s]) for s in STORES}
        ok = {s: all(code == 200 for code in query["status"][s]) for s in STORES}
        ratios = {s: (medians[s] / medians["loki"] if ok[s] and ok["loki"] and medians["loki"] > 0
                      else None) for s in STORES[1:]}
        rows.append({"id": query["id"], "medians": medians, "ok": ok, "ratios": ratios,
                     "status": {s: sorted(set(query["status"][s]) - {200}) for s in STORES},
                     "same": query["same"]})

    def worst(row):
        known = [v for v in row["ratios"].values() if v is not None]
        return (-max(known), row["id"]) if known else (0, row["id"])
    return sorted(rows, key=worst)


def summary(rows):
    """Per loghaul store: (queries with a ratio, at or under Loki's time, median ratio,
    geometric mean ratio, queries not answered 200 by some store)."""
    out = {}
    for store in STORES[1:]:
        ratios = [row["ratios"][store] for row in rows if row["ratios"][store] is not None]
        out[store] = {
            "compared": len(ratios),
            "at_or_under_loki": sum(1 for r in ratios if r <= 1),
            "median_ratio": statistics.median(ratios) if ratios else None,
            "geometric_mean_ratio": math.exp(statistics.fmean(math.log(r) for r in ratios))
            if ratios and all(r > 0 for r in ratios) else None,
            "not_200": sum(1 for row in rows if not row["ok"][store]),
        }
    out["loki_not_200"] = sum(1 for row in rows if not row["ok"]["loki"])
    return out


def seconds(row, store):
    text = f"{row['medians'][store]:.3f}"
    if row["status"][store]:
        text += f" ({', '.join(str(code) if code else 'no answer' for code in row['status'][store])})"
    return text


def ratio(value):
    return "-" if value is None else f"{value:.2f}"


def same(row, store):
    return "yes" if row["same"].get(store) else "no"


def summary_lines(report, rows):
    totals = summary(rows)
    lines = []
    for store in STORES[1:]:
        t = totals[store]
        line = (f"{NAMES[store]}: at or under Loki's time on {t['at_or_under_loki']} of "
                f"{t['compared']} queries")
        if t["median_ratio"] is not None:
            line += (f"; ratio median {t['median_ratio']:.2f}, geometric mean "
                     f"{t['geometric_mean_ratio']:.2f}")
        if t["not_200"]:
            line += f"; {t['not_200']} not answered with 200"
        lines.append(line + ".")
    if totals["loki_not_200"]:
        lines.append(f"Loki did not answer {totals['loki_not_200']} queries with 200.")
    return lines


def print_report(report):
    rows = rows_of(report)
    header = ["query", "Loki s", "SQLite s", "÷ Loki", "PG s", "÷ Loki", "same S/P"]
    cells = [[row["id"], seconds(row, "loki"), seconds(row, "sqlite"), ratio(row["ratios"]["sqlite"]),
              seconds(row, "postgres"), ratio(row["ratios"]["postgres"]),
              f"{same(row, 'sqlite')}/{same(row, 'postgres')}"] for row in rows]
    widths = [max(len(str(line[i])) for line in [header, *cells]) for i in range(len(header))]
    for line in [header, *cells]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip())
    for line in summary_lines(report, rows):
        print(line)


def facts_line(report):
    machine = report["machine"]
    parts = [machine["date"], f"{machine['cores']} cores ({machine['cpu']})"]
    if machine.get("memory_gib"):
        parts.append(f"{machine['memory_gib']} GiB of memory")
    if machine.get("postgres"):
        pg = machine["postgres"]
        parts.append(f"PostgreSQL {pg['version']} ({', '.join(f'{k} {v}' for k, v in pg['settings'].items())})")
    if report.get("load_average") is not None:
        parts.append(f"1-minute load average at the start {report['load_average']}")
    return "Measured " + "; ".join(parts) + "."


def not_compared(report, rows):
    """The queries without a ratio, grouped by why, as one paragraph."""
    errors = {q["id"]: q.get("errors", {}) for q in report["queries"]}
    groups = {}
    for row in rows:
        if all(row["ok"].values()):
            continue
        if 0 in row["status"]["loki"]:
            why = f"Loki did not answer within {report['timeout']:.0f} s"
        elif row["ok"]["loki"]:
            store = "sqlite" if not row["ok"]["sqlite"] else "postgres"
            reason = errors[row["id"]].get(store, "").split(";")[0].split("\n")[0][:100]
            why = f"loghaul refused what Loki answered ({reason})"
        elif not any(row["ok"][s] for s in STORES[1:]):
            why = "refused by all three"
        else:
            why = "answered by loghaul, refused by Loki"
        groups.setdefault(why, []).append(f"`{row['id']}`")
    if not groups:
        return None
    return "Not compared: " + "; ".join(f"{why}: {', '.join(ids)}" for why, ids in groups.items()) + "."


def render_block(report):
    rows = rows_of(report)
    header = ["query", "Loki s", "loghaul SQLite s", "÷ Loki", "same answer",
              "loghaul PostgreSQL s", "÷ Loki", "same answer"]
    table = bench.table(header, [
        [f"`{row['id']}`", seconds(row, "loki"), seconds(row, "sqlite"), ratio(row["ratios"]["sqlite"]),
         same(row, "sqlite"), seconds(row, "postgres"), ratio(row["ratios"]["postgres"]),
         same(row, "postgres")] for row in rows])
    counts = report["entries"]
    about = (f"Grafana Loki {report['loki_version']} against {report['loghaul_version'] or 'loghaul'}; "
             f"{sum(counts.values()):,} entries (scale {report['scale']}: "
             + ", ".join(f"{tenant} {n:,}" for tenant, n in counts.items())
             + f"), {len(rows)} queries, {report['rounds']} round{'s' if report['rounds'] != 1 else ''}, "
             f"{report['elapsed_seconds']:.0f} s in all.")
    rss = report.get("peak_rss_bytes") or {}
    if all(rss.get(s) for s in STORES):
        about += (" Peak resident memory at the end: "
                  + ", ".join(f"{NAMES[s]} {rss[s] / 1048576:.0f} MiB" for s in STORES) + ".")
    parts = [facts_line(report), about, table, " ".join(summary_lines(report, rows))]
    parts += [text for text in [not_compared(report, rows)] if text]
    return "\n\n".join(parts + ["```\n$ " + report["command"] + "\n```"])


def render(report, doc):
    begin, end = f"<!-- bench:begin {BLOCK} -->", f"<!-- bench:end {BLOCK} -->"
    text = doc.read_text(encoding="utf-8")
    if begin not in text or end not in text:
        text = text.rstrip("\n") + "\n\n" + SECTION
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    text = pattern.sub(lambda _: f"{begin}\n{render_block(report)}\n{end}", text, count=1)
    doc.write_text(text, encoding="utf-8")
    print(f"wrote {doc}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# The run


def command_line(args):
    """The command as the table shows it: the options that change the figures."""
    parts = ["python3 docs/bench/loki_query.py", f"--scale {args.scale}", f"--rounds {args.rounds}"]
    if args.only:
        parts.append(f"--only {args.only}")
    return " ".join(parts)


def run(args):
    checks = metric_checks(args.only)
    now = time.time_ns()
    anchor = now // (3600 * 10**9) * 3600 * 10**9
    streams = data.generate(anchor, args.scale)
    counts = data.entry_counts(streams)
    print(f"== data: {sum(counts.values()):,} entries in {len(streams)} streams (scale {args.scale}), "
          f"{len(checks)} queries, {args.rounds} rounds", flush=True)

    workdir = tempfile.mkdtemp(prefix="loki-query-bench-")
    database = admin_url = None
    report = None
    begun = time.monotonic()
    try:
        loki = Loki(loki_binary(args.loki, workdir), args.loki_config, workdir)
        check_no_results_cache(loki)
        limits = ["--max-query-series", str(loki_series_limit(args.loki_config))]
        stores = {"sqlite": conformance.Loghaul("loghaul-sqlite", args.loghaul,
                                                f"sqlite://{workdir}/loghaul.db", limits)}
        admin_url = conformance.postgres_admin_url(args.postgres_url)
        database = conformance.create_database(admin_url, "loghaul_loki_query")
        # The data's hour is past: it gets its indexes within seconds, and is not sealed halfway
        # through the run.
        stores["postgres"] = conformance.Loghaul("loghaul-postgres", args.loghaul,
                                                 conformance.with_database(admin_url, database),
                                                 limits + ["--seal-after", "0s",
                                                           "--seal-interval", "10s"])
        processes = {"loki": loki, **stores}
        targets = {name: p.http for name, p in processes.items()}

        started = time.monotonic()
        for tenant, body in push_requests(streams):
            for name, base in targets.items():
                status, text = conformance.push(base, tenant, body)
                if status not in (200, 204):
                    raise RuntimeError(f"push to {name} as {tenant}: {status} {text[:300]!r}")
        for name, base in targets.items():
            wait_for_data(name, base, counts, anchor)
        wait_for_index(stores["postgres"], anchor)
        print(f"== pushed to all three and counted in {time.monotonic() - started:.0f}s", flush=True)

        load = bench.load_average()
        results = measure(checks, targets, anchor, args.rounds, args.timeout)
        for name, process in processes.items():
            if process.died():
                raise RuntimeError(f"{name} exited during the run:\n{process.tail()}")
        rss = {name: peak_rss(p) for name, p in processes.items()}
        postgres = bench.postgres_facts(admin_url.rpartition("/")[0])
        report = {
            "benchmark": BLOCK,
            "command": command_line(args),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": bench.machine_facts(postgres),
            "load_average": load,
            "loki_version": args.loki_version,
            "loghaul_version": version(args.loghaul),
            "scale": args.scale,
            "rounds": args.rounds,
            "timeout": args.timeout,
            "entries": counts,
            "peak_rss_bytes": rss,
            "queries": [{"id": c["id"], "path": c["path"], "query": dict(c["params"]).get("query"),
                         **results[c["id"]]} for c in checks],
        }
    finally:
        for process in reversed(conformance.STARTED):
            code = process.stop()
            if process.name.startswith("loghaul") and code not in (0, None):
                print(f"WARNING {process.name} exited {code}:\n{process.tail()}")
        if database and admin_url:
            dropped = conformance.psql(admin_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
            if dropped.returncode != 0:
                print(f"WARNING could not drop {database}: {dropped.stderr.strip()}")
        shutil.rmtree(workdir, ignore_errors=True)
    report["elapsed_seconds"] = time.monotonic() - begun
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench.store_arguments(parser)
    parser.add_argument("--loki-version", default="3.7.6",
                        help="the version the table names (the binary may not say; default %(default)s)")
    parser.add_argument("--scale", type=int, default=700,
                        help="entries per stream, times the conformance data set's (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, medians taken (default %(default)s)")
    parser.add_argument("--only", help="comma-separated check ids")
    parser.add_argument("--timeout", type=float, default=30,
                        help="seconds a request may take; a query a store does not answer in time is "
                        "not asked again (default %(default)s)")
    bench.report_arguments(parser)
    args = parser.parse_args()

    if args.source:
        report = json.loads(Path(args.source).read_text(encoding="utf-8"))
    else:
        missing = [f"--{name}" for name in ("loki", "loki_config", "loghaul") if not getattr(args, name)]
        if missing:
            parser.error(f"{', '.join(m.replace('_', '-') for m in missing)} needed (or --from FILE)")
        # SIGTERM unwinds like Ctrl-C, so that every process and the database go.
        signal.signal(signal.SIGTERM, conformance.interrupted)
        try:
            report = run(args)
        except KeyboardInterrupt:
            print("interrupted")
            return 130
        except RuntimeError as error:
            print(f"FAIL {error}")
            return 1
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print_report(report)
    print(f"== {report['elapsed_seconds']:.0f}s in all")
    if args.render:
        render(report, Path(args.doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
