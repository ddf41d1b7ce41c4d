"""``repliscope diff MANIFEST --candidate PORT --layers`` on the darknet manifest from the command line: ``--limit``
takes the first N samples, and with ``--json`` every error is one JSON object on stdout (exit 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from repliscope.cli.main import app
from tests.diff.layers._darknet_port import converted_port, edit_port, swap_route_inputs
from tests.yolo._assets import DARKNET_DATA, MANIFEST, need_darknet, seed_cache


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_darknet()
    folder = tmp_path_factory.mktemp("images")
    shutil.copy(DARKNET_DATA / "dog.jpg", folder / "dog_0.jpg")  # a name the detection label rule accepts
    shutil.copy(DARKNET_DATA / "eagle.jpg", folder / "eagle_1.jpg")
    return folder


def _error(res: Result) -> dict[str, object]:
    out = res.stdout
    assert res.exit_code == 2, out
    doc = json.loads(out)
    assert set(doc) == {"error", "exit_code"} and doc["exit_code"] == 2
    return doc


def test_limit_and_json_with_a_swapped_route(images: Path, tmp_path: Path) -> None:
    """The port with route_20's inputs swapped, on the first sample only (--limit 1): exit 1, golden and carried
    both first divergent at route_20. One libdarknet + Keras diff of one image through the whole command (~3-4 s:
    libdarknet loads and runs, the port loads)."""
    pytest.importorskip("keras")
    seed_cache()
    bad = edit_port(converted_port(), tmp_path / "swapped.keras", swap_route_inputs)
    base = ["diff", str(MANIFEST), "--layers", "--dataset", str(images), "--json", "--no-store"]
    res = CliRunner().invoke(app, [*base, "--candidate", str(bad), "--limit", "1"])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert doc["samples"] == ["dog_0.jpg"] and doc["input_shape"] == [1, 3, 416, 416]
    assert doc["first_divergent"]["golden"]["path"] == doc["first_divergent"]["carried"]["path"] == "route_20"


def test_json_errors_are_one_object_on_stdout(images: Path, tmp_path: Path) -> None:
    """Refused before anything runs; each message names the option and what is allowed."""
    base = ["diff", str(MANIFEST), "--dataset", str(images), "--json", "--no-store"]
    runner = CliRunner()
    doc = _error(runner.invoke(app, [*base, "--layers", "--candidate", str(tmp_path / "gone.keras")]))
    assert "gone.keras" in str(doc["error"]) and "no such file or folder" in str(doc["error"])
    doc = _error(runner.invoke(app, [*base, "--layers", "--limit", "2", "--batch", "3"]))
    assert doc["error"] == (
        "--limit 2 and --batch 3: a layer diff compares one batch of the first samples; give one of them "
        "(--limit N: the first N samples)"
    )
    doc = _error(runner.invoke(app, [*base, "--runtimes", "torch", "onnxruntime", "--limit", "2"]))
    assert "--limit with it, --augment, --loss or --layers" in str(doc["error"])
    doc = _error(runner.invoke(app, [*base, "--layers", "--mode", "gold"]))
    assert doc["error"] == "--mode must be golden, carried or both, not 'gold'"
