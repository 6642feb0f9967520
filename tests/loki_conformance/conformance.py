#!/usr/bin/env python3
"""loghaul's Loki query API against the real Grafana Loki as the oracle.

Starts Loki (multi-tenant: `auth_enabled: true`), loghaul on SQLite and loghaul on PostgreSQL (a
database created for the run and dropped after it), pushes the same data set (data.py) to all
three, asks each the same checks (checks.py), and compares every loghaul answer with Loki's after
normalising what differs in shape only (compare.py).

A check whose answers differ fails the run unless docs/grafana.md lists its id, with a reason, in
its table of deliberate differences or of open differences. Prints PASS/FAIL per check and store,
a compact diff for each difference, and a summary per store.

Usage: conformance.py --loki LOKI_BINARY --loghaul LOGHAUL_BINARY [--postgres-url URL]
                      [--docs docs/grafana.md] [--only ID,ID…] [--verbose]
Standard library only; PostgreSQL databases are made and dropped with `psql`.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque

import compare
import data
import wsclient
from checks import CHECKS, Rel

POSTGRES_CANDIDATES = ["postgres://postgres@127.0.0.1:5432/test", "postgres://root@127.0.0.1:5432/test"]


# ---- processes ---------------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Every process started, stopped at the end of the run whatever happens.
STARTED = []


class Process:
    """A child process whose last lines of output are kept for a report."""

    def __init__(self, name, argv, env=None):
        self.name = name
        self.log = deque(maxlen=40)
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        text=True, env=env, start_new_session=True)
        STARTED.append(self)
        self.events = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stderr:
            self.log.append(line.rstrip())
            self.on_line(line)
        self.ready.set()

    def on_line(self, line):
        pass

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def died(self):
        return self.process.poll() is not None

    def tail(self):
        return "\n".join(f"   | {line}" for line in self.log)


class Loghaul(Process):
    """`loghaul serve` on `database_url`, its listeners on ephemeral loopback ports, X-Scope-OrgID
    naming the tenant (no API keys)."""

    def __init__(self, name, binary, database_url, extra=()):
        self.http = None
        self.metrics = None
        super().__init__(name, [
            binary, "serve",
            "--database-url", database_url,
            "--listen", "127.0.0.1:0",
            "--metrics-listen", "127.0.0.1:0",
            "--http-listen", "127.0.0.1:0",
            "--console-listen", "off",
            "--allow-org-id-tenants",
            "--log-format", "json",
            "--batch-linger", "20ms",
            *extra,
        ])
        if not self.ready.wait(90) or not self.http:
            self.stop()
            raise RuntimeError(f"{name} did not say it is serving:\n{self.tail()}")

    def on_line(self, line):
        try:
            event = json.loads(line)
        except ValueError:
            return
        if event.get("message") == "loghaul is serving":
            self.http = event.get("http_ingest")
            self.metrics = event.get("http")
            self.ready.set()


class Loki(Process):
    """Grafana Loki from `binary`, with the repository's reference config made multi-tenant (unless
    not `multi_tenant`: then every push is tenant `fake`) and moved to free ports, its data in
    `directory`; with `patterns`, its pattern ingester on, as Grafana's patterns need."""

    def __init__(self, binary, config_template, directory, multi_tenant=True, patterns=True):
        port, grpc = free_port(), free_port()
        text = open(config_template).read().replace("DATA_DIR", directory)
        auth = "auth_enabled: true" if multi_tenant else "auth_enabled: false"
        changes = [("auth_enabled: false", auth),
                   ("http_listen_port: 3100", f"http_listen_port: {port}"),
                   ("grpc_listen_port: 9095", f"grpc_listen_port: {grpc}"),
                   ("bind_addr: [127.0.0.1]", f"bind_addr: [127.0.0.1]\n  bind_port: {free_port()}")]
        if patterns:
            # Grafana's patterns come from the pattern ingester, off by default.
            changes.append(("analytics:", "pattern_ingester:\n  enabled: true\nanalytics:"))
        for old, new in changes:
            if old not in text:
                raise RuntimeError(f"{config_template} has no {old!r} to change")
            text = text.replace(old, new)
        config = os.path.join(directory, "loki.yaml")
        with open(config, "w") as out:
            out.write(text)
        self.http = f"127.0.0.1:{port}"
        super().__init__("loki", [binary, f"-config.file={config}"])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.died():
                raise RuntimeError(f"Loki exited with {self.process.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"http://{self.http}/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"Loki was not ready within 120 s:\n{self.tail()}")


def psql(url, sql):
    return subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", url, "-c", sql],
                          capture_output=True, text=True, timeout=60)


