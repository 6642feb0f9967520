#!/usr/bin/env python3
"""loghaul's OTLP/HTTP listener (`POST /v1/logs`) against real, independent clients.

(a) The official Python OpenTelemetry SDK: LoggerProvider -> BatchLogRecordProcessor -> the
    OTLP/HTTP OTLPLogExporter (protobuf, gzip); every stored row compared field by field with what
    was sent, following the mapping table of docs/opentelemetry.md. Then a raw protobuf request
    built with the generated OTLP classes, with records the server must reject (partial success).
(b) OTLP/JSON written by hand after the spec's logs example (camelCase, hex ids, int64 as strings),
    and again with int64 as numbers in a gzip body, POSTed with urllib.
(c) OTLP/JSON with one invalid record: 200 with partialSuccess, the other record stored.
    Then the answers to a body that does not decode and to a wrong content type.
(d) A server with an API key: 401 with a google.rpc.Status (JSON and protobuf) without it, the
    tenant of the key with `Authorization: Bearer` and `x-api-key` (the SDK's exporter too), 413
    over --max-request-bytes before and after decompression.
(e) CORS: a preflight from the allowed origin and from another one; a POST from another
    origin, which this keyless server refuses with 403 and does not store.
(f) A tenant over its rate limit: 429 with Retry-After and a RetryInfo, and the SDK's exporter
    waits that long and succeeds.
Answers are decoded with protobuf's own decoders (binary and JSON), and the metrics of the HTTP
listener are checked against what was sent.

Each part starts `loghaul serve` on its own temporary SQLite file (ephemeral ports, read from its
JSON start-up line) and stops it with SIGTERM. Prints `N passed, M failed` (exit 1 on any failure).

Usage: test_otlp_http.py PATH_TO_LOGHAUL_BINARY
"""

import base64
import gzip
import json
import os
import shutil
import sys
import tempfile
import time

from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import harness
from harness import (Server, check, flat, metric_value, request, retry_after_seconds, row_count,
                     stored_rows)

JSON = {"Content-Type": "application/json"}
PROTOBUF = {"Content-Type": "application/x-protobuf"}


