#!/usr/bin/env python3
"""loghaul's Loki push API (`POST /loki/api/v1/push`) against a real, independent Loki client.

(a) python-logging-loki: its LokiHandler (push API v1: JSON, one request per record, labels
    `severity` and `logger` plus the handler's tags and each record's `tags`) on a Python logger;
    every stored row compared field by field with what the handler sent. A second handler names
    its tenant with `X-Scope-OrgID` (the keyless server runs with --allow-org-id-tenants).
(b) A push written by hand: two streams (labels service_name, level, env), entries with and without
    structured metadata, nanosecond timestamps; then a gzip push of the label fallbacks (service,
    job, app; severity, detected_level; a level name Loki does not know).
(c) A push with one entry whose timestamp is not a number: 400 "1 of 3 entries rejected", the
    valid entries stored.
(d) A protobuf logproto.PushRequest (built with the protobuf runtime from Loki's field numbers),
    snappy-compressed (block format) by cramjam; sent first with a form's Content-Type, which
    is refused with 415.
(e) A server with an API key: 401 without it, the key's tenant with it, and X-Scope-OrgID must
    name that tenant (403 otherwise).
(f) A tenant over its rate limit: 429 with Retry-After; the same push after that delay is stored.
The metrics of the HTTP listener are checked against what was sent.

Each part starts `loghaul serve` on its own temporary SQLite file (ephemeral ports, read from its
JSON start-up line) and stops it with SIGTERM. Prints `N passed, M failed` (exit 1 on any failure).

Usage: test_loki.py PATH_TO_LOGHAUL_BINARY
"""

import gzip
import json
import logging
import os
import shutil
import sys
import tempfile
import time

import cramjam
import logging_loki
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

import harness
from harness import Server, check, metric_value, request, retry_after_seconds, row_count, stored_rows

JSON = {"Content-Type": "application/json"}
PUSH = "/loki/api/v1/push"


# ---------------------------------------------------------------------------------------------
# (a) python-logging-loki


