"""``/api/v1/benchmarks``: the stored benchmark records (``repliscope bench``, a ``bench`` job), listed page by page
(filtered by manifest name) and one by one (the record without its per-query latencies), read from the benchmarks
store (:class:`repliscope.store.benchmarks.BenchmarkStore`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from repliscope.service.auth import require
from repliscope.service.errors import ERROR_RESPONSES
from repliscope.service.redaction import hide_paths_in, request_roots
from repliscope.service.routers.common import MAX_PAGE, UtcDatetime, store_errors, store_of
from repliscope.service.routers.runs import MAX_PAGE_SIZE, _refuse_unknown

router = APIRouter(prefix="/benchmarks", tags=["benchmarks"], responses=ERROR_RESPONSES)

_QUERY_PARAMS = frozenset({"manifest", "page", "page_size"})


class BenchmarkRowOut(BaseModel):
    benchmark_id: str
    created_at: UtcDatetime
    manifest_name: str
    runtime: str
    scenario: str
    threads: int | None
    queries: int
    p90_ms: float | None
    throughput: float
    """Samples a second."""


class BenchmarkPage(BaseModel):
    items: list[BenchmarkRowOut]
    total: int
    page: int
    page_size: int


def benchmark_page(store: Any, manifest: str | None, page: int, page_size: int) -> BenchmarkPage:
    """One page of stored benchmarks, newest first (the API's and the ``/benchmarks`` page's)."""
    with store_errors():
        rows, total = store.benchmarks.page(manifest, page_size, (page - 1) * page_size)
    items = [BenchmarkRowOut.model_validate(row, from_attributes=True) for row in rows]
    return BenchmarkPage(items=items, total=total, page=page, page_size=page_size)


@router.get("", response_model=BenchmarkPage)
def list_benchmarks(
    request: Request,
    principal: Annotated[Any, Depends(require("viewer"))],
    manifest: Annotated[str | None, Query(min_length=1, max_length=300, description="manifest name (exact)")] = None,
    page: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1,
    page_size: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = 50,
) -> Any:
    """Stored benchmarks, newest first (ties by id), one page; ``manifest`` keeps one manifest's. Below the role
    admin, absolute server paths read relative to named roots (as in ``GET /runs``)."""
    _refuse_unknown(request, _QUERY_PARAMS)
    result = benchmark_page(store_of(request), manifest, page, page_size)
    return JSONResponse(hide_paths_in(result.model_dump(mode="json"), request_roots(request, principal)))


@router.get("/{benchmark_id}", response_model=dict[str, Any])
def get_benchmark(
    request: Request,
    benchmark_id: Annotated[str, Path(min_length=1, max_length=100)],
    principal: Annotated[Any, Depends(require("viewer"))],
) -> Any:
    """The benchmark record (or a unique prefix of its id, at least 6 characters) without its per-query
    latencies: scenario, settings, latency percentiles with intervals, throughput, provenance (pipeline, runtime,
    software, hardware, dataset); ``num_latencies`` counts the queries measured. Server paths as in
    ``GET /runs/{id}``."""
    with store_errors("benchmark_id"):
        record = store_of(request).get_benchmark(benchmark_id)
    body: dict[str, Any] = record.model_dump(mode="json", exclude={"latencies_us"})
    body["num_latencies"] = len(record.latencies_us)
    return JSONResponse(hide_paths_in(body, request_roots(request, principal)))
