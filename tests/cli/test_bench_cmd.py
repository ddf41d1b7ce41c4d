"""``repliscope bench`` end to end on the embedded default (Lite0 on the foolbox images), kept short."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.bench_cmd import expand_variadic
from repliscope.cli.main import app
from repliscope.store.repository import RunStore
from tests.conftest import LITE0

runner = CliRunner(env={"COLUMNS": "200"})
SHORT = ["--min-queries", "64", "--min-duration", "0", "--warmup-queries", "2"]


def test_expand_variadic() -> None:
    names = {"torch", "onnxruntime", "opencv_dnn"}
    assert expand_variadic(
        ["m.yaml", "--runtimes", "torch", "onnxruntime", "--threads", "1", "2", "--json"], names
    ) == ["m.yaml", "--runtime", "torch", "--runtime", "onnxruntime", "--threads", "1", "--threads", "2", "--json"]
    assert expand_variadic(["--threads", "2", "m.yaml"], names) == ["--threads", "2", "m.yaml"]
    # a misspelt runtime is taken as a runtime (then reported as unknown), never as an extra argument
    assert expand_variadic(["--runtimes", "torch", "onnxrutime", "m.yml"], names) == [
        "--runtime",
        "torch",
        "--runtime",
        "onnxrutime",
        "m.yml",
    ]
    assert expand_variadic(["--runtimes", "torch", str(LITE0)], names) == ["--runtime", "torch", str(LITE0)]


def test_a_misspelt_runtime_in_runtimes_is_named_as_unknown() -> None:
    result = runner.invoke(app, ["bench", "--runtimes", "torch", "onnxrutime", str(LITE0)])
    assert result.exit_code == 2
    assert "unknown runtime 'onnxrutime'" in result.output
    assert "benchmarking" not in result.output  # checked before torch ran


def test_single_stream_json(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    result = runner.invoke(
        app,
        [
            "bench",
            str(LITE0),
            "--runtime",
            "onnxruntime",
            *SHORT,
            "--json",
            "--trace-level",
            "model",
            "--trace-out",
            str(trace),
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["scenario"], out["runtime"], out["threads"], out["queries"]) == ("single-stream", "onnxruntime", 1, 64)
    assert set(out["latency_ms"]) == {"p50", "p90", "p95", "p99", "p999"}
    lat = out["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"]
    assert out["throughput_samples_per_second"] > 0 and out["valid"] is True
    assert 0 < out["harness_overhead_us"]["latency_p50_us"] < 1000
    assert out["harness_overhead_us"]["postprocess_mean_us"] > 0 and out["latency_ends"] == "response"
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e.get("name") == "query" for e in events) == 66  # 2 warm-up + 64 measured
    queries = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "query"]
    topk = [e["ts"] for e in events if e.get("name") == "postprocess/topk"]
    assert len(topk) == 66 and not any(lo <= t <= hi for t in topk for lo, hi in queries)  # after, not in, a query
    with RunStore() as store:
        rec = store.get_benchmark(out["benchmark_id"])
        assert rec.queries == 64 and len(rec.latencies_us) == 64
        assert rec.settings["latency_ends"] == "response"
        stored = store.load_trace(out["benchmark_id"])
        assert stored is not None and sum(e.get("name") == "query" for e in stored["traceEvents"]) == 66


def test_matrix_prints_ratios() -> None:
    result = runner.invoke(
        app, ["bench", str(LITE0), "--runtimes", "onnxruntime", "opencv_dnn", "--threads", "1", *SHORT, "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [r["runtime"] for r in out["results"]] == ["onnxruntime", "opencv_dnn"]
    assert {r["matrix_id"] for r in out["results"]} == {out["matrix_id"]}
    ratios = sorted(r["ratio_to_fastest"] for r in out["ratios"])
    assert ratios[0] == 1.0 and ratios[1] >= 1.0


def test_text_output_names_the_stored_and_written_traces(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "bench",
            str(LITE0),
            "--runtimes",
            "onnxruntime",
            "opencv_dnn",
            *SHORT,
            "--trace-level",
            "model",
            "--trace-out",
            str(tmp_path / "t.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    ids = re.findall(r"stored as benchmark ([0-9a-f]{32})", result.stdout)
    assert len(ids) == 2
    for bid, rt in zip(ids, ("onnxruntime", "opencv_dnn"), strict=True):
        # 1 run + 1 warmup + (2 warm-up + 64) queries x (query, inference, softmax, topk, labels)
        assert f"trace (model, 332 spans) stored; repliscope trace summary {bid[:12]}" in result.stdout
        assert f"wrote {tmp_path / f't-{rt}-t1.json'} (open in https://ui.perfetto.dev" in result.stdout
        assert (tmp_path / f"t-{rt}-t1.json").is_file()


def test_bad_input_exits_2() -> None:
    result = runner.invoke(app, ["bench", str(LITE0), "--scenario", "server", "--target-qps", "10"])
    assert result.exit_code == 2 and "--latency-bound-ms" in result.output
    result = runner.invoke(app, ["bench", str(LITE0), "--scenario", "sever"])
    assert result.exit_code == 2 and "allowed: single-stream, multi-stream, server, offline" in result.output
    result = runner.invoke(app, ["bench", str(LITE0), "--scenario", "server", "--latency-bound-ms", "10"])
    assert result.exit_code == 2 and "needs --target-qps (or --find-peak-qps)" in result.output
    result = runner.invoke(
        app,
        [
            "bench",
            str(LITE0),
            "--scenario",
            "server",
            "--latency-bound-ms",
            "10",
            "--find-peak-qps",
            "--target-qps",
            "5",
        ],
    )
    assert result.exit_code == 2 and "drop --target-qps" in result.output
    result = runner.invoke(app, ["bench", str(LITE0), "--batch-size", "4"])
    assert result.exit_code == 2 and "--batch-size belongs to --scenario offline, not single-stream" in result.output
    result = runner.invoke(app, ["bench", str(LITE0), "--scenario", "multi-stream", "--find-peak-qps"])
    assert result.exit_code == 2 and "--find-peak-qps belongs to --scenario server" in result.output
    result = runner.invoke(app, ["bench", str(LITE0), "--trace-out", "t.json"])
    assert result.exit_code == 2 and "--trace-out needs a --trace-level" in result.output
    result = runner.invoke(app, ["bench", str(LITE0), "--report", "out.pdf"])
    assert result.exit_code == 2 and "must end in .html or .md" in result.output
    result = runner.invoke(app, ["bench", str(LITE0), "--trace-level", "kernel"])
    assert result.exit_code == 2 and "library" in result.output


def test_offline_on_an_unlabelled_folder(tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (120, 160, 3), dtype=np.uint8)).save(tmp_path / f"img{i}.jpg")
    result = runner.invoke(
        app,
        [
            "bench",
            str(LITE0),
            "--runtime",
            "onnxruntime",
            "--dataset",
            str(tmp_path),
            "--label-rule",
            "none",
            "--scenario",
            "offline",
            "--samples-per-query",
            "16",
            "--batch-size",
            "4",
            "--min-duration",
            "0",
            "--warmup-queries",
            "1",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["scenario"], out["queries"], out["samples"], out["batch_size"]) == ("offline", 1, 16, 4)
    assert out["valid"] and out["early_stopping"] is None and out["throughput_samples_per_second"] > 0


@pytest.mark.slow
def test_matrix_three_runtimes_two_thread_counts(tmp_path: Path) -> None:
    report = tmp_path / "bench.md"
    result = runner.invoke(
        app,
        [
            "bench",
            str(LITE0),
            "--runtimes",
            "torch",
            "onnxruntime",
            "opencv_dnn",
            "--threads",
            "1",
            "2",
            "--min-queries",
            "20",
            "--min-duration",
            "0",
            "--warmup-queries",
            "2",
            "--report",
            str(report),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [(r["runtime"], r["threads"]) for r in out["results"]] == [
        (rt, n) for rt in ("torch", "onnxruntime", "opencv_dnn") for n in (1, 2)
    ]
    assert min(r["ratio_to_fastest"] for r in out["ratios"]) == 1.0
    assert all(r["queries"] == 20 and not r["valid"] for r in out["results"])  # 20 < 64 for early stopping
    text = report.read_text()
    assert text.count("| torch · ") == 2 and "## Latency distribution" in text
