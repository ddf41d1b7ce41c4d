"""The data of a metric chart across stored runs: each run's value of one metric (with the 95 % interval its record
states) grouped by runtime, stack, framework version, sweep variant, dataset or model, and the claims of that
metric the charted runs were judged against. What ``/charts`` and ``repliscope runs chart`` draw
(:mod:`repliscope.report.run_charts`); plain dataclasses, no ORM row leaves this module.

A metric belongs to one task (``top1`` to image classification, ``AP`` to object detection, ``mIoU`` to semantic
segmentation, ...): the runs charted are that task's (their stored headline metric is the task's), newest first,
at most :data:`MAX_CHART_RUNS` of them; how many more matched is said, never dropped silently.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from packaging.version import InvalidVersion, Version
from sqlalchemy import Integer, bindparam, func, select

from repliscope.records.stack import CURRENT
from repliscope.store.errors import InvalidInputError
from repliscope.store.models import RunRow
from repliscope.store.runs import RunQuery, _run_query_params, _runs_statements

MAX_CHART_RUNS = 500
"""The most runs one chart draws (the newest; the chart says how many more matched)."""
MAX_CLAIM_LINES = 8
"""The most distinct claims drawn as reference lines (the chart says how many more there were)."""

GROUPINGS: dict[str, str] = {
    "runtime": "Runtime",
    "stack": "Software stack",
    "framework_version": "Framework version",
    "variant": "Sweep variant",
    "dataset": "Dataset",
    "model": "Model",
}
"""What the x axis groups runs by -> its label."""

NOT_RECORDED = "not recorded"
PLAIN_RUN = "plain run"
"""The variant group of a run that is no sweep variant."""


@dataclass(frozen=True)
class ChartMetric:
    """A metric a chart may plot: its task, how it is written (``percent``: 88.9 %; ``fraction``: 0.5844), which way
    is better, and whether it is its task's headline metric (the runs list's column)."""

    name: str
    task: str
    unit: str
    direction: str
    headline: bool


@functools.cache
def chart_metrics() -> dict[str, ChartMetric]:
    """Every registered task's metrics by name, tasks in registry order (each task's headline first)."""
    from repliscope.tasks.base import all_tasks

    found: dict[str, ChartMetric] = {}
    for task in all_tasks():
        for i, spec in enumerate(task.metric_specs):
            found.setdefault(spec.name, ChartMetric(spec.name, task.name, spec.unit, spec.direction, i == 0))
    return found


def chart_metric(name: str) -> ChartMetric:
    """The metric ``name``; another name is an :class:`InvalidInputError` (field ``metric``) naming the allowed."""
    metrics = chart_metrics()
    if name not in metrics:
        raise InvalidInputError(f"unknown metric {name[:60]!r} (allowed: {', '.join(metrics)})", "metric")
    return metrics[name]


def check_grouping(by: str) -> str:
    """``by`` when it is one of :data:`GROUPINGS`, else an :class:`InvalidInputError` (field ``by``)."""
    if by not in GROUPINGS:
        raise InvalidInputError(f"unknown grouping {by[:60]!r} (allowed: {', '.join(GROUPINGS)})", "by")
    return by


@dataclass(frozen=True)
class ChartPoint:
    """One run on the chart: its value of the metric (a fraction, as records store it) and 95 % interval."""

    run_id: str
    created_at: datetime
    group: str
    value: float
    low: float | None
    high: float | None
    model: str
    runtime: str
    dataset: str
    variant: str | None


@dataclass(frozen=True)
class ChartClaim:
    """A claim of the metric (a fraction) that charted runs of ``model`` were judged against; ``source`` as
    the manifest states it."""

    model: str
    value: float
    source: str


@dataclass(frozen=True)
class ChartData:
    """A chart's data. ``points`` in group order, each group's runs oldest first; ``matched``: the task's runs
    the filters matched; ``read``: how many of them (the newest) were read, at most ``limit``; ``without_value``:
    read runs with no value of the metric (every sample failed), not drawn; ``claims_left_out``: distinct claims
    past :data:`MAX_CLAIM_LINES`."""

    metric: ChartMetric
    by: str
    groups: tuple[str, ...]
    points: tuple[ChartPoint, ...]
    claims: tuple[ChartClaim, ...]
    matched: int
    read: int
    limit: int
    without_value: int
    claims_left_out: int

    @property
    def more(self) -> int:
        """Runs that matched but were not read (past ``limit``)."""
        return self.matched - self.read


def _group_expression(by: str) -> Any:
    if by == "stack":
        return RunRow.record[("software", "stack")]  # {"key", "spec", "python", "prefix", "lock_sha256"}
    return {
        "runtime": RunRow.runtime,
        "framework_version": RunRow.framework_version,
        "variant": RunRow.variant,
        "dataset": RunRow.dataset_name,
        "model": RunRow.manifest_version,
    }[by]


def _group_label(by: str, raw: Any, runtime: str, model: str) -> str:
    if by == "variant":
        return PLAIN_RUN if raw is None else str(raw)
    if by == "stack":
        return _stack_label(raw)
    if raw is None or raw == "":
        return NOT_RECORDED
    if by == "framework_version":
        return f"{runtime} {raw}"
    if by == "model":
        return f"{model}@{raw}"
    return str(raw)


def _stack_label(stack: Any) -> str:
    """A record's ``software["stack"]`` as a group: a provisioned stack's key; the environment that is no stack
    (key ``current``) with the first 8 hex digits of its installed packages' hash, so two different environments
    stay apart (``current 1a2b3c4d``); not recorded (older records)."""
    if not isinstance(stack, dict) or not stack.get("key"):
        return NOT_RECORDED
    key = str(stack["key"])
    if key == CURRENT and stack.get("lock_sha256"):
        return f"{key} {str(stack['lock_sha256'])[:8]}"
    return key


def _group_key(by: str, label: str) -> tuple[Any, ...]:
    """Sort key of a group: framework versions in version order (per runtime), the rest by name; the missing
    group last, and a sweep's reference first among its variants."""
    if label in (NOT_RECORDED, PLAIN_RUN):
        return (2, label)
    if by == "variant" and label == "reference":
        return (0, "")
    if by == "framework_version":
        runtime, _, version = label.rpartition(" ")
        try:
            return (1, runtime, 0, Version(version), "")
        except InvalidVersion:
            return (1, runtime, 1, Version("0"), version)
    return (1, label)