class RecordingLokiHandler(logging_loki.LokiHandler):
    """The library's handler, remembering for each record the line it sent, the window of time in
    which it sent it (the v1 emitter stamps an entry with the time of sending, not the record's),
    and any error (the handler otherwise only prints it)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.sent = []
        self.errors = []

    def emit(self, record):
        line = self.format(record)
        before = time.time_ns()
        super().emit(record)
        # The emitter computes nanoseconds from the float time.time(): allow it 1 ms either side.
        self.sent.append({"line": line, "window": (before // 1000 - 1000, time.time_ns() // 1000 + 1000)})

    def handleError(self, record):  # noqa: N802 (logging's name)
        self.errors.append(repr(sys.exc_info()[1]))
        super().handleError(record)


AUDIT = 25  # a level of the application's own, named with a word Loki does not know


def log_with_the_handler(server):
    logging.addLevelName(AUDIT, "AUDIT")
    handler = RecordingLokiHandler(url=server.url(PUSH), tags={"application": "checkout"}, version="1")
    logger = logging.getLogger("loghaul.ci.loki")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(handler)

    logger.debug("cache miss for cart %s", "c-1")
    logger.info("user logged in", extra={"tags": {"user-id": "u-7"}})
    logger.warning("card declined for order %d", 42, extra={"tags": {"service": "payments"}})
    logger.error("payment failed", extra={"tags": {"job": "worker", "order.id": "42"}})
    logger.critical("disk full")
    logger.log(AUDIT, "price changed")
    logger.info("naïve café ✓ — unicode")
    try:
        1 / 0
    except ZeroDivisionError:
        logger.exception("unhandled error in checkout")
    logger.removeHandler(handler)
    handler.close()

    # A second handler that names its tenant, as a multi-tenant Loki wants.
    tenant_handler = RecordingLokiHandler(url=server.url(PUSH), tags={"app": "ops-tool"}, version="1")
    tenant_handler.emitter.session.headers["X-Scope-OrgID"] = "ops"
    ops_logger = logging.getLogger("loghaul.ci.loki.ops")
    ops_logger.propagate = False
    ops_logger.addHandler(tenant_handler)
    ops_logger.warning("ops tenant record")
    ops_logger.removeHandler(tenant_handler)
    tenant_handler.close()
    return handler, tenant_handler


def check_logging_loki(server, db_path):
    handler, tenant_handler = log_with_the_handler(server)
    check("python-logging-loki: every push answered 204", handler.errors + tenant_handler.errors, [])
    sent = handler.sent + tenant_handler.sent
    check("python-logging-loki: 9 records sent", len(sent), 9)
    rows = stored_rows(db_path)
    check("python-logging-loki: 9 rows stored", len(rows), 9)

    base = {"application": "checkout", "logger": "loghaul.ci.loki"}

    def expect(index, service, severity, attributes, tenant="default"):
        line, (low, high) = sent[index]["line"], sent[index]["window"]
        row = rows.get(line, {})
        name = f"python-logging-loki: {line.splitlines()[0]!r}"
        check(f"{name}: stored as sent", {k: row.get(k) for k in
              ("tenant", "service", "severity", "attributes", "trace_id", "span_id")},
              {"tenant": tenant, "service": service, "severity": severity,
               "attributes": attributes, "trace_id": None, "span_id": None})
        check(f"{name}: ts is the time it was sent", low <= (row.get("ts") or 0) <= high, True)

    # Every tag is a stream label, kept as sent (the handler adds `severity`); the service is
    # derived from them in Loki's order, where `application` comes before `job`.
    def tags(severity, **more):
        return {**base, "severity": severity, **more}

    expect(0, "checkout", 5, tags("debug"))
    expect(1, "checkout", 9, tags("info", user_id="u-7"))
    expect(2, "payments", 13, tags("warning", service="payments"))
    expect(3, "checkout", 17, tags("error", job="worker", order_id="42"))
    expect(4, "checkout", 21, tags("critical"))
    expect(5, "checkout", 0, tags("audit"))
    expect(6, "checkout", 9, tags("info"))
    expect(7, "checkout", 17, tags("error"))
    expect(8, "ops-tool", 13, {"app": "ops-tool", "logger": "loghaul.ci.loki.ops", "severity": "warning"},
           tenant="ops")
    check("python-logging-loki: the messages", [entry["line"].splitlines()[0] for entry in sent], [
        "cache miss for cart c-1",
        "user logged in",
        "card declined for order 42",
        "payment failed",
        "disk full",
        "price changed",
        "naïve café ✓ — unicode",
        "unhandled error in checkout",
        "ops tenant record",
    ])
    traceback_line = sent[7]["line"]
    check("python-logging-loki: a traceback is part of the line",
          ("Traceback (most recent call last)" in traceback_line,
           "ZeroDivisionError" in traceback_line, traceback_line in rows), (True, True, True))


# ---------------------------------------------------------------------------------------------
# (b) pushes written by hand


def ns_at(seconds_ago, nanos):
    """A nanosecond timestamp with digits below the microsecond, which loghaul truncates."""
    return (time.time_ns() - seconds_ago * 10**9) // 1000 * 1000 + nanos


def check_two_streams(server, db_path):
    t1, t2, t3 = ns_at(30, 789), ns_at(20, 1), ns_at(10, 999)
    push = {"streams": [
        {
            "stream": {"service_name": "checkout", "level": "warn", "env": "prod"},
            "values": [
                [str(t1), "card declined"],
                [str(t2), "retrying payment", {"order_id": "42", "attempt": "2"}],
            ],
        },
        {
            "stream": {"service_name": "search", "level": "ERROR", "env": "staging"},
            "values": [[str(t3), "index unavailable", {"shard": "7"}]],
        },
    ]}
    answer = request("POST", server.url(PUSH), json.dumps(push).encode(), JSON)
    check("two streams: 204", answer.status, 204)
    rows = stored_rows(db_path)

    def row(message, ts, service, severity, attributes):
        return {"tenant": "default", "ts": ts, "severity": severity, "service": service,
                "message": message, "attributes": attributes, "trace_id": None, "span_id": None}

    # The stream's labels (`level` as sent) and an entry's metadata, as one map.
    check("two streams: an entry without structured metadata", rows.get("card declined"),
          row("card declined", t1 // 1000, "checkout", 13, {"env": "prod", "level": "warn"}))
    check("two streams: an entry with structured metadata", rows.get("retrying payment"),
          row("retrying payment", t2 // 1000, "checkout", 13,
              {"env": "prod", "level": "warn", "order_id": "42", "attempt": "2"}))
    check("two streams: the second stream, level ERROR", rows.get("index unavailable"),
          row("index unavailable", t3 // 1000, "search", 17,
              {"env": "staging", "level": "ERROR", "shard": "7"}))


def check_label_fallbacks(server, db_path):
    now = str(ns_at(5, 0))
    streams = [
        ({"service": "billing", "job": "cron", "detected_level": "critical"}, "fallback: service"),
        ({"app": "frontend", "severity": "TRACE"}, "fallback: app"),
        ({"job": "cron-2", "level": "err"}, "fallback: job"),
        ({"env": "dev", "level": "verbose"}, "fallback: none"),
        ({"service_name": "api", "level": "Warning"}, "level Warning"),
        ({"service_name": "api", "level": "debug"}, "level debug"),
        ({"service_name": "api", "level": "fatal"}, "level fatal"),
        ({"service_name": "api", "level": "panic"}, "level panic"),
    ]
    push = {"streams": [{"stream": labels, "values": [[now, line]]} for labels, line in streams]}
    answer = request("POST", server.url(PUSH), gzip.compress(json.dumps(push).encode()),
                     {**JSON, "Content-Encoding": "gzip"})
    check("label fallbacks (gzip): 204", answer.status, 204)
    rows = stored_rows(db_path)

    def stored(line):
        row = rows.get(line, {})
        return row.get("service"), row.get("severity"), row.get("attributes")

    # Every label stays a label as sent; the service and the severity are read from them.
    check("service label, then job; detected_level critical", stored("fallback: service"),
          ("billing", 21, {"service": "billing", "job": "cron", "detected_level": "critical"}))
    check("app label; severity TRACE", stored("fallback: app"),
          ("frontend", 1, {"app": "frontend", "severity": "TRACE"}))
    check("job label; level err", stored("fallback: job"), ("cron-2", 17, {"job": "cron-2", "level": "err"}))
    check("no service label: unknown_service; an unknown level stays a label",
          stored("fallback: none"), ("unknown_service", 0, {"env": "dev", "level": "verbose"}))
    check("level Warning", stored("level Warning"), ("api", 13, {"level": "Warning"}))
    check("level debug", stored("level debug"), ("api", 5, {"level": "debug"}))
    check("level fatal", stored("level fatal"), ("api", 21, {"level": "fatal"}))
    check("level panic", stored("level panic"), ("api", 21, {"level": "panic"}))


# ---------------------------------------------------------------------------------------------
# (c) an invalid entry among valid ones


def check_bad_timestamp(server, db_path):
    now = str(ns_at(1, 0))
    push = {"streams": [{
        "stream": {"service_name": "bad-ts"},
        "values": [[now, "valid entry 1"], ["yesterday", "entry with a bad timestamp"], [now, "valid entry 2"]],
    }]}
    before = row_count(db_path)
    answer = request("POST", server.url(PUSH), json.dumps(push).encode(), JSON)
    check("a timestamp that is not a number: 400", answer.status, 400)
    text = answer.body.decode(errors="replace")
    check("a timestamp that is not a number: '1 of 3 entries rejected'",
          text.startswith("1 of 3 entries rejected"), True)
    if not text.startswith("1 of 3"):
        print(f"     body: {text[:300]!r}")
    rows = stored_rows(db_path)
    check("a timestamp that is not a number: the valid entries are stored",
          (row_count(db_path) - before, "valid entry 1" in rows, "valid entry 2" in rows,
           "entry with a bad timestamp" in rows), (2, True, True, False))


# ---------------------------------------------------------------------------------------------
# (d) protobuf + snappy


def loki_push_classes():
    """logproto.PushRequest, built by the protobuf runtime from Loki's message and field numbers
    (pkg/push/push.proto): PushRequest{streams=1}, StreamAdapter{labels=1, entries=2, hash=3},
    EntryAdapter{timestamp=1, line=2, structuredMetadata=3}, LabelPairAdapter{name=1, value=2}."""
    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="loghaul_ci_loki_push.proto", package="logproto", syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"],
    )

    def message(name, *fields):
        m = file.message_type.add(name=name)
        for number, (field, kind, repeated, type_name) in enumerate(fields, start=1):
            f = m.field.add(name=field, number=number, type=kind,
                            label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if type_name:
                f.type_name = type_name

    message("PushRequest", ("streams", F.TYPE_MESSAGE, True, ".logproto.StreamAdapter"))
    message("StreamAdapter", ("labels", F.TYPE_STRING, False, None),
            ("entries", F.TYPE_MESSAGE, True, ".logproto.EntryAdapter"),
            ("hash", F.TYPE_UINT64, False, None))
    message("EntryAdapter", ("timestamp", F.TYPE_MESSAGE, False, ".google.protobuf.Timestamp"),
            ("line", F.TYPE_STRING, False, None),
            ("structuredMetadata", F.TYPE_MESSAGE, True, ".logproto.LabelPairAdapter"))
    message("LabelPairAdapter", ("name", F.TYPE_STRING, False, None), ("value", F.TYPE_STRING, False, None))
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("logproto.PushRequest"))


def check_protobuf_snappy(server, db_path):
    PushRequest = loki_push_classes()
    t1, t2 = ns_at(15, 456), ns_at(14, 0)
    push = PushRequest()
    stream = push.streams.add(labels='{service_name="proto-svc", level="info", region="eu-west, 1"}')
    first = stream.entries.add(line="protobuf entry")
    first.timestamp.seconds, first.timestamp.nanos = divmod(t1, 10**9)
    second = stream.entries.add(line="protobuf entry with metadata")
    second.timestamp.seconds, second.timestamp.nanos = divmod(t2, 10**9)
    second.structuredMetadata.add(name="request_id", value="r-9")
    body = bytes(cramjam.snappy.compress_raw(push.SerializeToString()))
    # urllib sends a form's type when none is given, as a cross-site form post would.
    answer = request("POST", server.url(PUSH), body, {})
    check("protobuf + snappy as a form: 415", answer.status, 415)
    answer = request("POST", server.url(PUSH), body, {"Content-Type": "application/x-protobuf"})
    check("protobuf + snappy: 204", answer.status, 204)
    rows = stored_rows(db_path)

    def stored(line):
        row = rows.get(line, {})
        return row.get("ts"), row.get("service"), row.get("severity"), row.get("attributes")

    check("protobuf + snappy: an entry", stored("protobuf entry"),
          (t1 // 1000, "proto-svc", 9, {"level": "info", "region": "eu-west, 1"}))
    check("protobuf + snappy: an entry with structured metadata", stored("protobuf entry with metadata"),
          (t2 // 1000, "proto-svc", 9, {"level": "info", "region": "eu-west, 1", "request_id": "r-9"}))


def check_metrics(server, _db_path):
    """What parts (b)-(d) sent, as the HTTP listener's metrics count it."""
    check("metrics: Loki entries received, valid or not (3 + 8 + 3 + 2)",
          metric_value(server.metrics, "loghaul_ingest_records_total", protocol="loki"), 16)
    check("metrics: three pushes ok",
          metric_value(server.metrics, "loghaul_http_ingest_requests_total", protocol="loki", outcome="ok"), 3)
    check("metrics: one push of no Loki type",
          metric_value(server.metrics, "loghaul_http_ingest_requests_total", protocol="loki",
                       outcome="unsupported_media_type"), 1)


