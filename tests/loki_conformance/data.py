"""The data set pushed to Grafana Loki and to loghaul: deterministic (seeded), laid out in the
hour before an anchor, a whole hour of the clock, so that steps that divide an hour fall on the
same instants every run.

Two tenants. Streams with `service_name` and `level`, with `service_name` only, with `job` only
(Loki derives `service_name` from it), with `app` and a level name Loki keeps as is (`warning`),
with no service label at all; lines in JSON, logfmt (some with pairs a decoder cannot read) and
plain text, IPv6 addresses, ANSI colors and lines packed by Promtail; structured metadata on some entries; entries exactly on minute boundaries
(`hh:mm:00.000000000`) and one stream with nanoseconds below the microsecond.

Each stream's entries are pushed oldest first, never two at the same instant, never the same
line twice (Loki drops an entry whose stream, time and line it already has).

`scale` multiplies every stream's entries over the same hour, for benchmarks: 1, the default, is
the conformance data set (320 entries); 700 gives 196,739.
"""

import json
import random

SEED = 20240611
SECOND = 10**9
MINUTE = 60 * SECOND

TENANT_A = "team-a"
TENANT_B = "team-b"
TENANTS = (TENANT_A, TENANT_B)

PATHS = ["/api/v1/items", "/api/v1/cart", "/api/v1/pay", "/health", "/login"]
METHODS = ["GET", "GET", "GET", "POST", "PUT", "DELETE"]
USERS = ["ann", "bob", "cyd", "dee"]


class Stream:
    def __init__(self, tenant, labels):
        self.tenant = tenant
        self.labels = labels
        self.entries = []  # [ns, line, structured metadata or None]

    def add(self, ns, line, metadata=None):
        self.entries.append([ns, line, metadata])


