"""Framework / library level instrumentation, one entry per runtime (keyed by the runtime's registry name): each
backend's tracing adapter (``repliscope.backends.<framework>.tracing``), registered from its entry."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from repliscope.backends import runtime_entries
from repliscope.errors import RepliscopeError
from repliscope.registry import Registry

Instrument = Callable[[Any, Any], AbstractContextManager[None]]
INSTRUMENTS: Registry[Instrument] = Registry("tracing instrument")


@contextlib.contextmanager
def staged_instrument(tracer: Any, runner: Any) -> Iterator[None]:
    """The runner's own stage spans (the tflite runner's ``tracer`` hook): ``tflite.run`` with ``set_input`` /
    ``invoke`` / ``get_outputs`` (LiteRT's Python interpreter has no per-operator profiler)."""
    runner.tracer = tracer
    try:
        yield
    finally:
        runner.tracer = None


for _entry in runtime_entries():  # one entry per backend (repliscope.backends)
    if _entry.instrument is not None:
        INSTRUMENTS.add(_entry.name, _entry.instrument)


def instrument_runner(tracer: Any, runner: Any) -> AbstractContextManager[None]:
    """The instrumentation of ``runner.name``; a runtime without one is an error naming those that have one."""
    name = getattr(runner, "name", type(runner).__name__)
    source = getattr(getattr(runner, "artifact", None), "format", None)
    if source == "mtcnn_cascade":
        raise RepliscopeError(
            f"no framework-level tracing of an mtcnn_cascade source on {name!r}: its three nets "
            "run as three sessions the profilers do not follow; use --trace-level model "
            "(query, inference and post-processing spans)"
        )
    if name not in INSTRUMENTS:
        raise RepliscopeError(
            f"no framework-level tracing for runtime {name!r} (allowed: "
            f"{', '.join(INSTRUMENTS.names())}); use --trace-level model or lower"
        )
    return INSTRUMENTS.get(name)(tracer, runner)
