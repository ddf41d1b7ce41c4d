"""Framework-level tracing of the tflite and tensorflow runners: their stage spans (LiteRT's Python interpreter
has no per-operator profiler), nested in one span per framework call and summarised like layers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repliscope.runtimes import create_runner
from repliscope.tracing import make_tracer
from repliscope.tracing.chrome import nesting_errors
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


def test_tensorflow_stages_per_call(tmp_path: Path) -> None:
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
    assert [s.name for s in tracer.spans] == ["call", "to_numpy", "tensorflow.call"]
    call, to_numpy, whole = tracer.spans
    assert _inside(call, whole) and _inside(to_numpy, whole) and call.end_ns <= to_numpy.start_ns
    summary = summarize(tracer.spans)
    assert summary.source == "tensorflow" and summary.inferences == 1
    assert [s.layer for s in summary.layers] == ["call", "to_numpy"]