class RecordingExporter(OTLPLogExporter):
    """The SDK's exporter, remembering each export's result (the processor otherwise hides it)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.results = []

    def export(self, batch):
        result = super().export(batch)
        self.results.append(result)
        return result


# ---------------------------------------------------------------------------------------------
# (a) the SDK's OTLP/HTTP exporter


def send_with_the_sdk(endpoint):
    """Emits the records this test checks; returns what it needs to know about them."""
    resource = Resource.create({
        "service.name": "py-checkout",
        "deployment.environment": "ci",
        "host.cpu.count": 2,
        "process.runtime.flags": ["-O", "-X"],
    })
    exporter = RecordingExporter(endpoint=endpoint, compression=Compression.Gzip, timeout=10)
    provider = LoggerProvider(resource=resource)
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter, schedule_delay_millis=200))
    tracer = TracerProvider(resource=resource).get_tracer("loghaul.ci")
    logger = provider.get_logger("loghaul.ci", version="1.2.3", attributes={"suite": "http-check"})
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
    scope = {"scope.name": "loghaul.ci", "scope.version": "1.2.3", "scope.suite": "http-check"}
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


def check_protobuf_partial_success(server, db_path):
    """A raw protobuf request built with the generated OTLP classes: one good record, two with
    ids of the wrong length. The answer is an ExportLogsServiceResponse in protobuf."""
    def record(body, trace_id=b"", span_id=b""):
        return logs_pb2.LogRecord(
            time_unix_nano=time.time_ns(),
            severity_number=9,
            body=common_pb2.AnyValue(string_value=body),
            trace_id=trace_id,
            span_id=span_id,
        )

    export = logs_service_pb2.ExportLogsServiceRequest(resource_logs=[
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
    before = row_count(db_path)
    answer = request("POST", server.url("/v1/logs"), export.SerializeToString(), PROTOBUF)
    check("protobuf partial success: 200", answer.status, 200)
    check(
        "protobuf partial success: the answer is protobuf",
        (answer.header("Content-Type") or "").split(";")[0].strip(),
        "application/x-protobuf",
    )
    response = logs_service_pb2.ExportLogsServiceResponse()
    response.ParseFromString(answer.body)
    partial = response.partial_success
    check("protobuf partial success: rejected count", partial.rejected_log_records, 2)
    message = partial.error_message
    check("protobuf partial success: names #1", "#1 invalid_trace_id" in message, True)
    check("protobuf partial success: names #2", "#2 invalid_span_id" in message, True)
    check("protobuf partial success: only the good record is added", row_count(db_path) - before, 1)
    good = stored_rows(db_path).get("raw-good", {})
    check(
        "protobuf partial success: the good record's ids",
        (good.get("trace_id"), good.get("span_id"), good.get("service")),
        ("0102030405060708090a0b0c0d0e0f10", "0102030405060708", "raw"),
    )


# ---------------------------------------------------------------------------------------------
# (b) OTLP/JSON after the spec's example


def spec_example(body, time_unix_nano, int_value):
    """The logs example of the OTLP specification, with a body of our own and the int64 fields in
    the given JSON form (a string, as protobuf's JSON mapping writes them, or a number)."""
    return {
        "resourceLogs": [{
            "resource": {
                "attributes": [{"key": "service.name", "value": {"stringValue": "my.service"}}],
            },
            "scopeLogs": [{
                "scope": {
                    "name": "my.library",
                    "version": "1.0.0",
                    "attributes": [
                        {"key": "my.scope.attribute", "value": {"stringValue": "some scope attribute"}},
                    ],
                },
                "logRecords": [{
                    "timeUnixNano": time_unix_nano,
                    "observedTimeUnixNano": time_unix_nano,
                    "severityNumber": 10,
                    "severityText": "Information",
                    "traceId": "5B8EFFF798038103D269B633813FC60C",
                    "spanId": "EEE19B7EC3C1B174",
                    "body": {"stringValue": body},
                    "attributes": [
                        {"key": "string.attribute", "value": {"stringValue": "some string"}},
                        {"key": "boolean.attribute", "value": {"boolValue": True}},
                        {"key": "int.attribute", "value": {"intValue": int_value}},
                        {"key": "double.attribute", "value": {"doubleValue": 637.704}},
                        {"key": "array.attribute", "value": {"arrayValue": {"values": [
                            {"stringValue": "many"}, {"stringValue": "values"},
                        ]}}},
                        {"key": "map.attribute", "value": {"kvlistValue": {"values": [
                            {"key": "some.map.key", "value": {"stringValue": "some value"}},
                        ]}}},
                    ],
                }],
            }],
        }],
    }


def spec_row(message):
    """How the spec's example record is stored."""
    return {
        "tenant": "default",
        "ts": 1544712660300000,
        "severity": 10,
        "service": "my.service",
        "message": message,
        "attributes": {
            "scope.name": "my.library",
            "scope.version": "1.0.0",
            "scope.my.scope.attribute": "some scope attribute",
            "severity_text": "Information",
            "string.attribute": "some string",
            "boolean.attribute": "true",
            "int.attribute": "10",
            "double.attribute": "637.704",
            "array.attribute": '["many","values"]',
            "map.attribute": '{"some.map.key":"some value"}',
        },
        "trace_id": "5b8efff798038103d269b633813fc60c",
        "span_id": "eee19b7ec3c1b174",
    }


def json_response(answer):
    """A JSON answer decoded by protobuf's JSON decoder as an ExportLogsServiceResponse (which
    refuses unknown fields and wrong types), or the decoder's complaint."""
    try:
        return json_format.Parse(answer.body, logs_service_pb2.ExportLogsServiceResponse())
    except json_format.ParseError as error:
        return f"not an ExportLogsServiceResponse: {error}"


def rejected_count(answer):
    """partialSuccess.rejectedLogRecords of a JSON answer (an int64: a string or a number), 0 when
    absent (a fully stored request has no partialSuccess)."""
    partial = answer.json().get("partialSuccess") or {}
    return int(partial.get("rejectedLogRecords", 0))


def check_spec_json(server, db_path):
    body = json.dumps(spec_example("Example log record", "1544712660300000000", "10")).encode()
    answer = request("POST", server.url("/v1/logs"), body, JSON)
    check("spec example (int64 as strings): 200", answer.status, 200)
    check(
        "spec example: the answer is JSON",
        (answer.header("Content-Type") or "").split(";")[0].strip(),
        "application/json",
    )
    check("spec example: nothing rejected", rejected_count(answer) if answer.status == 200 else None, 0)
    check("spec example: protobuf's JSON decoder reads the answer as an empty ExportLogsServiceResponse",
          json_response(answer), logs_service_pb2.ExportLogsServiceResponse())
    check("spec example: the stored row", stored_rows(db_path).get("Example log record"),
          spec_row("Example log record"))

    body = json.dumps(spec_example("Example log record, numbers", 1544712660300000000, 10)).encode()
    answer = request("POST", server.url("/v1/logs"), gzip.compress(body),
                     {**JSON, "Content-Encoding": "gzip"})
    check("spec example (int64 as numbers, gzip): 200", answer.status, 200)
    check("spec example (int64 as numbers, gzip): nothing rejected",
          rejected_count(answer) if answer.status == 200 else None, 0)
    check("spec example (int64 as numbers, gzip): the stored row",
          stored_rows(db_path).get("Example log record, numbers"),
          spec_row("Example log record, numbers"))


# ---------------------------------------------------------------------------------------------
# (c) an invalid record among valid ones; bodies that do not decode


def check_json_partial_success(server, db_path):
    now = time.time_ns()
    export = {"resourceLogs": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-svc"}}]},
        "scopeLogs": [{"logRecords": [
            {"timeUnixNano": str(now), "severityNumber": 17, "body": {"stringValue": "json-good"}},
            {"timeUnixNano": str(now), "severityNumber": 99, "body": {"stringValue": "json-bad-severity"}},
        ]}],
    }]}
    before = row_count(db_path)
    answer = request("POST", server.url("/v1/logs"), json.dumps(export).encode(), JSON)
    check("JSON partial success: 200", answer.status, 200)
    partial = (answer.json().get("partialSuccess") or {}) if answer.status == 200 else {}
    check("JSON partial success: rejectedLogRecords", int(partial.get("rejectedLogRecords", 0)), 1)
    check("JSON partial success: errorMessage names #1 invalid_severity",
          "#1 invalid_severity" in partial.get("errorMessage", ""), True)
    check("JSON partial success: only the good record is added", row_count(db_path) - before, 1)
    rows = stored_rows(db_path)
    good = rows.get("json-good", {})
    check("JSON partial success: the good record",
          (good.get("service"), good.get("severity"), good.get("ts")), ("json-svc", 17, now // 1000))
    check("JSON partial success: the bad record is not stored", "json-bad-severity" in rows, False)
    decoded = json_response(answer)
    check("JSON partial success: protobuf's JSON decoder reads the same count",
          getattr(getattr(decoded, "partial_success", None), "rejected_log_records", decoded), 1)


def status_of(answer):
    """The google.rpc.Status of an error answer, as (code, message), in the answer's encoding."""
    kind = (answer.header("Content-Type") or "").split(";")[0].strip()
    if kind == "application/json":
        # Protobuf's JSON decoder: unknown fields, wrong types or an unknown Any in `details` fail.
        try:
            status = json_format.Parse(answer.body, status_pb2.Status())
        except json_format.ParseError as error:
            return "not a google.rpc.Status", str(error)
        return status.code, status.message
    if kind == "application/x-protobuf":
        status = status_pb2.Status()
        status.ParseFromString(answer.body)
        return status.code, status.message
    return f"content type {kind!r}", answer.body[:200]


def check_status_body(name, answer, kind):
    """An error body is a google.rpc.Status with a code and a message, in the request's encoding."""
    check(f"{name}: the body's content type",
          (answer.header("Content-Type") or "").split(";")[0].strip(), kind)
    code, message = status_of(answer)
    check(f"{name}: a google.rpc.Status with a code and a message",
          (isinstance(code, int) and code != 0, isinstance(message, str) and message != ""), (True, True))


def check_bad_bodies(server, db_path):
    before = row_count(db_path)
    answer = request("POST", server.url("/v1/logs"), b'{"resourceLogs": [', JSON)
    check("a JSON body that does not decode: 400", answer.status, 400)
    check_status_body("a JSON body that does not decode", answer, "application/json")
    answer = request("POST", server.url("/v1/logs"), b"\x0a\xff\xff\xff\xff\x0f", PROTOBUF)
    check("a protobuf body that does not decode: 400", answer.status, 400)
    check_status_body("a protobuf body that does not decode", answer, "application/x-protobuf")
    answer = request("POST", server.url("/v1/logs"), b"resourceLogs", {"Content-Type": "text/plain"})
    check("a text/plain body: 415", answer.status, 415)
    check("nothing stored from them", row_count(db_path), before)


def check_metrics(server, _db_path):
    """What parts (a)-(c) sent, as the HTTP listener's metrics count it."""
    requests_total = "loghaul_http_ingest_requests_total"
    check("metrics: OTLP/HTTP records received, valid or not (107 + 3 + 2 + 2)",
          metric_value(server.metrics, "loghaul_ingest_records_total", protocol="otlp_http"), 114)
    check("metrics: the SDK's exports are ok",
          metric_value(server.metrics, requests_total, protocol="otlp_http", outcome="ok") >= 3, True)
    check("metrics: two partial successes",
          metric_value(server.metrics, requests_total, protocol="otlp_http", outcome="partial"), 2)
    check("metrics: one unsupported media type",
          metric_value(server.metrics, requests_total, protocol="otlp_http", outcome="unsupported_media_type"), 1)


# ---------------------------------------------------------------------------------------------
# (d) API keys and the request size limit


def one_record(message):
    return json.dumps({"resourceLogs": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "keyed"}}]},
        "scopeLogs": [{"logRecords": [
            {"timeUnixNano": str(time.time_ns()), "severityNumber": 9, "body": {"stringValue": message}},
        ]}],
    }]}).encode()


