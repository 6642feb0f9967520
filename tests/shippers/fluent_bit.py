"""The Fluent Bit configurations of docs/shippers.md, run as written against a release loghaul.

    python3 tests/shippers/fluent_bit.py --loghaul BIN --fluent-bit BIN --logcli BIN
        [--stores sqlite,postgres] [--postgres-url URL] [--docs docs/shippers.md]

Each output's block is taken from the docs, with only the host and port replaced, and run by the
real Fluent Bit over a `tail` input (1,000 JSON lines with a `level`, 1,000 plain lines of which 50
are 2-12 KB) and a `dummy` input (100 records): 2,100 records per output. Both outputs run at once,
each with its own key, so each has its own tenant, counted apart. Per store, four cases:

    happy       everything written before Fluent Bit starts; every record is checked field by
                field against what the docs say is stored, also for the `loki` block without its
                `Drop_single_key` (a plain line as {"log":...}) and with `Line_format key_value`
                (logfmt), as the docs say; then logcli reads it back (query, labels, --tail) and
                `loghaul query` prints it as a user sees it
    outage      lines written over 25 s while loghaul is stopped (SIGTERM) for 20 s in the middle;
                each Fluent Bit must have had to retry
    freeze      the same, loghaul frozen (SIGSTOP) instead: connections accepted, never answered
    rate limit  a tenant limit of 200 records/s, everything sent at once; both protocols must
                have been answered 429

Every case must end with each record stored exactly once (0 lost, 0 doubled), with no chunk left
waiting for a retry in any Fluent Bit. Then, on the first store only, a control: the outage with
the docs' blocks less their retry settings (Fluent Bit's defaults) must lose records, or the
outage case would pass whatever the docs say. Processes started here are stopped and PostgreSQL
databases created here are dropped, whatever happens. Only the standard library: PostgreSQL is
read through psql.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

JSON_LINES = 1000
PLAIN_LINES = 1000
LARGE_LINES = 50
DUMMY_RECORDS = 100
TOTAL = JSON_LINES + PLAIN_LINES + DUMMY_RECORDS
# The `level` values of the JSON lines, and the severity each must be stored with.
LEVELS = [("info", 9), ("warn", 13), ("error", 17), ("debug", 5), ("warning", 13), ("Error", 17)]
OUTAGE_SECONDS = 20
RATE_LIMIT = 200
SERVICE = "checkout"
DOC_SECTIONS = {"loki": "#### `loki` output", "opentelemetry": "#### `opentelemetry` output"}
# The output settings the docs give for retrying; without them (Fluent Bit's defaults) the control
# case must lose records, or the outage case could not tell them from their absence.
RETRY_SETTINGS = ("Retry_Limit", "scheduler.cap")


class Variant:
    """One Fluent Bit output as run here: the docs' block for `output`, less the settings named in
    `without`, with the settings in `setting` changed. Each has its own key and tenant, so all run
    against one loghaul, counted apart."""

    def __init__(self, name, output, stores_as, without=(), setting=()):
        self.name, self.output, self.stores_as = name, output, stores_as
        self.without, self.setting = without, setting
        slug = re.sub(r"[^A-Za-z0-9]+", "-", name)
        self.key, self.tenant = f"key-{slug}", f"fluent-{slug}"

    def block(self, blocks, port):
        block = blocks[self.output]
        for name in self.without:
            block = without(block, name)
        for name, value in self.setting:
            block = replace(block, name, value)
        return adapt(block, port)


# The docs' blocks as written, in every case.
AS_WRITTEN = [Variant(output, output, output) for output in DOC_SECTIONS]
# What the docs say the `loki` block stores otherwise: without `Drop_single_key`, a plain line
# as {"log":…}; with `Line_format key_value`, the keys as logfmt.
OTHER_LOKI = [
    Variant("loki without Drop_single_key", "loki", "loki wrapped", without=("Drop_single_key",)),
    Variant(
        "loki with Line_format key_value", "loki", "loki key_value",
        setting=(("Line_format", "key_value"),),
    ),
]  # fmt: skip
# The control: the docs' blocks without their retry settings.
DEFAULTS = [
    Variant(f"{output} with default retries", output, output, without=RETRY_SETTINGS)
    for output in DOC_SECTIONS
]
VARIANTS = AS_WRITTEN + OTHER_LOKI + DEFAULTS
# Long enough for Fluent Bit's capped backoff (scheduler.cap 30 in the docs) after the outage.
DELIVERY_TIMEOUT = 120


class CheckFailed(Exception):
    """A check did not hold; the message says which and how."""


def log(message):
    print(message, flush=True)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- the docs' blocks -------------------------------------------------------------------------


def doc_block(docs, heading):
    """The first fenced block after `heading` in the docs."""
    lines = docs.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == heading)
    except StopIteration:
        raise CheckFailed(f"docs/shippers.md has no heading {heading!r}")
    block, inside = [], False
    for line in lines[start + 1 :]:
        if line.startswith("```"):
            if inside:
                return "\n".join(block) + "\n"
            inside = True
        elif inside:
            block.append(line)
        elif line.startswith("#"):
            break
    raise CheckFailed(f"no fenced block under {heading!r} in docs/shippers.md")


def adapt(block, port):
    """The docs' block pointed at this run's loghaul: `Host loghaul` and `Port 4318` replaced,
    nothing else. Each must be there exactly once, so a changed block fails here, not later."""
    for key, value in (("Host", "127.0.0.1"), ("Port", str(port))):
        pattern = re.compile(rf"^(\s*{key}\s+)(\S+)\s*$", re.MULTILINE | re.IGNORECASE)
        found = pattern.findall(block)
        if len(found) != 1:
            raise CheckFailed(f"the docs' block should set {key} once, found {found}")
        block = pattern.sub(lambda match: match.group(1) + value, block)
    if "${LOGHAUL_API_KEY}" not in block:
        raise CheckFailed("the docs' block should take the key from ${LOGHAUL_API_KEY}")
    return block


def setting_line(block, setting):
    """The pattern of the one line of `block` setting `setting`; it must be there exactly once."""
    pattern = re.compile(rf"^(\s*{re.escape(setting)}\s+)\S.*\n", re.MULTILINE | re.IGNORECASE)
    found = pattern.findall(block)
    if len(found) != 1:
        raise CheckFailed(f"the docs' block should set {setting} once, found {found}")
    return pattern


def without(block, setting):
    """The block less the line setting `setting`."""
    return setting_line(block, setting).sub("", block)


def replace(block, setting, value):
    """The block with `setting` set to `value`."""
    return setting_line(block, setting).sub(lambda match: f"{match.group(1)}{value}\n", block)


# --- what is shipped --------------------------------------------------------------------------


def json_line(n):
    level = LEVELS[n % len(LEVELS)][0]
    return json.dumps({"level": level, "message": f"json line {n}", "seq": n, "user": f"u{n % 7}"})


def plain_line(n):
    line = f"plain line {n}: GET /cart 200"
    if n % (PLAIN_LINES // LARGE_LINES) == 0:
        # 50 lines from 2 KB to 12 KB, longer than one of Fluent Bit's 32 KB buffers holds few.
        size = 2048 + (n // (PLAIN_LINES // LARGE_LINES)) * (10240 // (LARGE_LINES - 1))
        line += " " + "x" * (size - len(line) - 1)
    return line


def all_lines():
    lines = []
    for n in range(max(JSON_LINES, PLAIN_LINES)):
        if n < JSON_LINES:
            lines.append(json_line(n))
        if n < PLAIN_LINES:
            lines.append(plain_line(n))
    return lines


def write_lines(path, lines, seconds):
    """Appends `lines` to `path` spread over `seconds` (all at once for 0), as an application would."""
    steps = max(1, int(seconds * 4))
    per_step = -(-len(lines) // steps)
    with open(path, "a", encoding="utf-8") as out:
        for i in range(0, len(lines), per_step):
            out.write("".join(line + "\n" for line in lines[i : i + per_step]))
            out.flush()
            if seconds:
                time.sleep(seconds / steps)


# --- the stores -------------------------------------------------------------------------------


class Store:
    """A fresh database for one case, read directly: the ground truth, not an API of loghaul."""

    def __init__(self, kind, work, postgres_url, name):
        self.kind = kind
        if kind == "sqlite":
            self.path = os.path.join(work, f"{name}.db")
            self.url = f"sqlite://{self.path}"
        else:
            base, _, _ = postgres_url.rpartition("/")
            self.admin = postgres_url
            self.name = f"loghaul_shippers_{os.getpid()}_{name}"
            self.url = f"{base}/{self.name}"
            psql(self.admin, f'CREATE DATABASE "{self.name}"')

    def rows(self, tenant):
        """(message, severity, service, attributes) of each stored record of `tenant`."""
        if self.kind == "sqlite":
            if not os.path.exists(self.path):
                return []
            db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=10)
            try:
                found = db.execute(
                    # Stream labels and attributes as one map, a record's own winning.
                    "SELECT message, severity, service, json_patch(labels, attributes) FROM logs"
                    " WHERE tenant = ?",
                    (tenant,),
                ).fetchall()
            except sqlite3.OperationalError:
                return []  # not migrated yet
            finally:
                db.close()
            return [(m, s, svc, json.loads(a)) for m, s, svc, a in found]
        text = psql(
            self.url,
            "SELECT coalesce(json_agg(json_build_array(message, severity, service, labels || attributes)),"
            f" '[]') FROM logs WHERE tenant = '{tenant}'",
            check=False,
        )
        if text is None:
            return []
        rows = json.loads(text)
        return [(m, s, svc, a if isinstance(a, dict) else json.loads(a)) for m, s, svc, a in rows]

    def drop(self):
        if self.kind == "postgres":
            psql(self.admin, f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)', check=False)


def psql(url, sql, check=True):
    done = subprocess.run(
        ["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        if check:
            raise CheckFailed(f"psql {sql!r}: {done.stderr.strip()}")
        return None
    return done.stdout.strip()


# --- processes --------------------------------------------------------------------------------


class Processes:
    """Every process this run starts, stopped by its own id at the end."""

    def __init__(self):
        self.running = []

    def start(self, args, log_path, env=None):
        out = open(log_path, "ab")
        process = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        out.close()
        self.running.append(process)
        return process

    def stop(self, process, timeout=25):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process in self.running:
            self.running.remove(process)

    def stop_all(self):
        for process in list(self.running):
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)  # a frozen process cannot act on SIGTERM
            self.stop(process, timeout=10)


class Loghaul:
    def __init__(self, binary, processes, store, work, rate_limit=None):
        self.binary, self.processes, self.store = binary, processes, store
        self.grpc, self.metrics, self.http = free_port(), free_port(), free_port()
        self.log = os.path.join(work, "loghaul.log")
        self.args = [
            binary, "serve",
            "--listen", f"127.0.0.1:{self.grpc}",
            "--metrics-listen", f"127.0.0.1:{self.metrics}",
            "--http-listen", f"127.0.0.1:{self.http}",
            "--console-listen", "off",
            "--database-url", store.url,
        ]  # fmt: skip
        if rate_limit:
            self.args += ["--tenant-records-per-second", str(rate_limit)]
        self.env = dict(
            os.environ,
            LOGHAUL_API_KEYS=",".join(f"{v.key}={v.tenant}" for v in VARIANTS),
        )
        self.process = None

    def start(self):
        self.process = self.processes.start(self.args, self.log, self.env)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise CheckFailed(f"loghaul exited with {self.process.returncode}; see {self.log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/readyz", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise CheckFailed("loghaul was not ready within 60 s")

    def stop(self):
        self.processes.stop(self.process)


class FluentBit:
    """One Fluent Bit: the test's inputs, then the variant's block."""

    def __init__(self, binary, processes, work, variant, block, app_log, dummy_rate):
        self.variant = variant
        folder = os.path.join(work, "fluent_bit_" + re.sub(r"\W+", "_", variant.name))
        os.makedirs(folder, exist_ok=True)
        parsers = os.path.join(folder, "parsers.conf")
        with open(parsers, "w") as out:
            out.write("[PARSER]\n    Name   json\n    Format json\n")
        config = os.path.join(folder, "fluent-bit.conf")
        with open(config, "w") as out:
            out.write(
                "[INPUT]\n"
                "    Name            tail\n"
                "    Tag             app\n"
                f"    Path            {app_log}\n"
                "    Read_from_Head  true\n"
                "    Refresh_Interval 1\n"
                "    Parser          json\n"
                "\n[INPUT]\n"
                "    Name     dummy\n"
                "    Tag      heartbeat\n"
                '    Dummy    {"message":"heartbeat","level":"info"}\n'
                f"    Samples  {DUMMY_RECORDS}\n"
                f"    Rate     {dummy_rate}\n\n" + block
            )
        self.log = os.path.join(folder, "fluent-bit.log")
        self.args = [binary, "-c", config, "-R", parsers, "-f", "1"]
        self.env = dict(os.environ, LOGHAUL_API_KEY=variant.key)
        self.processes = processes
        self.process = None

    def start(self):
        self.process = self.processes.start(self.args, self.log, self.env)
        time.sleep(0.5)
        if self.process.poll() is not None:
            raise CheckFailed(
                f"Fluent Bit ({self.variant.name}) exited with {self.process.returncode}: "
                + tail_of(self.log)
            )

    def stop(self):
        self.processes.stop(self.process)

    def retries(self):
        """(chunks whose flush failed, chunks still waiting for a retry) from Fluent Bit's log."""
        try:
            with open(self.log, errors="replace") as text:
                said = text.read()
        except OSError:
            return 0, 0
        failed = set(re.findall(r"failed to flush chunk '([^']+)'", said))
        settled = set(re.findall(r"chunk '([^']+)' succeeded at retry", said))
        settled |= set(re.findall(r"chunk '([^']+)' cannot be retried", said))
        return len(failed), len(failed - settled)


