"""opencv_dnn on a darknet source: OpenCV's own Darknet reader (``cv2.dnn.readNetFromDarknet``) where the installed
OpenCV has it (< 5), else the Darknet -> ONNX conversion; the run's notes say which."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repliscope.backends.opencv_dnn import runner as ocv
from repliscope.backends.opencv_dnn.darknet import yolo_activate
from repliscope.ops.pipeline import decode_input
from repliscope.runtimes import create_runner
from tests.yolo._assets import DARKNET_DATA, MANIFEST, REPO, seed_cache


@pytest.fixture(scope="module")
def prepared() -> Any:
    from repliscope.evaluation.run import RunSettings, prepare

    seed_cache()
    return prepare(MANIFEST, RunSettings(runtime="opencv_dnn", threads=1, batch_size=1))


def _dog(prepared: Any) -> tuple[np.ndarray, Any]:
    item = prepared.pipeline.preprocess(decode_input((DARKNET_DATA / "dog.jpg").read_bytes()))
    return item.data[None], item.geometry


def test_opencv_5_runs_the_conversion_and_says_so(prepared: Any, tmp_path: Path) -> None:
    import cv2

    if hasattr(cv2.dnn, "readNetFromDarknet"):
        pytest.skip("this OpenCV still reads Darknet cfgs")
    runner = create_runner("opencv_dnn", prepared.artifact, 1, tmp_path)
    x, _ = _dog(prepared)
    got = runner.infer_outputs(x)
    want = create_runner("onnxruntime", prepared.artifact, 1, tmp_path).infer_outputs(x)
    assert runner.notes["darknet_reader"]["reader"] == "the ONNX conversion (notes.conversion)"
    assert "has no cv2.dnn.readNetFromDarknet" in runner.notes["darknet_reader"]["reason"]
    assert runner.notes["conversion"]["converter"] == "repliscope.convert.darknet_onnx"
    assert all(float(np.abs(got[k] - want[k]).max()) < 2e-5 for k in ("yolo_16", "yolo_23"))


class _FakeDarknetNet:
    """Stands in for OpenCV's Darknet net: its ``conv_<i>`` layers are the conversion's ``convolutional_<i>``
    tensors (raw heads before the yolo logistic), computed by onnxruntime."""

    def __init__(self, onnx_path: Path) -> None:
        import onnx
        import onnxruntime as ort

        model = onnx.load(str(onnx_path))
        for name in ("convolutional_15", "convolutional_22"):
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
        self._session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        self._x: np.ndarray | None = None
        self.calls: list[list[str]] = []

    def getLayerNames(self) -> list[str]:
        return [f"conv_{i}" for i in range(24)]

    def setPreferableBackend(self, backend: int) -> None:
        pass

    def setPreferableTarget(self, target: int) -> None:
        pass

    def setInput(self, x: np.ndarray) -> None:
        self._x = x

    def forward(self, names: list[str]) -> list[np.ndarray]:
        self.calls.append(list(names))
        wanted = [n.replace("conv_", "convolutional_") for n in names]
        return list(self._session.run(wanted, {"data": self._x}))


def test_darknet_reader_path_with_a_stand_in_net(
    prepared: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenCV < 5's path, its net replaced by the conversion's raw heads: the runner forwards conv_15 / conv_22
    and applies the yolo logistic, giving the conversion's own yolo outputs (Darknet's detections on dog.jpg)."""
    from repliscope.runtimes._common import onnx_source

    onnx_path = onnx_source(prepared.artifact, tmp_path, {})
    fake = _FakeDarknetNet(onnx_path)
    read: list[tuple[str, str]] = []

    def read_net_from_darknet(cfg: str, weights: str) -> _FakeDarknetNet:
        read.append((cfg, weights))
        return fake

    monkeypatch.setattr(ocv.cv2.dnn, "readNetFromDarknet", read_net_from_darknet, raising=False)
    runner = create_runner("opencv_dnn", prepared.artifact, 1, tmp_path)
    x, geometry = _dog(prepared)
    got = runner.infer_outputs(x)
    assert read == [(str(prepared.artifact.config_path), str(prepared.artifact.path))]
    assert fake.calls == [["conv_15", "conv_22"]]
    notes = runner.notes["darknet_reader"]
    assert notes["reader"] == "cv2.dnn.readNetFromDarknet" and "conversion" not in runner.notes
    assert notes["outputs"]["yolo_16"].startswith("conv_15 + the yolo layer's logistic")
    want = create_runner("onnxruntime", prepared.artifact, 1, tmp_path).infer_outputs(x)
    for k in ("yolo_16", "yolo_23"):
        assert got[k].shape == want[k].shape and float(np.abs(got[k] - want[k]).max()) < 1e-6
    dets = prepared.pipeline.postprocess(got, geometry=[geometry]).detections[0]
    assert len(dets.scores) == 70  # libdarknet's count at thresh .005 after do_nms_sort


