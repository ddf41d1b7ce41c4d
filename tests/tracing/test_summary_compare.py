"""Trace summary (self times, shares, op types) and compare (alignment by key and by covers) on exact spans."""

from __future__ import annotations

import pytest

from repliscope.errors import RepliscopeError
from repliscope.tracing.compare import compare_layers
from repliscope.tracing.spans import SpanRecord
from repliscope.tracing.summary import layer_times, summarize

US = 1000  # ns


def _torch(offset: int = 0, scale: int = 1) -> list[SpanRecord]:
    """One torch forward: conv (with its padding child), bn, act, fc inside the model; times in µs * scale."""

    def span(layer: str, op: str, a: int, b: int) -> SpanRecord:
        return SpanRecord(
            layer or "<model>",
            "framework",
            offset + a * US * scale,
            offset + b * US * scale,
            1,
            {"layer": layer, "op_type": op, "source": "torch"},
        )

    return [
        span("conv.pad", "ZeroPad2d", 0, 10),
        span("conv", "Conv2d", 0, 40),
        span("bn", "BatchNorm2d", 40, 50),
        span("act", "ReLU6", 50, 55),
        span("fc", "Linear", 60, 90),
        span("", "Net", 0, 100),
    ]


def _ort() -> list[SpanRecord]:
    def span(name: str, a: int, b: int, op: str) -> SpanRecord:
        return SpanRecord(name, "framework", a * US, b * US, 7, {"layer": name, "op_type": op, "source": "onnxruntime"})

    run = SpanRecord("onnxruntime.run", "framework", 0, 50 * US, 7, {"source": "onnxruntime"})
    return [
        run,
        span("act", 0, 20, "Conv"),
        span("fc", 20, 35, "Gemm"),
        span("", 35, 40, "Reshape"),
        span("(ReorderOutput)", 40, 42, "ReorderOutput"),
    ]


def test_summary_self_times_shares_and_op_types() -> None:
    s = summarize(_torch())
    assert (s.source, s.inferences, s.model_p50_ms) == ("torch", 1, 0.1)
    assert [(x.layer, x.p50_ms) for x in s.layers] == [
        ("conv.pad", 0.01),
        ("conv", 0.03),
        ("bn", 0.01),
        ("act", 0.005),
        ("fc", 0.03),
        ("<model>", 0.015),
    ]
    assert sum(x.share for x in s.layers) == pytest.approx(1.0)
    assert [x.layer for x in s.top(2)] == ["conv", "fc"]
    assert s.op_types[0] == ("Conv2d", 0.03, 0.3) and len(s.op_types) == 6
    assert s.spans_per_level == {"application": 0, "model": 0, "framework": 6, "library": 0}


def test_summary_p50_over_inferences() -> None:
    spans = _torch(0, 1) + _torch(10**6, 3) + _torch(2 * 10**6, 2)
    s = summarize(spans)
    assert s.inferences == 3 and s.model_p50_ms == 0.2
    assert {x.layer: (x.count, x.p50_ms, x.share) for x in s.layers}["conv"] == (3, 0.06, pytest.approx(0.3))
    assert sum(x.share for x in s.layers) == pytest.approx(1.0)  # totals over totals: shares always add up


def test_summary_needs_layer_spans() -> None:
    with pytest.raises(RepliscopeError, match="--trace-level framework or library"):
        summarize([SpanRecord("inference", "model", 0, 10, 1)])


def test_compare_torch_with_onnxruntime_groups_modules_into_fused_layers() -> None:
    c = compare_layers(layer_times(_torch()), layer_times(_ort()))
    assert c.mapping == "torch layers grouped into onnxruntime layers (assign_covers)"
    assert [(x.key, x.covers, x.a_ms, x.b_ms) for x in c.layers] == [
        ("act", ("conv", "conv.pad", "bn", "act"), pytest.approx(0.055), 0.02),
        ("fc", ("fc",), 0.03, 0.015),
        ("<model>", ("<model>",), 0.015, 0.005),
    ]
    assert c.only_a == [] and c.only_b == ["(ReorderOutput)"]
    assert (c.a_model_ms, c.b_model_ms) == (0.1, 0.05)
    act = c.layers[0]
    assert act.label == "conv … act"
    assert act.sentence("torch", "onnxruntime") == (
        "layer conv … act is 2.8× faster on onnxruntime (0.020 ms vs 0.055 ms)"
    )
    assert [x.key for x in c.largest(1)] == ["act"]
    back = compare_layers(layer_times(_ort()), layer_times(_torch()))  # same alignment, sides swapped
    assert [(x.key, x.a_ms) for x in back.layers] == [("act", 0.02), ("fc", 0.015), ("<model>", 0.005)]
    assert back.only_a == ["(ReorderOutput)"] and back.layers[1].sentence("A", "B").startswith(
        "layer fc is 2.0× slower on B"
    )


def test_compare_same_layers_by_key() -> None:
    c = compare_layers(layer_times(_torch()), layer_times(_torch(0, 2)))
    assert c.mapping == "by key" and [x.ratio for x in c.layers] == [2.0] * 6
