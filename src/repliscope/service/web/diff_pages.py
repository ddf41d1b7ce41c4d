"""The web UI's diff pages: ``/diffs`` (the stored diffs, newest first) and ``/diffs/{id}`` (one diff: a pipeline
diff's verdict, diagnosis, stages, timing and heatmaps; a layer diff's per-layer error chart and first divergence;
a task diff's agreement, McNemar and flipped samples; a loss diff's per-component table, gradient errors, matching
table and named loss pitfall, ``diff_loss.html``), ``/diffs/{id}/figure.png`` (the stored figure). Signed-in
viewers only (the pages' :data:`~repliscope.service.web.routes.SignedIn` dependency)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from repliscope.errors import StoreError
from repliscope.service.web import page_kit as kit
from repliscope.service.web.page_kit import (
    SignedIn,
    for_viewer,
)

router = APIRouter(include_in_schema=False)
PAGE_SIZE = 50
FIRST_FLIPS = 200
"""Flipped samples listed on the page (the API and ``repliscope diffs show --json`` have all)."""


@router.get("/diffs", response_class=HTMLResponse)
def diffs_page(request: Request, principal: SignedIn, kind: str = "", page: str = "1") -> Response:
    """The stored diffs, newest first, :data:`PAGE_SIZE` a page; ``page`` from 1 to ``MAX_PAGE`` (else 422)."""
    from repliscope.service.web.page_kit import page_number_problem
    from repliscope.store.diffs import DIFF_KINDS, list_diffs

    if kind and kind not in DIFF_KINDS:
        return kit.error_page(principal, 400, f"unknown diff kind {kind!r} (allowed: {', '.join(DIFF_KINDS)})")
    if (problem := page_number_problem(page, "page")) is not None:
        return kit.error_page(principal, 422, problem)
    number = int(page)
    rows, total = list_diffs(kit.store_of(request), kind=kind or None, limit=PAGE_SIZE, offset=(number - 1) * PAGE_SIZE)
    return kit.page(
        principal,
        "diffs.html",
        title="Diffs",
        rows=for_viewer(request, principal, rows),
        total=total,
        kind=kind,
        kinds=DIFF_KINDS,
        page=number,
        pages=max(1, -(-total // PAGE_SIZE)),
    )


@router.get("/diffs/{diff_id}", response_class=HTMLResponse)
def diff_page(request: Request, diff_id: str, principal: SignedIn) -> Response:
    from repliscope.service.web.training_diff_pages import training_context
    from repliscope.store.diffs import get_diff

    if len(diff_id) > 100:
        return kit.error_page(principal, 404, "unknown diff id")
    try:
        stored = get_diff(kit.store_of(request), diff_id)
    except StoreError as exc:
        return kit.error_page(principal, 404, str(exc))
    chart = _layer_chart(stored.diff_id, stored.result) if stored.kind == "layer_diff" else None
    stored = for_viewer(request, principal, stored)
    r = stored.result
    effect = r.get("model_effect") if stored.kind == "pipeline_diff" else r if stored.kind == "task_diff" else None
    flips = (effect or {}).get("flips") or []
    return kit.page(
        principal,
        "diff.html",
        title=f"Diff {stored.diff_id[:12]}",
        d=stored,
        r=r,
        chart=chart,
        effect=effect,
        flips=flips[:FIRST_FLIPS],
        flips_more=max(0, len(flips) - FIRST_FLIPS),
        fmt=_fmt,
        pct=_pct,
        **training_context(stored.kind, r),
    )


@router.get("/diffs/{diff_id}/figure.png")
def diff_figure(request: Request, diff_id: str, principal: SignedIn) -> Response:
    from repliscope.store.diffs import get_figure

    if len(diff_id) > 100:
        return kit.error_page(principal, 404, "unknown diff id")
    try:
        png = get_figure(kit.store_of(request), diff_id)
    except StoreError as exc:
        return kit.error_page(principal, 404, str(exc))
    if png is None:
        return kit.error_page(principal, 404, f"diff {diff_id} has no figure")
    return Response(png, media_type="image/png", headers={"Cache-Control": "private, max-age=3600"})


_CHARTS: OrderedDict[str, str | None] = OrderedDict()
_CHARTS_KEPT = 64
_CHARTS_LOCK = threading.Lock()


def _layer_chart(diff_id: str, result: dict[str, Any]) -> str | None:
    """The per-layer error chart of a stored layer diff, drawn once per diff id (a stored diff never changes;
    the last :data:`_CHARTS_KEPT` are kept)."""
    with _CHARTS_LOCK:
        if diff_id in _CHARTS:
            _CHARTS.move_to_end(diff_id)
            return _CHARTS[diff_id]
    from repliscope.report.diff_report import layer_chart

    chart = layer_chart(result)
    with _CHARTS_LOCK:
        _CHARTS[diff_id] = chart
        while len(_CHARTS) > _CHARTS_KEPT:
            _CHARTS.popitem(last=False)
    return chart


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _pct(value: Any) -> str:
    return "—" if value is None else f"{100 * float(value):.2f} %"
