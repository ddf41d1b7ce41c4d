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


def test_export_of_a_trace_file_and_its_errors(tmp_path: Path) -> None:
    """``trace export FILE --format otlp-json``: a foreign trace (no origin) says so in its resource; a file that is
    no Chrome trace, an unknown format and an unwritable ``--out`` are errors naming what is wrong (exit 2)."""
    from repliscope.tracing.otlp_json import UNKNOWN_EPOCH

    good = _trace(tmp_path / "a.json", True)
    res = runner.invoke(app, ["trace", "export", str(good), "--format", "otlp-json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    (resource,) = doc["resourceSpans"]
    assert {"key": "repliscope.epoch", "value": {"stringValue": UNKNOWN_EPOCH}} in resource["resource"]["attributes"]
    spans = resource["scopeSpans"][0]["spans"]
    # protobuf's JSON mapping leaves out a value at its default: the run's start time 0
    assert [(s["name"], s.get("startTimeUnixNano", "0"), "parentSpanId" in s) for s in spans] == [
        ("run", "0", False),
        ("onnxruntime.run", "10000", True),
        ("_fc", "20000", True),
    ]
    otlp = tmp_path / "otlp.json"
    otlp.write_text(res.stdout, encoding="utf-8")
    res = runner.invoke(app, ["trace", "export", str(otlp), "--format", "otlp-json"])
    assert res.exit_code == 2 and "error: not a Chrome trace: no 'traceEvents' list" in res.output
    res = runner.invoke(app, ["trace", "export", str(good), "--format", "OTLP"])
    assert res.exit_code == 2 and "unknown trace format 'OTLP' (allowed: chrome, otlp-json)" in res.output
    res = runner.invoke(app, ["trace", "export", str(good), "--out", str(good / "x.json")])
    assert res.exit_code == 2 and f"cannot write the trace '{good / 'x.json'}'" in res.output
