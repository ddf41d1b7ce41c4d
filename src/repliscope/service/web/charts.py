"""The chart pages (issue 36 item 8): ``/charts``, a metric across stored runs grouped by runtime, stack, framework
version, variant, dataset or model, with the runs list's filters; ``/sweeps/{id}/parallel``, the parallel
coordinates of a pitfall sweep (one axis for the variant, one per varied parameter, one for the metric).

The data come from the core (:func:`repliscope.store.run_charts.chart_data`,
:func:`repliscope.report.run_charts.sweep_parallel`), the SVG from :mod:`repliscope.report.run_charts` (the same
code ``repliscope runs chart`` writes a file with): inline, no script, each point or line a link to its run, the
values again in a table below. Signed-in viewers (any role) read them; every query parameter is checked (an
unknown one, metric or grouping is a 422 naming the allowed values; values are bounded).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from repliscope.errors import StoreError
from repliscope.service.web import page_kit as kit
from repliscope.service.web import views
from repliscope.service.web.page_kit import (
    DATE_FILTERS,
    MAX_SEARCH_CHARS,
    SignedIn,
)

router = APIRouter(include_in_schema=False)

MAX_VALUE_CHARS = 300
"""The longest filter value taken (a model name, a runtime, ...)."""
TEXT_FILTERS = views.RUN_FILTERS
"""The runs page's filters, the same fields (model, version, runtime, ..., sweep_id)."""
LISTED_FILTERS = ("model", "version", "runtime", "framework_version", "dataset", "hardware", "kind", "verdict")
"""The filters whose form field lists the stored values; any other one set (a sweep, a tag) shows as its value."""
CHART_PARAMS = ("metric", "by", "task", "limit", "search", *TEXT_FILTERS, *DATE_FILTERS)
PARALLEL_PARAMS = ("metric", "run")


def _run_href(run_id: str) -> str:
    return f"/runs/{quote(run_id, safe='')}"


@dataclass(frozen=True)
class ChartRow:
    """One charted run as the table below the chart lists it."""

    run_id: str
    group: str
    model: str
    runtime: str
    dataset: str
    variant: str
    value: str
    interval: str
    created_at: str


def _unknown(params: Any, allowed: tuple[str, ...]) -> str | None:
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        return f"unknown query parameter {unknown[0][:40]!r} (allowed: {', '.join(allowed)})"
    return None


@router.get("/charts", response_class=HTMLResponse)
def charts_page(request: Request, principal: SignedIn) -> Response:
    """A metric across the stored runs of its task (newest :data:`~repliscope.store.run_charts.MAX_CHART_RUNS`
    at most), grouped by ``by``; ``task`` alone charts its headline metric. Its inline SVG's own ``<style>`` is what
    the pages' policy (:data:`repliscope.service.guard.PAGE_CSP`) allows; no script."""
    return _charts(request, principal)


