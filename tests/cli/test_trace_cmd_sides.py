"""``trace compare`` names the side whose trace cannot be compared."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from repliscope.cli.main import app

runner = CliRunner(env={"COLUMNS": "200"})


def _trace(path: Path, layers: bool) -> Path:
    events = [
        {"name": "run", "cat": "application", "ph": "X", "ts": 0, "dur": 100, "tid": 1},
        {
            "name": "onnxruntime.run",
            "cat": "framework",
            "ph": "X",
            "ts": 10,
            "dur": 50,
            "tid": 1,
            "args": {"source": "onnxruntime"},
        },
    ]
    if layers:
        events.append(
            {
                "name": "_fc",
                "cat": "framework",
                "ph": "X",
                "ts": 20,
                "dur": 30,
                "tid": 1,
                "args": {"layer": "_fc", "op_type": "Gemm", "source": "onnxruntime"},
            }
        )
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    return path


def test_compare_names_the_side_without_layer_spans(tmp_path: Path) -> None:
    good, model_only = _trace(tmp_path / "a.json", True), _trace(tmp_path / "b.json", False)
    result = runner.invoke(app, ["trace", "compare", str(good), str(model_only)])
    assert result.exit_code == 2
    assert f"error: B ({model_only}): the trace has no layer spans" in result.output
    result = runner.invoke(app, ["trace", "compare", str(model_only), str(good)])
    assert f"error: A ({model_only}): the trace has no layer spans" in result.output
    result = runner.invoke(app, ["trace", "compare", str(good), str(tmp_path / "missing.json")])
    assert f"error: B ({tmp_path / 'missing.json'}): '{tmp_path / 'missing.json'}' is neither" in result.output
