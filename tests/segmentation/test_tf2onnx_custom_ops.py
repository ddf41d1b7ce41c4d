"""MediaPipe's Convolution2DTransposeBias converted by the tf2onnx handler: options read from the flatbuffer, and a
converted graph equal to LiteRT on the real selfie model (needs the cached wheel member)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repliscope.runtimes.tf2onnx_custom_ops import mediapipe_custom_options
from tests.segmentation._selfie import MODELS, REAL_CACHE


def _model(which: str) -> Path:
    from repliscope.errors import NotCachedError
    from repliscope.manifest import pypi_wheel

    uri, sha = MODELS[which]
    try:
        return pypi_wheel.resolve(uri, sha, REAL_CACHE, allow_download=False)
    except NotCachedError as exc:
        pytest.skip(f"{exc} (make segmentation-assets)")


def test_options_read_from_the_flatbuffer() -> None:
    assert mediapipe_custom_options(_model("general")) == {"segment": (1, 2, 2)}
    assert mediapipe_custom_options(_model("landscape")) == {"conv2d_transpose": (1, 2, 2)}


@pytest.mark.slow
def test_conversion_runs_like_litert(tmp_path: Path) -> None:
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    from repliscope.runtimes.base import ModelArtifact
    from repliscope.runtimes.tf2onnx_convert import convert_to_onnx

    path = _model("landscape")
    artifact = ModelArtifact(
        path=path,
        format="tflite",
        sha256=MODELS["landscape"][1],
        input_name="input_1",
        input_shape=(1, 144, 256, 3),
        input_dtype="float32",
        output_names=("segment_back",),
    )
    onnx_path, info = convert_to_onnx(artifact, tmp_path)
    x = np.random.default_rng(0).random((1, 144, 256, 3), dtype=np.float32)
    onnx_out = ort.InferenceSession(str(onnx_path)).run(["segment_back"], {"input_1": x})[0]
    it = Interpreter(str(path))
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    ref = it.get_tensor(it.get_output_details()[0]["index"])
    assert onnx_out.shape == ref.shape == (1, 144, 256, 1)
    assert float(np.abs(onnx_out - ref).max()) < 1e-4 and info["converter"] == "tf2onnx"