# ---------------------------------------------------------------------------------------------
# (e) API keys and X-Scope-OrgID


def check_keys_and_tenants(server, db_path):
    def push(line):
        return json.dumps({"streams": [{
            "stream": {"service_name": "keyed"}, "values": [[str(time.time_ns()), line]],
        }]}).encode()

    url = server.url(PUSH)
    check("no key: 401", request("POST", url, push("no key"), JSON).status, 401)
    check("a wrong key: 401", request("POST", url, push("wrong key"), {**JSON, "x-api-key": "k2"}).status, 401)
    check("x-api-key k1: 204", request("POST", url, push("with x-api-key"), {**JSON, "x-api-key": "k1"}).status, 204)
    check("Bearer k1 and X-Scope-OrgID of its tenant: 204", request(
        "POST", url, push("with the org id"),
        {**JSON, "Authorization": "Bearer k1", "X-Scope-OrgID": "team-a"}).status, 204)
    check("Bearer k1 and X-Scope-OrgID of another tenant: 403", request(
        "POST", url, push("another org id"),
        {**JSON, "Authorization": "Bearer k1", "X-Scope-OrgID": "team-b"}).status, 403)
    rows = stored_rows(db_path)
    check("only the accepted pushes are stored, as the key's tenant",
          {line: row["tenant"] for line, row in rows.items()},
          {"with x-api-key": "team-a", "with the org id": "team-a"})


