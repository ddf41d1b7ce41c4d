"""Adding a task = one module + its registration: a toy task defined and registered here (nothing else in src
knows it) is accepted by the manifest loader with its own output kind and claim metric, refused where its facts
say so, and evaluated end to end on a tiny dataset through the real loop, a real ONNX model and onnxruntime."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

from repliscope.datasets.base import Dataset, Sample
from repliscope.errors import DatasetError, RepliscopeError
from repliscope.evaluation.record import EvaluationRecord, MetricValue, SamplePrediction
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from repliscope.manifest.loader import load_manifest
from repliscope.metrics.intervals import wilson_interval
from repliscope.ops.base import Predictions
from repliscope.tasks.base import TASKS, MetricSpec, ReportSpec, Task, get_task

TOY = "dominant_colour"


class DominantColour(Task):
    """Which of red / green / blue dominates the image: the model's one output of kind ``colour_scores``,
    scored by ``hit_rate`` (a fraction, Wilson interval)."""

    name = TOY
    truth = "labels"
    post_ops: ClassVar[tuple[str, ...]] = ("softmax", "topk")
    metric_specs: ClassVar[tuple[MetricSpec, ...]] = (MetricSpec("hit_rate", unit="fraction", interval="wilson"),)
    output_kinds: ClassVar[tuple[str, ...]] = ("colour_scores",)
    class_scores = True
    report = ReportSpec(interval_note="95 % Wilson score intervals.")

    def check_dataset(self, dataset: Dataset, num_classes: int, class_names: Sequence[str] | None = None) -> None:
        if any(s.label is None for s in dataset.samples):
            raise DatasetError(f"dataset '{dataset.name}': every sample needs its colour label")

    def to_samples(self, preds: Predictions, batch: Sequence[Sample], rows: Sequence[int]) -> list[SamplePrediction]:
        if preds.topk_indices is None or preds.topk_scores is None:
            raise RepliscopeError("the toy postprocess ends with topk")
        idx, scores = preds.topk_indices.tolist(), preds.topk_scores.tolist()
        return [
            SamplePrediction(sample_id=batch[i].id, label=batch[i].label, topk_indices=idx[r], topk_probs=scores[r])
            for r, i in enumerate(rows)
        ]

    def metrics(self, samples: Sequence[SamplePrediction], dataset: Dataset) -> list[MetricValue]:
        ok = [s for s in samples if s.error is None]
        hits = sum(1 for s in ok if s.topk_indices[0] == s.label)
        low, high = wilson_interval(hits, len(ok))
        return [MetricValue(name="hit_rate", value=hits / len(ok), ci_low=low, ci_high=high, n=len(ok), successes=hits)]

    def paired(
        self, reference: Sequence[SamplePrediction], variant: Sequence[SamplePrediction], dataset: Dataset | None
    ) -> dict[str, Any] | None:
        return None


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registration: one entry in TASKS (taken out again after the test)."""
    monkeypatch.setitem(TASKS._items, TOY, DominantColour)


def _model(path: Path) -> None:
    """uint8 NHWC image -> its mean red, green and blue (N, 3) as float scores."""
    x = helper.make_tensor_value_info("image", TensorProto.UINT8, [None, 8, 8, 3])
    y = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 3])
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [1, 2])
    nodes = [
        helper.make_node("Cast", ["image"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["f", "axes"], ["scores"], keepdims=0),
    ]
    graph = helper.make_graph(nodes, "mean_colour", [x], [y], initializer=[axes])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))


MANIFEST = """\
name: toy-colours
version: 1.0.0
task: {task}
description: the mean colour of an image, as scores
license: Apache-2.0
framework: {{name: onnx, version: ">=1.14"}}
source: {{uri: colours.onnx, sha256: {sha}, format: onnx}}
inputs:
  - {{name: image, shape: [-1, 8, 8, 3], dtype: uint8, layout: NHWC}}
preprocess:
  - {{op: decode, library: pillow, channels: RGB}}
  - {{op: resize, size: [8, 8], keep_aspect_ratio: false, method: nearest, library: pillow, antialias: true}}
outputs:
  - {{name: scores, shape: [-1, 3], dtype: float32, layout: NC, kind: {kind}}}
postprocess:
  - {{op: softmax, axis: -1}}
  - {{op: topk, k: 1}}
labels: {{source: colours.txt, num_classes: 3}}
claims:
  - {{metric: {metric}, value: {value}, dataset: {{name: toy, split: val}}, source: this test}}
datasets:
  trained_on: [{{name: none, split: none}}]
  evaluated_on: [{{name: toy, split: val}}]
"""