def postgres_admin_url(given):
    candidates = [given] if given else POSTGRES_CANDIDATES
    for url in candidates:
        if psql(url, "SELECT 1").returncode == 0:
            return url
    raise RuntimeError(f"no PostgreSQL answers at {', '.join(candidates)} (set LOGHAUL_TEST_POSTGRES_URL)")


def create_database(admin_url, prefix):
    """A new database on `admin_url`'s server, named `prefix` and a random suffix; its name."""
    name = f"{prefix}_{os.getpid()}_{random.randrange(10**6)}"
    created = psql(admin_url, f"CREATE DATABASE {name}")
    if created.returncode != 0:
        raise RuntimeError(f"CREATE DATABASE failed: {created.stderr.strip()}")
    return name


def with_database(url, name):
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


# ---- requests ----------------------------------------------------------------------------------


def get(base, path, params, headers, timeout=60):
    """GET http://base/path?params: (status, body bytes)."""
    url = f"http://{base}{path}?{urllib.parse.urlencode(params)}"
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError as error:
        return 0, str(error).encode()


def push(base, tenant, body):
    req = urllib.request.Request(f"http://{base}/loki/api/v1/push", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "X-Scope-OrgID": tenant})
    try:
        with urllib.request.urlopen(req, timeout=60) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def absolute(params, anchor_ns):
    return [(k, v.ns(anchor_ns) if isinstance(v, Rel) else v) for k, v in params]


def normalise(check, status, body):
    """A check's answer as compared: an error is its status and its text."""
    if status != 200:
        return {"status": status, "error": body.decode(errors="replace").strip()}
    try:
        parsed = json.loads(body)
    except ValueError:
        return {"status": status, "not json": body.decode(errors="replace")[:500]}
    norm = check["norm"]
    if norm == "query":
        return compare.query_data(parsed)
    if norm == "data":
        return compare.status_body(parsed)
    return compare.sorted_lists(parsed)


def ask(base, check, anchor_ns):
    params = absolute(check["params"], anchor_ns)
    headers = {"X-Scope-OrgID": check["tenant"], **check["headers"]}
    status, body = get(base, "/loki/api/v1/" + check["path"], params, headers)
    return normalise(check, status, body)


def tail(base, check, anchor_ns, live_push=None):
    """A tail's messages over a few seconds, flattened; `live_push` runs once it is open."""
    params = absolute(check["params"], anchor_ns)
    host, port = base.rsplit(":", 1)
    path = "/loki/api/v1/tail?" + urllib.parse.urlencode(params)
    try:
        messages = wsclient.read_messages(host, int(port), path, {"X-Scope-OrgID": check["tenant"]},
                                          seconds=6 if live_push else 3, on_open=live_push)
    except wsclient.HandshakeRefused as refused:
        return {"status": refused.status, "error": refused.body}
    except OSError as error:
        return {"status": 0, "error": str(error)}
    return compare.tail_entries(messages)


# ---- the listed differences ----------------------------------------------------------------------


def listed_differences(docs):
    """{id: ("deliberate" | "open", reason)} from the two tables of docs/grafana.md: the first
    column's `ids`, the last the reason. A check may be listed for several causes, in either
    table; it is open while any of its causes is."""
    listed, section = {}, None
    for line in open(docs, encoding="utf-8"):
        if line.startswith("#"):
            heading = line.lower()
            section = ("deliberate" if "deliberate differences" in heading
                       else "open" if "open differences" in heading else None)
            continue
        if section and line.startswith("|") and not line.startswith("|---"):
            # Cells split on the pipes that are not escaped (`\|` in a cell's LogQL).
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            if len(cells) < 2:
                continue
            for check_id in re.findall(r"`([a-z0-9_]+)`", cells[0]):
                kind, reason = listed.get(check_id, (section, None))
                kind = "open" if "open" in (kind, section) else kind
                listed[check_id] = (kind, cells[-1] if reason is None else f"{reason}; {cells[-1]}")
    return listed


# ---- the run -----------------------------------------------------------------------------------


