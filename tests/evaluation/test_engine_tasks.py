"""The loop runs the task: named outputs for detection, each sample's geometry from pre-processing to the
postprocess (boxes mapped back to the source image exactly), classification unchanged."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from repliscope.datasets.base import BoxAnnotation, Sample, read_sample
from repliscope.evaluation.engine import LoopOptions, prepare_item, run_loop
from repliscope.ops.base import BuildContext, Geometry
from repliscope.ops.pipeline import Pipeline
from repliscope.runtimes.base import ModelArtifact, Runner
from repliscope.tasks import get_task

PRE = [
    {"op": "decode", "library": "pillow", "channels": "RGB"},
    {
        "op": "resize",
        "size": [32, 48],
        "keep_aspect_ratio": False,
        "method": "bilinear",
        "library": "pillow",
        "antialias": True,
    },
]
POST = [
    {
        "op": "detections_from_outputs",
        "boxes": "boxes",
        "scores": "scores",
        "classes": None,
        "count": None,
        "format": {"kind": "xyxy", "normalized": False, "one_based": False, "space": "input"},
    },
    {"op": "to_source", "undo": "geometry", "clip": False},
]


class _FixedBoxes(Runner):
    """Every image: the whole model input (48 x 32) and its left half, scores 0.5 and 0.75."""

    name = "fixed"

    def framework(self) -> tuple[str, str]:
        return "none", "0"

    def _load(self) -> None:
        pass

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        raise AssertionError("a detection loop asks for named outputs")

    def _infer_outputs(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        n = len(batch)
        boxes = np.tile(np.array([[0, 0, 48, 32], [0, 0, 24, 32]], np.float32), (n, 1, 1))
        return {"boxes": boxes, "scores": np.tile(np.array([0.5, 0.75], np.float32), (n, 1))}


def _png(h: int, w: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((h, w, 3), 99, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def test_boxes_come_back_in_source_pixels_through_each_samples_geometry() -> None:
    pipeline = Pipeline.from_specs(PRE, POST, BuildContext())
    sizes = [(64, 80), (100, 50), (32, 48)]
    samples = [
        Sample(f"s{i}.png", None, lambda h=h, w=w: _png(h, w), objects=(BoxAnnotation((0, 0, 1, 1), 0),))
        for i, (h, w) in enumerate(sizes)
    ]
    item = prepare_item(pipeline, read_sample(samples[0]), (32, 48, 3))
    assert item.geometry == Geometry((64, 80), (0.5, 0.6))
    artifact = ModelArtifact(
        path=Path("none"),
        sha256="0" * 64,
        format="onnx",
        input_name="x",
        input_shape=(-1, 32, 48, 3),
        input_dtype="uint8",
        output_names=("boxes", "scores"),
    )
    loop = run_loop(
        pipeline,
        _FixedBoxes(artifact, threads=1, cache_dir=Path(".")),
        samples,
        LoopOptions(batch_size=2, prep_workers=1),
        (32, 48, 3),
        task=get_task("object_detection"),
    )
    for pred, (h, w) in zip(loop.predictions, sizes, strict=True):
        assert pred.detections is not None and [d.score for d in pred.detections] == [0.75, 0.5]  # best first
        assert [d.box for d in pred.detections] == [[0.0, 0.0, w / 2, float(h)], [0.0, 0.0, float(w), float(h)]]
        assert [d.class_id for d in pred.detections] == [0, 0]


def test_postprocess_takes_named_outputs_and_geometry() -> None:
    pipeline = Pipeline.from_specs(PRE, [], BuildContext())
    count = np.array([3, 1], np.int32)
    boxes = np.zeros((2, 4, 4), np.float16)
    g = [Geometry((10, 20)), None]
    preds = pipeline.postprocess({"boxes": boxes, "count": count}, geometry=g)
    assert preds.outputs["count"].dtype == np.int32 and preds.outputs["boxes"].dtype == np.float16  # kept
    assert preds.scores.dtype == np.float32 and preds.scores.shape == (2, 4, 4) and preds.geometry == g
    plain = pipeline.postprocess(np.ones((2, 5), np.float64))  # classification: scores only, as before
    assert plain.scores.dtype == np.float32 and plain.outputs == {} and plain.geometry == []
