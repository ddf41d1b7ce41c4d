"""The house's number format, as pure text functions: a value in a known unit, with no task registry behind it.

:mod:`repliscope.tasks.metric_text` states the rule and looks a metric's unit up by its name (which loads the
task registry); this module holds the formatting itself, so that callers that already know the unit (the CLI's
``runs list`` at start-up, the reports' percent cells, the claim reasons) write the same text without importing
the tasks. It imports nothing of repliscope.

- ``percent``: ``88.90 %``, its 95 % interval ``[86.81, 90.71] %``, a difference ``+0.20 pp``;
- ``fraction``: ``0.3741``, ``[0.3612, 0.3857]``, ``+0.0012``;
- an unknown value (None) is ``—``.
"""

from __future__ import annotations

from typing import Literal

Unit = Literal["percent", "fraction"]
MISSING = "—"
PERCENT_DIGITS = 2
"""Decimals of a percent metric (``88.90 %``)."""
FRACTION_DIGITS = 4
"""Decimals of a fraction metric (``0.3741``)."""


def percent_text(value: float | None) -> str:
    """``value`` (a fraction, as records store it) in percent: ``0.889`` -> ``88.90 %``; ``—`` for None."""
    return MISSING if value is None else f"{100 * value:.{PERCENT_DIGITS}f} %"


def unit_value_text(unit: str, value: float | None) -> str:
    """``value`` (a fraction, as records store it) in ``unit``: ``88.90 %``, ``0.3741``; ``—`` for None."""
    if value is None:
        return MISSING
    return percent_text(value) if unit == "percent" else f"{value:.{FRACTION_DIGITS}f}"


def unit_interval_text(unit: str, low: float | None, high: float | None) -> str:
    """A 95 % interval in ``unit``: ``[86.81, 90.71] %``, ``[0.3612, 0.3857]``; ``—`` when either end is None."""
    if low is None or high is None:
        return MISSING
    if unit == "percent":
        return f"[{100 * low:.{PERCENT_DIGITS}f}, {100 * high:.{PERCENT_DIGITS}f}] %"
    return f"[{low:.{FRACTION_DIGITS}f}, {high:.{FRACTION_DIGITS}f}]"


def unit_delta_text(unit: str, delta: float | None) -> str:
    """A difference with its sign in ``unit``: ``+0.20 pp`` (percentage points), ``-0.0012``; ``—`` for None."""
    if delta is None:
        return MISSING
    return f"{100 * delta:+.{PERCENT_DIGITS}f} pp" if unit == "percent" else f"{delta:+.{FRACTION_DIGITS}f}"


def count_of(n: int, noun: str) -> str:
    """``1 object``, ``2 objects``, ``0 objects``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