def _filter_conditions(params: Mapping[str, Any]) -> list[Any]:
    """The WHERE conditions of the :class:`RunQuery` filters set in ``params``: the runs list's own
    (:func:`repliscope.store.runs._runs_statements`), so a chart and the runs list match the same runs."""
    filtered = tuple(sorted(k for k in params if not k.startswith("_")))
    page, _count = _runs_statements(("run_id",), "-created_at", filtered)
    return [] if page.whereclause is None else [page.whereclause]


def _metric_of(metrics: Any, name: str) -> tuple[float | None, float | None, float | None]:
    for m in metrics if isinstance(metrics, list) else []:
        if isinstance(m, dict) and m.get("name") == name:
            return m.get("value"), m.get("ci_low"), m.get("ci_high")
    return None, None, None


def chart_data(
    store: Any, metric: str, by: str, filters: RunQuery | None = None, limit: int = MAX_CHART_RUNS
) -> ChartData:
    """The newest ``limit`` (1..:data:`MAX_CHART_RUNS`) runs of ``metric``'s task matching ``filters`` (the runs
    list's filters), grouped by ``by`` (:data:`GROUPINGS`), with the claims of ``metric`` they were judged
    against. ``store``: a :class:`~repliscope.store.repository.RunStore`. Bad input is an
    :class:`InvalidInputError` naming the field and the allowed values."""
    spec = chart_metric(metric)
    check_grouping(by)
    if not 1 <= limit <= MAX_CHART_RUNS:
        raise InvalidInputError(f"limit {limit} must be 1..{MAX_CHART_RUNS}", "limit")
    params = _run_query_params(filters or RunQuery(), "-created_at", 1, limit)
    headline = next(m.name for m in chart_metrics().values() if m.task == spec.task and m.headline)
    params["_headline"] = headline
    where = [*_filter_conditions(params), RunRow.metric_name == bindparam("_headline")]
    columns: list[Any] = [
        RunRow.run_id,
        RunRow.created_at,
        RunRow.manifest_name,
        RunRow.runtime,
        RunRow.dataset_name,
        RunRow.variant,
        _group_expression(by),
    ]
    columns += (
        [RunRow.metric_value, RunRow.metric_low, RunRow.metric_high] if spec.headline else [RunRow.record["metrics"]]
    )
    columns.append(RunRow.record["claims"])
    query = (
        select(*columns)
        .where(*where)
        .order_by(RunRow.created_at.desc(), RunRow.run_id.desc())
        .limit(bindparam("_limit", type_=Integer))
    )
    count = select(func.count()).select_from(RunRow).where(*where)
    with store.db.session() as session:
        connection = session.connection()
        rows = connection.execute(query, params).all()
        matched = len(rows) if len(rows) < limit else int(connection.scalar(count, params) or 0)
    points: list[ChartPoint] = []
    claims: dict[tuple[str, float], ChartClaim] = {}
    without = 0
    for row in reversed(rows):  # oldest first
        run_id, created_at, model, runtime, dataset, variant, raw_group, *values, run_claims = row
        value, low, high = values if spec.headline else _metric_of(values[0], metric)
        for c in run_claims if isinstance(run_claims, list) else []:
            if isinstance(c, dict) and c.get("metric") == metric and isinstance(c.get("claimed"), int | float):
                claimed = float(c["claimed"])
                claims.setdefault((model, claimed), ChartClaim(model, claimed, str(c.get("source") or "")))
        if value is None:
            without += 1
            continue
        label = _group_label(by, raw_group, runtime, model)
        points.append(ChartPoint(run_id, created_at, label, float(value), low, high, model, runtime, dataset, variant))
    groups = tuple(sorted({p.group for p in points}, key=lambda g: _group_key(by, g)))
    order = {g: i for i, g in enumerate(groups)}
    points.sort(key=lambda p: order[p.group])  # stable: oldest first within a group
    shown = sorted(claims.values(), key=lambda c: (c.model, c.value))
    return ChartData(
        metric=spec,
        by=by,
        groups=groups,
        points=tuple(points),
        claims=tuple(shown[:MAX_CLAIM_LINES]),
        matched=matched,
        read=len(rows),
        limit=limit,
        without_value=without,
        claims_left_out=max(0, len(shown) - MAX_CLAIM_LINES),
    )
