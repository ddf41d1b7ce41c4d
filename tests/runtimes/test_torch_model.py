"""Building torch modules from weight-only files: factories, strict keys, refusing pickled code."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from repliscope.backends.torch.loader import build_torch_module, describe_module, resolve_factory
from repliscope.errors import FrameworkError, RepliscopeError
from repliscope.runtimes import (
    Architecture,
    BatchError,
    ModelArtifact,
    ModelLoadError,
    create_runner,
)

LINEAR = Architecture("torch.nn:Linear", {"in_features": 4, "out_features": 3})


def _linear_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return dict(torch.nn.Linear(4, 3).state_dict())


def _artifact(path: Path, architecture: Architecture | None = LINEAR) -> ModelArtifact:
    return ModelArtifact(
        path=path,
        sha256="0" * 64,
        format="pytorch_state_dict",
        input_name="x",
        input_shape=(-1, 4),
        input_dtype="float32",
        architecture=architecture,
    )


def _saved(tmp_path: Path, obj: object, name: str = "w.pth") -> Path:
    path = tmp_path / name
    torch.save(obj, path)
    return path


def _touch(path: str) -> None:  # what an unpickled payload would run
    Path(path).touch()


class Payload:
    """An object whose unpickling runs code (``_touch(marker)``)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return _touch, (self.marker,)


class NotWeights:
    def __init__(self) -> None:
        self.weight = torch.zeros(3, 4)


def test_linear_runs_and_matches_manual_math(tmp_path: Path) -> None:
    state = _linear_state()
    runner = create_runner("torch", _artifact(_saved(tmp_path, state)), threads=1, cache_dir=tmp_path)
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    out = runner.infer(x)
    expected = x @ state["weight"].numpy().T + state["bias"].numpy()
    assert out.dtype == np.float32 and out.shape == (5, 3)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-5)
    assert runner.info()["threads"] == 1
    assert torch.get_num_threads() == 1


def test_checkpoint_dict_with_state_dict_is_unwrapped(tmp_path: Path) -> None:
    path = _saved(tmp_path, {"epoch": 3, "state_dict": _linear_state()})
    describe: dict[str, object] = {}
    module = build_torch_module(_artifact(path), describe)
    assert not module.training
    assert describe["checkpoint_key"] == "state_dict"
    assert describe["weights_dtypes"] == ["float32"]


def test_missing_and_unexpected_keys_are_all_listed(tmp_path: Path) -> None:
    state = _linear_state()
    del state["bias"]
    state["extra.a"] = torch.zeros(1)
    state["extra.b"] = torch.zeros(1)
    with pytest.raises(ModelLoadError) as err:
        build_torch_module(_artifact(_saved(tmp_path, state)))
    msg = str(err.value)
    assert "1 missing key(s): bias" in msg
    assert "2 unexpected key(s): extra.a, extra.b" in msg


def test_shape_mismatch_is_listed(tmp_path: Path) -> None:
    state = _linear_state()
    state["weight"] = torch.zeros(3, 5)
    with pytest.raises(ModelLoadError, match=r"weight: file \(3, 5\) vs model \(3, 4\)"):
        build_torch_module(_artifact(_saved(tmp_path, state)))


def test_lite0_with_a_dropped_and_an_extra_key(lite0_artifact: ModelArtifact, tmp_path: Path) -> None:
    state = torch.load(lite0_artifact.path, map_location="cpu", weights_only=True)
    del state["_fc.bias"], state["_bn0.running_mean"]
    state["_head.weight"] = torch.zeros(1)
    path = _saved(tmp_path, state)
    with pytest.raises(ModelLoadError) as err:
        build_torch_module(dataclasses.replace(lite0_artifact, path=path))
    assert "2 missing key(s): _bn0.running_mean, _fc.bias" in str(err.value)
    assert "1 unexpected key(s): _head.weight" in str(err.value)


def test_pickled_code_is_refused_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "payload-ran"
    path = _saved(tmp_path, {"weight": torch.zeros(3, 4), "hook": Payload(marker)})
    with pytest.raises(ModelLoadError, match=r"refused to load .*never unpickles arbitrary code") as err:
        build_torch_module(_artifact(path))
    assert "_touch" in str(err.value)  # names the offending global
    assert not marker.exists()


def test_pickled_custom_object_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path, NotWeights())
    with pytest.raises(ModelLoadError, match=r"refused to load .*NotWeights"):
        build_torch_module(_artifact(path))