def tail_of(path, lines=15):
    try:
        with open(path, errors="replace") as text:
            return "".join(text.readlines()[-lines:])
    except OSError:
        return ""


# --- what must be stored ----------------------------------------------------------------------


def expected_records():
    """Key → (message, severity, attributes) as the docs say each output stores the record.
    Keys: ('json', n), ('plain', n); the dummy records are counted, all alike."""
    want = {"loki": {}, "loki wrapped": {}, "loki key_value": {}, "opentelemetry": {}}
    for n in range(JSON_LINES):
        level, severity = LEVELS[n % len(LEVELS)]
        rest = {"message": f"json line {n}", "seq": n, "user": f"u{n % 7}"}
        # loki: the record as JSON without the label key `level`, which is a stream label as sent,
        # as env=prod is.
        labels = {"env": "prod", "level": level}
        want["loki"][("json", n)] = (json.dumps(rest, separators=(",", ":")), severity, labels)
        want["loki wrapped"][("json", n)] = want["loki"][("json", n)]
        logfmt = f'message="json line {n}" seq={n} user="u{n % 7}"'
        want["loki key_value"][("json", n)] = (logfmt, severity, labels)
        attributes = {"level": level, "seq": str(n), "user": f"u{n % 7}"}
        if level == "warning":
            attributes["severity_text"] = level  # says more than WARN
        want["opentelemetry"][("json", n)] = (f"json line {n}", severity, attributes)
    for n in range(PLAIN_LINES):
        want["loki"][("plain", n)] = (plain_line(n), 0, {"env": "prod"})
        # The record's one key: its value (Drop_single_key raw), else the record as JSON.
        wrapped = json.dumps({"log": plain_line(n)}, separators=(",", ":"))
        want["loki wrapped"][("plain", n)] = (wrapped, 0, {"env": "prod"})
        want["loki key_value"][("plain", n)] = want["loki"][("plain", n)]
        want["opentelemetry"][("plain", n)] = (plain_line(n), 0, {})
    return want