def check_api_keys(server, db_path):
    url = server.url("/v1/logs")
    answer = request("POST", url, one_record("no key"), JSON)
    check("no key: 401", answer.status, 401)
    check_status_body("no key (JSON)", answer, "application/json")
    export = logs_service_pb2.ExportLogsServiceRequest(resource_logs=[logs_pb2.ResourceLogs(
        scope_logs=[logs_pb2.ScopeLogs(log_records=[logs_pb2.LogRecord(
            time_unix_nano=time.time_ns(), body=common_pb2.AnyValue(string_value="no key, protobuf"),
        )])],
    )])
    answer = request("POST", url, export.SerializeToString(), PROTOBUF)
    check("no key, protobuf: 401", answer.status, 401)
    check_status_body("no key (protobuf)", answer, "application/x-protobuf")
    answer = request("POST", url, one_record("wrong key"), {**JSON, "x-api-key": "k2"})
    check("a wrong key: 401", answer.status, 401)
    answer = request("POST", url, one_record("wrong bearer"), {**JSON, "Authorization": "Bearer k2"})
    check("a wrong bearer token: 401", answer.status, 401)
    check("nothing stored without the key", row_count(db_path), 0)

    answer = request("POST", url, one_record("bearer key"), {**JSON, "Authorization": "Bearer k1"})
    check("Authorization: Bearer k1: 200", answer.status, 200)
    answer = request("POST", url, one_record("x-api-key"), {**JSON, "x-api-key": "k1"})
    check("x-api-key: k1: 200", answer.status, 200)

    exporter = RecordingExporter(endpoint=url, headers={"x-api-key": "k1"}, compression=Compression.Gzip)
    provider = LoggerProvider(resource=Resource.create({"service.name": "keyed-sdk"}))
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter, schedule_delay_millis=100))
    provider.get_logger("loghaul.ci.keys").emit(severity_number=SeverityNumber.INFO, body="sdk with a key")
    flushed = provider.force_flush(30_000)
    provider.shutdown()
    check("the SDK's exporter with an x-api-key header: flushed and succeeded",
          (flushed, [result == LogRecordExportResult.SUCCESS for result in exporter.results]), (True, [True]))

    rows = stored_rows(db_path)
    check("the tenant of the key, by bearer token", rows.get("bearer key", {}).get("tenant"), "team-a")
    check("the tenant of the key, by x-api-key", rows.get("x-api-key", {}).get("tenant"), "team-a")
    check("the tenant of the key, through the SDK",
          (rows.get("sdk with a key", {}).get("tenant"), rows.get("sdk with a key", {}).get("service")),
          ("team-a", "keyed-sdk"))


