"""`repliscope report ID` for every stored kind: a benchmark (with its matrix siblings) and the per-layer time
of a stored trace added to a run's report by itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from tests.conftest import LITE0, _session_cache

runner = CliRunner(env={"COLUMNS": "200"})


def test_report_of_a_benchmark_shows_its_matrix_and_layer_times(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {"REPLISCOPE_CACHE": str(_session_cache(tmp_path_factory))}
    res = runner.invoke(
        app,
        [
            "bench",
            str(LITE0),
            "--runtimes",
            "onnxruntime",
            "opencv_dnn",
            "--threads",
            "1",
            "--min-queries",
            "8",
            "--min-duration",
            "0",
            "--warmup-queries",
            "1",
            "--trace-level",
            "framework",
            "--db",
            db,
            "--json",
        ],
        env=env,
    )
    assert res.exit_code == 0, res.output
    results = json.loads(res.stdout)["results"]
    out = tmp_path / "b.md"
    res = runner.invoke(
        app, ["report", results[1]["benchmark_id"][:10], "--format", "md", "--out", str(out), "--db", db]
    )
    assert res.exit_code == 0, res.output
    assert "wrote benchmark report" in res.output
    text = out.read_text()
    assert "onnxruntime" in text and "opencv_dnn" in text  # both configurations of the matrix
    assert "## Latency distribution" in text and "![latency ECDF per configuration](" in text
    assert text.count("![per-layer time (") == 2  # one chart per traced configuration
    assert text.count("data:image/png;base64,") == 3  # ECDF + two per-layer charts, embedded
    assert "The manifest makes no performance claim" in text  # Lite0 claims top-1 only: judged by evaluate


def test_report_of_a_traced_run_adds_the_per_layer_chart(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {"REPLISCOPE_CACHE": str(_session_cache(tmp_path_factory))}
    ids = []
    for level in ("framework", "model"):
        res = runner.invoke(
            app,
            [
                "evaluate",
                str(LITE0),
                "--runtime",
                "onnxruntime",
                "--limit",
                "2",
                "--batch-size",
                "1",
                "--threads",
                "1",
                "--trace-level",
                level,
                "--db",
                db,
            ],
            env=env,
        )
        assert res.exit_code == 0, res.output
        ids.append(re.search(r"stored as run (\w+)", res.output).group(1))  # type: ignore[union-attr]
    for run_id, charts in zip(ids, (1, 0), strict=True):
        out = tmp_path / f"{run_id}.md"
        res = runner.invoke(app, ["report", run_id, "--format", "md", "--out", str(out), "--db", db])
        assert res.exit_code == 0, res.output
        assert out.read_text().count("](data:image/png;base64,") == 2 + charts  # a model-level trace has no layers


def test_report_names_the_three_kinds_when_nothing_matches(tmp_path: Path) -> None:
    res = runner.invoke(app, ["report", "ffffffff", "--db", f"sqlite:///{tmp_path / 'runs.db'}"])
    assert res.exit_code == 2 and "no run, sweep, benchmark, stack matrix or diff matches 'ffffffff'" in res.output
