"""A process without torch exports in a child Python (issue 37: it never imports torch, and the export's Python
does not hold its GIL while the run reads its first samples); the child's model gives torch's outputs, and its
errors come back as the same repliscope errors."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from repliscope.errors import FrameworkError
from repliscope.runtimes import Architecture, ModelArtifact, ModelLoadError, onnx_export
from repliscope.runtimes.onnx_export import TORCH_TO_ONNX, export_in_child

LINEAR = Architecture("torch.nn:Linear", {"in_features": 4, "out_features": 3})


@pytest.fixture
def linear(tmp_path: Path) -> ModelArtifact:
    torch = pytest.importorskip("torch")
    weights = tmp_path / "linear.pth"
    torch.manual_seed(0)
    torch.save(torch.nn.Linear(4, 3).state_dict(), weights)
    return ModelArtifact(
        path=weights,
        sha256="2" * 64,
        format="pytorch_state_dict",
        input_name="x",
        input_shape=(-1, 4),
        input_dtype="float32",
        architecture=LINEAR,
    )


@pytest.mark.slow
def test_the_child_exports_a_model_that_gives_torchs_outputs(linear: ModelArtifact, tmp_path: Path) -> None:
    """A real child Python (~4 s on an idle machine: its start, torch's import, a 4 x 3 Linear's export): the one
    test of it. The child runs the same ``_export`` as this process (tested in test_onnx_export.py)."""
    import onnxruntime as ort
    import torch

    out = tmp_path / "child.onnx"
    info = export_in_child(linear, out)
    assert info["exported_from"] == "torch" and info["input_name"] == "x" and info["dynamic_batch"] is True
    module = torch.nn.Linear(4, 3)
    module.load_state_dict(torch.load(linear.path, weights_only=True))
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    (got,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got, module(torch.from_numpy(x)).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_without_torch_imported_the_export_runs_in_a_child(
    linear: ModelArtifact, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def recorder(where: str) -> Callable[[ModelArtifact, Path], dict[str, str]]:
        def export(_artifact: ModelArtifact, _out: Path) -> dict[str, str]:
            calls.append(where)
            return {}

        return export

    monkeypatch.setattr(onnx_export, "export_in_child", recorder("child"))
    monkeypatch.setattr(onnx_export, "_export", recorder("here"))
    TORCH_TO_ONNX.convert(linear, tmp_path / "a.onnx")
    monkeypatch.delitem(sys.modules, "torch")  # (restored after the test; nothing imports it meanwhile)
    TORCH_TO_ONNX.convert(linear, tmp_path / "b.onnx")
    assert calls == ["here", "child"]


@pytest.mark.parametrize(
    ("script", "error", "message"),
    [
        (
            "import json, sys; open(sys.argv[2], 'w').write(json.dumps("
            "{'error': {'type': 'FrameworkError', 'message': 'torch 1.0 is outside >=2.1'}}))",
            FrameworkError,
            r"^torch 1\.0 is outside >=2\.1$",
        ),
        (
            "import sys; sys.stderr.write('Killed\\n'); sys.exit(137)",
            ModelLoadError,
            r"exporting 'linear\.pth' to ONNX in a child process failed \(exit code 137\): Killed",
        ),
        (
            "import json, sys; open(sys.argv[2], 'w').write('{\"info\": 1')",
            ModelLoadError,
            r"failed \(exit code 0\): no output",
        ),
    ],
    ids=["repliscope error", "killed", "torn answer"],
)
def test_a_childs_failure_is_raised_here_with_its_reason(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    script: str,
    error: type[Exception],
    message: str,
) -> None:
    monkeypatch.setattr(onnx_export, "CHILD", script)
    artifact = ModelArtifact(tmp_path / "linear.pth", "3" * 64, "pytorch_state_dict", "x", (-1, 4), "float32", LINEAR)
    with pytest.raises(error, match=message):
        export_in_child(artifact, tmp_path / "out.onnx")
    assert not (tmp_path / "out.onnx").exists()