DUMMY = {
    "loki": ("heartbeat", 9, {"env": "prod", "level": "info"}),
    "loki wrapped": ('{"message":"heartbeat"}', 9, {"env": "prod", "level": "info"}),
    "loki key_value": ("heartbeat", 9, {"env": "prod", "level": "info"}),
    "opentelemetry": ("heartbeat", 9, {"level": "info"}),
}


def identify(stores_as, message):
    """The record a stored message stands for."""
    if stores_as.startswith("loki") and message.startswith("{"):
        try:
            record = json.loads(message)
            message = record.get("message", record.get("log", message))
        except ValueError:
            return ("unknown", message[:80])
    if message == "heartbeat":
        return ("dummy",)
    # `message="json line 1" …` is a logfmt line (Line_format key_value).
    match = re.match(r'(?:message=")?(json|plain) line (\d+)', message)
    if not match:
        return ("unknown", message[:80])
    return (match.group(1), int(match.group(2)))


def tally(stores_as, rows):
    """(stored, lost, doubled, unknown, mismatches) of one variant's tenant."""
    want = expected_records()[stores_as]
    seen, unknown, mismatches, dummies = {}, [], [], 0
    for message, severity, service, attributes in rows:
        key = identify(stores_as, message)
        if key[0] == "unknown":
            unknown.append(key[1])
            continue
        expected = DUMMY[stores_as] if key == ("dummy",) else want[key]
        got = (message, severity, attributes)
        if expected[0].startswith("{") and message.startswith("{"):
            # The line is JSON: compared as values, not as text, so key order does not matter.
            try:
                got = (json.loads(message), severity, attributes)
                expected = (json.loads(expected[0]),) + expected[1:]
            except ValueError:
                pass
        if service != SERVICE or got != expected:
            mismatches.append(f"{key}: stored {(service,) + got}, docs say {(SERVICE,) + expected}")
        if key == ("dummy",):
            dummies += 1
        else:
            seen[key] = seen.get(key, 0) + 1
    lost = sum(1 for key in want if key not in seen) + max(0, DUMMY_RECORDS - dummies)
    doubled = sum(count - 1 for count in seen.values()) + max(0, dummies - DUMMY_RECORDS)
    return len(rows), lost, doubled, unknown, mismatches


