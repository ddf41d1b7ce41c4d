"""``/api/v1/runs``: query stored runs (filters, paging, sorting), one run (the record without its samples; samples
page by page), compare two runs, and the run's HTML report (the CLI's ``repliscope report``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel

from repliscope.service.auth import require
from repliscope.service.errors import ERROR_RESPONSES, ApiError
from repliscope.service.routers.common import UtcDatetime, store_errors, store_of, utc_bound

router = APIRouter(prefix="/runs", tags=["runs"], responses=ERROR_RESPONSES)

Sort = Literal["created_at", "-created_at", "top1", "-top1", "model", "-model", "runtime", "-runtime"]
Verdict = Literal["consistent", "inconsistent", "not comparable"]
MAX_PAGE_SIZE = 500


class RunRow(BaseModel):
    run_id: str
    created_at: UtcDatetime
    kind: str
    manifest_name: str
    manifest_version: str
    runtime: str
    dataset_name: str
    num_samples: int
    num_failed: int
    top1: float | None
    top5: float | None
    ap: float | None
    sweep_id: str | None
    variant: str | None
    framework_version: str | None = None
    cpu_model: str | None = None
    verdict: str | None = None


class RunPage(BaseModel):
    items: list[RunRow]
    total: int
    page: int
    page_size: int


class SamplePage(BaseModel):
    run_id: str
    items: list[dict[str, Any]]
    total: int
    page: int
    page_size: int


def get_record(store: Any, run_id: str, field: str = "run_id") -> Any:
    with store_errors(field):
        return store.get(run_id)


_QUERY_PARAMS = frozenset(
    {
        "model",
        "version",
        "runtime",
        "framework_version",
        "dataset",
        "hardware",
        "kind",
        "verdict",
        "created_from",
        "created_to",
        "sweep_id",
        "sort",
        "page",
        "page_size",
    }
)


@router.get("", response_model=RunPage)
def query_runs(
    request: Request,
    _: Annotated[Any, Depends(require("viewer"))],
    model: Annotated[str | None, Query(max_length=300, description="manifest name (exact)")] = None,
    version: Annotated[str | None, Query(max_length=100)] = None,
    runtime: Annotated[str | None, Query(max_length=100)] = None,
    framework_version: Annotated[str | None, Query(max_length=100)] = None,
    dataset: Annotated[str | None, Query(max_length=300)] = None,
    hardware: Annotated[str | None, Query(max_length=300, description="the recorded CPU model (exact)")] = None,
    kind: Annotated[str | None, Query(max_length=50)] = None,
    verdict: Verdict | None = None,
    created_from: datetime | None = None,
    created_to: datetime | None = None,
    sweep_id: Annotated[
        str | None,
        Query(max_length=100, description="a sweep id or a unique prefix of it (the pages show 12 characters)"),
    ] = None,
    sort: Sort = "-created_at",
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    page_size: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = 50,
) -> Any:
    """Stored runs matching every given filter, one page, sorted (``-`` = descending)."""
    from repliscope.store.repository import RunQuery

    unknown = sorted(set(request.query_params) - _QUERY_PARAMS)
    if unknown:  # a misspelt filter must not silently return every run
        raise ApiError(
            422,
            f"unknown query parameter {unknown[0]!r} (allowed: {', '.join(sorted(_QUERY_PARAMS))})",
            field=f"query.{unknown[0]}",
        )

    created_from = utc_bound(created_from, "query.created_from")
    created_to = utc_bound(created_to, "query.created_to")
    if sweep_id is not None:
        sweep_id = _full_sweep_id(store_of(request), sweep_id)
    filters = RunQuery(
        model=model,
        version=version,
        runtime=runtime,
        framework_version=framework_version,
        dataset=dataset,
        hardware=hardware,
        kind=kind,
        verdict=verdict,
        created_from=created_from,
        created_to=created_to,
        sweep_id=sweep_id,
    )
    with store_errors():
        rows, total = store_of(request).query_runs(filters, sort=sort, page=page, page_size=page_size)
    return {"items": [r.model_dump() for r in rows], "total": total, "page": page, "page_size": page_size}


def _full_sweep_id(store: Any, sweep_id: str) -> str:
    """The stored sweep id that ``sweep_id`` is, or starts (the pages show 12 characters; at least
    ``MIN_PREFIX``): a 422 listing the candidates when several sweeps start with it; no match -> as given."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from repliscope.store.models import RunRow
    from repliscope.store.repository import MIN_PREFIX

    if len(sweep_id) < MIN_PREFIX:
        return sweep_id
    with Session(store.engine) as session:
        matches = session.scalars(
            select(RunRow.sweep_id)
            .distinct()
            .where(RunRow.sweep_id.startswith(sweep_id, autoescape=True))
            .order_by(RunRow.sweep_id)
            .limit(11)
        ).all()
    if sweep_id in matches or not matches:
        return sweep_id
    if len(matches) > 1:
        more = " and more" if len(matches) > 10 else ""
        raise ApiError(
            422,
            f"sweep id prefix {sweep_id!r} is ambiguous; candidates: {', '.join(str(m) for m in matches[:10])}{more}",
            field="query.sweep_id",
            code="ambiguous",
        )
    return str(matches[0])


