"""Issue 36 item 8 (charts): the layout and SVG of :mod:`repliscope.report.run_charts`: where each run's point and
interval bar go, the claim line, the links and labels; a sweep's parallel coordinates (axes, one line per run,
the reference and the chosen run marked)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime

import pytest

from repliscope.pitfalls.result import SweepResult
from repliscope.report.run_charts import (
    DEFAULT,
    metric_chart_svg,
    metric_layout,
    nice_ticks,
    parallel_layout,
    parallel_svg,
    sweep_parallel,
    table_rows,
)
from repliscope.store.errors import InvalidInputError
from repliscope.store.run_charts import ChartClaim, ChartData, ChartPoint, chart_metrics
from tests.report.factories import SWEEP_ID, VARIANT_RUN_IDS, sweep

NS = {"s": "http://www.w3.org/2000/svg"}


def point(run_id: str, group: str, value: float, low: float | None, high: float | None) -> ChartPoint:
    return ChartPoint(run_id, datetime(2026, 1, 1), group, value, low, high, "m", "onnxruntime", "d", None)


def data() -> ChartData:
    return ChartData(
        metric=chart_metrics()["top1"],
        by="runtime",
        groups=("onnxruntime", "torch"),
        points=(
            point("a" * 32, "onnxruntime", 0.9, 0.8, 0.95),
            point("b" * 32, "onnxruntime", 0.5, 0.4, 0.6),
            point("c" * 32, "torch", 0.7, None, None),
        ),
        claims=(ChartClaim("m", 0.75, "paper"),),
        matched=3,
        read=3,
        limit=500,
        without_value=0,
        claims_left_out=0,
    )


def test_nice_ticks() -> None:
    assert nice_ticks(0.4, 0.95) == [0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(0.0, 1.0) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert nice_ticks(0.5, 0.5) == [0.46, 0.48, 0.5, 0.52, 0.54]  # a single value: padded by 5 %


def test_each_run_is_placed_in_its_groups_band_at_its_value() -> None:
    layout = metric_layout(data())
    assert (layout.left, layout.top, layout.right, layout.bottom) == (72.0, 24.0, 952.0, 324.0)
    assert [b[0] for b in layout.bands] == ["onnxruntime", "torch"]
    assert [(t[1]) for t in layout.y_ticks] == ["40", "60", "80", "100"]

    def y(v: float) -> float:  # ticks 0.4 .. 1.0 over 300 units
        return round(324 - (v - 0.4) / 0.6 * 300, 2)

    a, b, c = layout.points
    assert (a.x, b.x, c.x) == (218.67, 365.33, 732.0)  # thirds of the first band (72..512), the middle of the second
    assert (a.y, a.y_low, a.y_high) == (y(0.9), y(0.8), y(0.95))
    assert b.y == y(0.5) and c.y_low is None and c.y_high is None
    assert layout.claim_lines == ((y(0.75), "claim m 75.00 %"),)
    assert a.label.startswith(f"run {'a' * 12}, onnxruntime: top1 90.00 % [80.00, 95.00] %")


def test_the_svg_has_a_title_a_desc_and_a_labelled_link_per_run() -> None:
    svg = ET.fromstring(metric_chart_svg(data(), lambda r: f"/runs/{r}", key="k"))
    assert svg.get("aria-labelledby") == "k-title k-desc"
    assert svg.find("s:title", NS).text == "top1 by runtime: 3 runs"  # type: ignore[union-attr]
    assert "95 % interval" in svg.find("s:desc", NS).text  # type: ignore[union-attr,operator]
    links = svg.findall(".//s:a", NS)
    assert [a.get("href") for a in links] == [f"/runs/{x * 32}" for x in "abc"]
    assert all(a.get("aria-label") and a.find("s:circle", NS) is not None for a in links)
    bar = links[0].find("s:path", NS)  # the interval bar from 0.8 to 0.95 and its caps
    assert bar is not None and bar.get("d") == "M218.67 124V49M214.67 124h8M214.67 49h8"
    assert links[2].find("s:path", NS) is None  # no interval, no bar
    claim = svg.find(".//s:g[@class='claims']/s:text", NS)
    assert claim is not None and claim.text == "claim m 75.00 %"
    unlinked = ET.fromstring(metric_chart_svg(data()))  # the CLI's file: no links, the same labels as titles
    assert unlinked.findall(".//s:a", NS) == [] and len(unlinked.findall(".//s:g[@class='point']", NS)) == 3


def test_text_in_the_svg_is_escaped() -> None:
    hostile = "<script>alert(1)</script>"
    d = data()
    d = ChartData(
        **{**d.__dict__, "groups": (hostile, "torch"), "points": (point("a" * 32, hostile, 0.9, None, None),)}
    )
    text = metric_chart_svg(d, lambda r: f"/runs/{r}")
    assert "<script>" not in text and "&lt;script&gt;" in text


def parameter_sweep() -> SweepResult:
    """The factory sweep with degrees: two variants at a scale, one at an offset."""
    s = sweep()
    s.variants[0].params = {"scale": 0.5}
    s.variants[1].params = {"scale": 2}
    s.variants[2].params = {"offset": [1, 0]}
    return s


def test_a_sweeps_parallel_coordinates_have_an_axis_per_varied_parameter_and_a_line_per_run() -> None:
    pc = sweep_parallel(parameter_sweep())
    assert [(a.name, a.kind) for a in pc.axes] == [
        ("variant", "category"),
        ("scale", "number"),
        ("offset", "category"),
        ("top1", "number"),
    ]
    assert pc.axes[1].values == (DEFAULT,) and (pc.axes[1].low, pc.axes[1].high) == (0.5, 2.0)
    assert pc.axes[2].values == (DEFAULT, "[1, 0]")
    assert [(x.variant, x.metric, x.reference) for x in pc.lines] == [
        ("reference", 0.9, True),
        ("color_layout_swapped", 0.8, False),
        ("data_layout_bug", 0.0, False),
        ("no_center_crop", 0.85, False),
    ]
    assert [name for name, _ in pc.left_out] == ["resize_antialias_off", "float16_inference"]
    assert table_rows(pc)[1] == ["color_layout_swapped", "0.5", DEFAULT, "80.00 % [58.40, 91.93] %"]
    plain = sweep_parallel(sweep(), "top5")  # no degrees: the variant and the metric only
    assert [a.name for a in plain.axes] == ["variant", "top5"]
    with pytest.raises(InvalidInputError) as bad:
        sweep_parallel(sweep(), "AP")
    assert bad.value.field == "metric" and "(allowed: top1, top5)" in str(bad.value)


def test_the_parallel_lines_go_through_each_runs_values_and_mark_the_reference_and_the_chosen_run() -> None:
    pc = sweep_parallel(parameter_sweep())
    chosen = VARIANT_RUN_IDS["data_layout_bug"]
    layout = parallel_layout(pc, chosen)
    assert [name for name, _x, _t in layout.axes] == ["variant", "scale", "offset", "top1 (%)"]
    xs = [x for _n, x, _t in layout.axes]
    assert xs == [150.0, 320.0, 490.0, 660.0]
    ref, swapped, bug, _no_crop = layout.lines
    assert ref.reference and not ref.chosen and bug.chosen and not swapped.reference
    assert [x for x, _y in bug.points] == xs
    assert ref.points[1][1] == layout.bottom  # the reference has no scale: the axis' default slot
    assert bug.points[1][1] == layout.top  # the largest scale at the top
    svg = ET.fromstring(parallel_svg(pc, lambda r: f"/runs/{r}", chosen))
    links = svg.findall(".//s:a", NS)
    assert len(links) == 4 and len(svg.findall(".//s:polyline[@class='pc-path']", NS)) == 4
    assert [a.get("class") for a in links][-2:] == ["pc-line reference", "pc-line chosen"]  # drawn on top
    assert {a.get("href") for a in links} == {f"/runs/{r}" for r in VARIANT_RUN_IDS.values()}
    assert svg.find("s:title", NS).text == f"Parallel coordinates of sweep {SWEEP_ID[:12]}: 4 runs, top1"  # type: ignore[union-attr]