def test_yolo_activate_is_logistic_but_on_w_h() -> None:
    raw = np.linspace(-3, 3, 2 * 3 * 7 * 2 * 2, dtype=np.float32).reshape(2, 21, 2, 2)
    out = yolo_activate(raw, 3)
    per = raw.reshape(2, 3, 7, 2, 2)
    got = out.reshape(2, 3, 7, 2, 2)
    assert np.array_equal(got[:, :, 2:4], per[:, :, 2:4])
    sig = 1 / (1 + np.exp(-per.astype(np.float64)))
    assert np.allclose(got[:, :, [0, 1, 4, 5, 6]], sig[:, :, [0, 1, 4, 5, 6]], atol=1e-7, rtol=0)
    assert out.dtype == np.float32 and out.shape == raw.shape


PROBE = textwrap.dedent("""
    import json, sys
    import cv2
    from pathlib import Path
    from repliscope.evaluation.run import RunSettings, prepare
    from repliscope.ops.pipeline import decode_input
    from repliscope.runtimes import create_runner
    p = prepare(Path(sys.argv[1]), RunSettings(runtime="opencv_dnn", threads=1, batch_size=1))
    item = p.pipeline.preprocess(decode_input(Path(sys.argv[2]).read_bytes()))
    r = create_runner("opencv_dnn", p.artifact, 1, Path(sys.argv[3]))
    o = create_runner("onnxruntime", p.artifact, 1, Path(sys.argv[3]))
    a, b = r.infer_outputs(item.data[None]), o.infer_outputs(item.data[None])
    d = p.pipeline.postprocess(a, geometry=[item.geometry]).detections[0]
    print(json.dumps({"opencv": cv2.__version__, "notes": r.notes["darknet_reader"], "detections": len(d.scores),
                      "max_diff": max(float(abs(a[k] - b[k]).max()) for k in a)}))
""")


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.stack
@pytest.mark.timeout(900)
def test_real_opencv_4_reads_the_cfg(prepared: Any, tmp_path: Path) -> None:
    """opencv-python-headless < 5 from the package index (into a folder put first on the path): its own Darknet
    reader gives libdarknet's 70 detections on dog.jpg, within 1e-4 of the conversion on onnxruntime."""
    seed_cache()  # this test's cache (the subprocess inherits $REPLISCOPE_CACHE)
    target = tmp_path / "opencv4"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            "opencv-python-headless<5",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if pip.returncode != 0:
        pytest.skip(f"pip could not install opencv-python-headless<5: {pip.stderr.strip()[-300:]}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(REPO / "src"), str(REPO)])}
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(MANIFEST), str(DARKNET_DATA / "dog.jpg"), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["opencv"].startswith("4.")
    assert out["notes"]["reader"] == "cv2.dnn.readNetFromDarknet"
    assert out["detections"] == 70
    assert out["max_diff"] < 1e-4
