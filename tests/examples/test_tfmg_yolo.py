"""The seed's own case (docs/guides/tfmg-yolo.md): the TF Model Garden's YOLOv3-tiny with pjreddie's weights, built
in the Model Garden's stack by examples/tfmg/yolov3_tiny.py, against libdarknet: layer by layer, and its COCO AP the
Model Garden's serving way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.errors import StackError
from tests.yolo._assets import MANIFEST, REPO, cfg_path, need_coco, need_darknet, seed_cache, weights_path

pytestmark = [pytest.mark.slow, pytest.mark.stack]
SCRIPT = REPO / "examples" / "tfmg" / "yolov3_tiny.py"
MAPPING = REPO / "examples" / "tfmg" / "mapping.yaml"


@pytest.fixture(scope="module")
def stack_python() -> tuple[Path, str]:
    """The Model Garden stack's interpreter and the PYTHONPATH of its sources (official/, orbit/)."""
    from repliscope.diff.loss.originals.tfmg_yolo import STACK, official_tree
    from repliscope.stacks.store import create_stack, get_stack

    need_darknet()
    try:
        stack = get_stack(STACK)
    except StackError:
        stack = create_stack(STACK)
    return stack.python_executable, str(official_tree())


def _in_stack(stack_python: tuple[Path, str], *args: str) -> dict[str, object]:
    python, path = stack_python
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="3", PYTHONNOUSERSITE="1")
    proc = subprocess.run(
        [str(python), str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _layer_diff(saved: Path, coco: str) -> dict[str, object]:
    from repliscope.cli.main import app

    args = ["diff", str(MANIFEST), "--candidate", str(saved), "--candidate-format", "savedmodel", "--layers"]
    args += ["--mapping", str(MAPPING), "--dataset", coco, "--batch", "2", "--json"]
    res = CliRunner().invoke(app, [*args, "--no-store"])
    assert res.exit_code in (0, 1), res.stderr
    out = json.loads(res.stdout)
    return out.get("layer_diff", out)


@pytest.fixture
def coco() -> str:
    seed_cache()
    return f"coco:{need_coco()}"


@pytest.mark.parametrize(
    ("mode", "passed", "first"), [("as-loaded", (10, 0), "convolutional_0"), ("darknet-bn", (21, 21), None)]
)
def test_layers_against_libdarknet(
    stack_python: tuple[Path, str], coco: str, tmp_path: Path, mode: str, passed: tuple[int, int], first: str | None
) -> None:
    """Golden and carried: as loaded, every batch-normalised conv diverges (the pools, the upsample and the concat
    pass in golden mode), the first at convolutional_0 with Keras' batch-norm convention named; with the variances
    folded to Darknet's divisor, all 21 units pass both ways."""
    saved = tmp_path / "tfmg"
    extra = ["darknet-bn"] if mode == "darknet-bn" else []
    assert _in_stack(stack_python, "save", str(cfg_path()), str(weights_path()), str(saved), *extra) == {
        "saved": str(saved)
    }
    result = _layer_diff(saved, coco)
    summary = result["summary"]
    assert (summary["golden"]["passed"], summary["carried"]["passed"]) == passed, summary
    assert summary["golden"]["compared"] == summary["carried"]["compared"] == 21
    for run in ("golden", "carried"):
        assert (result["first_divergent"].get(run) or {}).get("path") == first
    assert {"yolo_16", "yolo_23"} <= set(result["not_compared"])  # no Model Garden op: skipped, listed
    causes = {(c["path"], c["cause"], c.get("convention")) for c in result["causes"]}
    if first is not None:  # the named cause: Keras' batch-norm convention, fitted per channel
        assert ("convolutional_0", "batch_norm_convention", "keras") in causes
    else:
        assert not causes


def test_coco_ap_the_model_gardens_way(stack_python: tuple[Path, str], tmp_path: Path) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import yolov3_tiny
    finally:
        sys.path.remove(str(SCRIPT.parent))
    root = need_coco()
    out = tmp_path / "dets.json"
    got = _in_stack(stack_python, "detect", str(cfg_path()), str(weights_path()), str(root), str(out), "40")
    assert got["images"] == 40
    files = sorted(p.name for p in (root / "images").glob("*.jpg"))[:40]
    ap = yolov3_tiny.coco_ap(root / "annotations" / "instances_val2017_mini.json", json.loads(out.read_text()), files)
    assert ap == pytest.approx(AP_40, abs=2e-4)


AP_40 = {"AP": 0.14714, "AP50": 0.26316}
"""The Model Garden's AP / AP50 on the first 40 coco-val-mini images (measured once; all 158: 0.1228 / 0.2301,
Darknet's own 0.1260 / 0.2391)."""
