"""The web pages' numbers in the house's one format per metric (:mod:`repliscope.tasks.metric_text` holds the
rule; this module applies it to the run page's view, a sweep's pitfall table and the templates' filters)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from repliscope.tasks.metric_text import (
    MISSING,
    count_of,
    delta_text,
    headline_text,
    interval_text,
    is_percent,
    metric_specs,
    value_text,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from repliscope.evaluation.record import EvaluationRecord
    from repliscope.pitfalls.result import VariantOutcome
    from repliscope.report.view import PitfallRow, ReportView

__all__ = [
    "FILTERS",
    "MISSING",
    "count_of",
    "delta_text",
    "headline_text",
    "interval_text",
    "is_percent",
    "metric_specs",
    "run_view_numbers",
    "sweep_row_numbers",
    "value_text",
]


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