@router.get("/compare")
def compare(
    request: Request,
    _: Annotated[Any, Depends(require("viewer"))],
    a: Annotated[str, Query(min_length=1, max_length=100)],
    b: Annotated[str, Query(min_length=1, max_length=100)],
) -> dict[str, Any]:
    """What differs between runs ``a`` and ``b`` (deltas b - a, paired statistics such as McNemar, flipped
    samples): ``repliscope runs compare``."""
    from repliscope.store.compare import compare_runs

    store = store_of(request)
    result: dict[str, Any] = compare_runs(get_record(store, a, "a"), get_record(store, b, "b")).model_dump(mode="json")
    return result


@router.get("/{run_id}")
def get_run(request: Request, run_id: str, _: Annotated[Any, Depends(require("viewer"))]) -> dict[str, Any]:
    """The run's record without its samples (``/samples`` pages them); ``num_samples`` counts them."""
    record = get_record(store_of(request), run_id)
    body: dict[str, Any] = record.model_dump(mode="json", exclude={"samples"})
    body["num_samples"] = len(record.samples)
    return body


@router.get("/{run_id}/samples", response_model=SamplePage)
def get_samples(
    request: Request,
    run_id: str,
    _: Annotated[Any, Depends(require("viewer"))],
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    page_size: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = 100,
) -> Any:
    """The run's per-sample predictions, one page (in the record's order)."""
    record = get_record(store_of(request), run_id)
    start = (page - 1) * page_size
    items = [s.model_dump(mode="json") for s in record.samples[start : start + page_size]]
    return {"run_id": record.run_id, "items": items, "total": len(record.samples), "page": page, "page_size": page_size}


@router.get("/{run_id}/report", responses={200: {"content": {"text/html": {"schema": {"type": "string"}}}}})
def get_report(request: Request, run_id: str, _: Annotated[Any, Depends(require("viewer"))]) -> Any:
    """The run's self-contained HTML report (as ``repliscope report ID``), with its stored trace's per-layer
    chart when there is one."""
    from repliscope.report.html import render_run_html

    store = store_of(request)
    record = get_record(store, run_id)
    extra: list[tuple[str, bytes]] = []
    doc = store.load_trace(record.run_id)
    if doc is not None:
        from repliscope.report.trace_sections import trace_figures

        extra = trace_figures(doc)
    try:
        return HTMLResponse(render_run_html(record, extra or None))
    except ImportError as exc:  # pragma: no cover - jinja2/matplotlib are core dependencies
        raise ApiError(501, f"the report needs jinja2 and matplotlib ({exc})", code="unavailable") from None