def _times(rng, start, end, count, on_minutes=()):
    """`count` distinct times in [start, end), microsecond-aligned, plus `on_minutes` (offsets in
    minutes from `start`, each exactly on the minute), sorted."""
    chosen = {start + m * MINUTE for m in on_minutes}
    while len(chosen) < count + len(on_minutes):
        chosen.add(start + rng.randrange((end - start) // 1000) * 1000)
    return sorted(chosen)


def _json_line(rng, n, status):
    doc = {
        "msg": rng.choice(["request served", "cache miss", "slow request", "request failed"]),
        "status": status,
        "method": rng.choice(METHODS),
        "path": rng.choice(PATHS),
        "duration": f"{rng.randint(1, 2500)}ms",
        "bytes": rng.randint(100, 90000),
        "user": {"name": rng.choice(USERS), "id": f"u-{rng.randint(1, 9)}"},
        "seq": n,
    }
    if n % 5 == 0:
        doc["tags"] = ["a", "b"]
    if n % 7 == 0:
        doc["ratio"] = round(rng.random(), 3)
    return json.dumps(doc, separators=(",", ":"))


def _logfmt_line(rng, n, level):
    method, path = rng.choice(METHODS), rng.choice(PATHS)
    status = rng.choice([200, 200, 201, 204, 301, 404, 500, 503])
    dur = rng.choice(["0.5ms", "12ms", "250ms", "1.5s", "3s", "45us"])
    size = rng.choice(["512B", "2KB", "12KB", "1.5MB", "300kB"])
    line = (f'ts=t{n} level={level} method={method} path={path} status={status} '
            f'duration={dur} size={size} bytes={rng.randint(10, 5000)} msg="handled {method} {path}"')
    if n % 9 == 4:
        line += ' broken"key=1 next=ok'  # a pair with a quote in its key
    if n % 11 == 3:
        line += ' user="ann'  # an unterminated quote
    return line


def _plain_line(rng, n):
    ip = f"10.0.{rng.randint(0, 3)}.{rng.randint(1, 254)}"
    method, path = rng.choice(METHODS), rng.choice(PATHS)
    status = rng.choice([200, 200, 200, 304, 404, 500])
    return (f'{ip} - - "{method} {path} HTTP/1.1" {status} {rng.randint(100, 9999)} '
            f'{rng.randint(1, 999) / 1000:.3f} n{n}')


def generate(anchor_ns, scale=1):
    """The streams (a list of Stream), all entries in [anchor - 60 min, anchor); `scale` times
    the entries per stream (the ones exactly on the minute and the quirks are not multiplied)."""
    rng = random.Random(SEED)
    start, end = anchor_ns - 60 * MINUTE, anchor_ns
    streams = []

    def stream(tenant, labels):
        s = Stream(tenant, labels)
        streams.append(s)
        return s

    # team-a: checkout, JSON lines, by level.
    for level, count, statuses in (("info", 40, [200, 200, 201, 204, 304]),
                                   ("error", 18, [500, 502, 503, 504]),
                                   ("warn", 12, [404, 429, 400])):
        s = stream(TENANT_A, {"service_name": "checkout", "level": level, "env": "prod"})
        for n, ns in enumerate(_times(rng, start, end, count * scale, on_minutes=(0, 15, 30, 59))):
            meta = None
            if n % 4 == 1:
                meta = {"trace_id": f"t{n:04x}{level}", "user_id": rng.choice(USERS)}
            s.add(ns, _json_line(rng, n, rng.choice(statuses)), meta)
    # checkout in staging: logfmt.
    s = stream(TENANT_A, {"service_name": "checkout", "level": "warn", "env": "staging"})
    for n, ns in enumerate(_times(rng, start, end, 15 * scale, on_minutes=(10, 20))):
        s.add(ns, _logfmt_line(rng, n, "warn"))
    # payments with a level: logfmt; payments without: mixed text with levels in the line.
    s = stream(TENANT_A, {"service_name": "payments", "level": "debug"})
    for n, ns in enumerate(_times(rng, start, end, 30 * scale, on_minutes=(5, 45))):
        s.add(ns, _logfmt_line(rng, n, rng.choice(["debug", "info", "error"])))
    s = stream(TENANT_A, {"service_name": "payments"})
    for n, ns in enumerate(_times(rng, start, end, 24 * scale, on_minutes=(1, 2, 3))):
        kind = n % 3
        if kind == 0:
            s.add(ns, f"level=error msg=\"charge failed\" order={1000 + n} amount={rng.randint(1, 500)}.{n % 100:02d}")
        elif kind == 1:
            s.add(ns, json.dumps({"level": "info", "msg": "charge ok", "order": 1000 + n,
                                  "amount": rng.randint(1, 500)}, separators=(",", ":")))
        else:
            s.add(ns, f"WARN card expiring soon for order {1000 + n}")
    # A stream with `job` only.
    s = stream(TENANT_A, {"job": "cron"})
    for n, ns in enumerate(_times(rng, start, end, 12 * scale, on_minutes=(0, 30))):
        s.add(ns, f"cron run {n} finished in {rng.randint(1, 90)}s exit=0")
    # `app` and a level name Loki keeps as it is.
    s = stream(TENANT_A, {"app": "frontend", "level": "warning"})
    for n, ns in enumerate(_times(rng, start, end, 10 * scale, on_minutes=(25,))):
        line = f"slow render of {rng.choice(PATHS)} took {rng.randint(100, 3000)}ms"
        # Scaled, a path and a duration repeat: the entry's number keeps each line unique.
        s.add(ns, line if scale == 1 else f"{line} n{n}")
    # No service label at all.
    s = stream(TENANT_A, {"env": "dev", "host": "h1"})
    for n, ns in enumerate(_times(rng, start, end, 8 * scale)):
        s.add(ns, f"orphan line {n} from a host without a service")
    # Search, with structured metadata on most entries.
    s = stream(TENANT_A, {"service_name": "search", "level": "info", "region": "eu"})
    for n, ns in enumerate(_times(rng, start, end, 25 * scale, on_minutes=(0, 40))):
        meta = {"trace_id": f"tr{n:03d}", "shard": str(n % 3)} if n % 5 else None
        s.add(ns, f"query q{n} took {rng.randint(1, 400)}ms hits={rng.randint(0, 50)}", meta)
    # A proxy writing access lines.
    s = stream(TENANT_A, {"service_name": "proxy", "level": "info"})
    for n, ns in enumerate(_times(rng, start, end, 35 * scale, on_minutes=(0, 1, 50))):
        s.add(ns, _plain_line(rng, n))
    # Nanoseconds below the microsecond.
    s = stream(TENANT_A, {"service_name": "precise", "level": "info"})
    for n, ns in enumerate(_times(rng, start, end, 6 * scale)):
        # Below the microsecond whatever the scale, so that times stay distinct and in order.
        s.add(ns + 1 + n * 37 % 997, f"precise entry {n}")

    # team-b: a service of the same name (tenants must not mix) and another one.
    s = stream(TENANT_B, {"service_name": "checkout", "level": "info", "env": "prod"})
    for n, ns in enumerate(_times(rng, start, end, 20 * scale, on_minutes=(0, 30))):
        s.add(ns, _json_line(rng, 1000 + n, 200))
    s = stream(TENANT_B, {"service_name": "billing", "level": "error"})
    for n, ns in enumerate(_times(rng, start, end, 14 * scale, on_minutes=(12,))):
        s.add(ns, _logfmt_line(rng, n, "error"), {"invoice": f"inv-{n}"} if n % 2 else None)

    # team-a again, last so that the streams above keep their lines: an edge proxy writing IPv6
    # addresses, ANSI colors and lines packed by Promtail's `pack` stage.
    s = stream(TENANT_A, {"service_name": "edge", "level": "info"})
    for n, ns in enumerate(_times(rng, start, end, 12 * scale)):
        s.add(ns, _edge_line(rng, n))
    # JSON that gives a key twice, and nested keys that collide with flat ones: Loki keeps the
    # first label of a name, in the line's order. Nine lines: no other service has as many, so
    # that `topk` and `bottomk` over services meet no tie.
    s = stream(TENANT_A, {"service_name": "quirks", "level": "info"})
    # Not multiplied by the scale: they are for answers, not for load.
    for line, ns in zip(QUIRKS, _times(rng, start, end, len(QUIRKS))):
        s.add(ns, line)
    return streams


QUIRKS = [
    '{"a":"1","a":"2"}',
    '{"a":{"b":1},"a":{"c":2}}',
    '{"a_b":"1","a":{"b":"2"}}',
    '{"z":"1","a":{"z":3},"a_z":"x"}',
    '{"a":"1","a":{"b":2}}',
    '{"k":null,"k":"v"}',
    '{"a":{"c":1},"a":{"b":2},"k":"w","k":null}',
    '{"e":"","n":"5"}',
    '{"n":"1","n":""}',
]


def _edge_line(rng, n):
    client = rng.choice(["2001:db8::17", "2001:db8:0:1::9", "fe80::1", "10.1.2.3", "2001:db8::1ff"])
    method, path = rng.choice(METHODS), rng.choice(PATHS)
    color = rng.choice(["\u001b[32m", "\u001b[1;31m", "\u001b[33m"])
    text = f"{color}{method}\u001b[0m {path} from {client} took {rng.randint(1, 900)}ms n{n}"
    if n % 3 == 0:
        return json.dumps({"_entry": text, "pod": f"edge-{n % 2}", "zone": rng.choice("ab"), "n": n},
                          separators=(",", ":"))
    return text


def push_bodies(streams):
    """One Loki JSON push body per tenant: {tenant: bytes}."""
    bodies = {}
    for tenant in TENANTS:
        out = []
        for s in streams:
            if s.tenant != tenant:
                continue
            values = []
            for ns, line, meta in s.entries:
                values.append([str(ns), line, meta] if meta else [str(ns), line])
            out.append({"stream": s.labels, "values": values})
        bodies[tenant] = json.dumps({"streams": out}).encode()
    return bodies


def entry_counts(streams):
    """Entries pushed per tenant."""
    counts = {tenant: 0 for tenant in TENANTS}
    for s in streams:
        counts[s.tenant] += len(s.entries)
    return counts
