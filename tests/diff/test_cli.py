"""``repliscope diff`` through typer's CliRunner on a tiny app that calls ``register``."""

from __future__ import annotations

import json
import re
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
    passed = re.search(r"golden\s+(\d+)/(\d+) passed", res.stdout)
    assert passed is not None and passed[1] == passed[2] and int(passed[1]) >= 84, res.stdout
    assert "all layers within tolerance" in " ".join(res.stdout.split())
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


def _binary(path: Path) -> Path:
    path.write_bytes(bytes(range(256)) * 8)  # not UTF-8 from byte 128 on
    return path


def test_binary_candidate_is_an_error_not_a_traceback(app: typer.Typer, tmp_path: Path) -> None:
    onnx = _binary(tmp_path / "model.onnx")
    res = CliRunner().invoke(app, ["diff", str(LITE0), "--candidate", str(onnx), "--batch", "1"])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith("error: ") and "model.onnx" in res.stderr
    mapping = _binary(tmp_path / "mapping.yaml")
    res = CliRunner().invoke(app, ["diff", str(LITE0), "--candidate", str(tmp_path), "--layers"])
    assert res.exit_code == 2
    assert res.stderr == (f"error: Keras candidate '{tmp_path}': the mapping file '{mapping}' is not UTF-8 text "
                          "(byte 128); a mapping is YAML\n")
    res = CliRunner().invoke(app, ["diff", str(LITE0), "--candidate", str(tmp_path / "nope"), "--layers"])
    assert res.exit_code == 2 and f"candidate '{tmp_path / 'nope'}': no such file or folder" in res.stderr


@pytest.mark.parametrize("args, message", [
    (["--runtimes", "torch", "keras", "--layers"],
     "a keras candidate is a re-implementation, not a runtime: give --candidate X (a Keras port folder (model.py + "
     "mapping.yaml), its mapping .yaml, or a .keras file)"),
    (["--runtimes", "torch", "keras"],
     "unknown runtime 'keras' (allowed: onnxruntime, opencv_dnn, torch); a Keras port is compared layer by layer: "
     "--candidate PATH --layers"),
    (["--runtimes", "torch", "tflite"], "unknown runtime 'tflite'. (allowed: onnxruntime, opencv_dnn, torch)"),
    (["--runtimes", "torch", "foo", "--layers"],
     "unknown layer-diff candidate 'foo' (allowed: onnxruntime; a re-implementation: --candidate X)"),
    (["--runtimes", "torch", "--db", "sqlite:///runs.db"],
     "--runtimes takes exactly two runtime names (e.g. --runtimes torch onnxruntime); it got 'torch --db': '--db' "
     "is an option, so a runtime name is missing"),
    (["--runtimes", "torch", "onnxruntime", "opencv_dnn"],
     "RUN_A RUN_B compares two stored runs; --runtimes, --layers and --candidate need one MANIFEST (an extra "
     "argument 'opencv_dnn' was given: --runtimes takes exactly two names)"),
])
def test_runtimes_take_exactly_two_known_names(app: typer.Typer, args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["diff", str(LITE0), *args])
    assert res.exit_code == 2 and res.stderr == f"error: {message}\n"


def test_runtimes_with_one_value_is_a_usage_error(app: typer.Typer) -> None:
    res = CliRunner().invoke(app, ["diff", str(LITE0), "--runtimes", "torch"])
    assert res.exit_code == 2 and "Option '--runtimes' requires 2 arguments." in res.output


def test_candidate_with_another_runtime_is_refused(app: typer.Typer, tmp_path: Path) -> None:
    (tmp_path / "mapping.yaml").write_text("a: b\n")
    res = CliRunner().invoke(app, ["diff", str(LITE0), "--runtimes", "torch", "onnxruntime", "--candidate",
                                   str(tmp_path), "--layers"])
    assert res.exit_code == 2
    assert res.stderr == (f"error: --candidate {tmp_path} is a keras candidate: give --runtimes torch keras or "
                          "leave --runtimes out (not 'onnxruntime')\n")


def test_runtimes_diff_with_no_sample_evaluated_by_both_exits_1(tmp_path: Path) -> None:
    (tmp_path / "a_1.jpg").write_bytes(b"not an image")
    (tmp_path / "b_2.jpg").write_bytes(b"nor this")
    from repliscope.cli.main import app

    res = CliRunner().invoke(app, ["diff", str(LITE0), "--runtimes", "torch", "onnxruntime", "--dataset",
                                   str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert ("error: no sample was evaluated by both torch and onnxruntime (failed in A: 2, in B: 2): nothing to "
            "compare") in res.output
