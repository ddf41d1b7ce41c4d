"""Conversions as registered, composable, cache-checked loaders (repliscope.runtimes.loaders); multi-graph models
driven through the ONNX runners' generic interface; one ``infer(feed)`` of named outputs."""

from __future__ import annotations

import hashlib
import inspect
import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from repliscope.backends import CONVERSION_TARGETS, CONVERSIONS, ONNX_MODELS, ONNX_SOURCES
from repliscope.errors import RepliscopeError
from repliscope.registry import Registry
from repliscope.runtimes import Architecture, BatchError, ModelArtifact, ModelLoadError, create_runner, loaders
from repliscope.runtimes.loaders import Conversion, Net, chain, load_as, route

onnx = pytest.importorskip("onnx")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _linear_artifact(tmp_path: Path) -> tuple[ModelArtifact, Any]:
    torch = pytest.importorskip("torch")
    weights = tmp_path / "linear.pth"
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    torch.save(layer.state_dict(), weights)
    artifact = ModelArtifact(
        path=weights,
        sha256=_sha(weights),
        format="pytorch_state_dict",
        input_name="x",
        input_shape=(-1, 4),
        input_dtype="float32",
        architecture=Architecture("torch.nn:Linear", {"in_features": 4, "out_features": 3}),
    )
    return artifact, layer


def _constant_model(path: Path, value: float, input_name: str = "x", output_name: str = "logits") -> Path:
    """A valid ONNX model computing ``x * 0 + value`` on (N, 4) float32 -> (N, 4)."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [
            helper.make_node("Mul", [input_name, "zero"], ["z"]),
            helper.make_node("Add", ["z", "value"], [output_name]),
        ],
        "constant",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, ["N", 4])],
        initializer=[
            numpy_helper.from_array(np.zeros((1, 4), np.float32), "zero"),
            numpy_helper.from_array(np.full((1, 4), value, np.float32), "value"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


# -- the registry is the one place ------------------------------------------------------------------------------


def test_the_onnx_sources_come_from_the_registries() -> None:
    assert CONVERSIONS.names() == sorted(f"{s}->{t}" for s, t, _ in CONVERSION_TARGETS)
    assert ONNX_SOURCES == ("onnx", "pytorch_state_dict", "tflite", "tf_frozen_graph", "darknet", "mtcnn_cascade")
    assert set(ONNX_SOURCES) == {"onnx", *(s for s, t, _ in CONVERSION_TARGETS if t == "onnx"), *ONNX_MODELS.names()}


def test_an_unconvertible_format_names_the_ones_that_are(tmp_path: Path) -> None:
    artifact = ModelArtifact(tmp_path / "m.keras", "0" * 64, "keras", "x", (-1, 4), "float32")
    with pytest.raises(
        ModelLoadError,
        match=r"no conversion from source format 'keras' to 'onnx' \(formats "
        r"converted to onnx: onnx, darknet, pytorch_state_dict, tf_frozen_graph, tflite\)",
    ):
        load_as(artifact, "onnx", tmp_path, {})
    assert not list(tmp_path.iterdir())


def test_no_runner_names_a_model_or_a_conversion() -> None:
    """The ONNX runners run any registered multi-graph model and any registered conversion: they name none."""
    from repliscope.backends.onnxruntime import runner as ort_runner
    from repliscope.backends.opencv_dnn import runner as cv_runner

    for module in (ort_runner, cv_runner):
        source = inspect.getsource(module).lower()
        for word in ("mtcnn", "cascade", "tf2onnx", "onnx_export", "pytorch_state_dict"):
            assert word not in source, (module.__name__, word)


# -- the shared verified cache, hostile -------------------------------------------------------------------------


def test_a_tampered_torch_export_is_exported_again_not_run(tmp_path: Path) -> None:
    """The cached export replaced by another VALID model (constant 7s): the runner exports again and computes the
    linear layer, not the planted model; the notes say why."""
    artifact, layer = _linear_artifact(tmp_path)
    cache = tmp_path / "cache"
    first = create_runner("onnxruntime", artifact, threads=1, cache_dir=cache)
    first.load()
    path = Path(first.notes["export"]["onnx_path"])
    good = path.read_bytes()
    _constant_model(path, 7.0)
    runner = create_runner("onnxruntime", artifact, threads=1, cache_dir=cache)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = runner.infer(x)
    expected = x @ layer.weight.detach().numpy().T + layer.bias.detach().numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    info = runner.notes["export"]
    assert info["cached"] is False and "differs from the recorded" in info["reexported_because"]
    assert path.read_bytes() == good and info["onnx_sha256"] == _sha(path)
    assert "inputs" not in info  # the record's notes are as before: the inputs live in the sidecar
    assert json.loads(path.with_suffix(".json").read_text())["inputs"]["source_sha256"] == artifact.sha256


def test_a_cached_export_of_other_inputs_is_not_used(tmp_path: Path) -> None:
    """A sidecar whose recorded inputs are not this source's (another weights file's sha256) is a miss, even when
    the model's sha256 matches the one it records."""
    artifact, _ = _linear_artifact(tmp_path)
    cache = tmp_path / "cache"
    path, _ = loaders.CONVERSIONS.get("pytorch_state_dict->onnx").cached(artifact, cache)
    sidecar = path.with_suffix(".json")
    planted = _constant_model(tmp_path / "planted.onnx", 7.0, output_name="logits")
    path.write_bytes(planted.read_bytes())
    record = json.loads(sidecar.read_text())
    sidecar.write_text(
        json.dumps({**record, "onnx_sha256": _sha(path), "inputs": {**record["inputs"], "source_sha256": "f" * 64}})
    )
    again, info = loaders.CONVERSIONS.get("pytorch_state_dict->onnx").cached(artifact, cache)
    assert (
        info["cached"] is False and info["reexported_because"] == "its sidecar records other inputs than this source's"
    )
    assert _sha(again) != _sha(planted)