def check_request_limit(server, db_path):
    """The server runs with --max-request-bytes 64KiB."""
    url = server.url("/v1/logs")
    before = row_count(db_path)
    big = one_record("x" * 100_000)
    answer = request("POST", url, big, {**JSON, "x-api-key": "k1"})
    check("a 100 KB body over a 64 KiB limit: 413", answer.status, 413)
    check_status_body("a body over the limit", answer, "application/json")
    inflated = gzip.compress(big)
    check("(the gzip body is under the limit on the wire)", len(inflated) < 65536, True)
    answer = request("POST", url, inflated, {**JSON, "x-api-key": "k1", "Content-Encoding": "gzip"})
    check("a gzip body over the limit once decompressed: 413", answer.status, 413)
    check("nothing stored from them", row_count(db_path), before)


# ---------------------------------------------------------------------------------------------
# (e) CORS


def header_list(answer, name):
    return {item.strip().lower() for item in (answer.header(name) or "").split(",") if item.strip()}


def check_cors(server):
    url = server.url("/v1/logs")
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-api-key",
    }
    answer = request("OPTIONS", url, None, {**preflight, "Origin": "http://app.test"})
    check("CORS preflight from the allowed origin: 204", answer.status, 204)
    check("CORS preflight: Access-Control-Allow-Origin", answer.header("Access-Control-Allow-Origin"),
          "http://app.test")
    check("CORS preflight: Access-Control-Allow-Methods has POST",
          "post" in header_list(answer, "Access-Control-Allow-Methods"), True)
    wanted = {"content-type", "content-encoding", "x-api-key", "authorization"}
    check("CORS preflight: Access-Control-Allow-Headers",
          wanted & header_list(answer, "Access-Control-Allow-Headers"), wanted)

    answer = request("POST", url, one_record("from the browser"),
                     {**JSON, "Origin": "http://app.test"})
    check("a POST from the allowed origin: 200", answer.status, 200)
    check("a POST from the allowed origin: Access-Control-Allow-Origin",
          answer.header("Access-Control-Allow-Origin"), "http://app.test")

    answer = request("OPTIONS", url, None, {**preflight, "Origin": "http://evil.test"})
    check("CORS preflight from another origin: 403", answer.status, 403)
    check("CORS preflight from another origin: no CORS headers",
          [name for name in ("Access-Control-Allow-Origin", "Access-Control-Allow-Methods",
                             "Access-Control-Allow-Headers") if answer.header(name) is not None], [])
    answer = request("POST", url, one_record("from elsewhere"), {**JSON, "Origin": "http://evil.test"})
    check("a POST from another origin to a server without keys: 403", answer.status, 403)
    check("a POST from another origin: no Access-Control-Allow-Origin",
          answer.header("Access-Control-Allow-Origin"), None)


