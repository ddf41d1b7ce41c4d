"""Framework-level tracing of the tflite and tensorflow runners: their stage spans (LiteRT's Python interpreter
has no per-operator profiler), nested in one span per framework call and summarised like layers, and
TensorFlow's own profiler (XPlane) kernels as layers inside each call."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repliscope.backends.tensorflow.runner import read_graph_def
from repliscope.backends.tensorflow.tracing import Kernel, kernels, record_kernels
from repliscope.runtimes import create_runner
from repliscope.tracing import make_tracer
from repliscope.tracing.chrome import nesting_errors
from repliscope.tracing.spans import SpanRecord
from repliscope.tracing.summary import summarize
from tests.runtimes.detection_references import blazeface_artifact, ssdlite_artifact


def _inside(child: object, parent: object) -> bool:
    return parent.start_ns <= child.start_ns and child.end_ns <= parent.end_ns  # type: ignore[attr-defined]


def test_tflite_stages_per_invoke(tmp_path: Path) -> None:
    pytest.importorskip("ai_edge_litert")
    runner = create_runner("tflite", blazeface_artifact(), threads=1, cache_dir=tmp_path)
    x = np.zeros((2, 192, 192, 3), np.float32)
    untraced = runner.infer_outputs(x)
    tracer = make_tracer("framework", otel=False)
    with tracer.instrument(runner):
        traced = runner.infer_outputs(x)
    assert runner.__dict__["tracer"] is None  # the hook is removed on exit
    for name, value in untraced.items():
        np.testing.assert_array_equal(traced[name], value)
    names = [s.name for s in tracer.spans]
    # BlazeFace's batch is fixed at 1: one invoke per image, each with its three stages
    assert names == ["set_input", "invoke", "get_outputs", "tflite.run"] * 2
    runs = [s for s in tracer.spans if s.name == "tflite.run"]
    stages = [s for s in tracer.spans if s.name != "tflite.run"]
    assert all(_inside(s, runs[i // 3]) for i, s in enumerate(stages))
    assert nesting_errors(tracer.chrome_trace()) == []
    summary = summarize(tracer.spans)
    assert summary.source == "tflite" and summary.inferences == 2
    assert [s.layer for s in summary.layers] == ["set_input", "invoke", "get_outputs"]
    assert summary.spans_per_level == {"application": 0, "model": 0, "framework": 8, "library": 0}


def test_tensorflow_stages_and_kernels_per_call(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    runner = create_runner("tensorflow", ssdlite_artifact(), threads=1, cache_dir=tmp_path)
    x = np.zeros((1, 300, 300, 3), np.uint8)
    untraced = runner.infer_outputs(x)
    tracer = make_tracer("framework", otel=False)
    with tracer.instrument(runner):
        traced = runner.infer_outputs(x)
    assert runner.__dict__["tracer"] is None
    assert list(traced) == list(untraced)
    for name, value in untraced.items():
        np.testing.assert_array_equal(traced[name], value)
    assert [s.name for s in tracer.spans[:3]] == ["call", "to_numpy", "tensorflow.call"]
    call, to_numpy, whole = tracer.spans[:3]
    assert _inside(call, whole) and _inside(to_numpy, whole) and call.end_ns <= to_numpy.start_ns
    kernels = tracer.spans[3:]
    nodes = {n.name for n in read_graph_def(ssdlite_artifact().path).node}
    assert len(kernels) > 100 and all(_inside(k, call) and k.tid == call.tid for k in kernels)
    # graph nodes, or nodes TensorFlow's optimiser made inside the graph's scopes (a FusedBatchNorm split into
    # .../FusedBatchNorm/Mul, .../ArithmeticOptimizer/ReorderCastLike...)
    assert all(k.attributes["layer"] == k.name for k in kernels)
    assert {k.name.split("/")[0] for k in kernels} <= {n.split("/")[0] for n in nodes}
    assert sum(k.name in nodes for k in kernels) > 0.9 * len(kernels)
    types = {k.attributes["op_type"] for k in kernels}
    assert {"NonMaxSuppressionV3", "Relu6"} <= types
    assert nesting_errors(tracer.chrome_trace()) == []
    note = tracer.notes["tensorflow_profiler"][0]
    assert note["calls"] == 1 and note["recorded"] == len(kernels) == note["kernels"]
    summary = summarize(tracer.spans)
    assert summary.source == "tensorflow" and summary.inferences == 1
    assert {"call", "to_numpy"} <= {s.layer for s in summary.layers}


def test_xplane_kernels_on_the_tracers_clock() -> None:
    pytest.importorskip("tensorflow")
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    env = space.planes.add(name="Task Environment")
    env.stat_metadata[1].name = "profile_start_time"
    env.stats.add(metadata_id=1, int64_value=5_000_000)
    host = space.planes.add(name="/host:CPU")
    for i, name in enumerate(["conv:Conv2D", "ExecutorState::Process", "EagerLocalExecute: f", "relu:Relu"], 1):
        host.event_metadata[i].name = name
    line = host.lines.add(name="tf_Compute/7", timestamp_ns=100)
    line.events.add(metadata_id=1, offset_ps=2_000_000, duration_ps=3_000_000)  # 2 us after the line, 3 us long
    line.events.add(metadata_id=2, offset_ps=0, duration_ps=9_000_000)
    line.events.add(metadata_id=3, offset_ps=0, duration_ps=9_000_000)
    line.events.add(metadata_id=4, offset_ps=4_000_000, duration_ps=2_000_000)  # overlaps conv by 1 us
    found = kernels(space, epoch_offset_ns=1_000_000)
    assert found == [
        Kernel("conv", "Conv2D", 4_002_100, 4_005_100, "tf_Compute/7"),
        Kernel("relu", "Relu", 4_004_100, 4_006_100, "tf_Compute/7"),
    ]
    tracer = make_tracer("framework", otel=False)
    call = SpanRecord("call", "framework", 4_000_000, 4_010_000, 42, {"source": "tensorflow"})
    assert record_kernels(tracer, [call], found) == 2
    conv, relu = tracer.spans
    assert (conv.start_ns, conv.end_ns, conv.tid) == (4_002_100, 4_005_100, 42)
    assert (relu.start_ns, relu.end_ns) == (4_005_100, 4_006_100) and relu.attributes["clipped_ns"] == 1000
    assert relu.attributes == {
        "layer": "relu",
        "op_type": "Relu",
        "source": "tensorflow",
        "thread": "tf_Compute/7",
        "clipped_ns": 1000,
    }