def _charts(request: Request, principal: Any) -> Response:
    from repliscope.report.run_charts import metric_chart_svg, metric_chart_title
    from repliscope.service.web.metric_format import interval_text, value_text
    from repliscope.store.repository import RunQuery
    from repliscope.store.run_charts import GROUPINGS, MAX_CHART_RUNS, chart_data, chart_metrics
    from repliscope.store.service_tables import InvalidInputError

    params = request.query_params
    if (problem := _unknown(params, CHART_PARAMS)) is not None:
        return kit.error_page(principal, 422, problem)
    problems: list[str] = []
    values = {k: params.get(k, "").strip() for k in CHART_PARAMS}
    for key, value in values.items():
        bound = MAX_SEARCH_CHARS if key == "search" else MAX_VALUE_CHARS
        if len(value) > bound:
            problems.append(f"{key} must be at most {bound} characters")
    metrics = chart_metrics()
    tasks = list(dict.fromkeys(m.task for m in metrics.values()))
    task, metric, by = values["task"], values["metric"], values["by"] or "runtime"
    if task and task not in tasks:
        problems.append(f"unknown task {task[:40]!r} (allowed: {', '.join(tasks)})")
    elif task and not metric:
        metric = next(m.name for m in metrics.values() if m.task == task and m.headline)
    metric = metric or next(iter(metrics))
    if metric not in metrics:
        problems.append(f"unknown metric {metric[:40]!r} (allowed: {', '.join(metrics)})")
    elif task and metrics[metric].task != task:
        allowed = ", ".join(m.name for m in metrics.values() if m.task == task)
        problems.append(f"metric {metric!r} is not one of task {task}'s (allowed: {allowed})")
    if by not in GROUPINGS:
        problems.append(f"unknown grouping by={by[:40]!r} (allowed: {', '.join(GROUPINGS)})")
    limit_text = values["limit"] or str(MAX_CHART_RUNS)
    if not (
        limit_text.isascii()
        and limit_text.isdigit()
        and len(limit_text) <= 4
        and 1 <= int(limit_text) <= MAX_CHART_RUNS
    ):
        problems.append(f"limit must be a whole number from 1 to {MAX_CHART_RUNS}, not '{limit_text[:40]}'")
    created_from = kit.parse_date(values["created_from"], "created_from", problems)
    created_to = kit.parse_date(values["created_to"], "created_to", problems)
    if problems:
        return kit.error_page(principal, 422, "; ".join(problems))
    filters = {k: values[k] for k in ("search", *TEXT_FILTERS) if values[k]}
    store = kit.store_of(request)
    if "sweep_id" in filters:
        from repliscope.service.errors import ApiError
        from repliscope.service.routers.runs import _full_sweep_id

        try:
            filters["sweep_id"] = _full_sweep_id(store, filters["sweep_id"])
        except ApiError as exc:
            return kit.error_page(principal, 400, exc.message)
    query = RunQuery(
        **{k: v for k, v in filters.items() if k != "search"},
        search=filters.get("search"),
        created_from=created_from,
        created_to=created_to + timedelta(days=1) if created_to and created_to.year < 9999 else None,
    )
    try:
        data = chart_data(store, metric, by, query, int(limit_text))
    except InvalidInputError as exc:
        return kit.error_page(principal, 422, f"{exc.field}: {exc}" if exc.field else str(exc))
    rows = [
        ChartRow(
            run_id=p.run_id,
            group=p.group,
            model=p.model,
            runtime=p.runtime,
            dataset=p.dataset,
            variant=p.variant or "—",
            value=value_text(metric, p.value),
            interval=interval_text(metric, p.low, p.high),
            created_at=f"{p.created_at:%Y-%m-%d %H:%M}",
        )
        for p in data.points
    ]
    kept = {k: v for k, v in {**filters, **{k: values[k] for k in DATE_FILTERS}}.items() if v}
    return kit.page(
        principal,
        "charts.html",
        title="Charts",
        data=data,
        chart_title=metric_chart_title(data),
        svg=metric_chart_svg(data, _run_href, key="run-chart") if data.points else "",
        rows=rows,
        claims=[(c.model, value_text(metric, c.value), c.source) for c in data.claims],
        metric=metric,
        by=by,
        limit=int(limit_text),
        max_runs=MAX_CHART_RUNS,
        groupings=GROUPINGS,
        metrics_by_task={t: [m.name for m in metrics.values() if m.task == t] for t in tasks},
        filters=kept,
        choices=views.filter_choices(store),
        other_filters={k: v for k, v in filters.items() if k not in LISTED_FILTERS and k != "search"},
        runs_link="/runs?" + urlencode(kept) if kept else "/runs",
    )


@router.get("/sweeps/{sweep_id}/parallel", response_class=HTMLResponse)
def sweep_parallel_page(request: Request, sweep_id: str, principal: SignedIn) -> Response:
    """The parallel coordinates of sweep ``sweep_id`` (a unique prefix of 6+ characters is enough); ``metric``:
    which of its metrics the last axis shows; ``run``: the run drawn highlighted (besides the reference)."""
    return _parallel(request, sweep_id, principal)


def _parallel(request: Request, sweep_id: str, principal: Any) -> Response:
    from repliscope.report.run_charts import parallel_svg, sweep_parallel, table_rows
    from repliscope.store.service_tables import InvalidInputError

    params = request.query_params
    if (problem := _unknown(params, PARALLEL_PARAMS)) is not None:
        return kit.error_page(principal, 422, problem)
    metric, chosen = params.get("metric", "").strip(), params.get("run", "").strip()
    if len(sweep_id) > 100 or len(metric) > 100 or len(chosen) > 100:
        return kit.error_page(principal, 422, "sweep_id, metric and run are at most 100 characters each")
    try:
        sweep = kit.store_of(request).get_sweep(sweep_id)
    except StoreError as exc:
        return kit.error_page(principal, 404, str(exc))
    try:
        data = sweep_parallel(sweep, metric or None)
    except InvalidInputError as exc:
        return kit.error_page(principal, 422, f"{exc.field}: {exc}" if exc.field else str(exc))
    run_ids = {line.run_id for line in data.lines}
    if chosen and chosen not in run_ids:
        return kit.error_page(
            principal, 422, f"run {chosen[:40]!r} is not a drawn run of sweep {sweep.sweep_id[:12]} (see its table)"
        )
    lines = list(zip(data.lines, table_rows(data), strict=True))
    return kit.page(
        principal,
        "sweep_parallel.html",
        title=f"Parallel coordinates of sweep {sweep.sweep_id[:12]}",
        data=data,
        sweep=sweep,
        svg=parallel_svg(data, _run_href, chosen or None, key="parallel-chart") if data.lines else "",
        lines=lines,
        chosen=chosen,
        reference_run=sweep.reference.run_id,
    )
