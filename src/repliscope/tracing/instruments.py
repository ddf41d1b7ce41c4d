"""Framework / library level instrumentation, one entry per runtime (keyed by the runtime's registry name)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from repliscope.backends import runtime_entries
from repliscope.errors import RepliscopeError
from repliscope.registry import Registry
from repliscope.tracing.levels import RANK

Instrument = Callable[[Any, Any], AbstractContextManager[None]]
INSTRUMENTS: Registry[Instrument] = Registry("tracing instrument")


@contextlib.contextmanager
def torch_instrument(tracer: Any, runner: Any) -> Iterator[None]:
    """Module hooks (framework); torch.profiler ops too at ``library``."""
    from repliscope.backends.torch.tracing import torch_module_hooks, torch_profiler_ops

    with contextlib.ExitStack() as stack:
        stack.enter_context(torch_module_hooks(tracer, runner.module))
        if tracer.rank >= RANK["library"]:
            stack.enter_context(torch_profiler_ops(tracer))
        yield


def onnxruntime_instrument(tracer: Any, runner: Any) -> AbstractContextManager[None]:
    """ORT's profiler: layers (framework), node kernels (library)."""
    from repliscope.backends.onnxruntime.tracing import profile_onnxruntime

    return profile_onnxruntime(tracer, runner)


def opencv_instrument(tracer: Any, runner: Any) -> AbstractContextManager[None]:
    """``getPerfProfile`` after every forward: layers (framework), OpenCV layers (library)."""
    from repliscope.backends.opencv_dnn.tracing import opencv_layer_timings

    return opencv_layer_timings(tracer, runner)


@contextlib.contextmanager
def staged_instrument(tracer: Any, runner: Any) -> Iterator[None]:
    """The runner's own stage spans (the tflite runner's ``tracer`` hook): ``tflite.run`` with ``set_input`` /
    ``invoke`` / ``get_outputs`` (LiteRT's Python interpreter has no per-operator profiler)."""
    runner.tracer = tracer
    try:
        yield
    finally:
        runner.tracer = None


def darknet_instrument(tracer: Any, runner: Any) -> AbstractContextManager[None]:
    """libdarknet's layer loop driven from Python: one span per Darknet layer (framework)."""
    from repliscope.backends.darknet.tracing import darknet_layer_timings

    return darknet_layer_timings(tracer, runner)


def tensorflow_instrument(tracer: Any, runner: Any) -> AbstractContextManager[None]:
    """The runner's stage spans and TensorFlow's profiler: one layer span per executed kernel."""
    from repliscope.backends.tensorflow.tracing import profile_tensorflow

    return profile_tensorflow(tracer, runner)


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
