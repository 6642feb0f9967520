#!/usr/bin/env python3
"""loghaul's refusals read by gRPC's own status library: grpcio and grpcio-status.

A client told RESOURCE_EXHAUSTED learns when to come back from the `google.rpc.RetryInfo` in the
status details (`grpc-status-details-bin`). grpcio-status's `rpc_status.from_call` hands them out
only when the details' code and message are the status's own, and raises ValueError otherwise.

Starts `loghaul serve` on a temporary SQLite file with one shard whose queue holds one chunk,
locks the table from another connection so that nothing commits, and pushes: four
LogIngest.Push streams of 20 chunks (stubs built from proto/ with grpcio-tools) and one OTLP
Export. Each is refused with RESOURCE_EXHAUSTED once it has waited the enqueue timeout; every
refusal must decode with `from_call` and carry a RetryInfo of 1 s, and a Push refusal must also
say, in the same message, which of its messages were not stored. Then the lock is released, a new
push is stored, the server stops with SIGTERM, and the test prints `N passed, M failed`.

Usage: test_grpc_status.py PATH_TO_LOGHAUL_BINARY
"""

import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from datetime import timedelta

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "http"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "proto"))

import harness  # noqa: E402
from harness import check  # noqa: E402

STREAMS = 4
CHUNKS = 20
RECORDS = 100
DEADLINE = 60


def push_requests(ingest, stream):
    """The chunks of one Push stream."""
    for chunk in range(CHUNKS):
        yield ingest.PushRequest(records=[
            ingest.LogRecord(service="py-status", message=f"s{stream}-c{chunk}-r{n}", severity=9)
            for n in range(RECORDS)
        ])


def export_request(body):
    """An OTLP Export of one record."""
    record = logs_pb2.LogRecord(
        time_unix_nano=time.time_ns(), severity_number=9, body=common_pb2.AnyValue(string_value=body)
    )
    return logs_service_pb2.ExportLogsServiceRequest(resource_logs=[
        logs_pb2.ResourceLogs(scope_logs=[logs_pb2.ScopeLogs(log_records=[record])])
    ])


def check_refusal(name, error):
    """A RESOURCE_EXHAUSTED whose details grpcio-status reads, with the retry delay in them."""
    check(f"{name}: RESOURCE_EXHAUSTED", error.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
    try:
        status = rpc_status.from_call(error)
    except ValueError as mismatch:
        check(f"{name}: from_call reads the details", str(mismatch), "no error")
        return
    if not check(f"{name}: the status has details", status is not None, True):
        return
    check(f"{name}: the details' message is the status's", status.message, error.details())
    check(f"{name}: the details' code is the status's", status.code, error.code().value[0])
    delays = []
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            delays.append(info.retry_delay.ToTimedelta())
    check(f"{name}: RetryInfo says when to come back", delays, [timedelta(seconds=1)])


def wait_for(what, condition):
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {DEADLINE} s for {what}")
        time.sleep(0.05)


def run(server, db_path):
    ingest, services = grpc.protos_and_services("loghaul/v1/ingest.proto")
    channel = grpc.insecure_channel(server.grpc)
    push = services.LogIngestStub(channel).Push
    export = logs_service_pb2_grpc.LogsServiceStub(channel).Export

    # Another connection holds SQLite's write lock: nothing commits until it rolls back.
    lock = sqlite3.connect(db_path, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    outcomes = {}

    def stream(number):
        try:
            outcomes[number] = push(push_requests(ingest, number), timeout=DEADLINE)
        except grpc.RpcError as error:
            outcomes[number] = error

    threads = [threading.Thread(target=stream, args=(n,)) for n in range(STREAMS)]
    for thread in threads:
        thread.start()
    # One chunk fills the queue and one the batch being written: then this Export finds no room.
    queued = lambda: harness.metric_value(server.metrics, "loghaul_queue_depth", shard="0")
    wait_for("the streams to fill the queue", lambda: queued() >= 1)
    try:
        export(export_request("refused while locked"), timeout=DEADLINE)
        check("the OTLP Export is refused while the table is locked", "stored", "refused")
    except grpc.RpcError as error:
        check_refusal("OTLP Export", error)
    # The streams that queued a chunk wait for room for their next one: once every stream (and
    # the Export) has waited out the enqueue timeout, none is left to store more after the lock.
    timeouts = lambda: harness.metric_value(server.metrics, "loghaul_backpressure_timeouts_total")
    wait_for("every stream to time out waiting for room", lambda: timeouts() >= STREAMS + 1)
    lock.rollback()
    lock.close()
    for thread in threads:
        thread.join(DEADLINE)

    for number in range(STREAMS):
        outcome = outcomes.get(number)
        if not check(f"Push {number} is refused", isinstance(outcome, grpc.RpcError), True):
            continue
        check_refusal(f"Push {number}", outcome)
        trailers = dict(outcome.trailing_metadata() or ())
        check(f"Push {number}: names what was not stored", "loghaul-unstored-messages" in trailers, True)
        check(f"Push {number}: the message says it too", "not stored: message" in outcome.details(), True)

    wait_for("a push once the lock is gone", lambda: try_push(push, ingest))
    check("after the lock, a push is stored", harness.row_count(db_path) >= 1, True)
    channel.close()


def try_push(push, ingest):
    try:
        request = ingest.PushRequest(records=[ingest.LogRecord(message="after", severity=9)])
        return push(iter([request]), timeout=DEADLINE).accepted == 1
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
            raise
        return False


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="loghaul-status-")
    db_path = os.path.join(workdir, "logs.db")
    server = harness.Server(
        sys.argv[1], db_path,
        "--shards", "1",
        "--queue-capacity", "1",
        "--batch-max-rows", str(RECORDS),
        "--enqueue-timeout", "1s",
        "--store-retry-timeout", "120s",
    )
    try:
        print(f"== loghaul serving gRPC on {server.grpc}")
        run(server, db_path)
        check("loghaul exits 0 on SIGTERM", server.stop(), 0)
    except Exception:  # a crash is a failure, reported like the others
        harness.crashed("the test")
    finally:
        if harness.failed():
            print("-- last lines of the loghaul log:\n" + server.last_lines())
        server.kill()
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"== checks took {time.monotonic() - started:.1f}s")
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
