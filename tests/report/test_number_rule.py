"""One number rule for every reader (repliscope.number_text, stated in tasks.metric_text): the HTML / Markdown
report's cells, its claim chart's labels and the claim reasons read ``88.90 %`` and ``0.3741`` as the web pages."""

from __future__ import annotations

import pytest

from repliscope import number_text
from repliscope.report import figures
from repliscope.report import formatting as fmt
from repliscope.tasks import metric_text


def test_the_pure_module_and_metric_text_are_one_rule() -> None:
    assert number_text.unit_value_text("percent", 0.889) == metric_text.value_text("top1", 0.889) == "88.90 %"
    assert number_text.unit_value_text("fraction", 0.37414) == metric_text.value_text("AP", 0.37414) == "0.3741"
    assert metric_text.unit_interval_text is number_text.unit_interval_text
    assert number_text.unit_interval_text("percent", 0.8681, 0.9071) == "[86.81, 90.71] %"
    assert number_text.unit_delta_text("percent", 0.002) == "+0.20 pp"
    assert number_text.unit_delta_text("fraction", -0.00123) == "-0.0012"
    assert number_text.count_of(1, "run") == "1 run" and number_text.count_of(2, "run") == "2 runs"


def test_the_reports_percent_cells_have_the_space_and_two_decimals() -> None:
    assert fmt.pct(0.9) == "90.00 %" and fmt.pct(None) == "—"
    assert fmt.interval(0.6989663, 0.9721335) == "[69.90, 97.21] %"
    assert fmt.delta_pp(-0.1) == "-10.00 pp"


@pytest.mark.parametrize(
    ("point", "labels"),
    [
        (
            figures.ClaimPoint("top1 on imagenet-1k/val", 0.751, 0.889, 0.868, 0.907),
            ["claimed 75.10 %", "measured 88.90 % [86.80, 90.70] %"],
        ),
        (
            figures.ClaimPoint("AP on coco/val2017", 0.331, 0.3254, 0.3101, 0.3402, unit="fraction"),
            ["claimed 0.3310", "measured 0.3254 [0.3101, 0.3402]"],
        ),
    ],
)
def test_the_claim_charts_labels_follow_the_rule(
    monkeypatch: pytest.MonkeyPatch, point: figures.ClaimPoint, labels: list[str]
) -> None:
    from matplotlib.axes import Axes

    drawn: list[str] = []
    annotate = Axes.annotate

    def recording(self: Axes, text: str, *args: object, **kwargs: object) -> object:
        drawn.append(text)
        return annotate(self, text, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Axes, "annotate", recording)
    assert figures.claim_chart([point]).startswith(b"\x89PNG")
    assert drawn == labels
