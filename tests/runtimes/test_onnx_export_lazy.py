"""A cached torch -> ONNX export is found, verified and run without importing torch (its import costs seconds of
a run that needs only the ONNX file); the export key's torch version is the same string either way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from repliscope.errors import FrameworkError
from repliscope.runtimes import ModelArtifact, Runner, onnx_export
from repliscope.runtimes.onnx_export import export_key, torch_version

CHILD = r"""
import json, sys
from pathlib import Path
from repliscope.runtimes import Architecture, ModelArtifact, create_runner
path, sha256, cache = sys.argv[1:4]
artifact = ModelArtifact(
    path=Path(path), sha256=sha256, format="pytorch_state_dict", input_name="input",
    input_shape=(-1, 3, 224, 224), input_dtype="float32",
    architecture=Architecture("efficientnet_lite_pytorch:EfficientNet.from_name", {"model_name": "efficientnet-lite0"}),
)
runner = create_runner("onnxruntime", artifact, threads=1, cache_dir=Path(cache))
runner.load()
print(json.dumps({"torch_imported": "torch" in sys.modules, "export": runner.notes["export"]}))
"""


def test_torch_version_without_torch_is_torchs_own() -> None:
    import torch  # imported here: the module's attribute is read first

    assert torch_version() == torch.__version__


def test_version_from_the_distribution_when_torch_is_not_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    import torch

    monkeypatch.delitem(sys.modules, "torch")
    assert torch_version() == importlib.metadata.version("torch") == torch.__version__


def test_no_torch_installed_is_named_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    def absent(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.setattr(onnx_export.importlib.metadata, "version", absent)
    with pytest.raises(
        FrameworkError, match=r"needs torch, which is not installed \(pip install 'repliscope\[torch\]'\)"
    ):
        torch_version()


def test_cached_export_loads_in_a_process_that_never_imports_torch(
    runners: dict[str, Runner], lite0_artifact: ModelArtifact, export_cache: Path
) -> None:
    """A child process (~2 s: imports and one ONNX Runtime session) loads the export the fixture made."""
    assert runners["onnxruntime"].notes["export"]["cache_key"] == export_key(lite0_artifact)
    args = [str(lite0_artifact.path), lite0_artifact.sha256, str(export_cache)]
    done = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    child = json.loads(done.stdout.strip().splitlines()[-1])
    assert child["torch_imported"] is False
    assert child["export"]["cached"] is True
    assert child["export"]["cache_key"] == export_key(lite0_artifact)
