"""Issue 36 item 9: one number format per metric on every web page (service/web/metric_format.py). Accuracy-like
metrics (top1, top5) in percent with two decimals; COCO AP / AR and mIoU as fractions with four; a claim in its
metric's format (an AP claim of 0.331 reads 0.3310, never 33.10 %); the templates format no metric themselves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from repliscope.service.web import metric_format as mf
from repliscope.service.web.claim_cells import claim_cell

WEB = Path(__file__).parents[2] / "src" / "repliscope" / "service" / "web"


def test_percent_metrics_read_as_percent_with_two_decimals() -> None:
    assert mf.value_text("top1", 0.889) == "88.90 %"
    assert mf.value_text("top5", 17 / 19) == "89.47 %"
    assert mf.interval_text("top1", 0.8681, 0.90712) == "[86.81, 90.71] %"
    assert mf.delta_text("top1", 0.0553) == "+5.53 pp" and mf.delta_text("top1", -0.002) == "-0.20 pp"
    assert mf.headline_text("top1", 0.889) == "top1 88.90 %"


def test_fraction_metrics_read_as_fractions_with_four_decimals() -> None:
    assert mf.value_text("AP", 0.331) == "0.3310"
    assert mf.value_text("mIoU", 0.58444) == "0.5844" and mf.value_text("pixel_accuracy", 0.9) == "0.9000"
    assert mf.interval_text("AR100", 0.36121, 0.3857) == "[0.3612, 0.3857]"
    assert mf.delta_text("AP50", 0.0012) == "+0.0012" and mf.delta_text("mIoU", -0.25) == "-0.2500"
    assert mf.headline_text("AP", 0.126) == "AP 0.1260"


def test_a_metric_no_task_names_follows_what_it_measures() -> None:
    assert mf.value_text("recall", 0.5, proportion=True) == "50.00 %"  # a proportion over samples
    assert mf.value_text("recall", 0.5) == "0.5000"
    assert mf.interval_text("recall", 0.25, 0.75, proportion=True) == "[25.00, 75.00] %"


@pytest.mark.parametrize(
    ("call", "args"),
    [
        (mf.value_text, ("top1", None)),
        (mf.value_text, (None, 0.5)),
        (mf.interval_text, ("AP", None, 0.4)),
        (mf.interval_text, ("AP", 0.3, None)),
        (mf.delta_text, ("top1", None)),
        (mf.headline_text, (None, 0.9)),
    ],
)
def test_nothing_measured_reads_as_a_dash(call: object, args: tuple[object, ...]) -> None:
    assert call(*args) == "—"  # type: ignore[operator]


def test_a_claim_reads_in_its_metrics_format_on_the_models_and_claims_pages() -> None:
    ap = claim_cell({"metric": "AP", "claimed": 0.331, "measured": 0.3254, "ci_low": 0.3101, "ci_high": 0.3402})
    assert (ap.claimed, ap.measured, ap.interval) == ("0.3310", "0.3254", "[0.3101, 0.3402]")
    top1 = claim_cell({"metric": "top1", "claimed": 0.751, "measured": 0.889, "ci_low": 0.868, "ci_high": 0.907})
    assert (top1.claimed, top1.measured, top1.interval) == ("75.10 %", "88.90 %", "[86.80, 90.70] %")


def test_the_templates_filters_are_the_rule() -> None:
    f = mf.FILTERS
    assert f["metric_value"](0.889, "top1") == "88.90 %" and f["metric_value"](None, "AP") == "—"
    assert f["metric_interval"]((0.31, 0.34), "AP") == "[0.3100, 0.3400]"
    assert f["metric_delta"](-0.0553, "top1") == "-5.53 pp"


def test_no_template_or_view_formats_a_metric_itself() -> None:
    """The places that showed metrics in their own format (``"%.4f" | format(d.a)`` on compare, ``* 100`` in the
    claim cells, ``:.4f`` in the compare of many runs) go through metric_format; what is left formats timings,
    scores of single detections and memory, not metrics."""
    metric_words = re.compile(r"\b(top1|top5|AP|mIoU|claimed|measured|ci_a|ci_b|d\.a|d\.b|d\.delta|paired_)")
    offenders = []
    for path in sorted((WEB / "templates").glob("*.html")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r'"%[+]?\.\d+f"\s*\|\s*format|\|\s*round|\*\s*100', line) and metric_words.search(line):
                offenders.append(f"{path.name}:{number}")
    for name in ("claim_cells.py", "compare_many.py"):
        text = (WEB / name).read_text()
        offenders += [f"{name}: {m}" for m in re.findall(r"value \* 100|:\.4f}\", f\"\[", text)]
    assert offenders == []


def test_a_sweeps_pitfall_table_on_the_run_page_reads_like_its_metrics_table() -> None:
    from repliscope.report import pitfall_sections as ps
    from tests.report.factories import sweep

    result = sweep()
    rows = mf.sweep_row_numbers(ps.pitfall_rows(result), [result.reference, *result.variants], "top1")
    shown = {r.name: (r.top1, r.top1_interval, r.delta_top1) for r in rows}
    assert shown["reference"] == ("90.00 % (18/20)", "[69.90, 97.21] %", "—")
    assert shown["color_layout_swapped"] == ("80.00 % (16/20)", "[58.40, 91.93] %", "-10.00 pp")
    assert shown["data_layout_bug"] == ("0.00 % (0/20)", "[0.00, 16.11] %", "-90.00 pp")
    assert shown["float16_inference"] == ("—", "—", "—")  # did not run: its dashes stay
    assert [r.p for r in rows][:3] == ["—", "0.625", "<0.0001"]  # McNemar p is not a metric: as the report has it


def test_the_html_reports_claims_table_writes_an_ap_claim_as_a_fraction() -> None:
    """The run page links the run's full HTML report (repliscope.report, which cannot import the web pages'
    module): its claims table reads an AP claim and a top-1 claim as the pages do (75.10 %, never 75.10%)."""
    from repliscope.report.sections import claim_rows

    base = {"claim_dataset": "coco/val2017", "evaluated_dataset": "coco/val2017", "verdict": "consistent"}
    ap, top1 = claim_rows(
        [
            {**base, "metric": "AP", "claimed": 0.331, "measured": 0.3254, "ci_low": 0.3101, "ci_high": 0.3402},
            {**base, "metric": "top1", "claimed": 0.751, "measured": 0.889, "ci_low": 0.868, "ci_high": 0.907},
        ]
    )
    assert (ap.claimed, ap.measured, ap.interval) == ("0.3310", "0.3254", "[0.3101, 0.3402]")
    assert (top1.claimed, top1.measured, top1.interval) == ("75.10 %", "88.90 %", "[86.80, 90.70] %")
