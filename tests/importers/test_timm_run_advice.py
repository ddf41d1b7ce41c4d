"""An imported timm manifest is evaluated in a provisioned stack of timm with torch and torchvision builds made
for each other (``STACK_PINS``); where its architecture cannot be loaded, ``evaluate`` fails with ONE line that
says exactly how (before: ``operator torchvision::nms does not exist`` and no advice, or ``pip install timm``,
which leads there). The stack itself is exercised by tests/importers/test_timm_conformance.py (slow, stack);
``evaluate`` of the imported resnet50.a1_in1k in it is measured in docs/guides/importers.md. The two CLI tests run
``evaluate`` up to the architecture, which loads the torch runner (torch's import, shared with the rest of the
suite) and scans the installed distributions once (about 1 s)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.importers.batch import import_one
from repliscope.importers.timm import STACK_PINS, TimmImporter, stack_spec
from repliscope.stacks.spec import parse_spec

RESNET = Path(__file__).parent / "fixtures" / "timm" / "resnet50.a1_in1k.json"
NMS = "operator torchvision::nms does not exist"


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The translated manifest, beside a store both tests share (made once: a store's set-up costs a second)."""
    folder = tmp_path_factory.mktemp("model")
    shutil.copy(RESNET, folder / "config.json")
    (folder / "model.safetensors").write_bytes(b"weights")  # hashed by the import; never loaded here
    out = folder / "resnet50.yaml"
    out.write_text(import_one("timm", folder / "config.json").to_yaml(), encoding="utf-8")
    return out


def _evaluate(manifest: Path) -> tuple[int, str]:
    runner = CliRunner(env={"REPLISCOPE_CACHE": str(manifest.parent / "cache")})
    db = f"sqlite:///{manifest.parent / 'runs.db'}"
    got = runner.invoke(app, ["evaluate", str(manifest), "--limit", "1", "--db", db])
    return got.exit_code, got.output


def _expected_advice(manifest: Path) -> str:
    return (
        "the manifest was imported from timm, which needs torch and torchvision builds made for each other: run it "
        f"in a provisioned stack: repliscope evaluate {manifest} --stack 'timm==1.0.31 torch==2.14.1 "
        "torchvision==0.29.1'"
    )


def test_the_stack_spec_is_one_a_stack_accepts() -> None:
    spec = parse_spec(stack_spec("timm==1.0.31"))
    assert spec.text == "timm==1.0.31 torch==2.14.1 torchvision==0.29.1"
    assert STACK_PINS == ("torch==2.14.1", "torchvision==0.29.1")
    assert TimmImporter.run_advice(None, "m.yaml") == TimmImporter.run_advice("timm==1.0.31", "m.yaml")


def test_timm_not_installed_says_which_stack_in_one_line(imported: Path) -> None:
    assert importlib.util.find_spec("timm") is None  # make install keeps timm in its stack only
    code, output = _evaluate(imported)
    assert code == 2
    (line,) = output.strip().splitlines()
    assert line == (
        "error: architecture 'timm:create_model' needs 'timm==1.0.31', which is not installed "
        f"(pip install 'timm==1.0.31'); {_expected_advice(imported)}"
    )


def test_torchvision_operators_missing_at_import_says_which_stack(
    imported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hostile install: a timm 1.0.31 whose import fails as the real one does beside a torchvision built for
    another torch (the registry's CUDA torchvision 0.28.0 next to torch 2.13.0+cpu)."""
    site = tmp_path / "site"
    (site / "timm").mkdir(parents=True)
    (site / "timm" / "__init__.py").write_text(f"raise RuntimeError({NMS!r})\n", encoding="utf-8")
    info = site / "timm-1.0.31.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: timm\nVersion: 1.0.31\n", encoding="utf-8")
    (info / "top_level.txt").write_text("timm\n", encoding="utf-8")
    (info / "RECORD").write_text(
        "timm/__init__.py,,\ntimm-1.0.31.dist-info/METADATA,,\ntimm-1.0.31.dist-info/top_level.txt,,\n"
        "timm-1.0.31.dist-info/RECORD,,\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(site))
    code, output = _evaluate(imported)
    assert "timm" not in sys.modules  # its import failed: nothing half-imported is left behind
    assert code == 2
    (line,) = output.strip().splitlines()
    assert line == (
        f"error: architecture factory 'timm:create_model': importing 'timm' failed: RuntimeError: {NMS}; "
        f"{_expected_advice(imported)}"
    )
