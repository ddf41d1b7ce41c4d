"""The leveled tracer: ``span(name, level)`` records a span when ``level`` is at or above the tracer's level and
is a shared no-op context manager otherwise; ``instrument(runner)`` adds the framework / library levels.

Recording is a ``perf_counter_ns`` pair and one list append per span (list.append is atomic under the GIL, so
worker threads record into the same list); conversion to OpenTelemetry spans and Chrome trace events happens
after the measured work (when the ``application`` span ends, on ``flush`` or when the trace is written).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from repliscope.errors import RepliscopeError
from repliscope.tracing.levels import LEVELS, RANK, check_level
from repliscope.tracing.spans import SpanRecord

_NOOP: AbstractContextManager[None] = contextlib.nullcontext()


class _Span:
    __slots__ = ("_attributes", "_level", "_name", "_start", "_tracer")

    def __init__(self, tracer: Tracer, name: str, level: str, attributes: dict[str, Any]) -> None:
        self._tracer, self._name, self._level, self._attributes = tracer, name, level, attributes
        self._start = 0

    def __enter__(self) -> None:
        self._start = time.perf_counter_ns()

    def __exit__(self, *exc: object) -> None:
        end = time.perf_counter_ns()
        self._tracer.record(self._name, self._level, self._start, end, threading.get_native_id(), self._attributes)
        if self._level == "application":
            self._tracer.flush()


class Tracer:
    """Spans at levels up to ``level`` (one of :data:`LEVELS`); ``none`` records nothing and imports nothing.

    ``otel``: the :class:`~repliscope.tracing.otel.OtelSink` spans are exported to, or None (Chrome trace only).
    """

    def __init__(self, level: str, *, service: str = "repliscope", otel: Any = None) -> None:
        self.rank = check_level(level)
        self.level = level
        self.service = service
        self.spans: list[SpanRecord] = []
        self.thread_names: dict[int, str] = {}
        self.notes: dict[str, Any] = {}
        """What instrumentation did (ONNX Runtime profiler runs and start time, torch.profiler ops and thread),
        kept in the Chrome trace's ``otherData``."""
        self.origin_ns = time.perf_counter_ns()
        self.epoch_offset_ns = time.time_ns() - time.perf_counter_ns()
        """epoch ns = perf_counter ns + this (OpenTelemetry wants epoch times; ORT's profiler reports them too)."""
        self.otel = otel
        self.active: set[str] = set()
        """Instrumentations of this tracer running now (``torch.profiler``: one at a time)."""
        self._exported = 0

    def enabled(self, level: str) -> bool:
        """Whether spans at ``level`` are recorded."""
        return 0 < check_level(level) <= self.rank

    def span(self, name: str, level: str, **attributes: Any) -> AbstractContextManager[None]:
        """A span at ``level``; the shared no-op context manager when ``level`` is deeper than the tracer's."""
        rank = RANK.get(level)
        if rank is None or rank == 0:
            raise RepliscopeError(f"unknown span level {level!r} (allowed: {', '.join(LEVELS[1:])})")
        if rank > self.rank:
            return _NOOP
        return _Span(self, name, level, attributes)

    def record(
        self, name: str, level: str, start_ns: int, end_ns: int, tid: int, attributes: dict[str, Any] | None = None
    ) -> None:
        """Add a finished span (perf_counter_ns clock) - for events converted from a profiler."""
        if tid not in self.thread_names:
            current = threading.current_thread()
            self.thread_names[tid] = current.name if current.native_id == tid else f"thread {tid}"
        self.spans.append(SpanRecord(name, level, start_ns, end_ns, tid, attributes or {}))

    def instrument(self, runner: Any) -> AbstractContextManager[None]:
        """Framework / library level instrumentation of ``runner`` for the duration (torch module hooks and
        torch.profiler, ONNX Runtime's profiler, OpenCV DNN per-layer timings); a no-op above ``framework``."""
        if self.rank < RANK["framework"]:
            return _NOOP
        from repliscope.tracing.instruments import instrument_runner

        return instrument_runner(self, runner)

    def flush(self) -> int:
        """Export the spans recorded since the last flush to OpenTelemetry -> how many (0 without OTel)."""
        if self.otel is None or self._exported >= len(self.spans):
            return 0
        batch = self.spans[self._exported :]
        self._exported += len(batch)
        return int(self.otel.export(batch, self.epoch_offset_ns))

    def chrome_trace(self) -> dict[str, Any]:
        """The Chrome trace / Perfetto JSON document of every span recorded so far."""
        from repliscope.tracing.chrome import to_chrome

        meta = {
            "repliscope_trace_level": self.level,
            "service": self.service,
            "clock": "perf_counter_ns",
            "origin_ns": self.origin_ns,
            "epoch_offset_ns": self.epoch_offset_ns,
            **self.notes,
        }
        return to_chrome(self.spans, self.origin_ns, thread_names=self.thread_names, metadata=meta)

    def write_chrome_trace(self, path: str | Path) -> Path:
        """Write :meth:`chrome_trace` to ``path`` (parents created) and flush OpenTelemetry -> the path."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(self.chrome_trace()), encoding="utf-8")
        self.flush()
        return out


def make_tracer(
    level: str, *, service: str = "repliscope", otel: bool | None = None, otel_exporter: Any = None
) -> Tracer:
    """A tracer at ``level`` (one of :data:`LEVELS`; anything else is an error naming them).

    ``otel``: None exports OpenTelemetry spans when there is somewhere to send them (``otel_exporter``, e.g. the
    SDK's ``InMemorySpanExporter``, or the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` variable: OTLP/HTTP), True always builds the SDK provider, False
    never; both need ``pip install 'repliscope[tracing]'``. Level ``none`` records nothing and imports nothing.
    """
    check_level(level)
    if level == "none":
        return Tracer("none", service=service)
    from repliscope.tracing.otel import OTLP_ENV, OtelSink

    use = otel if otel is not None else (otel_exporter is not None or any(os.environ.get(v) for v in OTLP_ENV))
    if not use and otel_exporter is not None:
        raise RepliscopeError("otel_exporter given with otel=False")
    return Tracer(level, service=service, otel=OtelSink(service, otel_exporter) if use else None)


NO_TRACER = Tracer("none")
"""The tracer of level ``none``: every span is the shared no-op."""

_CURRENT: list[Tracer] = [NO_TRACER]


def current_tracer() -> Tracer:
    """The tracer of the command running in this process (:data:`NO_TRACER` unless :func:`use_tracer` set one).

    Process-wide, not per thread or context: the evaluation loop's and the pitfall sweep's worker threads see it
    too. One command (one tracer) per process at a time."""
    return _CURRENT[-1]


@contextlib.contextmanager
def use_tracer(tracer: Tracer) -> Iterator[Tracer]:
    """Make ``tracer`` the current one for the duration (the evaluation loop and the pipeline read it)."""
    _CURRENT.append(tracer)
    try:
        yield tracer
    finally:
        _CURRENT.remove(tracer)


__all__ = ["LEVELS", "NO_TRACER", "Tracer", "current_tracer", "make_tracer", "use_tracer"]
