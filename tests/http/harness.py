"""What tests/http/test_otlp_http.py and tests/http/test_loki.py share: the `ok`/`FAIL` checks and
their count, a `loghaul serve` process on a temporary SQLite file with its HTTP ingest listener on
an ephemeral port, plain HTTP requests, and the stored rows.

The same as tests/otlp/test_python_sdk.py's helpers (which cannot be imported here: that module
needs the gRPC exporter), plus the HTTP ingest address and server options. It needs no package
beyond the standard library, so tests/otlp/test_grpc_status.py uses it too.
"""

import base64
import json
import signal
import sqlite3
import subprocess
import sys
import threading
import traceback
import urllib.error
import urllib.request
from collections import deque

PASSED = 0
FAILED = 0


def check(name, actual, expected):
    """One named comparison; the test goes on after a failure so one run shows every problem."""
    global PASSED, FAILED
    if actual == expected:
        PASSED += 1
        print(f"ok   {name}")
    else:
        FAILED += 1
        print(f"FAIL {name}\n     expected: {expected!r}\n     actual:   {actual!r}")
    return actual == expected


def crashed(what):
    """An exception in a part of a test: a failure, reported like the others, and the test goes on."""
    global FAILED
    FAILED += 1
    traceback.print_exc(file=sys.stdout)
    print(f"FAIL {what} crashed")


def failed():
    return FAILED


def summary():
    """The closing line, `N passed, M failed`; the exit code."""
    print(f"{PASSED} passed, {FAILED} failed")
    return 1 if FAILED else 0


def flat(value):
    """An attribute value as loghaul stores it (README): strings as is, bytes as base64, anything
    else as compact JSON with sorted keys."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, (tuple, list)):
        value = list(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class Server:
    """`loghaul serve` on a temporary SQLite file, its gRPC, metrics and HTTP ingest listeners on
    ephemeral loopback ports (read from its JSON start-up line), stopped with SIGTERM like an
    operator would. `extra` are more `serve` options, and may set the shards and the linger."""

    def __init__(self, binary, db_path, *extra):
        tunable = [
            item
            for option, value in (("--shards", "2"), ("--batch-linger", "20ms"))
            if option not in extra
            for item in (option, value)
        ]
        self.process = subprocess.Popen(
            [
                binary, "serve",
                "--listen", "127.0.0.1:0",
                "--metrics-listen", "127.0.0.1:0",
                "--http-listen", "127.0.0.1:0",
                "--console-listen", "off",
                "--database-url", f"sqlite://{db_path}",
                "--log-format", "json",
                *tunable,
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        # The last lines of its log, shown if something goes wrong.
        self.log = deque(maxlen=50)
        self.serving = threading.Event()
        self.grpc = self.metrics = self.http_ingest = None
        threading.Thread(target=self._read_log, daemon=True).start()
        if not self.serving.wait(60) or not self.http_ingest:
            exited = self.process.poll()
            self.kill()
            raise RuntimeError(
                "loghaul did not log 'loghaul is serving' with an http_ingest address "
                + (f"(it exited with {exited})" if exited is not None else "within 60 s")
                + ":\n" + "\n".join(self.log)
            )

    def _read_log(self):
        for line in self.process.stderr:
            self.log.append(line.rstrip())
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("message") == "loghaul is serving":
                self.grpc, self.metrics = event.get("grpc"), event.get("http")
                self.http_ingest = event.get("http_ingest")
                self.serving.set()
        # It exited: stop waiting for it.
        self.serving.set()

    def url(self, path):
        return f"http://{self.http_ingest}{path}"

    def stop(self):
        """SIGTERM, then the exit code (None if it had to be killed)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def last_lines(self):
        return "\n".join(self.log)


class Answer:
    """An HTTP answer: status, headers (case-insensitive lookup) and body bytes."""

    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def header(self, name):
        return self.headers.get(name)

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"HTTP {self.status} {dict(self.headers)!r} {self.body[:300]!r}"


def request(method, url, body=None, headers=None, timeout=15):
    """One request with urllib; an error status is an answer like any other, not an exception."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            return Answer(answer.status, answer.headers, answer.read())
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.headers, error.read())


def stored_rows(db_path):
    """Every stored row, by message."""
    connection = sqlite3.connect(db_path)
    connection.row_factory = sqlite3.Row
    rows = connection.execute(
        # A record's stream labels and its own attributes, as one map (its own winning).
        "SELECT tenant, ts, severity, service, message, json_patch(labels, attributes) AS attributes,"
        " trace_id, span_id FROM logs"
    ).fetchall()
    connection.close()
    return {row["message"]: dict(row, attributes=json.loads(row["attributes"])) for row in rows}


def metric_samples(metrics_addr, name):
    """The samples of one metric on the Prometheus endpoint: [(labels dict, value)]."""
    with urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples = []
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        series, value = line.rsplit(" ", 1)
        labels = {}
        if "{" in series:
            for pair in series[series.index("{") + 1:series.rindex("}")].split(","):
                if "=" in pair:
                    key, quoted = pair.split("=", 1)
                    labels[key.strip()] = quoted.strip().strip('"')
        samples.append((labels, float(value)))
    return samples


def metric_value(metrics_addr, name, **labels):
    """The value of the one series of `name` with these labels (0 when there is none)."""
    return sum(value for got, value in metric_samples(metrics_addr, name)
               if all(got.get(key) == wanted for key, wanted in labels.items()))


def retry_after_seconds(answer):
    """Retry-After as delay-seconds (RFC 9110), or None when absent or not a number."""
    value = (answer.header("Retry-After") or "").strip()
    return int(value) if value.isdigit() else None


def row_count(db_path):
    connection = sqlite3.connect(db_path)
    (count,) = connection.execute("SELECT count(*) FROM logs").fetchone()
    connection.close()
    return count
