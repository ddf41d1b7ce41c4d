"""One number format per metric on every web page (runs list, run page, models and claims pages, compare).

The house rule, from the metric's :class:`~repliscope.tasks.base.MetricSpec` (the unit its claims are written in):

- a **percent** metric (classification's ``top1``, ``top5``: ImageNet papers and timm's tables read accuracy in
  percent) reads ``88.90 %``: two decimals, so one sample of 1000 (0.10 %) and of 50,000 (0.002 %, rounded) moves
  it visibly; its 95 % interval ``[86.81, 90.71] %``; a difference ``+0.20 pp`` (percentage points);
- a **fraction** metric (detection's COCO ``AP``, ``AP50``, ..., ``AR100``; segmentation's ``mIoU``, ``fwIoU``,
  ``pixel_accuracy``: COCOeval and the segmentation toolkits print fractions, ``0.374``) reads ``0.3741``: four
  decimals, COCOeval's three plus one, because two runtimes on the same images often differ in the fourth; its
  interval ``[0.3612, 0.3857]``; a difference ``+0.0012``;
- a metric no task names: a proportion over samples (a record's ``successes`` is set) as a percent, else a
  fraction.

A claim is shown in its metric's format too: the manifest's ``AP: 0.331`` reads ``0.3310`` next to the measured
``0.3254``, never ``33.10 %``. Exports (``/api/v1/runs/export``, the samples CSV / JSON, the REST API) keep the
raw numbers as records store them (fractions, full precision): this module formats for reading only.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any

from repliscope.tasks.base import MetricSpec

if TYPE_CHECKING:
    from collections.abc import Sequence

    from repliscope.evaluation.record import EvaluationRecord
    from repliscope.pitfalls.result import VariantOutcome
    from repliscope.report.view import PitfallRow, ReportView

MISSING = "—"
PERCENT_DIGITS = 2
"""Decimals of a percent metric (``88.90 %``)."""
FRACTION_DIGITS = 4
"""Decimals of a fraction metric (``0.3741``)."""


@functools.cache
def metric_specs() -> dict[str, MetricSpec]:
    """Every registered task's metric specs by metric name."""
    from repliscope.tasks.base import all_tasks

    return {spec.name: spec for task in all_tasks() for spec in task.metric_specs}


def is_percent(name: str | None, proportion: bool = False) -> bool:
    """Whether metric ``name`` reads in percent: its spec's unit; a metric no task names when it is a
    ``proportion`` over samples (a record's ``successes`` is set)."""
    spec = metric_specs().get(name or "")
    return proportion if spec is None else spec.unit == "percent"


def value_text(name: str | None, value: float | None, proportion: bool = False) -> str:
    """``value`` of metric ``name`` (a fraction, as records store it) in the metric's format: ``88.90 %``,
    ``0.3741``; ``—`` for None."""
    if name is None or value is None:
        return MISSING
    if is_percent(name, proportion):
        return f"{100 * value:.{PERCENT_DIGITS}f} %"
    return f"{value:.{FRACTION_DIGITS}f}"


def interval_text(name: str | None, low: float | None, high: float | None, proportion: bool = False) -> str:
    """The 95 % interval of metric ``name`` in its format: ``[86.81, 90.71] %``, ``[0.3612, 0.3857]``; ``—``
    when either end is None."""
    if name is None or low is None or high is None:
        return MISSING
    if is_percent(name, proportion):
        return f"[{100 * low:.{PERCENT_DIGITS}f}, {100 * high:.{PERCENT_DIGITS}f}] %"
    return f"[{low:.{FRACTION_DIGITS}f}, {high:.{FRACTION_DIGITS}f}]"


def delta_text(name: str | None, delta: float | None, proportion: bool = False) -> str:
    """A difference of metric ``name`` with its sign: ``+0.20 pp`` (percentage points), ``-0.0012``; ``—`` for
    None."""
    if name is None or delta is None:
        return MISSING
    if is_percent(name, proportion):
        return f"{100 * delta:+.{PERCENT_DIGITS}f} pp"
    return f"{delta:+.{FRACTION_DIGITS}f}"