def _frozen_graph(tmp_path: Path) -> ModelArtifact:
    """A one-op frozen GraphDef ``y = x * 2`` (TensorFlow builds it; tf2onnx converts it)."""
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("tf2onnx")
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        tf.multiply(x, tf.constant(2.0), name="y")
    pb = tmp_path / "double.pb"
    pb.write_bytes(graph.as_graph_def().SerializeToString())
    return ModelArtifact(pb, _sha(pb), "tf_frozen_graph", "x:0", (-1, 4), "float32", output_names=("y:0",))


def test_a_tampered_tf2onnx_conversion_is_converted_again_not_run(tmp_path: Path) -> None:
    artifact = _frozen_graph(tmp_path)
    cache = tmp_path / "cache"
    first = create_runner("onnxruntime", artifact, threads=1, cache_dir=cache)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(first.infer_outputs(x)["y:0"], x * 2)
    path = Path(first.notes["conversion"]["onnx_path"])
    assert first.notes["conversion"]["cached"] is False
    _constant_model(path, 7.0, input_name="x:0", output_name="y:0")
    runner = create_runner("onnxruntime", artifact, threads=1, cache_dir=cache)
    np.testing.assert_array_equal(runner.infer({"x:0": x})["y:0"], x * 2)
    info = runner.notes["conversion"]
    assert info["cached"] is False and "differs from the recorded" in info["reconverted_because"]
    assert (info["converter"], info["from"], info["onnx_sha256"]) == ("tf2onnx", "tf_frozen_graph", _sha(path))
    hit = create_runner("onnxruntime", artifact, threads=1, cache_dir=cache)
    hit.load()
    assert hit.notes["conversion"]["cached"] is True and "reconverted_because" not in hit.notes["conversion"]


def test_a_conversion_that_writes_escaping_external_data_is_refused_and_nothing_is_cached(tmp_path: Path) -> None:
    """The written file is verified BEFORE it is renamed into place: a model whose external data points out of its
    folder is refused by the one guard every ONNX reader uses, and no cache entry is left."""
    from onnx import TensorProto, helper

    class Escaping(Conversion):
        source, target = "fake", "onnx"

        def cache_path(self, artifact: ModelArtifact, cache_dir: Path) -> Path:
            return cache_dir / "fake.onnx"

        def inputs(self, artifact: ModelArtifact) -> dict[str, Any]:
            return {"source_sha256": artifact.sha256}

        def convert(self, artifact: ModelArtifact, out: Path) -> dict[str, Any]:
            tensor = helper.make_tensor("w", TensorProto.FLOAT, [1], [0.0])
            tensor.ClearField("float_data")
            tensor.data_location = TensorProto.EXTERNAL
            tensor.external_data.add(key="location", value="../../../../etc/passwd")
            node = helper.make_node("Add", ["x", "w"], ["y"])
            graph = helper.make_graph(
                [node],
                "g",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
                initializer=[tensor],
            )
            out.write_bytes(helper.make_model(graph).SerializeToString())
            return {}

    artifact = ModelArtifact(tmp_path / "src", "a" * 64, "fake", "x", (1,), "float32")  # type: ignore[arg-type]
    cache = tmp_path / "cache"
    with pytest.raises(RepliscopeError, match=r"etc/passwd"):
        Escaping().cached(artifact, cache)
    assert sorted(p.name for p in cache.iterdir()) == []


# -- composition ------------------------------------------------------------------------------------------------


class _Step(Conversion):
    """A fake conversion: appends its name to the text of its input (counted, to see cache hits)."""

    runs: ClassVar[list[str]] = []

    def __init__(self, source: str, target: str) -> None:
        self.source, self.target = source, target

    def cache_path(self, artifact: ModelArtifact, cache_dir: Path) -> Path:
        return cache_dir / f"{artifact.sha256[:12]}-{self.source}-{self.target}.{self.target}"

    def inputs(self, artifact: ModelArtifact) -> dict[str, Any]:
        return {"source_sha256": artifact.sha256}

    def convert(self, artifact: ModelArtifact, out: Path) -> dict[str, Any]:
        _Step.runs.append(f"{self.source}->{self.target}")
        out.write_text(artifact.path.read_text() + f"|{self.target}")
        return {"converter": "fake"}


