"""One number format per metric on the web pages, from the task registry's metric specs: a metric whose claims
are written in percent (``top1``) reads ``88.9 %`` with its interval ``[86.8, 90.7]``; a fraction (``AP``,
``mIoU``) reads ``0.5844`` with ``[0.5611, 0.6072]``. A metric no task names reads as a fraction."""

from __future__ import annotations

import functools

from repliscope.tasks.base import MetricSpec

MISSING = "—"


@functools.cache
def metric_specs() -> dict[str, MetricSpec]:
    """Every registered task's metric specs by metric name."""
    from repliscope.tasks.base import all_tasks

    return {spec.name: spec for task in all_tasks() for spec in task.metric_specs}


def _percent(name: str) -> bool:
    spec = metric_specs().get(name)
    return spec is not None and spec.unit == "percent"


def value_text(name: str | None, value: float | None) -> str:
    """``value`` of metric ``name`` (a fraction, as records store it) in the metric's format; ``—`` for None."""
    if name is None or value is None:
        return MISSING
    return f"{100 * value:.1f} %" if _percent(name) else f"{value:.4f}"


def interval_text(name: str | None, low: float | None, high: float | None) -> str:
    """The 95 % interval ``[low, high]`` of metric ``name`` in its format (percent without the sign); ``—``
    when either end is None."""
    if name is None or low is None or high is None:
        return MISSING
    if _percent(name):
        return f"[{100 * low:.1f}, {100 * high:.1f}]"
    return f"[{low:.4f}, {high:.4f}]"


def headline_text(name: str | None, value: float | None) -> str:
    """``top1 88.9 %``, ``AP 0.1260``, ``mIoU 0.5844``; ``—`` without a value."""
    return MISSING if name is None or value is None else f"{name} {value_text(name, value)}"


def count_of(n: int, noun: str) -> str:
    """``1 object``, ``2 objects``, ``0 objects``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