# ---------------------------------------------------------------------------------------------
# (f) a tenant over its rate limit


def check_rate_limit(server, db_path):
    """The server allows 1 record/s with a burst of 10 s: 10 entries empty the bucket."""
    def push(lines):
        return json.dumps({"streams": [{
            "stream": {"service_name": "limited"},
            "values": [[str(time.time_ns()), line] for line in lines],
        }]}).encode()

    url = server.url(PUSH)
    check("rate limit: 10 entries fill the burst: 204",
          request("POST", url, push([f"burst-{n}" for n in range(10)]), JSON).status, 204)
    answer = request("POST", url, push(["after the burst"]), JSON)
    check("rate limit: one more entry: 429", answer.status, 429)
    delay = retry_after_seconds(answer)
    check("rate limit: Retry-After in seconds, between 1 and 10", delay is not None and 1 <= delay <= 10, True)
    check("rate limit: the refused entry is not stored", "after the burst" in stored_rows(db_path), False)
    time.sleep(delay if delay is not None and delay <= 10 else 1)
    check("rate limit: the same push after Retry-After: 204",
          request("POST", url, push(["after the burst"]), JSON).status, 204)
    check("rate limit: now it is stored", (row_count(db_path), "after the burst" in stored_rows(db_path)), (11, True))
    check("rate limit: metrics count the 429",
          metric_value(server.metrics, "loghaul_http_ingest_requests_total",
                       protocol="loki", outcome="rate_limited"), 1)