def test_file_that_is_not_a_torch_file(tmp_path: Path) -> None:
    path = tmp_path / "garbage.pth"
    path.write_bytes(b"this is not a pickle at all")
    with pytest.raises(ModelLoadError, match="not a torch weights file readable with weights_only=True"):
        build_torch_module(_artifact(path))


def test_tensor_that_is_not_a_state_dict(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="holds a Tensor, not a state_dict"):
        build_torch_module(_artifact(_saved(tmp_path, torch.zeros(3))))


def test_missing_architecture_module_names_the_pip_package(tmp_path: Path) -> None:
    arch = Architecture("no_such_pkg.model:Net", {})
    expected = r"module 'no_such_pkg.model' is not installed.*pip install no-such-pkg"
    with pytest.raises(FrameworkError, match=expected):
        build_torch_module(_artifact(_saved(tmp_path, _linear_state()), arch))


def test_missing_factory_attribute_suggests_close_names() -> None:
    with pytest.raises(
        ModelLoadError,
        match=r"'efficientnet_lite_pytorch.EfficientNet' has no attribute "
        r"'from_nam'. Did you mean 'from_name'",
    ):
        resolve_factory("efficientnet_lite_pytorch:EfficientNet.from_nam")


@pytest.mark.parametrize("factory", ["torch.nn.Linear", ":Linear", "torch.nn:"])
def test_malformed_factory(factory: str) -> None:
    with pytest.raises(ModelLoadError, match="must look like 'module:attr'"):
        resolve_factory(factory)


def test_factory_failure_is_wrapped(tmp_path: Path) -> None:
    arch = Architecture("torch.nn:Linear", {"in_features": 4, "nope": 1})
    with pytest.raises(ModelLoadError, match=r"factory 'torch.nn:Linear' failed with kwargs .*nope"):
        build_torch_module(_artifact(_saved(tmp_path, _linear_state()), arch))


def test_no_architecture_for_a_weight_only_file(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="must give 'architecture'"):
        build_torch_module(_artifact(_saved(tmp_path, _linear_state()), None))


def test_swish_in_a_relu6_lite_model_is_refused() -> None:
    factory = resolve_factory("efficientnet_lite_pytorch:EfficientNet.from_name")
    module = factory(model_name="efficientnet-lite0")
    assert describe_module(module)["activation_modules"] == {"ReLU6": 17}
    module.set_swish()  # what the library's README suggests, and what repliscope never does
    with pytest.raises(ModelLoadError, match=r"declares relu_fn='relu6' but contains MemoryEfficientSwish"):
        describe_module(module)


def test_batch_must_match_the_input_spec(tmp_path: Path) -> None:
    artifact = _artifact(_saved(tmp_path, _linear_state()))
    runner = create_runner("torch", artifact, threads=1, cache_dir=tmp_path)
    with pytest.raises(BatchError, match="expects float32"):
        runner.infer(np.zeros((2, 4), dtype=np.float64))
    with pytest.raises(BatchError, match=r"axis 1 is 5, not 4"):
        runner.infer(np.zeros((2, 5), dtype=np.float32))
    with pytest.raises(BatchError, match="rank"):
        runner.infer(np.zeros(4, dtype=np.float32))


def test_read_only_batch_is_accepted(tmp_path: Path) -> None:
    artifact = _artifact(_saved(tmp_path, _linear_state()))
    runner = create_runner("torch", artifact, threads=1, cache_dir=tmp_path)
    x = np.ones((2, 4), dtype=np.float32)
    x.flags.writeable = False
    assert runner.infer(x).shape == (2, 3)


@pytest.mark.parametrize("threads", [0, -1, 1.5, True])
def test_threads_must_be_a_positive_int(threads: object, tmp_path: Path) -> None:
    with pytest.raises(RepliscopeError, match="threads must be a positive integer"):
        create_runner("torch", _artifact(tmp_path / "w.pth"), threads=threads, cache_dir=tmp_path)  # type: ignore[arg-type]


def test_unknown_runtime_suggests_close_names(tmp_path: Path) -> None:
    with pytest.raises(RepliscopeError, match="Did you mean 'onnxruntime'"):
        create_runner("onnxruntim", _artifact(tmp_path / "w.pth"), threads=1, cache_dir=tmp_path)
