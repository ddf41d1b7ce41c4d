"""The report figures of a trace (per-layer bars; A vs B bars), from exact spans."""

from __future__ import annotations

from repliscope.report.figures import PNG_SIGNATURE
from repliscope.report.trace_sections import layer_compare_chart, layer_time_chart, trace_figures
from repliscope.tracing.chrome import to_chrome
from repliscope.tracing.compare import compare_layers
from repliscope.tracing.summary import layer_times, summarize
from tests.tracing.test_summary_compare import _ort, _torch


def test_per_layer_and_compare_charts_are_pngs() -> None:
    assert layer_time_chart(summarize(_torch()), top=3).startswith(PNG_SIGNATURE)
    assert layer_compare_chart(compare_layers(layer_times(_torch()), layer_times(_ort()))).startswith(PNG_SIGNATURE)


def test_trace_figures_of_a_chrome_document() -> None:
    doc = to_chrome(_ort(), 0, thread_names={}, metadata={"repliscope_trace_level": "framework"}, pid=1)
    ((title, png),) = trace_figures(doc)
    assert title == "per-layer time (onnxruntime, trace level framework)" and png.startswith(PNG_SIGNATURE)


def test_a_trace_without_layers_has_no_figure() -> None:
    doc = to_chrome(_ort()[:1], 0, thread_names={}, metadata={}, pid=1)
    assert trace_figures(doc) == []


def test_a_run_report_with_only_trace_figures_titles_the_section_per_layer_time() -> None:
    from repliscope.report.build import _with_extra

    doc = to_chrome(_ort(), 0, thread_names={}, metadata={"repliscope_trace_level": "framework"}, pid=1)
    assert [s.title for s in _with_extra([], trace_figures(doc))] == ["Per-layer time"]
    assert [s.title for s in _with_extra([], [*trace_figures(doc), ("layer-level diff (x)", b"")])] == [
        "Layer differences"
    ]
    assert _with_extra([], None) == []
