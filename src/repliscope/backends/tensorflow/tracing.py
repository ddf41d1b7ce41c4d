"""TensorFlow's own profiler (``tf.profiler.experimental``, XPlane) -> per-op ``framework`` layer spans.

While tracing, the profiler records every executed kernel on the host plane ``/host:CPU`` as an event named
``<node>:<OpType>`` (e.g. ``FeatureExtractor/.../Conv2D:_MklNativeConv2D``) on one line per TensorFlow thread.
An event's time in epoch nanoseconds is ``profile_start_time`` (a stat of the ``Task Environment`` plane) +
``line.timestamp_ns`` + ``offset_ps / 1000``; minus the tracer's ``epoch_offset_ns`` it is on the tracer's
``perf_counter_ns`` clock (the same conversion as ONNX Runtime's profile). Node names are those of the graph
TensorFlow runs after its optimiser (Grappler): mostly the graph's own, plus nodes it made inside one (a
``FusedBatchNorm`` folded into ``.../FusedBatchNorm/Mul``).

Each kernel that starts inside a traced ``call`` stage span of the tensorflow runner (one per batch) becomes a
layer span (name = node name, ``op_type`` = the kernel's op type) on the CALLING thread, so it nests under that
``call``: the ``call`` stage's self time is then what is not a kernel (feeding, the executor itself). Kernels
run on TensorFlow's pool threads (``thread`` attribute); an overlapping kernel (parallel branches) starts where
the previous one ended (``clipped_ns`` says by how much) so that the trace nests.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repliscope.tracing.spans import SpanRecord


@dataclass(frozen=True)
class Kernel:
    """One executed kernel: graph ``node``, ``op_type``, [start_ns, end_ns] on the tracer's clock, ``thread``
    (TensorFlow's line name, e.g. ``tf_Compute/...``)."""

    node: str
    op_type: str
    start_ns: int
    end_ns: int
    thread: str


def _stat(plane: Any, name: str) -> int | None:
    for s in plane.stats:
        if plane.stat_metadata[s.metadata_id].name == name:
            return int(s.int64_value or s.uint64_value)
    return None


def kernel_name(name: str) -> tuple[str, str] | None:
    """``node:OpType`` -> (node, op type); None for the profiler's own events (``ExecutorState::Process``,
    ``EagerLocalExecute: f``, ...)."""
    if "::" in name or ": " in name or name.count(":") != 1:
        return None
    node, op_type = name.split(":")
    return (node, op_type) if node and op_type else None


def kernels(space: Any, epoch_offset_ns: int) -> list[Kernel]:
    """Every kernel of the XSpace ``space`` on the tracer's clock, by start time."""
    env = next((p for p in space.planes if p.name == "Task Environment"), None)
    start = _stat(env, "profile_start_time") if env is not None else None
    host = next((p for p in space.planes if p.name == "/host:CPU"), None)
    if start is None or host is None:
        return []
    base = start - epoch_offset_ns
    out = []
    for line in host.lines:
        for e in line.events:
            parsed = kernel_name(host.event_metadata[e.metadata_id].name)
            if parsed is None:
                continue
            t0 = base + line.timestamp_ns + e.offset_ps // 1000
            out.append(Kernel(parsed[0], parsed[1], t0, t0 + e.duration_ps // 1000, line.name))
    return sorted(out, key=lambda k: (k.start_ns, k.end_ns))


def record_kernels(tracer: Any, calls: Sequence[SpanRecord], found: Sequence[Kernel]) -> int:
    """A ``framework`` layer span per kernel that starts inside one of ``calls`` (on that call's thread, clipped
    to it and to the previous kernel's end) -> the number recorded."""
    count = 0
    for call in calls:
        previous = call.start_ns
        for k in found:
            if not call.start_ns <= k.start_ns < call.end_ns:
                continue
            start = max(k.start_ns, previous)
            end = min(max(k.end_ns, start), call.end_ns)
            attrs: dict[str, Any] = {"layer": k.node, "op_type": k.op_type, "source": "tensorflow", "thread": k.thread}
            if start > k.start_ns:
                attrs["clipped_ns"] = start - k.start_ns
            tracer.record(k.node, "framework", start, end, call.tid, attrs)
            previous = end
            count += 1
    return count


def read_xspace(folder: Path) -> Any:
    """The newest ``*.xplane.pb`` the profiler wrote under ``folder`` as an XSpace, None when there is none."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    files = sorted(folder.rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not files:
        return None
    space = xplane_pb2.XSpace()
    space.ParseFromString(files[-1].read_bytes())
    return space


@contextlib.contextmanager
def profile_tensorflow(tracer: Any, runner: Any) -> Iterator[None]:
    """The tensorflow runner's stage spans plus TensorFlow's profiler for the duration; its kernels are turned
    into layer spans afterwards (outside the measured work)."""
    import tensorflow as tf

    runner.load()
    first = len(tracer.spans)
    with tempfile.TemporaryDirectory(prefix="repliscope-tf-profile-") as tmp:
        runner.tracer = tracer
        tf.profiler.experimental.start(tmp)
        try:
            yield
        finally:
            tf.profiler.experimental.stop()
            runner.tracer = None
        space = read_xspace(Path(tmp))
    calls = [s for s in tracer.spans[first:] if s.name == "call" and s.attributes.get("source") == "tensorflow"]
    found = kernels(space, tracer.epoch_offset_ns) if space is not None else []
    recorded = record_kernels(tracer, calls, found)
    tracer.notes.setdefault("tensorflow_profiler", []).append(
        {
            "calls": len(calls),
            "kernels": len(found),
            "recorded": recorded,
            "clock": "profile_start_time (epoch ns) + line and event offsets, minus the tracer's epoch offset",
        }
    )