def test_conversions_compose_into_a_cached_chain(tmp_path: Path) -> None:
    registry: Registry[Conversion] = Registry("conversion")
    for source, target in (("alpha", "beta"), ("beta", "gamma"), ("alpha", "delta")):
        registry.add(f"{source}->{target}", _Step(source, target))
    src = tmp_path / "model.alpha"
    src.write_text("alpha")
    artifact = ModelArtifact(src, _sha(src), "alpha", "x", (1,), "float32")  # type: ignore[arg-type]
    assert [f"{c.source}->{c.target}" for c in route("alpha", "gamma", registry)] == ["alpha->beta", "beta->gamma"]
    _Step.runs.clear()
    notes: dict[str, Any] = {}
    out = chain(artifact, "gamma", tmp_path / "cache", notes, registry)()
    assert out.path.read_text() == "alpha|beta|gamma" and out.format == "gamma" and out.sha256 == _sha(out.path)
    assert [(c["from"], c["to"], c["cached"]) for c in notes["conversions"]] == [
        ("alpha", "beta", False),
        ("beta", "gamma", False),
    ]
    # tamper the middle link: only it is converted again; the last link's input is the same bytes, so it hits
    middle = Path(notes["conversions"][0]["onnx_path"])
    middle.write_text("planted")
    _Step.runs.clear()
    again: dict[str, Any] = {}
    assert load_as(artifact, "gamma", tmp_path / "cache", again, registry).read_text() == "alpha|beta|gamma"
    assert _Step.runs == ["alpha->beta"]
    assert [c["cached"] for c in again["conversions"]] == [False, True]
    with pytest.raises(ModelLoadError, match="no conversion from source format 'gamma' to 'alpha'"):
        route("gamma", "alpha", registry)
    # one link: its info names where it came from too (a converter that did not say so read "converted from ?")
    single: dict[str, Any] = {}
    chain(artifact, "delta", tmp_path / "cache", single, registry)()
    assert (single["conversion"]["from"], single["conversion"]["to"], single["conversion"]["converter"]) == (
        "alpha",
        "delta",
        "fake",
    )


# -- a model of several graphs, on both ONNX runners --------------------------------------------------------------


class _TwoGraphs:
    """A fake multi-graph model: ``first.onnx`` (x * 0 + 1) then ``second.onnx`` (x * 0 + 2) added to it."""

    single_output_error: ClassVar[str] = "two graphs give 'sum', not one score output"

    def __init__(self, nets: dict[str, Net]) -> None:
        self.nets = nets

    @classmethod
    def load(cls, artifact: ModelArtifact, open_net: Any, notes: dict[str, Any]) -> _TwoGraphs:
        notes["graphs"] = ["first", "second"]
        return cls({n: open_net(artifact.path.with_name(f"{n}.onnx"), ["logits"]) for n in ("first", "second")})

    def infer_outputs(self, batch: np.ndarray, names: tuple[str, ...]) -> dict[str, np.ndarray]:
        (a,) = self.nets["first"](batch)
        (b,) = self.nets["second"](batch)
        return {"sum": np.asarray(a) + np.asarray(b)}


@pytest.mark.parametrize("runtime", ["onnxruntime", "opencv_dnn"])
def test_a_registered_multi_graph_model_runs_on_both_onnx_runners(
    runtime: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("cv2")
    models: Registry[Any] = Registry("ONNX model")
    models.add("two_graphs", _TwoGraphs)
    monkeypatch.setattr(loaders, "ONNX_MODELS", models)
    _constant_model(tmp_path / "first.onnx", 1.0)
    _constant_model(tmp_path / "second.onnx", 2.0)
    artifact = ModelArtifact(
        tmp_path / "first.onnx", "b" * 64, "two_graphs", "x", (-1, 4), "float32", output_names=("sum",)
    )  # type: ignore[arg-type]
    runner = create_runner(runtime, artifact, threads=1, cache_dir=tmp_path / "cache")
    out = runner.infer({"x": np.zeros((3, 4), np.float32)})
    assert list(out) == ["sum"]
    np.testing.assert_array_equal(out["sum"], np.full((3, 4), 3.0, np.float32))
    assert runner.notes["graphs"] == ["first", "second"]
    with pytest.raises(ModelLoadError, match="two graphs give 'sum'"):
        runner.infer(np.zeros((3, 4), np.float32))


# -- one infer ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", ["onnxruntime", "opencv_dnn", "torch"])
def test_infer_takes_a_feed_and_returns_named_outputs(runtime: str, tmp_path: Path) -> None:
    artifact, layer = _linear_artifact(tmp_path)
    runner = create_runner(runtime, artifact, threads=1, cache_dir=tmp_path / "cache")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = runner.infer({"x": x})
    assert isinstance(out, dict) and len(out) == 1
    (scores,) = out.values()
    expected = x @ layer.weight.detach().numpy().T + layer.bias.detach().numpy()
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(runner.infer(x), np.asarray(scores, np.float32))  # the single-score call
    assert runner.last_inference_seconds > 0
    with pytest.raises(BatchError, match=r"infer\(\) takes a feed of the model's one input 'x', got 'images'"):
        runner.infer({"images": x})
