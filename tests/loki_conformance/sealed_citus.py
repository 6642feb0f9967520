#!/usr/bin/env python3
"""Answers over sealed Citus days against a plain PostgreSQL's heap.

Starts loghaul on a Citus database (sealing every past partition within seconds) and loghaul on
one PostgreSQL server (a database created for the run and dropped after it, sealing off), pushes
the conformance data set (data.py) to both, waits until every row on Citus is in a sealed
columnar partition, then asks both every conformance check (checks.py) and fails on any answer
that is not the same. Loki is not asked: conformance.py compares loghaul with Loki.

On Citus a partition is a whole day, sealed once the day is over, so the data are laid out in an
hour of yesterday (11:00 to 12:00 UTC).

Usage: sealed_citus.py --citus-url URL --loghaul LOGHAUL_BINARY [--postgres-url URL] [--only ID,…]
  --citus-url     a database of a Citus coordinator with its workers added, empty
  --postgres-url  PostgreSQL to make the heap's database in (default: as conformance.py)
"""

import argparse
import os
import signal
import sys
import time

import compare
import conformance
import data
from checks import CHECKS

DAY_NS = 86400 * 10**9


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--citus-url", required=True)
    parser.add_argument("--loghaul", required=True)
    parser.add_argument("--postgres-url", default=os.environ.get("LOGHAUL_TEST_POSTGRES_URL"))
    parser.add_argument("--only", help="comma-separated check ids")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, conformance.interrupted)

    # A live tail reads a line pushed now, which no seal touches.
    checks = [c for c in CHECKS if not c.get("live")]
    if args.only:
        wanted = set(args.only.split(","))
        checks = [c for c in checks if c["id"] in wanted]
    anchor = time.time_ns() // DAY_NS * DAY_NS - 12 * 3600 * 10**9
    streams = data.generate(anchor)
    bodies, counts = data.push_bodies(streams), data.entry_counts(streams)
    rows = sum(counts.values())
    print(f"== data: {rows} entries in {len(streams)} streams, the hour before "
          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(anchor / 1e9))} UTC")

    admin_url = database = None
    try:
        admin_url = conformance.postgres_admin_url(args.postgres_url)
        database = conformance.create_database(admin_url, "loghaul_heap")
        stores = {
            "heap": conformance.Loghaul("loghaul-heap", args.loghaul,
                                        conformance.with_database(admin_url, database),
                                        extra=["--seal-after", "0s"]),
            "citus": conformance.Loghaul("loghaul-citus", args.loghaul, args.citus_url,
                                         extra=["--seal-after", "1s", "--seal-interval", "1s"]),
        }
        for name, process in stores.items():
            for tenant, body in bodies.items():
                status, text = conformance.push(process.http, tenant, body)
                if status not in (200, 204):
                    raise RuntimeError(f"push to {name} as {tenant}: {status} {text[:300]!r}")
        for name, process in stores.items():
            if not conformance.wait_for_data(name, process.http, counts, anchor):
                raise RuntimeError(f"{name} does not return every entry pushed")
        started = time.monotonic()
        conformance.wait_until_sealed(args.citus_url, rows)
        print(f"== every row on Citus sealed ({time.monotonic() - started:.0f}s)")

        same, differ = 0, []
        for check in checks:
            if check["norm"] == "tail":
                answers = [conformance.tail(p.http, check, anchor) for p in stores.values()]
            else:
                answers = [conformance.ask(p.http, check, anchor) for p in stores.values()]
            if compare.equal(*answers):
                same += 1
            else:
                differ.append(check["id"])
                print(f"FAIL {check['id']}: {conformance.query_of(check)}")
                print("\n".join(compare.diff(*answers)))
        for name, process in stores.items():
            if process.died():
                raise RuntimeError(f"{name} exited during the run:\n{process.tail()}")
        print(f"== {same} of {len(checks)} checks answered the same over sealed Citus days as "
              f"over heap rows; {len(differ)} differ{': ' + ', '.join(differ) if differ else ''}")
        return 1 if differ else 0
    except KeyboardInterrupt:
        print("interrupted")
        return 130
    except RuntimeError as error:
        print(f"FAIL {error}")
        return 1
    finally:
        for process in reversed(conformance.STARTED):
            process.stop()
        if database and admin_url:
            conformance.psql(admin_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


if __name__ == "__main__":
    sys.exit(main())