def _write(tmp_path: Path, **fields: Any) -> Path:
    _model(tmp_path / "colours.onnx")
    (tmp_path / "colours.txt").write_text("red\ngreen\nblue\n")
    sha = hashlib.sha256((tmp_path / "colours.onnx").read_bytes()).hexdigest()
    values = {"task": TOY, "kind": "colour_scores", "metric": "hit_rate", "value": 0.75, "sha": sha, **fields}
    path = tmp_path / "toy.yaml"
    path.write_text(MANIFEST.format(**values))
    return path


def _png(rgb: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((12, 10, 3), rgb, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def test_the_toy_task_is_unknown_until_registered(tmp_path: Path) -> None:
    with pytest.raises(RepliscopeError) as info:
        load_manifest(_write(tmp_path))
    text = str(info.value)
    assert "task" in text and TOY in text and "image_classification" in text  # the registered names offered


def test_the_loader_takes_the_toy_tasks_facts(tmp_path: Path, toy_registered: None) -> None:
    loaded = load_manifest(_write(tmp_path))
    assert loaded.manifest.task == TOY and loaded.manifest.outputs[0].kind == "colour_scores"
    with pytest.raises(RepliscopeError) as info:  # the task's claim metrics, not another task's
        load_manifest(_write(tmp_path, metric="top1", value=75))
    assert "claims on top1 do not belong to dominant_colour (allowed: hit_rate, latency_p90_ms" in str(info.value)
    with pytest.raises(RepliscopeError) as info:  # the metric's unit: a fraction
        load_manifest(_write(tmp_path, value=75))
    assert "hit_rate is a fraction: 75.0 is above 1" in str(info.value)
    with pytest.raises(RepliscopeError) as info:  # the task's output kinds, not classification's
        load_manifest(_write(tmp_path, kind="logits"))
    assert "outputs[0].kind 'logits' is not an output of dominant_colour (allowed: colour_scores)" in str(info.value)


def test_the_toy_task_is_evaluated_end_to_end(tmp_path: Path, toy_registered: None) -> None:
    path = _write(tmp_path)
    colours = [(200, 10, 10), (10, 200, 10), (10, 10, 200), (200, 10, 10)]
    labels = [0, 1, 2, 2]  # the last one is labelled blue but red: a miss
    samples = [
        Sample(f"s{i}.png", lab, partial(_png, c)) for i, (c, lab) in enumerate(zip(colours, labels, strict=True))
    ]
    data = Dataset(name="toy", samples=samples, license="CC0-1.0", label_rule="test")
    prepared = prepare(
        path, RunSettings(runtime="onnxruntime", threads=1, batch_size=2, prep_workers=1, cache_dir=tmp_path)
    )
    assert prepared.task.name == TOY and not prepared.task.reads_named_outputs(["scores"])
    rec = evaluate(prepared, data)
    assert rec.task == TOY
    assert [s.top1 for s in rec.samples] == [0, 1, 2, 0]
    hit = rec.metric("hit_rate")
    assert hit is not None and (hit.successes, hit.n, hit.value) == (3, 4, 0.75)
    assert (hit.ci_low, hit.ci_high) == pytest.approx(wilson_interval(3, 4))
    assert rec.claims[0].metric == "hit_rate" and rec.claims[0].claimed == 0.75  # a fraction, compared as written
    again = EvaluationRecord.model_validate_json(rec.model_dump_json())  # the record reads back (its checks pass)
    assert again.result_hash == rec.result_hash
    assert get_task(TOY).report.failures_title == "Failed samples"