def headline_text(name: str | None, value: float | None) -> str:
    """``top1 88.90 %``, ``AP 0.1260``, ``mIoU 0.5844``; ``—`` without a value."""
    return MISSING if name is None or value is None else f"{name} {value_text(name, value)}"


def count_of(n: int, noun: str) -> str:
    """``1 object``, ``2 objects``, ``0 objects``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def run_view_numbers(view: ReportView, record: EvaluationRecord) -> ReportView:
    """The run page's view (built by :mod:`repliscope.report.build` for the HTML report too) with its claims' and
    metrics' numbers in this module's format: the claimed, measured values and intervals of each claim, the value
    and interval of each metric. ``view`` is the run's (``view.claims`` in ``record.claims`` order,
    ``view.metrics`` in ``record.metrics`` order); a claim of a metric no task names (a latency) keeps its
    text."""
    rows = [
        row
        if (name := claim.metric) not in metric_specs()
        else dataclasses.replace(
            row,
            claimed=value_text(name, claim.claimed),
            measured=value_text(name, claim.measured),
            interval=interval_text(name, claim.ci_low, claim.ci_high),
        )
        for row, claim in zip(view.claims, record.claims, strict=True)
    ]
    metrics = [
        dataclasses.replace(
            row,
            value=value_text(m.name, m.value, m.successes is not None),
            interval=interval_text(m.name, m.ci_low, m.ci_high, m.successes is not None),
        )
        for row, m in zip(view.metrics, record.metrics, strict=True)
    ]
    return dataclasses.replace(view, claims=rows, metrics=metrics)


def sweep_row_numbers(rows: Sequence[PitfallRow], outcomes: Sequence[VariantOutcome], metric: str) -> list[PitfallRow]:
    """A sweep's pitfall table on the run page (:func:`repliscope.report.pitfall_sections.pitfall_rows` or the
    detection rows: the reference, then each variant, in ``outcomes`` order) with its headline ``metric``
    (``top1`` or ``AP``) in this module's format: the value (and ``successes/n`` of a proportion), its interval,
    the paired difference and, for AP, the paired difference's interval (the ``p`` column of a detection sweep)."""
    out = []
    for row, outcome in zip(rows, outcomes, strict=True):
        m = outcome.metric(metric)
        if m is None:
            out.append(row)
            continue
        proportion = m.successes is not None
        count = f" ({m.successes}/{m.n})" if proportion else ""
        changes: dict[str, Any] = {
            "top1": value_text(metric, m.value, proportion) + count,
            "top1_interval": interval_text(metric, m.ci_low, m.ci_high, proportion),
        }
        if metric == "AP":
            paired = outcome.paired_task or {}
            changes["delta_top1"] = delta_text(metric, paired.get("delta_ap"))
            low, high = paired.get("delta_ap_ci_low"), paired.get("delta_ap_ci_high")
            if low is not None and high is not None:
                changes["p"] = f"[{delta_text(metric, low)}, {delta_text(metric, high)}]"
        elif outcome.paired is not None:
            changes["delta_top1"] = delta_text(metric, outcome.paired.delta_top1, proportion)
        out.append(dataclasses.replace(row, **changes))
    return out


FILTERS: dict[str, Any] = {
    "metric_value": lambda value, name, proportion=False: value_text(name, value, proportion),
    "metric_interval": lambda bounds, name, proportion=False: interval_text(name, bounds[0], bounds[1], proportion),
    "metric_delta": lambda delta, name, proportion=False: delta_text(name, delta, proportion),
}
"""The templates' filters (registered on the pages' Jinja environment): ``{{ d.a | metric_value(d.name) }}``,
``{{ d.ci_a | metric_interval(d.name) }}``, ``{{ d.delta | metric_delta(d.name) }}``."""