# ---------------------------------------------------------------------------------------------
# (f) a tenant over its rate limit


def records(count, prefix):
    return json.dumps({"resourceLogs": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "limited"}}]},
        "scopeLogs": [{"logRecords": [
            {"timeUnixNano": str(time.time_ns()), "severityNumber": 9, "body": {"stringValue": f"{prefix}-{n}"}}
            for n in range(count)
        ]}],
    }]}).encode()


def check_rate_limit(server, db_path):
    """The server allows 1 record/s with a burst of 10 s: 10 records empty the bucket."""
    url = server.url("/v1/logs")
    check("rate limit: 10 records fill the burst: 200",
          request("POST", url, records(10, "burst"), JSON).status, 200)
    answer = request("POST", url, records(1, "over"), JSON)
    check("rate limit: one more record: 429", answer.status, 429)
    delay = retry_after_seconds(answer)
    check("rate limit: Retry-After in seconds, at least 1", delay is not None and delay >= 1, True)
    check_status_body("rate limit", answer, "application/json")
    status = status_pb2.Status()
    try:
        json_format.Parse(answer.body, status)
    except json_format.ParseError:
        pass
    retry_info = [detail for detail in status.details if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR)]
    check("rate limit: the Status carries a RetryInfo", len(retry_info), 1)

    exporter = RecordingExporter(endpoint=url, timeout=10)
    provider = LoggerProvider(resource=Resource.create({"service.name": "limited-sdk"}))
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter, schedule_delay_millis=50))
    sent_at = time.monotonic()
    provider.get_logger("loghaul.ci.limit").emit(severity_number=SeverityNumber.INFO, body="sdk after the limit")
    flushed = provider.force_flush(30_000)
    took = time.monotonic() - sent_at
    provider.shutdown()
    check("rate limit: the SDK's exporter retries after Retry-After and succeeds",
          (flushed, [result == LogRecordExportResult.SUCCESS for result in exporter.results]), (True, [True]))
    print(f"     (the SDK's export took {took:.1f}s)")
    rows = stored_rows(db_path)
    check("rate limit: stored are the burst and the SDK's record, not the refused one",
          (len(rows), "sdk after the limit" in rows, "over-0" in rows), (11, True, False))
    check("rate limit: metrics count the 429s",
          metric_value(server.metrics, "loghaul_http_ingest_requests_total",
                       protocol="otlp_http", outcome="rate_limited") >= 1, True)


