#!/usr/bin/env python3
"""loghaul against a real, independent OTLP client: the official Python OpenTelemetry SDK.

Starts `loghaul serve` on a temporary SQLite file (ephemeral ports, read from its JSON start-up
line), exports logs through LoggerProvider -> BatchLogRecordProcessor -> OTLPLogExporter with gzip,
force-flushes, and compares every stored row field by field with what was sent, following the
mapping table in the README ("OpenTelemetry (OTLP)"). Then it sends one raw Export with bad records
through the generated OTLP stub to see the partial success, stops the server with SIGTERM, and
prints `N passed, M failed` (exit 1 on any failure).

Usage: test_python_sdk.py PATH_TO_LOGHAUL_BINARY
"""

import base64
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from collections import deque

import grpc
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

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
    """`loghaul serve` on a temporary SQLite file, stopped with SIGTERM like an operator would."""

    def __init__(self, binary, db_path):
        self.process = subprocess.Popen(
            [
                binary, "serve",
                "--listen", "127.0.0.1:0",
                "--metrics-listen", "127.0.0.1:0",
                "--console-listen", "off",
                "--http-listen", "off",
                "--database-url", f"sqlite://{db_path}",
                "--log-format", "json",
                "--shards", "2",
                "--batch-linger", "20ms",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        # The last lines of its log, shown if something goes wrong.
        self.log = deque(maxlen=50)
        self.serving = threading.Event()
        self.grpc = self.http = None
        threading.Thread(target=self._read_log, daemon=True).start()
        if not self.serving.wait(60):
            self.kill()
            raise RuntimeError("loghaul did not log 'loghaul is serving' within 60 s:\n" + "\n".join(self.log))

    def _read_log(self):
        for line in self.process.stderr:
            self.log.append(line.rstrip())
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("message") == "loghaul is serving":
                self.grpc, self.http = event["grpc"], event["http"]
                self.serving.set()

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


class RecordingExporter(OTLPLogExporter):
    """The SDK's exporter, remembering each export's result (the processor otherwise hides it)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.results = []

    def export(self, batch):
        result = super().export(batch)
        self.results.append(result)
        return result


def send_with_the_sdk(endpoint):
    """Emits the records this test checks; returns what it needs to know about them."""
    resource = Resource.create({
        "service.name": "py-checkout",
        "deployment.environment": "ci",
        "host.cpu.count": 2,
        "process.runtime.flags": ["-O", "-X"],
    })
    exporter = RecordingExporter(
        endpoint=endpoint, insecure=True, compression=grpc.Compression.Gzip, timeout=10
    )
    provider = LoggerProvider(resource=resource)
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter, schedule_delay_millis=200))
    tracer = TracerProvider(resource=resource).get_tracer("loghaul.ci")
    logger = provider.get_logger("loghaul.ci", version="1.2.3", attributes={"suite": "otlp-check"})
    plain_logger = provider.get_logger("loghaul.ci.plain")

    fixed_time = (time.time_ns() - 90 * 10**9) // 1000 * 1000 + 123_000
    started = time.time_ns()
    with tracer.start_as_current_span("checkout") as span:
        context = span.get_span_context()
        logger.emit(
            severity_number=SeverityNumber.WARN,
            severity_text="WARN",
            body="card declined",
            attributes={
                "order.id": 42,
                "amount": 12.5,
                "retry": True,
                "tags": ["a", "b"],
                "customer": "c-7",
                "http": {"method": "POST", "status": 402},
            },
            event_name="payment.declined",
        )
    logger.emit(
        severity_number=SeverityNumber.INFO,
        severity_text="INFO",
        body={"event": "login", "ok": True, "n": 3},
    )
    logger.emit(severity_number=SeverityNumber.DEBUG, severity_text="debug", body=b"\x00\x01binary\xff")
    logger.emit(severity_number=SeverityNumber.ERROR2, severity_text="E-PAYMENT", body=[1, "two", 3.5])
    logger.emit(
        timestamp=fixed_time,
        severity_number=SeverityNumber.FATAL,
        severity_text="CRITICAL",
        body="fatal at a fixed time",
    )
    logger.emit(body="no severity")
    plain_logger.emit(severity_number=SeverityNumber.INFO, body="plain scope", attributes={"k": "v"})
    for n in range(100):
        logger.emit(severity_number=SeverityNumber.INFO2, body=f"bulk-{n:03}", attributes={"n": n})
    flushed = provider.force_flush(30_000)
    finished = time.time_ns()
    provider.shutdown()
    return {
        "flushed": flushed,
        "results": exporter.results,
        "resource": dict(provider.resource.attributes),
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "fixed_time": fixed_time,
        "window": (started // 1000, finished // 1000),
    }


def stored_rows(db_path):
    connection = sqlite3.connect(db_path)
    connection.row_factory = sqlite3.Row
    rows = connection.execute(
        # A record's stream labels and its own attributes, as one map (its own winning).
        "SELECT tenant, ts, severity, service, message, json_patch(labels, attributes) AS attributes,"
        " trace_id, span_id FROM logs"
    ).fetchall()
    connection.close()
    return {row["message"]: dict(row, attributes=json.loads(row["attributes"])) for row in rows}


def check_sdk_rows(rows, sent):
    check("the SDK flushed within the timeout", sent["flushed"], True)
    check(
        "every SDK export succeeded",
        [result == LogRecordExportResult.SUCCESS for result in sent["results"]],
        [True] * len(sent["results"]),
    )
    check("all 107 records are stored", len(rows), 107)

    resource = {
        f"resource.{key}": flat(value)
        for key, value in sent["resource"].items()
        if key != "service.name"
    }
    check("resource attributes: string", resource.get("resource.deployment.environment"), "ci")
    check("resource attributes: int", resource.get("resource.host.cpu.count"), "2")
    check("resource attributes: array", resource.get("resource.process.runtime.flags"), '["-O","-X"]')
    check("resource attributes: the SDK's own", resource.get("resource.telemetry.sdk.language"), "python")
    scope = {"scope.name": "loghaul.ci", "scope.version": "1.2.3", "scope.suite": "otlp-check"}
    low, high = sent["window"]

    declined = rows.get("card declined", {})
    check("service from service.name", declined.get("service"), "py-checkout")
    check("tenant", declined.get("tenant"), "default")
    check("WARN severity", declined.get("severity"), 13)
    check("trace id of the active span", declined.get("trace_id"), sent["trace_id"])
    check("span id of the active span", declined.get("span_id"), sent["span_id"])
    check("no timestamp: the SDK's observed time", low <= (declined.get("ts") or 0) <= high, True)
    check(
        "attributes of several types, scope and resource, event_name; canonical WARN text dropped",
        declined.get("attributes"),
        {
            **resource,
            **scope,
            "order.id": "42",
            "amount": "12.5",
            "retry": "true",
            "tags": '["a","b"]',
            "customer": "c-7",
            "http": '{"method":"POST","status":402}',
            "event_name": "payment.declined",
        },
    )

    login_body = '{"event":"login","n":3,"ok":true}'
    login = rows.get(login_body, {})
    check("map body as compact JSON with sorted keys", login.get("message"), login_body)
    check("INFO severity", login.get("severity"), 9)
    check("INFO text is not repeated", login.get("attributes"), {**resource, **scope})
    check("outside a span there is no trace id", (login.get("trace_id"), login.get("span_id")), (None, None))

    binary_body = base64.b64encode(b"\x00\x01binary\xff").decode()
    binary = rows.get(binary_body, {})
    check("bytes body as base64", binary.get("message"), binary_body)
    check("DEBUG severity", binary.get("severity"), 5)
    check("lowercase 'debug' is still the canonical name", binary.get("attributes"), {**resource, **scope})

    listed = rows.get('[1,"two",3.5]', {})
    check("array body as compact JSON", listed.get("message"), '[1,"two",3.5]')
    check("ERROR2 severity", listed.get("severity"), 18)
    check("informative severity_text kept", listed.get("attributes", {}).get("severity_text"), "E-PAYMENT")

    fatal = rows.get("fatal at a fixed time", {})
    check("explicit timestamp, to the microsecond", fatal.get("ts"), sent["fixed_time"] // 1000)
    check("FATAL severity", fatal.get("severity"), 21)
    check("CRITICAL is not FATAL's name: kept", fatal.get("attributes", {}).get("severity_text"), "CRITICAL")

    check("no severity is 0", rows.get("no severity", {}).get("severity"), 0)
    check(
        "a scope without version or attributes",
        rows.get("plain scope", {}).get("attributes"),
        {**resource, "scope.name": "loghaul.ci.plain", "k": "v"},
    )
    bulk = [rows.get(f"bulk-{n:03}", {}) for n in range(100)]
    check("bulk records: severity", {row.get("severity") for row in bulk}, {10})
    check("bulk records: int attribute", [row.get("attributes", {}).get("n") for row in bulk], [str(n) for n in range(100)])
    check("bulk records: service", {row.get("service") for row in bulk}, {"py-checkout"})


def check_partial_success(endpoint, rows_before, db_path):
    """A raw Export through the generated OTLP stub: one good record, two with bad ids."""
    def record(body, trace_id=b"", span_id=b""):
        return logs_pb2.LogRecord(
            time_unix_nano=time.time_ns(),
            severity_number=9,
            body=common_pb2.AnyValue(string_value=body),
            trace_id=trace_id,
            span_id=span_id,
        )

    request = logs_service_pb2.ExportLogsServiceRequest(resource_logs=[
        logs_pb2.ResourceLogs(
            resource=resource_pb2.Resource(attributes=[
                common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value="raw")),
            ]),
            scope_logs=[logs_pb2.ScopeLogs(log_records=[
                record("raw-good", trace_id=bytes(range(1, 17)), span_id=bytes(range(1, 9))),
                record("raw-short-trace", trace_id=b"\x01\x02\x03"),
                record("raw-long-span", span_id=bytes(12)),
            ])],
        ),
    ])
    with grpc.insecure_channel(endpoint, compression=grpc.Compression.Gzip) as channel:
        response = logs_service_pb2_grpc.LogsServiceStub(channel).Export(request, timeout=10)
    partial = response.partial_success
    check("partial success: rejected count", partial.rejected_log_records, 2)
    message = partial.error_message
    check("partial success: names #1", "#1 invalid_trace_id: trace_id is 3 bytes" in message, True)
    check("partial success: names #2", "#2 invalid_span_id: span_id is 12 bytes" in message, True)
    rows = stored_rows(db_path)
    check("partial success: only the good record is added", len(rows) - rows_before, 1)
    good = rows.get("raw-good", {})
    check("partial success: the good record's ids", (good.get("trace_id"), good.get("span_id")),
          ("0102030405060708090a0b0c0d0e0f10", "0102030405060708"))


def check_metrics(http):
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    check("metrics count OTLP exports", 'loghaul_otlp_exports_total{outcome="ok"}' in text, True)
    check(
        "metrics count the rejections by reason",
        'loghaul_records_rejected_total{reason="invalid_span_id",tenant="default"} 1' in text,
        True,
    )


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    binary = sys.argv[1]
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="loghaul-otlp-")
    db_path = os.path.join(workdir, "logs.db")
    server = Server(binary, db_path)
    try:
        print(f"== loghaul serving gRPC on {server.grpc}, HTTP on {server.http}")
        endpoint = f"http://{server.grpc}"
        sent = send_with_the_sdk(endpoint)
        rows = stored_rows(db_path)
        check_sdk_rows(rows, sent)
        check_partial_success(server.grpc, len(rows), db_path)
        check_metrics(server.http)
        check("loghaul exits 0 on SIGTERM", server.stop(), 0)
    except Exception:  # a crash is a failure, reported like the others
        global FAILED
        FAILED += 1
        traceback.print_exc(file=sys.stdout)
        print("FAIL the test crashed")
    finally:
        if FAILED:
            print("-- last lines of the loghaul log:\n" + "\n".join(server.log))
        server.kill()
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"== checks took {time.monotonic() - started:.1f}s")
        print(f"{PASSED} passed, {FAILED} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
