"""One number format per metric, for every place that writes a metric for reading (web pages, charts, reports).

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
``0.3254``, never ``33.10 %``. Exports (the REST API, the samples CSV / JSON) keep the raw numbers as records store
them (fractions, full precision): this module formats for reading only. Functions taking ``unit`` (``"percent"`` or
``"fraction"``) serve callers that already know it (charts); the others look the unit up by metric name. The
``unit_*`` functions live in :mod:`repliscope.number_text` (no task registry behind them, for callers that know the
unit without loading the tasks, such as the CLI's ``runs list``) and are handed on from here.
"""

from __future__ import annotations

import functools

from repliscope.number_text import (
    FRACTION_DIGITS,
    MISSING,
    PERCENT_DIGITS,
    Unit,
    count_of,
    unit_delta_text,
    unit_interval_text,
    unit_value_text,
)
from repliscope.tasks.base import MetricSpec

__all__ = [
    "FRACTION_DIGITS",
    "MISSING",
    "PERCENT_DIGITS",
    "Unit",
    "count_of",
    "delta_text",
    "headline_text",
    "interval_text",
    "is_percent",
    "metric_specs",
    "unit_delta_text",
    "unit_interval_text",
    "unit_of",
    "unit_value_text",
    "value_text",
]


@functools.cache
def metric_specs() -> dict[str, MetricSpec]:
    """Every registered task's metric specs by metric name."""
    from repliscope.tasks.base import all_tasks

    return {spec.name: spec for task in all_tasks() for spec in task.metric_specs}


def unit_of(name: str | None, proportion: bool = False) -> Unit:
    """The unit metric ``name`` reads in: its spec's; for a metric no task names, percent when it is a
    ``proportion`` over samples (a record's ``successes`` is set), else fraction."""
    spec = metric_specs().get(name or "")
    if spec is None:
        return "percent" if proportion else "fraction"
    return "percent" if spec.unit == "percent" else "fraction"


def is_percent(name: str | None, proportion: bool = False) -> bool:
    """Whether metric ``name`` reads in percent (:func:`unit_of`)."""
    return unit_of(name, proportion) == "percent"


def value_text(name: str | None, value: float | None, proportion: bool = False) -> str:
    """``value`` of metric ``name`` in the metric's format; ``—`` for None (or no name)."""
    return MISSING if name is None else unit_value_text(unit_of(name, proportion), value)


def interval_text(name: str | None, low: float | None, high: float | None, proportion: bool = False) -> str:
    """The 95 % interval of metric ``name`` in its format; ``—`` when either end is None (or no name)."""
    return MISSING if name is None else unit_interval_text(unit_of(name, proportion), low, high)


def delta_text(name: str | None, delta: float | None, proportion: bool = False) -> str:
    """A difference of metric ``name`` in its format; ``—`` for None (or no name)."""
    return MISSING if name is None else unit_delta_text(unit_of(name, proportion), delta)


def headline_text(name: str | None, value: float | None) -> str:
    """``top1 88.90 %``, ``AP 0.1260``, ``mIoU 0.5844``; ``—`` without a value."""
    return MISSING if name is None or value is None else f"{name} {value_text(name, value)}"
