"""MediaPipe Selfie Segmentation reproduced and pinned against MediaPipe's own graph: the golden masks
(tests/fixtures/segmentation/mediapipe_selfie_golden.npz, made by make_mediapipe_golden.py in a mediapipe 0.10.21
stack) against the examples' pipelines on tflite, probability by probability."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from repliscope.evaluation.run import PreparedRun, RunSettings, prepare
from repliscope.ops.pipeline import Pipeline, decode_input
from repliscope.pitfalls.base import rebuild
from tests.segmentation._selfie import COCO_MINI, GOLDEN, MANIFESTS, need_coco, seed_cache

CASES = [
    ("general", "000000404484"),
    ("general", "000000434204"),
    ("general", "000000020992"),
    ("landscape", "000000404484"),
]


@pytest.fixture(scope="module")
def golden() -> Any:
    return np.load(GOLDEN)


def _prepared(which: str, runtime: str = "tflite") -> PreparedRun:
    seed_cache()
    return prepare(MANIFESTS[which], RunSettings(runtime=runtime, threads=1, batch_size=1))


def probabilities(prepared: PreparedRun, stem: str, pipeline: Pipeline | None = None) -> np.ndarray:
    """The person probability per pixel of the decoded image: the manifest's postprocess up to mask_resize."""
    pipe = pipeline or prepared.pipeline
    item = pipe.preprocess(decode_input((COCO_MINI / "images" / f"{stem}.jpg").read_bytes()))
    prepared.runner.load()
    outputs = prepared.runner.infer_outputs(pipe.batch([item]))
    head = Pipeline(pipe.pre_ops, pipe.post_ops[:2])
    maps = head.postprocess(outputs, geometry=[item.geometry]).segmentation
    assert maps is not None
    return maps[0].values[..., 0]  # type: ignore[index]


@pytest.mark.parametrize(("which", "stem"), CASES)
def test_masks_equal_mediapipes_own(golden: Any, which: str, stem: str) -> None:
    need_coco()
    assert str(golden["mediapipe_version"]) == "0.10.21"
    data = (COCO_MINI / "images" / f"{stem}.jpg").read_bytes()
    assert hashlib.sha256(data).hexdigest() == str(golden[f"{stem}__sha256"])
    ref = golden[f"{stem}__m{0 if which == 'general' else 1}"]
    ours = probabilities(_prepared(which), stem)
    assert ours.shape == ref.shape
    assert float(np.abs(ours - ref).max()) < 1e-4  # measured: 5.5e-5 at most (XNNPACK builds)
    assert np.array_equal(ours > 0.5, ref > 0.5)  # the masks: 100 % agreement


def test_opencv5_warp_moves_the_mask(golden: Any) -> None:
    """The same graph with this environment's cv2.warpPerspective (OpenCV 5 rounds the fixed-point bilinear
    otherwise than MediaPipe's OpenCV 4): visibly different probabilities."""
    import cv2

    need_coco()
    if not cv2.__version__.startswith("5."):
        pytest.skip(f"OpenCV {cv2.__version__}: the rounding difference is OpenCV 5's")
    prepared = _prepared("general")
    i = prepared.pipeline.index_of("warp_resize")
    pipe = prepared.pipeline.replace_pre(i, rebuild(prepared.pipeline.pre_ops[i], library="opencv"))
    stem = "000000404484"
    ours = probabilities(prepared, stem, pipe)
    err = np.abs(ours - golden[f"{stem}__m0"])
    assert err.max() > 0.1 and (ours > 0.5).sum() != (golden[f"{stem}__m0"] > 0.5).sum()


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["onnxruntime", "opencv_dnn"])
def test_converted_model_equals_mediapipe(golden: Any, runtime: str) -> None:
    """The tf2onnx conversion (MediaPipe's Convolution2DTransposeBias through
    :mod:`repliscope.runtimes.tf2onnx_custom_ops`) on onnxruntime and OpenCV DNN: the same masks."""
    need_coco()
    prepared = _prepared("general", runtime)
    for stem in ("000000404484", "000000434204", "000000020992"):
        ours = probabilities(prepared, stem)
        ref = golden[f"{stem}__m0"]
        assert float(np.abs(ours - ref).max()) < 2e-4  # measured: 1.35e-4 at most
        assert np.array_equal(ours > 0.5, ref > 0.5)
