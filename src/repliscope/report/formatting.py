"""Number and value formatting shared by the HTML and Markdown reports (one place, so both read the same)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

DASH = "—"


def pct(x: float | None, digits: int = 1) -> str:
    """``0.9`` -> ``90.0%``; None -> an em dash."""
    return DASH if x is None else f"{100.0 * x:.{digits}f}%"


def interval(low: float | None, high: float | None, digits: int = 1) -> str:
    """``[69.9%, 97.2%]`` (a 95 % interval), or an em dash when unknown."""
    if low is None or high is None:
        return DASH
    return f"[{pct(low, digits)}, {pct(high, digits)}]"


def delta_pp(delta: float | None) -> str:
    """A difference of proportions in percentage points with its sign: ``-0.1`` -> ``-10.0 pp``."""
    return DASH if delta is None else f"{100.0 * delta:+.1f} pp"


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
