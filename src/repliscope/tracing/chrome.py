"""Chrome trace / Perfetto JSON (the "Trace Event Format"): complete ("X") events, one row per thread.

Times are microseconds (floats with nanosecond resolution) since the tracer's origin; complete events of one
thread nest by time, which is how chrome://tracing and Perfetto draw the hierarchy.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from repliscope.errors import RepliscopeError
from repliscope.tracing.spans import SpanRecord, start_order


def to_chrome(
    spans: Sequence[SpanRecord],
    origin_ns: int,
    *,
    thread_names: Mapping[int, str],
    metadata: Mapping[str, Any],
    pid: int | None = None,
) -> dict[str, Any]:
    """``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": metadata}``; events sorted by thread, start."""
    pid = os.getpid() if pid is None else pid
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "repliscope"}}
    ]
    for tid in sorted({s.tid for s in spans}):
        events.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": pid,
                "tid": tid,
                "args": {"name": thread_names.get(tid, f"thread {tid}")},
            }
        )
    for i in start_order(spans):
        s = spans[i]
        events.append(
            {
                "name": s.name,
                "cat": s.level,
                "ph": "X",
                "ts": (s.start_ns - origin_ns) / 1000,
                "dur": s.duration_ns / 1000,
                "pid": pid,
                "tid": s.tid,
                "args": {k: _jsonable(v) for k, v in s.attributes.items()},
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": dict(metadata)}


def from_chrome(doc: Mapping[str, Any]) -> list[SpanRecord]:
    """The complete ("X") events of a Chrome trace as spans (ns, relative to the trace's origin); ``cat`` is the
    level. Other phases (metadata "M", instant "i") are ignored."""
    events = doc.get("traceEvents") if isinstance(doc, Mapping) else None
    if not isinstance(events, list):
        raise RepliscopeError("not a Chrome trace: no 'traceEvents' list")
    out: list[SpanRecord] = []
    for e in events:
        if e.get("ph") != "X":
            continue
        start = round(float(e["ts"]) * 1000)
        out.append(
            SpanRecord(
                name=str(e["name"]),
                level=str(e.get("cat", "")),
                start_ns=start,
                end_ns=start + round(float(e.get("dur", 0)) * 1000),
                tid=int(e.get("tid", 0)),
                attributes=dict(e.get("args") or {}),
            )
        )
    return out


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def nesting_errors(doc: Mapping[str, Any]) -> list[str]:
    """Pairs of complete events of one thread that overlap without one containing the other (a Chrome trace
    draws such a pair wrongly); [] when every child is inside its parent."""
    spans = from_chrome(doc)
    errors: list[str] = []
    stack: list[SpanRecord] = []
    tid: int | None = None
    for i in start_order(spans):
        s = spans[i]
        if s.tid != tid:
            stack, tid = [], s.tid
        while stack and stack[-1].end_ns <= s.start_ns:
            stack.pop()
        if stack and s.end_ns > stack[-1].end_ns:
            p = stack[-1]
            errors.append(
                f"thread {s.tid}: '{s.name}' [{s.start_ns}, {s.end_ns}] ns overlaps '{p.name}' "
                f"[{p.start_ns}, {p.end_ns}] ns without being inside it"
            )
        stack.append(s)
    return errors
