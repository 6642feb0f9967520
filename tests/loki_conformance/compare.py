"""Answers made comparable: what differs only in shape is normalised away (the order of streams
and series, `stats`, `encodingFlags`, a label list's order), the rest compared exactly, numbers
to a relative 1e-9."""

import difflib
import json
import math

REL = 1e-9


def _labels_key(labels):
    return json.dumps(labels or {}, sort_keys=True)


def _num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return text


def _points(values):
    return [[_num(t), _num(v)] for t, v in values or []]


def query_data(body):
    """`data` of query/query_range: resultType and result, streams and series sorted by labels."""
    data = (body or {}).get("data") or {}
    kind, result = data.get("resultType"), data.get("result")
    if kind == "streams":
        result = sorted(({"stream": s.get("stream") or {}, "values": [list(v) for v in s.get("values") or []]}
                         for s in result or []), key=lambda s: (_labels_key(s["stream"]), s["values"]))
    elif kind == "matrix":
        result = sorted(({"metric": s.get("metric") or {}, "values": _points(s.get("values"))}
                         for s in result or []), key=lambda s: _labels_key(s["metric"]))
    elif kind == "vector":
        result = sorted(({"metric": s.get("metric") or {}, "value": _points([s.get("value")])[0]}
                         for s in result or []), key=lambda s: _labels_key(s["metric"]))
    elif kind == "scalar":
        result = _points([result])[0]
    return {"resultType": kind, "result": result}


def status_body(body):
    """`{"status", "data"}` answers (labels, label values, series, format_query, patterns): data
    with its lists sorted."""
    data = (body or {}).get("data")
    if data is None:
        data = []
    if isinstance(data, list):
        data = sorted(data, key=lambda item: json.dumps(item, sort_keys=True))
    return data


def sorted_lists(body):
    """A whole JSON body, every list of objects in it sorted (detected labels and fields)."""
    def walk(value):
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            items = [walk(v) for v in value]
            return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
        return value
    return walk(body)


def tail_entries(messages):
    """The messages of a tail, flattened to sorted [labels, ns, line] (how lines are batched into
    messages is timing, not content)."""
    out = []
    for text in messages:
        try:
            message = json.loads(text)
        except ValueError:
            out.append(["<not json>", text])
            continue
        for stream in message.get("streams") or []:
            for ts, line, *_ in stream.get("values") or []:
                out.append([stream.get("stream") or {}, ts, line])
    return sorted(out, key=lambda e: json.dumps(e, sort_keys=True))


def equal(a, b):
    """Exact equality, numbers to a relative 1e-9 (NaN equals NaN)."""
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) \
                and not isinstance(a, bool) and not isinstance(b, bool):
            if math.isnan(a) or math.isnan(b):
                return math.isnan(a) and math.isnan(b)
            if math.isinf(a) or math.isinf(b):
                return a == b
            return abs(a - b) <= REL * max(abs(a), abs(b))
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _pretty(value):
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False).splitlines()


def diff(expected, actual, width=14, cut=160):
    """A compact unified diff of two normalised answers (Loki's first), at most `width` lines."""
    lines = list(difflib.unified_diff(_pretty(expected), _pretty(actual), "loki", "loghaul", n=1, lineterm=""))
    lines = [line if len(line) <= cut else line[:cut] + "…" for line in lines[2:]]
    if len(lines) > width:
        lines = lines[:width] + [f"… ({len(lines) - width} more diff lines)"]
    return lines
