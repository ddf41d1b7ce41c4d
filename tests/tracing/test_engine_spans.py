"""The evaluation loop's spans at each level (Lite0 on ONNX Runtime, 2 foolbox images, batch 1, pipelined)."""

from __future__ import annotations

from collections import Counter

import pytest

from repliscope.datasets import resolve_dataset
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from repliscope.tracing import make_tracer, use_tracer
from repliscope.tracing.chrome import nesting_errors
from tests.conftest import LITE0

OPS = [
    "read",
    "preprocess/decode",
    "preprocess/resize",
    "preprocess/center_crop",
    "preprocess/to_float",
    "preprocess/subtract_mean",
    "preprocess/divide_std",
    "preprocess/data_layout",
]
POST = ["postprocess/softmax", "postprocess/topk", "postprocess/labels"]


@pytest.mark.parametrize("level", ["none", "application", "model", "library"])
def test_evaluate_records_exactly_the_spans_of_its_level(level: str) -> None:
    tracer = make_tracer(level, otel=False)
    prepared = prepare(LITE0, RunSettings(runtime="onnxruntime", threads=1, batch_size=1))
    with use_tracer(tracer), tracer.span("run", "application"):
        record = evaluate(prepared, resolve_dataset("foolbox_imagenet", limit=2))
    assert record.counts["evaluated"] == 2
    counts = Counter(s.name for s in tracer.spans)
    per_level = Counter(s.level for s in tracer.spans)
    if level == "none":
        assert tracer.spans == [] and "trace_level" not in record.runtime
        return
    assert record.runtime["trace_level"] == level  # the record says its latencies were measured traced
    assert counts["run"] == 1
    if level == "application":
        assert per_level == {"application": 1}
        return
    assert {n: counts[n] for n in ["batch", "inference", *OPS, *POST]} == {
        "batch": 2,
        "inference": 2,
        **{n: 2 for n in OPS},
        **{n: 2 for n in POST},
    }
    assert nesting_errors(tracer.chrome_trace()) == []
    if level == "library":  # ORT: warm-up + 2 batches, each a run span, 53 layers and 53 node kernels
        assert counts["onnxruntime.run"] == 3 and counts["_blocks.3._swish#2"] == 3
        assert per_level["framework"] == 3 * (1 + 53) and per_level["library"] == 3 * 53
