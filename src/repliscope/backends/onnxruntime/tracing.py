"""ONNX Runtime's profiler -> spans on the tracer's clock.

ORT writes a Chrome-trace-like JSON list: every event's ``ts`` (µs) is relative to the session's profiling start,
which ``InferenceSession.get_profiling_start_time_ns()`` reports in epoch nanoseconds (system clock). An event's
time on the tracer's ``perf_counter_ns`` clock is ``start_epoch_ns + ts * 1000 - tracer.epoch_offset_ns``.
Events used: ``Session``/``model_run`` (one per ``run``) and ``Node``/``<node>_kernel_time`` (one per executed
node, on the calling thread for the sequential executor); ``fence_before``/``fence_after`` are dropped.
ORT keeps every event until profiling ends (about 35 kB of JSON per Lite0 inference): trace short runs.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from repliscope.tracing.layers import NodeTiming, ScopeIndex, group_layers, record_layers

_KERNEL = "_kernel_time"


def align_events(
    events: Sequence[dict[str, Any]], start_epoch_ns: int, epoch_offset_ns: int
) -> list[tuple[dict[str, Any], int, int]]:
    """(event, start_ns, end_ns) on the perf_counter_ns clock for every complete ("X") event."""
    base = start_epoch_ns - epoch_offset_ns
    return [
        (e, base + round(float(e["ts"]) * 1000), base + round((float(e["ts"]) + float(e["dur"])) * 1000))
        for e in events
        if e.get("ph") == "X"
    ]


def convert(tracer: Any, events: Sequence[dict[str, Any]], start_epoch_ns: int, index: ScopeIndex) -> int:
    """Add ``onnxruntime.run`` spans (framework), layers (framework) and nodes (library) -> runs converted."""
    aligned = align_events(events, start_epoch_ns, tracer.epoch_offset_ns)
    runs = [(e, s, t) for e, s, t in aligned if e.get("cat") == "Session" and e.get("name") == "model_run"]
    nodes = sorted(
        ((e, s, t) for e, s, t in aligned if e.get("cat") == "Node" and e["name"].endswith(_KERNEL)), key=lambda x: x[1]
    )
    for e, start, end in runs:
        tid = int(e.get("tid", 0))
        tracer.record("onnxruntime.run", "framework", start, end, tid, {"source": "onnxruntime"})
        inside = [
            NodeTiming(n["name"][: -len(_KERNEL)], str(n.get("args", {}).get("op_name", "?")), s, t)
            for n, s, t in nodes
            if start <= s and t <= end and int(n.get("tid", 0)) == tid
        ]
        record_layers(tracer, group_layers(inside, index), tid, "onnxruntime")
    return len(runs)


@contextlib.contextmanager
def profile_onnxruntime(tracer: Any, runner: Any) -> Iterator[None]:
    """Run ``runner`` (an OnnxRuntimeRunner) with ORT's profiler on for the duration, then convert its events.

    The runner's session is (re)created with profiling enabled (a session cannot start profiling later), so
    the first run after entering pays the session's lazy initialisation again: warm up inside the block."""
    with tempfile.TemporaryDirectory(prefix="repliscope-ort-profile-") as tmp:
        runner.start_profiling(Path(tmp) / "ort")
        try:
            yield
        except BaseException:
            runner.end_profiling()  # stop the profiler; the run failed, its events are not converted
            raise
        path, start_ns = runner.end_profiling()
        events = json.loads(Path(path).read_text(encoding="utf-8"))
        count = convert(tracer, events, start_ns, ScopeIndex(runner.onnx_path))
        tracer.notes.setdefault("onnxruntime_profiler", []).append(
            {
                "runs": count,
                "profiling_start_epoch_ns": start_ns,
                "clock": "epoch ns from get_profiling_start_time_ns(), minus the tracer's epoch offset",
            }
        )
