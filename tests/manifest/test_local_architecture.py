"""``architecture.path``: a factory module beside the manifest (no installed package), its sha256 in the run's
provenance and in the ONNX export key, the path policy, and ``claims: []``."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
import yaml

from repliscope.errors import FrameworkError
from repliscope.manifest.checks import check_manifest, import_local_module
from repliscope.manifest.loader import load_manifest
from repliscope.manifest.schema import ArchitectureSpec
from tests.conftest import EXAMPLES

MODULE = """
import torch
from torch import nn


def build(features: int = 3, classes: int = 3) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(features, classes))
"""


def _manifest(tmp: Path, architecture: dict, module_name: str = "a2_localnet") -> Path:
    """A manifest in ``tmp`` (tiny-resnet's pre-processing, 3 classes) whose weights fit ``MODULE``'s build();
    the module is ``tmp/nets/<module_name>.py``."""
    import torch

    (tmp / "nets").mkdir(exist_ok=True)
    (tmp / "nets" / f"{module_name}.py").write_text(MODULE)
    weights = tmp / "w.pt"
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 3))
    torch.save(net.state_dict(), weights)
    (tmp / "labels.txt").write_text("a\nb\nc\n")
    data = yaml.safe_load((EXAMPLES / "tiny-resnet.yaml").read_text())
    data.update(
        name="localnet",
        architecture=architecture,
        source={
            "uri": "w.pt",
            "sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
            "format": "pytorch_state_dict",
        },
        outputs=[{"name": "logits", "shape": [-1, 3], "dtype": "float32", "layout": "NC", "kind": "logits"}],
        labels={"source": "labels.txt", "num_classes": 3},
    )
    data["postprocess"] = [{"op": "softmax", "axis": -1}, {"op": "topk", "k": 3}, {"op": "labels"}]
    path = tmp / "m.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"factory": "m:build", "kwargs": {}}, "give 'package'"),
        ({"factory": "m:build", "package": "torch", "sha256": "0" * 64, "kwargs": {}}, "'sha256' pins a local module"),
    ],
)
def test_schema_needs_package_or_path(spec: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ArchitectureSpec(**spec)


@pytest.mark.parametrize("name", ["tiny-resnet", "tiny-transformer"])
def test_examples_validate_with_no_claims(name: str, tmp_path: Path) -> None:
    report = check_manifest(EXAMPLES / f"{name}.yaml", cache_dir=tmp_path)
    assert report.ok, [str(e) for e in report.errors]
    assert report.loaded is not None and report.loaded.manifest.claims == []
    arch = report.loaded.manifest.architecture
    assert arch is not None and arch.path == "models" and arch.package == "torch>=2.1"


def test_local_module_is_built_and_its_sha256_recorded(tmp_path: Path) -> None:
    from repliscope.backends.torch.loader import build_torch_module
    from repliscope.evaluation.artifacts import resolve_artifact
    from repliscope.runtimes.onnx_export import export_key

    path = _manifest(tmp_path, {"factory": "a2_localnet:build", "path": "nets", "kwargs": {"features": 3}})
    assert check_manifest(path, cache_dir=tmp_path).ok
    artifact = resolve_artifact(load_manifest(path), tmp_path)
    module_file = tmp_path / "nets" / "a2_localnet.py"
    assert artifact.architecture is not None
    assert artifact.architecture.module_dir == (tmp_path / "nets").resolve()
    assert artifact.architecture.module_sha256 == _sha(module_file)
    describe: dict = {}
    module = build_torch_module(artifact, describe)
    assert type(module).__name__ == "Sequential" and describe["parameters"] == 12
    assert describe["architecture_module"] == {
        "module": "a2_localnet",
        "folder": str((tmp_path / "nets").resolve()),
        "sha256": _sha(module_file),
    }
    key = export_key(artifact)
    module_file.write_text(MODULE + "\n# edited\n")  # other code, same weights: another ONNX export
    assert export_key(resolve_artifact(load_manifest(path), tmp_path)) != key


def test_pinned_sha256_mismatch_and_missing_module_are_reported_at_their_line(tmp_path: Path) -> None:
    path = _manifest(
        tmp_path,
        {"factory": "a2_localnet2:build", "path": "nets", "sha256": "0" * 64, "kwargs": {}},
        module_name="a2_localnet2",
    )
    errors = [str(e) for e in check_manifest(path, cache_dir=tmp_path).errors]
    assert len(errors) == 1 and "architecture module: sha256 of" in errors[0] and "refusing" in errors[0]
    path = _manifest(tmp_path, {"factory": "nowhere:build", "path": "nets", "kwargs": {}})
    errors = [str(e) for e in check_manifest(path, cache_dir=tmp_path).errors]
    assert len(errors) == 1 and "no module file" in errors[0] and "nowhere.py" in errors[0]


def test_path_outside_the_manifest_folder_is_refused_unless_allowed(tmp_path: Path) -> None:
    inner = tmp_path / "project"
    inner.mkdir()
    _manifest(tmp_path, {"factory": "a2_localnet3:build", "path": "nets", "kwargs": {}}, module_name="a2_localnet3")
    path = _manifest(inner, {"factory": "a2_localnet3:build", "path": "../nets", "kwargs": {}}, module_name="a2_unused")
    errors = [str(e) for e in check_manifest(path, cache_dir=tmp_path).errors]
    assert len(errors) == 1 and "outside the manifest's folder" in errors[0] and "--allow-outside-paths" in errors[0]
    assert check_manifest(path, cache_dir=tmp_path, allow_outside_paths=True).ok


def test_a_local_module_never_shadows_an_imported_one(tmp_path: Path) -> None:
    (tmp_path / "yaml.py").write_text("def build():\n    return 1\n")
    with pytest.raises(FrameworkError, match=r"a module 'yaml' is already imported from .*rename the local module"):
        import_local_module("yaml", tmp_path)
    (tmp_path / "a2_fresh.py").write_text("def build():\n    return 2\n")
    assert import_local_module("a2_fresh", tmp_path).build() == 2
    assert str(tmp_path.resolve()) not in sys.path  # the folder was on sys.path only during the import


def test_two_manifests_each_with_their_own_model_py(tmp_path: Path) -> None:
    """Two projects, each with a local ``a2_model.py`` (a common name), checked in one process (``manifest
    validate a.yaml b.yaml``): the second used to be refused ("already imported from the first folder");
    each now gets its own module, and a third-party module of that name is still never replaced."""
    for k in (1, 2):
        (tmp_path / f"p{k}").mkdir()
        (tmp_path / f"p{k}" / "a2_model.py").write_text(f"def build():\n    return {k}\n")
    assert import_local_module("a2_model", tmp_path / "p1").build() == 1
    assert import_local_module("a2_model", tmp_path / "p2").build() == 2
    assert import_local_module("a2_model", tmp_path / "p1").build() == 1
    assert sys.modules["a2_model"].__file__ == str((tmp_path / "p1" / "a2_model.py").resolve())


def test_evaluate_a_local_module_model_without_claims(tmp_path: Path) -> None:
    """End to end: evaluate examples/tiny-resnet.yaml on unlabelled images; the record names the module file's
    sha256, and the summary says there is no claim and no metric instead of printing empty tables."""
    from typer.testing import CliRunner

    from repliscope.cli.main import app
    from repliscope.store.repository import RunStore
    from tests.support import foolbox_imagenet_files

    images = tmp_path / "images"
    images.mkdir()
    for k, (path, _) in enumerate(foolbox_imagenet_files()[:3]):
        (images / f"photo{k}.jpg").write_bytes(path.read_bytes())
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    res = CliRunner().invoke(
        app,
        ["evaluate", str(EXAMPLES / "tiny-resnet.yaml"), "--dataset", str(images), "--label-rule", "none", "--db", db],
    )
    assert res.exit_code == 0, res.output
    assert "claims    none: the manifest makes no claim (claims: [])" in res.stdout
    assert "metrics   none: no labelled sample was evaluated" in res.stdout
    with RunStore(db) as store:
        (summary,) = store.list()
        record = store.get(summary.run_id)
    assert record.claims == [] and record.counts["evaluated"] == 3
    assert record.runtime["model"]["architecture_module"] == {
        "module": "tiny_resnet",
        "folder": str((EXAMPLES / "models").resolve()),
        "sha256": _sha(EXAMPLES / "models" / "tiny_resnet.py"),
    }
