"""`repliscope diff ... --trace-level`: one tracing mechanism for diff too (task-level runtimes diff traced down
to layers on both runtimes; layer diff traced at application level; stored diffs refuse tracing)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.store.repository import RunStore
from repliscope.tracing.chrome import nesting_errors
from tests.conftest import LITE0, _session_cache

runner = CliRunner(env={"COLUMNS": "200"})


def test_runtimes_diff_traces_both_runtimes_layer_by_layer(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out, db = tmp_path / "diff.json", f"sqlite:///{tmp_path / 'runs.db'}"
    res = runner.invoke(
        app,
        [
            "diff",
            str(LITE0),
            "--runtimes",
            "torch",
            "onnxruntime",
            "--batch",
            "10",
            "--threads",
            "1",
            "--trace-level",
            "framework",
            "--trace-out",
            str(out),
            "--db",
            db,
        ],
        env={"REPLISCOPE_CACHE": str(_session_cache(tmp_path_factory))},
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    names = [e["name"] for e in spans]
    assert names.count("run") == 1 and names.count("batch") == 2  # 20 foolbox images in batches of 10
    inference = sorted(e["args"]["runtime"] for e in spans if e["name"] == "inference")
    assert inference == ["onnxruntime", "onnxruntime", "torch", "torch"]
    assert names.count("_blocks.3._depthwise_conv") == 2  # torch module hooks: one span per batch
    assert names.count("_blocks.3._bn2") == 4  # torch's module, and ORT's fused node named by its last layer
    assert names.count("postprocess/softmax") == 4 and nesting_errors(doc) == []
    diff_id = re.search(r"repliscope trace summary (diff-[0-9a-f]+)", res.output).group(1)  # type: ignore[union-attr]
    stored = RunStore(db).load_trace(diff_id)
    assert stored is not None and len(stored["traceEvents"]) == len(doc["traceEvents"])


def test_layer_diff_records_the_run_span(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    out = tmp_path / "layers.json"
    res = runner.invoke(
        app,
        [
            "diff",
            str(LITE0),
            "--layers",
            "--batch",
            "2",
            "--mode",
            "golden",
            "--trace-level",
            "application",
            "--trace-out",
            str(out),
            "--db",
            f"sqlite:///{tmp_path / 'runs.db'}",
        ],
        env={"REPLISCOPE_CACHE": str(_session_cache(tmp_path_factory))},
    )
    assert res.exit_code == 0, res.output
    spans = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["args"]["command"]) for e in spans] == [("run", "diff")]


def test_stored_runs_diff_refuses_tracing(tmp_path: Path) -> None:
    res = runner.invoke(app, ["diff", "aaaa", "bbbb", "--trace-level", "model"])
    assert res.exit_code == 2 and "comparing two stored runs runs nothing" in res.output
    res = runner.invoke(app, ["diff", str(LITE0), "--runtimes", "torch", "onnxruntime", "--trace-level", "deep"])
    assert res.exit_code == 2 and "unknown trace level 'deep'" in res.output