# ---------------------------------------------------------------------------------------------


def part(name, binary, db_path, extra, steps):
    """One part of the test: its own server and database; the steps get (server, db_path)."""
    print(f"== {name}")
    server = None
    try:
        server = Server(binary, db_path, *extra)
        print(f"   loghaul serving OTLP/HTTP on {server.http_ingest}")
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
    workdir = tempfile.mkdtemp(prefix="loghaul-otlp-http-")
    try:
        def sdk(server, db_path):
            sent = send_with_the_sdk(server.url("/v1/logs"))
            check_sdk_rows(stored_rows(db_path), sent)

        def cors(server, db_path):
            check_cors(server)
            check("CORS: only the allowed origin's record is stored", sorted(stored_rows(db_path)),
                  ["from the browser"])

        # The spec's example is from 2018: keep every age for it.
        part("(a)-(c) the SDK's OTLP/HTTP exporter, OTLP/JSON, partial success", binary,
             os.path.join(workdir, "otlp.db"), ["--retention", "0s"],
             [sdk, check_protobuf_partial_success, check_spec_json, check_json_partial_success,
              check_bad_bodies, check_metrics])
        part("(d) API keys and the request limit", binary, os.path.join(workdir, "keys.db"),
             ["--api-keys", "k1=team-a", "--max-request-bytes", "64KiB"],
             [check_api_keys, check_request_limit])
        part("(e) CORS", binary, os.path.join(workdir, "cors.db"),
             ["--http-cors-origins", "http://app.test"], [cors])
        part("(f) a tenant over its rate limit", binary, os.path.join(workdir, "limit.db"),
             ["--tenant-records-per-second", "1", "--tenant-burst", "10s"], [check_rate_limit])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"== checks took {time.monotonic() - started:.1f}s")
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
