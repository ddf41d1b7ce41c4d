"""Recorded spans (plain data, one clock) and their nesting by time.

Every span is on the ``time.perf_counter_ns()`` clock (CLOCK_MONOTONIC on Linux), in integer nanoseconds;
events from other profilers (ONNX Runtime, torch.profiler, OpenCV DNN) are converted onto it before they are
added. ``tid`` is the OS thread id (``threading.get_native_id()``), the id ONNX Runtime's profiler writes too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from repliscope.tracing.levels import RANK


@dataclass(slots=True)
class SpanRecord:
    """One finished span: ``[start_ns, end_ns]`` on the perf_counter_ns clock, on OS thread ``tid``."""

    name: str
    level: str
    start_ns: int
    end_ns: int
    tid: int
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def _tie_key(s: SpanRecord, i: int) -> tuple[int, int, int, int]:
    return s.start_ns, -s.end_ns, RANK.get(s.level, len(RANK)), -i


def start_order(spans: Sequence[SpanRecord]) -> list[int]:
    """Indices of ``spans`` sorted by (thread, start, longest first); on an exact tie of start and end the outer
    level comes first (a framework layer before its one library node: converted profiler events are recorded
    layer first), then, within one level, the later-recorded span (a parent recorded live ends after its
    children). Unknown levels (a foreign trace's categories) count as innermost."""
    return sorted(range(len(spans)), key=lambda i: (spans[i].tid, *_tie_key(spans[i], i)))


def time_order(spans: Sequence[SpanRecord]) -> list[int]:
    """Indices of ``spans`` by (start, longest first, outer level first, later recorded first) over all threads:
    every span comes after its :func:`nest` parent, also a parent on another thread."""
    return sorted(range(len(spans)), key=lambda i: _tie_key(spans[i], i))


def nest(spans: Sequence[SpanRecord]) -> list[int]:
    """The parent index of every span (-1 for none): the innermost span of the same thread that contains it;
    a thread's outermost spans get the innermost ``application`` span of another thread containing them (a worker
    thread's batches belong to the run)."""
    parents = [-1] * len(spans)
    stack: list[int] = []
    tid: int | None = None
    for i in start_order(spans):
        s = spans[i]
        if s.tid != tid:
            stack, tid = [], s.tid
        while stack and spans[stack[-1]].end_ns < s.end_ns:
            stack.pop()
        if stack and spans[stack[-1]].start_ns <= s.start_ns:
            parents[i] = stack[-1]
        stack.append(i)
    apps = [i for i, s in enumerate(spans) if s.level == "application"]
    for i, s in enumerate(spans):
        if parents[i] == -1 and s.level != "application":
            around = [a for a in apps if spans[a].start_ns <= s.start_ns and s.end_ns <= spans[a].end_ns]
            if around:
                parents[i] = min(around, key=lambda a: spans[a].duration_ns)
    return parents