def wait_delivered(store, shippers, timeout):
    """Waits until each variant's tenant holds every record and no Fluent Bit still has a chunk
    to retry (or the time is up), then a little longer: a chunk retried after it was stored would
    be doubled, and is seen so."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(
            shipper.retries()[1] == 0
            and tally(shipper.variant.stores_as, store.rows(shipper.variant.tenant))[1] == 0
            for shipper in shippers
        ):
            time.sleep(3)
            return
        time.sleep(1)


def wait_settled(shippers, timeout):
    """Waits until no Fluent Bit has a chunk left to retry (or the time is up)."""
    deadline = time.time() + timeout
    while time.time() < deadline and any(shipper.retries()[1] for shipper in shippers):
        time.sleep(1)


# --- the cases --------------------------------------------------------------------------------


class Run:
    def __init__(self, args):
        self.args = args
        self.work = tempfile.mkdtemp(prefix="loghaul-shippers-")
        self.processes = Processes()
        self.stores = []
        with open(args.docs, encoding="utf-8") as text:
            docs = text.read()
        self.blocks = {output: doc_block(docs, heading) for output, heading in DOC_SECTIONS.items()}
        self.results = []

    def case(self, kind, name, variants, dummy_rate, rate_limit=None):
        # Letters, digits and _ only: a comma in tail's Path would split it into two patterns.
        slug = re.sub(r"\W+", "_", name).strip("_")
        folder = os.path.join(self.work, f"{kind}_{slug}")
        os.makedirs(folder)
        store = Store(kind, folder, self.args.postgres_url, slug)
        self.stores.append(store)
        server = Loghaul(self.args.loghaul, self.processes, store, folder, rate_limit)
        server.start()
        app_log = os.path.join(folder, "app.log")
        open(app_log, "w").close()
        shippers = [
            FluentBit(
                self.args.fluent_bit, self.processes, folder, variant,
                variant.block(self.blocks, server.http), app_log, dummy_rate,
            )
            for variant in variants
        ]  # fmt: skip
        return store, server, shippers, app_log

    def count(self, kind, name, store, shipper):
        """Tallies one variant's tenant and records the row of the table."""
        variant = shipper.variant
        stored, lost, doubled, unknown, mismatches = tally(
            variant.stores_as, store.rows(variant.tenant)
        )
        self.results.append((kind, name, variant.name, stored, lost, doubled))
        failed, _ = shipper.retries()
        log(
            f"   {variant.name:30} stored {stored} of {TOTAL}, lost {lost}, doubled {doubled}"
            f" ({failed} chunks retried)"
        )
        return stored, lost, doubled, unknown, mismatches

    def finish(self, kind, name, store, server, shippers):
        wait_delivered(store, shippers, DELIVERY_TIMEOUT)
        failures = []
        for shipper in shippers:
            stored, lost, doubled, unknown, mismatches = self.count(kind, name, store, shipper)
            what = f"{kind}/{name}/{shipper.variant.name}"
            if lost or doubled or unknown:
                failures.append(
                    f"{what}: lost {lost}, doubled {doubled}, unknown {unknown[:3]}; "
                    f"Fluent Bit said:\n{tail_of(shipper.log)}"
                )
            if mismatches:
                failures.append(
                    f"{what}: {len(mismatches)} records not stored as the docs say, e.g.\n  "
                    + "\n  ".join(mismatches[:3])
                )
            pending = shipper.retries()[1]
            if pending:
                failures.append(f"{what}: {pending} chunks still waiting for a retry at the end")
        return failures

    def stop(self, server, shippers):
        for shipper in shippers:
            shipper.stop()
        server.stop()

    def happy(self, kind):
        log(f"== {kind}: happy path")
        store, server, shippers, app_log = self.case(
            kind, "happy path", AS_WRITTEN + OTHER_LOKI, dummy_rate=50
        )
        write_lines(app_log, all_lines(), 0)
        for shipper in shippers:
            shipper.start()
        failures = self.finish(kind, "happy path", store, server, shippers)
        if not failures:
            failures += self.read_back(server, app_log)
        self.stop(server, shippers)
        return failures

    def interrupted(self, kind, name, variants, frozen):
        """Lines written over 25 s; loghaul stopped (or frozen) for 20 s after the first 5."""
        how = "frozen (SIGSTOP)" if frozen else "stopped (SIGTERM)"
        store, server, shippers, app_log = self.case(kind, name, variants, dummy_rate=4)
        writer = threading.Thread(target=write_lines, args=(app_log, all_lines(), 25), daemon=True)
        writer.start()
        for shipper in shippers:
            shipper.start()
        time.sleep(5)
        failures = []
        # Something must be left to send when loghaul goes away, or the case tests nothing.
        for shipper in shippers:
            stored = len(store.rows(shipper.variant.tenant))
            log(f"   {shipper.variant.name}: {stored} stored before loghaul went away")
            if stored >= TOTAL:
                failures.append(f"{kind}/{name}/{shipper.variant.name}: all stored beforehand")
        stopped = time.time()
        if frozen:
            server.process.send_signal(signal.SIGSTOP)
        else:
            server.stop()
        time.sleep(max(0, OUTAGE_SECONDS - (time.time() - stopped)))
        if frozen:
            server.process.send_signal(signal.SIGCONT)
        else:
            server.start()
        log(f"   loghaul was {how.split()[0]} {time.time() - stopped:.0f} s")
        writer.join()
        return store, server, shippers, failures

    def outage(self, kind):
        log(f"== {kind}: loghaul stopped (SIGTERM) for {OUTAGE_SECONDS} s mid-run")
        store, server, shippers, failures = self.interrupted(kind, "outage", AS_WRITTEN, False)
        failures += self.finish(kind, "outage", store, server, shippers)
        for shipper in shippers:
            if shipper.retries()[0] == 0:
                failures.append(
                    f"{kind}/outage/{shipper.variant.name}: no chunk was retried; it tested nothing"
                )
        self.stop(server, shippers)
        return failures

    def freeze(self, kind):
        """loghaul alive but frozen: connections accepted by the kernel and never answered."""
        log(f"== {kind}: loghaul frozen (SIGSTOP) for {OUTAGE_SECONDS} s mid-run")
        store, server, shippers, failures = self.interrupted(kind, "freeze", AS_WRITTEN, True)
        failures += self.finish(kind, "freeze", store, server, shippers)
        self.stop(server, shippers)
        return failures

    def control(self, kind):
        """The outage with Fluent Bit's default retries must lose records: the settings the docs
        give are what the outage case passes on. Run on the first store only."""
        if kind != self.args.stores.split(",")[0]:
            return []
        log(f"== {kind}: control: the outage with Fluent Bit's default retries must lose records")
        name = "outage, default retries"
        store, server, shippers, failures = self.interrupted(kind, name, DEFAULTS, False)
        wait_settled(shippers, DELIVERY_TIMEOUT)
        time.sleep(3)
        for shipper in shippers:
            _, lost, _, unknown, _ = self.count(kind, name, store, shipper)
            if not lost:
                failures.append(
                    f"{kind}/control/{shipper.variant.name}: nothing lost without the docs' retry"
                    " settings, so the outage case does not show that they are needed"
                )
            if unknown:
                failures.append(f"{kind}/control/{shipper.variant.name}: unknown {unknown[:3]}")
        self.stop(server, shippers)
        return failures

    def rate_limit(self, kind):
        log(f"== {kind}: a tenant limit of {RATE_LIMIT} records/s, everything sent at once")
        name = "rate limit (429)"
        store, server, shippers, app_log = self.case(
            kind, name, AS_WRITTEN, dummy_rate=100, rate_limit=RATE_LIMIT
        )
        write_lines(app_log, all_lines(), 0)
        for shipper in shippers:
            shipper.start()
        failures = self.finish(kind, name, store, server, shippers)
        # Each output must have been refused, or its row tested nothing.
        for protocol in ("loki", "otlp_http"):
            refused = metric(
                server,
                "loghaul_http_ingest_requests_total",
                f'protocol="{protocol}"',
                'outcome="rate_limited"',
            )
            log(f"   {protocol} requests answered 429: {refused:.0f}")
            if refused < 1:
                failures.append(f"{kind}/rate limit: no {protocol} request was answered 429")
        self.stop(server, shippers)
        return failures

    def read_back(self, server, app_log):
        """logcli and `loghaul query` read what Fluent Bit sent, as a user would."""
        failures = []
        addr = f"http://127.0.0.1:{server.http}"
        for variant in AS_WRITTEN:
            token = f"--bearer-token={variant.key}"
            logcli = [self.args.logcli, f"--addr={addr}", token, "--quiet"]
            found = run(logcli + ["query", "--since=1h", "--limit=5000", "--output=jsonl",
                                  f'{{service_name="{SERVICE}"}}'])  # fmt: skip
            lines = [json.loads(line) for line in found.splitlines() if line.strip()]
            read = sorted(identify(variant.stores_as, line["line"]) for line in lines)
            want = sorted([("json", n) for n in range(JSON_LINES)]
                          + [("plain", n) for n in range(PLAIN_LINES)]
                          + [("dummy",)] * DUMMY_RECORDS)  # fmt: skip
            log(f"   logcli query ({variant.name}): {len(lines)} lines")
            if read != want:
                failures.append(
                    f"logcli query ({variant.name}) read {len(lines)} lines, not each of the"
                    f" {TOTAL} records once"
                )
            labels = run(logcli + ["labels"]).split()
            log(f"   logcli labels ({variant.name}): {' '.join(labels)}")
            if "service_name" not in labels or (variant.output == "loki" and "env" not in labels):
                failures.append(f"logcli labels ({variant.name}) lack service_name or env: {labels}")
        otel = AS_WRITTEN[1]
        warn = run([self.args.loghaul, "query", "--endpoint", f"http://127.0.0.1:{server.grpc}",
                    "--since", "1h", "--attr", "seq=1"],
                   env=dict(os.environ, LOGHAUL_API_KEY=otel.key))  # fmt: skip
        log(f"   loghaul query ({otel.name}): {warn.strip()}")
        if not re.search(rf"\bWARN +{SERVICE}: json line 1 ", warn):
            failures.append(f"loghaul query shows {warn.strip()!r}, not 'WARN {SERVICE}: json line 1'")

        # --tail: lines written now arrive at a running logcli through the loki output.
        tail_log = os.path.join(self.work, "logcli-tail.out")
        tail = self.processes.start(
            [self.args.logcli, f"--addr={addr}", f"--bearer-token={AS_WRITTEN[0].key}", "--quiet",
             "query", "--tail", "--output=raw", f'{{service_name="{SERVICE}"}} |= "tail probe"'],
            tail_log,
        )  # fmt: skip
        time.sleep(2)
        probes = [f"tail probe {n}" for n in range(3)]
        write_lines(app_log, probes, 0)
        deadline = time.time() + 30
        while time.time() < deadline and not all(probe in tail_of(tail_log, 50) for probe in probes):
            time.sleep(0.5)
        self.processes.stop(tail)
        # raw output: each probe is a line of its own, as written (a plain line stored as itself).
        arrived = [probe for probe in probes if probe in tail_of(tail_log, 50).splitlines()]
        log(f"   logcli query --tail (loki): {len(arrived)} of {len(probes)} lines")
        if len(arrived) != len(probes):
            failures.append(f"logcli --tail saw {arrived} of {probes}: {tail_of(tail_log)}")
        return failures

    def cleanup(self):
        self.processes.stop_all()
        for store in self.stores:
            store.drop()
        if self.args.keep:
            log(f"work files kept in {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)


def metric(server, name, *labels):
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and all(label in line for label in labels)
    )