def wait_for_data(name, base, counts, anchor_ns):
    """Until the store returns every entry pushed (or 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        got = {}
        for tenant, count in counts.items():
            status, body = get(base, "/loki/api/v1/query_range",
                               [("query", '{service_name=~".+"}'), ("limit", "5000"),
                                ("start", str(anchor_ns - 7200 * 10**9)), ("end", str(anchor_ns + 1))],
                               {"X-Scope-OrgID": tenant})
            n = 0
            if status == 200:
                n = sum(len(s["values"]) for s in json.loads(body)["data"]["result"])
            got[tenant] = n
        if got == counts:
            return True
        if time.monotonic() > deadline:
            print(f"WARNING {name} returns {got} entries of {counts} pushed")
            return False
        time.sleep(0.5)


def wait_until_sealed(url, rows, seconds=120):
    """Waits until the `rows` rows of `logs` are all in columnar (sealed) partitions. A seal's
    table being filled is columnar too, but not yet a partition: it is not counted."""
    leaves = ("SELECT string_agg(c.oid::regclass::text, ' ') FROM pg_class c JOIN pg_am am ON am.oid = c.relam "
              "WHERE am.amname = 'columnar' AND c.relispartition AND c.relname LIKE 'logs\\_p%'")
    deadline = time.monotonic() + seconds
    while True:
        done = psql_value(url, leaves)
        sealed = sum(int(psql_value(url, f"SELECT count(*) FROM {t}")) for t in done.split())
        if sealed == rows:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{sealed} of {rows} rows sealed after {seconds} s")
        time.sleep(1)


def psql_value(url, sql):
    done = subprocess.run(["psql", "-X", "-Atq", "-v", "ON_ERROR_STOP=1", url, "-c", sql],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"psql: {done.stderr.strip()}")
    return done.stdout.strip()


def interrupted(*_):
    raise KeyboardInterrupt


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loki", required=True, help="Loki's binary")
    parser.add_argument("--loki-config", required=True, help="Loki's config, with DATA_DIR to replace")
    parser.add_argument("--loghaul", required=True, help="loghaul's binary")
    parser.add_argument("--postgres-url", default=os.environ.get("LOGHAUL_TEST_POSTGRES_URL"))
    parser.add_argument("--docs", default="docs/grafana.md")
    parser.add_argument("--only", help="comma-separated check ids")
    parser.add_argument("--verbose", action="store_true", help="show listed differences' diffs too")
    parser.add_argument("--save", help="write every normalised answer to this JSON file")
    parser.add_argument("--sealed", action="store_true",
                        help="also ask loghaul on PostgreSQL once the data's hour is sealed into "
                             "columnar form (needs the citus_columnar extension)")
    args = parser.parse_args()

    # SIGTERM (a CI timeout) unwinds like Ctrl-C, so that every process and database goes.
    signal.signal(signal.SIGTERM, interrupted)

    listed = listed_differences(args.docs)
    checks = CHECKS
    if args.only:
        wanted = set(args.only.split(","))
        checks = [c for c in CHECKS if c["id"] in wanted]
    unknown = sorted(set(listed) - {c["id"] for c in CHECKS})
    if unknown:
        print(f"FAIL {args.docs} lists ids no check has: {', '.join(unknown)}")
        return 1

    # The data's hour ends on the last whole hour: steps that divide an hour fall on the same
    # instants of the data every run.
    now = time.time_ns()
    anchor = now // (3600 * 10**9) * 3600 * 10**9
    streams = data.generate(anchor)
    bodies, counts = data.push_bodies(streams), data.entry_counts(streams)
    print(f"== data: {sum(counts.values())} entries in {len(streams)} streams, tenants {counts}, "
          f"the hour before {time.strftime('%H:%M', time.gmtime(anchor / 1e9))} UTC")

    workdir = tempfile.mkdtemp(prefix="loki-conformance-")
    database = admin_url = None
    databases = []
    try:
        started = time.monotonic()
        loki = Loki(args.loki, args.loki_config, workdir)
        stores = {"sqlite": Loghaul("loghaul-sqlite", args.loghaul, f"sqlite://{workdir}/loghaul.db")}
        admin_url = postgres_admin_url(args.postgres_url)
        database = create_database(admin_url, "loghaul_conformance")
        stores["postgres"] = Loghaul("loghaul-postgres", args.loghaul, with_database(admin_url, database))
        if args.sealed:
            sealed_database = f"{database}_sealed"
            created = psql(admin_url, f"CREATE DATABASE {sealed_database}")
            if created.returncode != 0:
                raise RuntimeError(f"CREATE DATABASE failed: {created.stderr.strip()}")
            databases.append(sealed_database)
            stores["sealed"] = Loghaul("loghaul-sealed", args.loghaul, with_database(admin_url, sealed_database),
                                       extra=["--seal-after", "1s", "--seal-interval", "1s"])
        print(f"== Loki on {loki.http}, loghaul on {stores['sqlite'].http} (SQLite) and "
              f"{stores['postgres'].http} (PostgreSQL), up in {time.monotonic() - started:.0f}s")

        targets = {"loki": loki.http, **{name: p.http for name, p in stores.items()}}
        for name, base in targets.items():
            for tenant, body in bodies.items():
                status, text = push(base, tenant, body)
                if status not in (200, 204):
                    raise RuntimeError(f"push to {name} as {tenant}: {status} {text[:300]!r}")
        for name, base in targets.items():
            wait_for_data(name, base, counts, anchor)
        if args.sealed:
            wait_until_sealed(with_database(admin_url, databases[0]), sum(counts.values()))

        results = {name: {} for name in stores}
        for check in checks:
            if check["norm"] == "tail":
                continue
            expected = ask(loki.http, check, anchor)
            for name, base in ((n, p.http) for n, p in stores.items()):
                results[name][check["id"]] = (expected, ask(base, check, anchor))
        # Tails last: the live one pushes a line.
        for check in checks:
            if check["norm"] != "tail":
                continue
            live_ns = time.time_ns() // 1000 * 1000
            live_body = json.dumps({"streams": [{"stream": {"service_name": "tailed", "level": "info"},
                                                 "values": [[str(live_ns), "a line sent while tailing",
                                                             {"region": "eu"}]]}]}).encode()

            def pusher(base):
                if not check.get("live"):
                    return None
                return lambda: (time.sleep(1), push(base, check["tenant"], live_body))
            expected = tail(loki.http, check, anchor, pusher(loki.http))
            for name, base in ((n, p.http) for n, p in stores.items()):
                results[name][check["id"]] = (expected, tail(base, check, anchor, pusher(base)))

        for name, process in [("loki", loki), *stores.items()]:
            if process.died():
                raise RuntimeError(f"{name} exited during the run:\n{process.tail()}")
        if args.save:
            with open(args.save, "w") as out:
                json.dump({"anchor": anchor, "results": results}, out)
        return report(checks, results, listed, args)
    except KeyboardInterrupt:
        print("interrupted")
        return 130
    except RuntimeError as error:
        print(f"FAIL {error}")
        return 1
    finally:
        for process in reversed(STARTED):
            code = process.stop()
            if process.name.startswith("loghaul") and code not in (0, None):
                print(f"WARNING {process.name} exited {code}:\n{process.tail()}")
        for extra in databases:
            psql(admin_url, f"DROP DATABASE IF EXISTS {extra} WITH (FORCE)")
        if database and admin_url:
            dropped = psql(admin_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
            if dropped.returncode != 0:
                print(f"WARNING could not drop {database}: {dropped.stderr.strip()}")
        shutil.rmtree(workdir, ignore_errors=True)


def report(checks, results, listed, args):
    """PASS/FAIL lines, diffs, the summary; the exit code."""
    summary, unlisted, stale = {}, [], []
    for check in checks:
        cid = check["id"]
        differs_somewhere = False
        for store, answers in results.items():
            if cid not in answers:
                continue
            expected, actual = answers[cid]
            counts = summary.setdefault(store, {"checks": 0, "identical": 0, "open": 0, "deliberate": 0, "unlisted": 0})
            counts["checks"] += 1
            if compare.equal(expected, actual):
                counts["identical"] += 1
                print(f"PASS {store:8} {cid}")
                continue
            differs_somewhere = True
            kind, reason = listed.get(cid, (None, None))
            if kind:
                counts[kind] += 1
                print(f"LIST {store:8} {cid} ({kind}: {reason[:90]})")
                if not args.verbose:
                    continue
            else:
                counts["unlisted"] += 1
                if cid not in unlisted:
                    unlisted.append(cid)
                print(f"FAIL {store:8} {cid}  {query_of(check)}")
            for line in compare.diff(expected, actual):
                print(f"     {line}")
        if cid in listed and not differs_somewhere:
            stale.append(cid)
    print("== summary")
    for store, counts in summary.items():
        print(f"{store}: {counts['checks']} checks, {counts['identical']} identical, "
              f"{counts['open']} listed open, {counts['deliberate']} listed deliberate, "
              f"{counts['unlisted']} unlisted differences")
    if stale:
        print(f"NOTE listed in {args.docs} but identical on every store now (remove them): {', '.join(stale)}")
    if unlisted:
        print(f"FAIL {len(unlisted)} checks differ and are not listed in {args.docs}: {', '.join(unlisted)}")
        return 1
    print("every difference is listed")
    return 0


def query_of(check):
    for name, value in check["params"]:
        if name in ("query", "match[]"):
            return f"{check['path']} {value}"
    return check["path"]


if __name__ == "__main__":
    sys.exit(main())