# ---------------------------------------------------------------------------------------------


def part(name, binary, db_path, extra, steps):
    """One part of the test: its own server and database; the steps get (server, db_path)."""
    print(f"== {name}")
    server = None
    try:
        server = Server(binary, db_path, *extra)
        print(f"   loghaul serving the Loki push API on {server.http_ingest}")
        for step in steps:
            try:
                step(server, db_path)
            except Exception:
                harness.crashed(f"{name}: {step.__name__}")
        check(f"{name}: loghaul exits 0 on SIGTERM", server.stop(), 0)
    except Exception:
        harness.crashed(name)
    finally:
        if server is not None:
            if harness.failed():
                print("-- last lines of the loghaul log:\n" + server.last_lines())
            server.kill()


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    binary = sys.argv[1]
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="loghaul-loki-")
    try:
        part("(a) python-logging-loki", binary, os.path.join(workdir, "client.db"),
             ["--allow-org-id-tenants"], [check_logging_loki])
        part("(b)-(d) pushes by hand: JSON, gzip, a bad timestamp, protobuf + snappy", binary,
             os.path.join(workdir, "pushes.db"), [],
             [check_two_streams, check_label_fallbacks, check_bad_timestamp, check_protobuf_snappy,
              check_metrics])
        part("(e) API keys and X-Scope-OrgID", binary, os.path.join(workdir, "keys.db"),
             ["--api-keys", "k1=team-a"], [check_keys_and_tenants])
        part("(f) a tenant over its rate limit", binary, os.path.join(workdir, "limit.db"),
             ["--tenant-records-per-second", "1", "--tenant-burst", "10s"], [check_rate_limit])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"== checks took {time.monotonic() - started:.1f}s")
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
