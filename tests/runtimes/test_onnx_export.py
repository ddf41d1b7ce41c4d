"""The torch -> ONNX export cache, and ONNX sources fed straight to the ONNX runtimes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from repliscope.runtimes import Architecture, ModelArtifact, ModelLoadError, Runner, create_runner
from repliscope.runtimes.onnx_export import OPSET, export_cache_path, export_key, export_to_onnx

from .conftest import THREADS, Images

LINEAR = Architecture("torch.nn:Linear", {"in_features": 4, "out_features": 3})


def test_first_export_is_recorded_and_not_cached(runners: dict[str, Runner], export_cache: Path) -> None:
    # The session fixture created "onnxruntime" before "opencv_dnn": the first exported, the second reused.
    first, second = runners["onnxruntime"].notes["export"], runners["opencv_dnn"].notes["export"]
    assert first["cached"] is False and second["cached"] is True
    for info in (first, second):
        assert info["exported_from"] == "torch"
        assert info["exporter"] == "torch.onnx.export(dynamo=True)"
        assert info["opset"] == OPSET
        assert info["dynamic_batch"] is True
        assert Path(info["onnx_path"]).parent == export_cache
    assert first["onnx_sha256"] == second["onnx_sha256"]
    assert first["onnx_sha256"] == hashlib.sha256(Path(first["onnx_path"]).read_bytes()).hexdigest()
    assert not list(export_cache.glob(".*tmp*")), "temporary files must not be left behind"


def test_second_runner_reuses_the_cached_file(
    lite0_artifact: ModelArtifact, runners: dict[str, Runner], export_cache: Path, images: Images
) -> None:
    path = Path(runners["onnxruntime"].notes["export"]["onnx_path"])
    mtime = path.stat().st_mtime_ns
    runner = create_runner("onnxruntime", lite0_artifact, threads=1, cache_dir=export_cache)
    out = runner.infer(images.x[:2])
    info = runner.info()["export"]
    assert info["cached"] is True
    assert Path(info["onnx_path"]) == path
    assert path.stat().st_mtime_ns == mtime
    assert runner.info()["threads"] == 1
    assert out.shape == (2, 1000)


def test_cache_file_name_and_key(lite0_artifact: ModelArtifact, export_cache: Path) -> None:
    path = export_cache_path(lite0_artifact, export_cache)
    assert path.name == f"{lite0_artifact.sha256[:16]}-{export_key(lite0_artifact)}.onnx"
    assert path.is_file()
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar["source_sha256"] == lite0_artifact.sha256


def test_different_input_shape_or_kwargs_give_a_different_key(lite0_artifact: ModelArtifact) -> None:
    key = export_key(lite0_artifact)
    assert export_key(dataclasses.replace(lite0_artifact)) == key
    assert export_key(dataclasses.replace(lite0_artifact, input_shape=(-1, 3, 240, 240))) != key
    assert export_key(dataclasses.replace(lite0_artifact, input_shape=(1, 3, 224, 224))) != key
    assert lite0_artifact.architecture is not None
    arch = dataclasses.replace(lite0_artifact.architecture, kwargs={"model_name": "efficientnet-lite1"})
    assert export_key(dataclasses.replace(lite0_artifact, architecture=arch)) != key


def test_export_refuses_an_onnx_source(lite0_artifact: ModelArtifact, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="only a 'pytorch_state_dict' source"):
        export_to_onnx(dataclasses.replace(lite0_artifact, format="onnx", architecture=None), tmp_path)


def _onnx_artifact(runners: dict[str, Runner], input_name: str = "input") -> ModelArtifact:
    info = runners["onnxruntime"].notes["export"]
    return ModelArtifact(
        path=Path(info["onnx_path"]),
        sha256=info["onnx_sha256"],
        format="onnx",
        input_name=input_name,
        input_shape=(-1, 3, 224, 224),
        input_dtype="float32",
    )


@pytest.mark.parametrize("name", ["onnxruntime", "opencv_dnn"])
def test_onnx_source_runs_as_is(
    name: str, runners: dict[str, Runner], scores: dict[str, np.ndarray], images: Images, tmp_path: Path
) -> None:
    runner = create_runner(name, _onnx_artifact(runners), threads=THREADS, cache_dir=tmp_path)
    out = runner.infer(images.x[:4])
    np.testing.assert_allclose(out, scores[name][:4], atol=1e-4, rtol=0)
    assert "export" not in runner.info()
    assert not list(tmp_path.iterdir()), "an ONNX source must not be exported"


@pytest.mark.parametrize("name", ["onnxruntime", "opencv_dnn"])
def test_wrong_input_name_lists_the_actual_names(name: str, runners: dict[str, Runner], tmp_path: Path) -> None:
    runner = create_runner(name, _onnx_artifact(runners, input_name="images"), threads=1, cache_dir=tmp_path)
    with pytest.raises(ModelLoadError, match=r"no input named 'images'.*its inputs are: input"):
        runner.load()


def test_torch_runtime_refuses_an_onnx_source(runners: dict[str, Runner], tmp_path: Path) -> None:
    from repliscope.errors import RepliscopeError

    with pytest.raises(RepliscopeError, match="torch runtime needs a torch source"):
        create_runner("torch", _onnx_artifact(runners), threads=1, cache_dir=tmp_path)


def test_tampered_cache_file_is_exported_again(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    weights = tmp_path / "linear.pth"
    torch.manual_seed(0)
    torch.save(torch.nn.Linear(4, 3).state_dict(), weights)
    artifact = ModelArtifact(
        path=weights,
        sha256="1" * 64,
        format="pytorch_state_dict",
        input_name="x",
        input_shape=(-1, 4),
        input_dtype="float32",
        architecture=LINEAR,
    )
    cache = tmp_path / "cache"
    path, first = export_to_onnx(artifact, cache)
    assert first["cached"] is False
    assert export_to_onnx(artifact, cache)[1]["cached"] is True
    path.write_bytes(path.read_bytes() + b"\0")  # a truncated/edited cache file must never be run
    _, again = export_to_onnx(artifact, cache)
    assert again["cached"] is False
    assert "differs from the recorded" in again["reexported_because"]
    assert again["onnx_sha256"] == first["onnx_sha256"]  # the export is deterministic


@pytest.mark.parametrize("name", ["onnxruntime", "opencv_dnn"])
def test_two_dimensional_input_runs_on_the_onnx_runtimes(name: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    weights = tmp_path / "linear.pth"
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    torch.save(layer.state_dict(), weights)
    artifact = ModelArtifact(
        path=weights,
        sha256="2" * 64,
        format="pytorch_state_dict",
        input_name="x",
        input_shape=(-1, 4),
        input_dtype="float32",
        architecture=LINEAR,
    )
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    out = create_runner(name, artifact, threads=1, cache_dir=tmp_path / "cache").infer(x)
    expected = x @ layer.weight.detach().numpy().T + layer.bias.detach().numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
