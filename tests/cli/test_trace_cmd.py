"""`--trace-level` / `--trace-out` on evaluate, `repliscope trace summary`, `trace compare` and `trace export`:
Lite0 on torch and ONNX Runtime (2 foolbox images, batch 1), compared layer by layer and exported as OTLP/JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.tracing import make_tracer
from repliscope.tracing.chrome import nesting_errors
from tests.conftest import LITE0, _session_cache

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """run ids of Lite0 evaluated with --trace-level framework on torch and onnxruntime, and the ORT trace file."""
    tmp = tmp_path_factory.mktemp("traced")
    db = f"sqlite:///{tmp / 'runs.db'}"
    out: dict[str, object] = {"db": db, "file": tmp / "ort.json"}
    for rt in ("torch", "onnxruntime"):
        args = [
            "evaluate",
            str(LITE0),
            "--runtime",
            rt,
            "--limit",
            "2",
            "--batch-size",
            "1",
            "--threads",
            "1",
            "--trace-level",
            "framework",
            "--db",
            db,
        ]
        if rt == "onnxruntime":
            args += ["--trace-out", str(out["file"])]
        res = runner.invoke(app, args, env={"REPLISCOPE_CACHE": str(_session_cache(tmp_path_factory))})
        assert res.exit_code == 0, res.output
        out[rt] = re.search(r"stored as run (\w+)", res.output).group(1)  # type: ignore[union-attr]
        assert "trace (framework, " in res.output
    return out


def test_evaluate_writes_a_nested_chrome_trace_with_model_and_layer_spans(traced: dict[str, object]) -> None:
    doc = json.loads(Path(str(traced["file"])).read_text())
    assert nesting_errors(doc) == []
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    names = [e["name"] for e in spans]
    assert names.count("run") == 1 and names.count("batch") == 2 and names.count("inference") == 2
    assert names.count("onnxruntime.run") == 3  # the warm-up and the two batches
    for op in ("read", "preprocess/decode", "preprocess/resize", "preprocess/center_crop", "postprocess/topk"):
        assert op in names
    assert names.count("_blocks.3._swish#2") == 3 and "library" not in {e["cat"] for e in spans}


def test_summary_of_a_stored_run_and_of_a_file(traced: dict[str, object]) -> None:
    res = runner.invoke(app, ["trace", "summary", str(traced["onnxruntime"])[:12], "--db", str(traced["db"]), "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["source"] == "onnxruntime" and s["inferences"] == 3
    assert len(s["layers"]) == 53 and s["spans_per_level"]["application"] == 1
    assert {x["layer"] for x in s["layers"]} >= {"_blocks.3._swish", "_blocks.3._swish#2", "_blocks.3._bn2", "_fc"}
    assert sum(x["share"] for x in s["layers"]) <= 1.0 and s["op_types"][0]["op_type"] == "Conv"
    text = runner.invoke(app, ["trace", "summary", str(traced["file"]), "--top", "3"])
    assert text.exit_code == 0 and "top 3 layers" in text.output and "per op type" in text.output
    shares = re.findall(r"│ (\d{1,3}\.\d\d %) +│", text.output)  # the house's percent (number_text): 12.34 %
    assert len(shares) >= 4 and "%│" not in text.output  # 3 layers and the op types


def test_compare_torch_with_onnxruntime_names_real_layers(traced: dict[str, object]) -> None:
    res = runner.invoke(
        app, ["trace", "compare", str(traced["torch"]), str(traced["onnxruntime"]), "--db", str(traced["db"]), "--json"]
    )
    assert res.exit_code == 0, res.output
    c = json.loads(res.stdout)
    assert (c["a"]["source"], c["b"]["source"]) == ("torch", "onnxruntime")
    assert c["mapping"] == "torch layers grouped into onnxruntime layers (assign_covers)"
    rows = {x["label"]: x for x in c["layers"]}
    depthwise = rows["_blocks.3._depthwise_conv … _blocks.3._swish#2"]
    assert depthwise["covers"] == [
        "_blocks.3._depthwise_conv",
        "_blocks.3._depthwise_conv.static_padding",
        "_blocks.3._bn1",
        "_blocks.3._swish#2",
    ]
    assert depthwise["a_ms"] > 0 and depthwise["b_ms"] > 0
    assert re.fullmatch(
        r"layer _blocks\.3\._depthwise_conv … _blocks\.3\._swish#2 is \d+\.\d× (slower|faster) on "
        r"B \(onnxruntime\) \(\d+\.\d{3} ms vs \d+\.\d{3} ms\)",
        depthwise["sentence"],
    )
    assert len(c["layers"]) == 52 and c["only_a"] == [] and c["only_b"] == ["(ReorderOutput)"]
    plot = Path(str(traced["file"])).with_name("compare.png")
    text = runner.invoke(
        app,
        [
            "trace",
            "compare",
            str(traced["torch"]),
            str(traced["onnxruntime"]),
            "--db",
            str(traced["db"]),
            "--top",
            "5",
            "--plot",
            str(plot),
        ],
    )
    assert text.exit_code == 0 and "× " in text.output and "layers aligned" in text.output
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_export_a_stored_run_as_otlp_json_nested_as_its_chrome_trace(traced: dict[str, object]) -> None:
    """The stored ORT run's trace (53 layers x 3 runs) as OTLP/JSON: protobuf's strict parser reads it into an
    ExportTraceServiceRequest, one span per complete event, each with the parent its Chrome trace nests it in."""
    from repliscope.tracing.chrome import from_chrome
    from repliscope.tracing.spans import nest
    from tests.tracing.test_otlp_json import parse_otlp, spans_of

    run, db = str(traced["onnxruntime"]), str(traced["db"])
    out = Path(str(traced["file"])).with_name("ort.otlp.json")
    res = runner.invoke(app, ["trace", "export", run[:12], "--format", "otlp-json", "--out", str(out), "--db", db])
    assert res.exit_code == 0, res.output
    assert f"wrote {out} (otlp-json)" in res.output
    assert out.read_text(encoding="utf-8").count("\n") == 1  # one line: the Collector's otlpjsonfile reads it
    doc = json.loads(out.read_text(encoding="utf-8"))
    chrome = runner.invoke(app, ["trace", "export", run[:12], "--db", db])  # --format chrome, to stdout
    assert chrome.exit_code == 0, chrome.output
    records = from_chrome(json.loads(chrome.stdout))
    request = parse_otlp(doc)
    spans = spans_of(doc)
    assert len(request.resource_spans[0].scope_spans[0].spans) == len(spans) == len(records) > 150
    assert len({s["traceId"] for s in spans}) == 1 and len({s["spanId"] for s in spans}) == len(spans)
    meta = json.loads(chrome.stdout)["otherData"]
    epoch = meta["origin_ns"] + meta["epoch_offset_ns"]
    index = {(r.name, r.start_ns + epoch, r.tid): i for i, r in enumerate(records)}
    assert len(index) == len(records)  # (name, start, thread) names a span
    # protobuf's JSON mapping leaves out a default value: an ONNX node without a name has no "name"
    of = {s["spanId"]: index[(s.get("name", ""), int(s["startTimeUnixNano"]), _tid(s))] for s in spans}
    parents = nest(records)
    assert [of[s["parentSpanId"]] if "parentSpanId" in s else -1 for s in spans] == [
        parents[of[s["spanId"]]] for s in spans
    ]
    assert sum(p == -1 for p in parents) == 1  # the run holds everything
    layer = next(s for s in spans if s["name"] == "_blocks.3._swish#2")
    assert next(x for x in spans if x["spanId"] == layer["parentSpanId"])["name"] == "onnxruntime.run"
    bad = runner.invoke(app, ["trace", "export", run[:12], "--format", "jaeger", "--db", db])
    assert bad.exit_code == 2 and "unknown trace format 'jaeger' (allowed: chrome, otlp-json)" in bad.output


def _tid(span: dict[str, Any]) -> int:
    from tests.tracing.test_otlp_json import attributes_of

    return int(attributes_of(span)["thread.id"])


def test_trace_option_errors(tmp_path: Path) -> None:
    res = runner.invoke(app, ["evaluate", str(LITE0), "--trace-level", "layers"])
    assert res.exit_code == 2
    assert "unknown trace level 'layers' (allowed: none, application, model, framework, library)" in res.output
    res = runner.invoke(app, ["evaluate", str(LITE0), "--trace-out", str(tmp_path / "t.json")])
    assert res.exit_code == 2 and "--trace-out needs --trace-level above none" in res.output
    res = runner.invoke(app, ["trace", "summary", "nosuchrun"])
    assert res.exit_code == 2 and "neither a trace file nor the id of a stored trace" in res.output
    tracer = make_tracer("model", otel=False)
    with tracer.span("run", "application"), tracer.span("inference", "model"):
        pass
    path = tracer.write_chrome_trace(tmp_path / "model.json")
    res = runner.invoke(app, ["trace", "summary", str(path)])
    assert res.exit_code == 2 and "record it with --trace-level framework or library" in res.output


def test_pitfalls_traces_the_run_the_ops_and_the_layers(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    res = runner.invoke(
        app,
        [
            "pitfalls",
            str(LITE0),
            "--runtime",
            "onnxruntime",
            "--limit",
            "2",
            "--variant",
            "no_center_crop",
            "--threads",
            "1",
            "--batch-size",
            "1",
            "--trace-level",
            "framework",
            "--trace-out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    names = [e["name"] for e in spans]
    assert names.count("run") == 1 and names.count("preprocess/center_crop") == 2  # the reference only
    assert names.count("preprocess/resize") == 4 and names.count("postprocess/topk") == 4  # 2 batches x 2 plans
    inference = [e for e in spans if e["name"] == "inference"]
    assert sorted(e["args"]["variant"] for e in inference) == ["no_center_crop"] * 2 + ["reference"] * 2
    layers = {n for n in names if n.startswith("_blocks.3.")}  # ORT profiler: layer spans inside the inferences
    assert layers == {"_blocks.3._swish", "_blocks.3._swish#2", "_blocks.3._bn2"}  # the fused units, by last layer
    assert nesting_errors(doc) == []


def test_pitfalls_on_torch_traces_the_float16_variant_layer_by_layer(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    res = runner.invoke(
        app,
        [
            "pitfalls",
            str(LITE0),
            "--runtime",
            "torch",
            "--limit",
            "1",
            "--variant",
            "float16_inference",
            "--threads",
            "1",
            "--batch-size",
            "1",
            "--trace-level",
            "framework",
            "--trace-out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    spans = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]
    inference = {e["args"]["variant"]: e for e in spans if e["name"] == "inference"}
    assert set(inference) == {"reference", "float16_inference"}
    for variant, parent in inference.items():  # the module hooks of each runner, inside its own inference
        inside = [
            e
            for e in spans
            if e["name"] == "_blocks.3._depthwise_conv"
            and e["tid"] == parent["tid"]
            and parent["ts"] <= e["ts"]
            and e["ts"] + e["dur"] <= parent["ts"] + parent["dur"]
        ]
        assert len(inside) == 1, variant


def test_pitfalls_library_level_on_torch_names_the_variants_that_add_runners() -> None:
    res = runner.invoke(
        app,
        [
            "pitfalls",
            str(LITE0),
            "--runtime",
            "torch",
            "--limit",
            "1",
            "--variant",
            "threads_changed",
            "--threads",
            "1",
            "--batch-size",
            "1",
            "--schedule",
            "pipelined",
            "--trace-level",
            "library",
        ],
    )
    assert res.exit_code == 2
    assert "pitfalls: --schedule pipelined and only variants that keep the runner, i.e. not threads_changed" in (
        " ".join(res.output.split())
    )
