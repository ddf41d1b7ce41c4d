"""``repliscope diff`` through typer's CliRunner on a tiny app that calls ``register``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from repliscope.cli.diff_cmd import register
from repliscope.store.repository import RunStore
from tests.conftest import LITE0
from tests.diff._records import pair


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def version() -> None:  # a second command, so "diff" stays a sub-command as in the real CLI
        print("0")

    register(app)
    return app


def test_two_records(app: typer.Typer, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    a, b = pair()
    with RunStore(url) as store:
        store.save(a)
        store.save(b)
    res = CliRunner().invoke(app, ["diff", a.run_id[:8], b.run_id, "--db", url, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["kind"] == "task_diff" and data["agreements"] == 3 and len(data["flips"]) == 1
    human = CliRunner().invoke(app, ["diff", a.run_id, b.run_id, "--db", url])
    assert human.exit_code == 0 and "1 flipped" in human.stdout and "s2" in human.stdout


def test_layers_golden_with_plot(app: typer.Typer, tmp_path: Path) -> None:
    png = tmp_path / "layers.png"
    res = CliRunner().invoke(app, ["diff", str(LITE0), "--runtimes", "torch", "onnxruntime", "--layers",
                                   "--mode", "golden", "--batch", "2", "--plot", str(png)])
    assert res.exit_code == 0, res.output
    assert "84/84 passed" in res.stdout and "all layers within tolerance" in res.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args, message", [
    (["not-a-file.yaml"], "is not a manifest file"),
    ([str(LITE0), "--layers", "--mode", "fast"], "--mode must be"),
    ([str(LITE0), "--runtimes", "onnxruntime", "torch", "--layers"], "reference must be torch"),
    ([str(LITE0)], "give --runtimes A B"),
])
def test_errors_exit_2(app: typer.Typer, args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["diff", *args])
    assert res.exit_code == 2 and message in res.stderr
