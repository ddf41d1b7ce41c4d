"""Number and value formatting shared by the HTML and Markdown reports (one place, so both read the same; the
metrics' numbers follow the house's rule, :mod:`repliscope.tasks.metric_text`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from repliscope.number_text import MISSING, percent_text, unit_delta_text, unit_interval_text

DASH = MISSING


def pct(x: float | None) -> str:
    """A proportion in percent, the house's format (:mod:`repliscope.number_text`): ``0.9`` -> ``90.00 %``; None ->
    an em dash."""
    return percent_text(x)


def interval(low: float | None, high: float | None) -> str:
    """A 95 % interval of a proportion in percent: ``[69.90, 97.21] %``, or an em dash when unknown."""
    return unit_interval_text("percent", low, high)


def delta_pp(delta: float | None) -> str:
    """A difference of proportions in percentage points with its sign: ``-0.1`` -> ``-10.00 pp``."""
    return unit_delta_text("percent", delta)


def p_value(p: float | None) -> str:
    """Three significant digits; below 1e-4 as ``<0.0001``."""
    if p is None:
        return DASH
    if p < 1e-4:
        return "<0.0001"
    return f"{p:.3g}"


def kl(value: float | None) -> str:
    """Mean KL divergence in nats, four decimals."""
    return DASH if value is None else f"{value:.4f}"


def seconds(value: float | None) -> str:
    """Seconds with three significant digits (``0.639 s``)."""
    return DASH if value is None else f"{value:.3g} s"


def short_hash(value: str | None, n: int = 12) -> str:
    return DASH if not value else value[:n]


def scalar(value: Any) -> str:
    """A provenance value as text: None -> ``—``, booleans lower case, lists comma separated, dicts as JSON."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | tuple):
        return (
            ", ".join(scalar(v) for v in value)
            if all(not isinstance(v, dict) for v in value)
            else json.dumps(value, default=str)
        )
    if isinstance(value, dict):
        return json.dumps(value, default=str, sort_keys=True)
    return str(value)


def flatten(mapping: Mapping[str, Any], prefix: str = "", skip: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """Nested dicts as ``(a.b, text)`` pairs in insertion order; lists stay one value; ``skip`` top-level keys."""
    rows: list[tuple[str, str]] = []
    for key, value in mapping.items():
        if not prefix and key in skip:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            rows.extend(flatten(value, prefix=f"{name}."))
        else:
            rows.append((name, scalar(value)))
    return rows


def runtime_seconds_note(options: Mapping[str, Any]) -> str:
    """``" summed over 2 workers"`` when a run's runtime time adds up parallel workers (``data_parallel`` with more
    than one worker: it can exceed the measured loop's wall time), else ``""``."""
    plan = options.get("plan") or {}
    workers = plan.get("workers") if isinstance(plan, Mapping) else None
    if options.get("schedule") == "data_parallel" and isinstance(workers, int) and workers > 1:
        return f" summed over {workers} workers"
    return ""