def run(args, env=None):
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
    if done.returncode != 0:
        raise CheckFailed(f"{' '.join(args[:3])}… exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loghaul", required=True)
    parser.add_argument("--fluent-bit", required=True)
    parser.add_argument("--logcli", required=True)
    parser.add_argument("--docs", default="docs/shippers.md")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--postgres-url", default="")
    parser.add_argument("--cases", default="happy,outage,freeze,rate_limit,control")
    parser.add_argument("--keep", action="store_true", help="keep the work files")
    args = parser.parse_args()

    started = time.time()
    run_ = Run(args)
    # SIGTERM (CI cancelling the job) cleans up like a failure does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    failures = []
    try:
        for kind in args.stores.split(","):
            for case in args.cases.split(","):
                failures += getattr(run_, case)(kind)
    except CheckFailed as failure:
        failures.append(str(failure))
    finally:
        run_.cleanup()
    log(f"\n| store | case | Fluent Bit output | stored of {TOTAL:,} | lost | doubled |")
    log("|---|---|---|---|---|---|")
    for kind, name, variant, stored, lost, doubled in run_.results:
        log(f"| {kind} | {name} | {variant} | {stored:,} | {lost:,} | {doubled:,} |")
    log(f"\n== shippers-check took {time.time() - started:.0f} s")
    for failure in failures:
        log(f"FAIL {failure}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
