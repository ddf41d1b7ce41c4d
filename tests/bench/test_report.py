"""The benchmark report: configurations with ratios, performance claim cards, the ECDF figure, in HTML and MD."""

from __future__ import annotations

import re

import pytest

from repliscope.bench.record import BenchmarkRecord
from repliscope.bench.scenarios import ScenarioSettings
from repliscope.report.bench_sections import build_benchmark_view
from repliscope.report.figures import PNG_SIGNATURE, decode_png_b64
from repliscope.report.html import render_view_html
from repliscope.report.markdown import render_view_markdown
from tests.bench._fakes import UNIT, Base, run_fake


@pytest.fixture(scope="module")
def records(base: Base) -> list[BenchmarkRecord]:
    s = ScenarioSettings("single-stream", min_duration_s=0.0, min_queries=100, warmup_queries=0)
    fast, _ = run_fake(base, s, latencies=[UNIT, 2 * UNIT])
    slow, _ = run_fake(base, s, latencies=[4 * UNIT, 8 * UNIT])
    fast.matrix_id = slow.matrix_id = "matrix-1"
    return [slow, fast]


def test_view_rows_and_claims(records: list[BenchmarkRecord]) -> None:
    view = build_benchmark_view(records)
    assert view.kind == "benchmark" and view.object_id == "matrix-1"
    assert [s.id for s in view.sections] == ["claim", "bench", "latency", "provenance"]
    assert [m.count.split(" · ")[0] for m in view.metrics] == ["4.00×", "1.00×"]
    assert view.metrics[1].value == f"p90 latency (ms): {2 * UNIT * 1e3:.3f}"
    assert len(view.claims) == 8 and [c.verdict for c in view.claims] == [c.verdict for r in records for c in r.claims]
    assert view.claims[0].claimed.endswith(" ms") and view.latency is not None


def test_html_and_markdown_render(records: list[BenchmarkRecord]) -> None:
    html = render_view_html(build_benchmark_view(records))
    assert 'alt="latency ECDF per configuration"' in html and "fake · 1 thread" in html and "4.00×" in html
    pngs = re.findall(r'src="(data:image/png;base64,[^"]+)"', html)
    assert len(pngs) == 1 and decode_png_b64(pngs[0]).startswith(PNG_SIGNATURE)
    md = render_view_markdown(build_benchmark_view(records))
    assert "| fake · 1 thread | p90 latency (ms): " in md and "## Latency distribution" in md


def _layer_trace() -> dict:
    events = [
        {
            "name": "onnxruntime.run",
            "cat": "framework",
            "ph": "X",
            "ts": 0,
            "dur": 10,
            "tid": 1,
            "args": {"source": "onnxruntime"},
        },
        {
            "name": "_fc",
            "cat": "framework",
            "ph": "X",
            "ts": 2,
            "dur": 6,
            "tid": 1,
            "args": {"layer": "_fc", "op_type": "Gemm", "source": "onnxruntime"},
        },
    ]
    return {"traceEvents": events, "otherData": {"repliscope_trace_level": "framework"}}


def test_a_traced_configuration_adds_its_per_layer_chart(records: list[BenchmarkRecord]) -> None:
    view = build_benchmark_view(records, traces=[_layer_trace(), None])
    assert [s.id for s in view.sections] == ["claim", "bench", "latency", "layer-diff", "provenance"]
    assert [f.title for f in view.extra_figures] == [
        "per-layer time (onnxruntime, trace level framework) · fake · 1 thread"
    ]
    html = render_view_html(view)
    assert len(re.findall(r'src="data:image/png;base64,', html)) == 2 and "Per-layer time" in html
    untraced = build_benchmark_view(records, traces=[None, None])
    assert "layer-diff" not in [s.id for s in untraced.sections] and untraced.extra_figures == []
