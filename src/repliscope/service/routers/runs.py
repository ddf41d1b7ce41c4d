"""``/api/v1/runs``: query stored runs (filters, search, paging, sorting), download a query as CSV or JSON, one run
(the record without its samples; samples page by page or downloaded whole), compare two runs, and the run's HTML
report (the CLI's ``repliscope report``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC
from functools import lru_cache
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from pydantic import BaseModel
from pydantic_core import to_json
from starlette.concurrency import run_in_threadpool

from repliscope.service.auth import require
from repliscope.service.errors import ERROR_RESPONSES, ApiError
from repliscope.service.redaction import hide_paths_in, request_roots
from repliscope.service.routers.common import DATE_RULE, MAX_PAGE, UtcDatetime, iso_datetime, store_errors, store_of

router = APIRouter(prefix="/runs", tags=["runs"], responses=ERROR_RESPONSES)

Sort = Literal[
    "created_at",
    "-created_at",
    "top1",
    "-top1",
    "top5",
    "-top5",
    "ap",
    "-ap",
    "model",
    "-model",
    "runtime",
    "-runtime",
    "dataset",
    "-dataset",
    "kind",
    "-kind",
    "verdict",
    "-verdict",
    "samples",
    "-samples",
    "hardware",
    "-hardware",
    "variant",
    "-variant",
    "metric",
    "-metric",
]
"""The store's sorts (:data:`repliscope.store.repository.SORTS`), spelt out for the OpenAPI schema."""
Verdict = Literal["consistent", "inconsistent", "not comparable"]
ExportFormat = Literal["csv", "json"]
MAX_PAGE_SIZE = 500
MAX_EXPORT_ROWS = 100_000
"""The most runs one download holds (``limit``); the rows are streamed page by page, never held at once."""


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
    metric_name: str | None = None
    """The headline metric of the run's task (the first of its metric specs: ``top1``, ``AP``, ``mIoU``)."""
    metric_value: float | None = None
    metric_low: float | None = None
    """The headline metric's 95 % interval as the record states it (Wilson for top-1, bootstrap for AP, mIoU)."""
    metric_high: float | None = None
    display_name: str | None = None
    """The run's display name (``PATCH /runs/{id}``; null: the record's own name)."""
    tags: list[str] = []
    """The run's tags (``PUT /runs/{id}/tags/{tag}``), in the order they were added."""


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
        "search",
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
        "tag",
        "sort",
        "page",
        "page_size",
    }
)


def _refuse_unknown(request: Request, allowed: frozenset[str]) -> None:
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:  # a misspelt filter must not silently return every run
        raise ApiError(
            422,
            f"unknown query parameter {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})",
            field=f"query.{unknown[0]}",
        )


async def run_filters(
    request: Request,
    search: Annotated[
        str | None,
        Query(
            max_length=200,
            description="text in the model name, version, dataset, runtime, variant, or the run's tags, display "
            "name or note",
        ),
    ] = None,
    tag: Annotated[str | None, Query(max_length=200, description="runs carrying this tag (exact)")] = None,
    model: Annotated[str | None, Query(max_length=300, description="manifest name (exact)")] = None,
    version: Annotated[str | None, Query(max_length=100)] = None,
    runtime: Annotated[str | None, Query(max_length=100)] = None,
    framework_version: Annotated[str | None, Query(max_length=100)] = None,
    dataset: Annotated[str | None, Query(max_length=300)] = None,
    hardware: Annotated[str | None, Query(max_length=300, description="the recorded CPU model (exact)")] = None,
    kind: Annotated[str | None, Query(max_length=50)] = None,
    verdict: Verdict | None = None,
    created_from: Annotated[
        str | None, Query(max_length=40, description=f"runs created at or after this instant: {DATE_RULE}")
    ] = None,
    created_to: Annotated[
        str | None, Query(max_length=40, description=f"runs created before this instant: {DATE_RULE}")
    ] = None,
    sweep_id: Annotated[
        str | None,
        Query(max_length=100, description="a sweep id or a unique prefix of it (the pages show 12 characters)"),
    ] = None,
) -> Any:
    """The runs filters of ``GET /runs`` and ``GET /runs/export`` as a :class:`RunQuery` (a dependency on the event
    loop: only a ``sweep_id`` prefix asks the store, in the thread pool)."""
    from repliscope.store.annotations import check_tag
    from repliscope.store.repository import RunQuery

    if tag is not None:
        with store_errors():
            check_tag(tag, "query.tag")
    if sweep_id is not None:
        sweep_id = await run_in_threadpool(_full_sweep_id, store_of(request), sweep_id)
    return RunQuery(
        search=search.strip() or None if search is not None else None,
        model=model,
        version=version,
        runtime=runtime,
        framework_version=framework_version,
        dataset=dataset,
        hardware=hardware,
        kind=kind,
        verdict=verdict,
        created_from=iso_datetime(created_from, "query.created_from"),
        created_to=iso_datetime(created_to, "query.created_to"),
        sweep_id=sweep_id,
        tag=tag,
    )


@router.get("", response_model=RunPage)
async def query_runs(
    request: Request,
    principal: Annotated[Any, Depends(require("viewer"))],
    filters: Annotated[Any, Depends(run_filters)],
    sort: Sort = "-created_at",
    page: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1,
    page_size: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = 50,
) -> Any:
    """Stored runs matching every given filter, one page, sorted (``-`` = descending; ties by run id). Below the
    role admin, absolute server paths in the values read relative to named roots (``<model cache>/...``)."""
    _refuse_unknown(request, _QUERY_PARAMS)
    store = store_of(request)
    roots = request_roots(request, principal)

    def page_json() -> bytes:
        with store_errors():
            rows, total = store.query_run_rows(filters, sort, page, page_size, RUN_ROW_COLUMNS)
            labels = store.annotations.labels(row[0] for row in rows)
        if roots is not None:
            rows = [tuple(hide_paths_in(v, roots) for v in row) for row in rows]
        return run_page_json(rows, total, page, page_size, labels)

    return Response(await run_in_threadpool(page_json), media_type="application/json")


RUN_ROW_COLUMNS = tuple(name for name in RunRow.model_fields if name not in ("display_name", "tags"))
"""The store columns of a :class:`RunRow`, in its order (``run_id`` first; its annotations come after them)."""
_CREATED_AT = RUN_ROW_COLUMNS.index("created_at")


def run_page_json(
    rows: list[tuple[Any, ...]], total: int, page: int, page_size: int, labels: dict[str, Any] | None = None
) -> bytes:
    """A :class:`RunPage` of the store's rows of :data:`RUN_ROW_COLUMNS` (``created_at`` naive UTC) as JSON bytes,
    equal to what the response model serialises to, without building a model per row (one ``to_json`` call);
    ``labels``: the runs' display names and tags by run id (:meth:`AnnotationStore.labels`)."""
    items = []
    for row in rows:
        item = dict(zip(RUN_ROW_COLUMNS, row, strict=True))
        item["created_at"] = row[_CREATED_AT].replace(tzinfo=UTC)
        label = (labels or {}).get(row[0])
        item["display_name"], item["tags"] = (label.display_name, label.tags) if label else (None, [])
        items.append(item)
    return to_json({"items": items, "total": total, "page": page, "page_size": page_size})


EXPORT_COLUMNS = (
    "run_id",
    "created_at",
    "kind",
    "manifest_name",
    "manifest_version",
    "runtime",
    "framework_version",
    "cpu_model",
    "dataset_name",
    "num_samples",
    "num_failed",
    "top1",
    "top1_ci_low",
    "top1_ci_high",
    "top5",
    "ap",
    "metric_name",
    "metric_value",
    "metric_low",
    "metric_high",
    "verdict",
    "sweep_id",
    "variant",
    "manifest_sha256",
    "result_hash",
    "display_name",
    "tags",
)
"""The columns of a runs download (``top1_ci_*``: the 95 % Wilson interval over the evaluated samples;
``metric_*``: the task's headline metric, top1 / AP / mIoU, with the 95 % interval its record states;
``display_name`` and ``tags``, the run's annotations: its tags separated by spaces)."""


@lru_cache(maxsize=65536)
def top1_interval(successes: int, n: int) -> tuple[float, float]:
    """The record's 95 % Wilson interval of top-1 (:func:`repliscope.metrics.intervals.wilson_interval`, ~3 ms a
    call: cached, as runs share their (successes, n))."""
    from repliscope.metrics.intervals import wilson_interval

    return wilson_interval(successes, n)


def export_row(summary: Any, label: Any = None) -> dict[str, Any]:
    """One run of a download: :data:`EXPORT_COLUMNS` (created_at as RFC 3339 UTC; ``label``: the run's display
    name and tags, :meth:`AnnotationStore.labels`)."""
    row = summary.model_dump(mode="json")
    row["display_name"] = label.display_name if label else None
    row["tags"] = " ".join(label.tags) if label else ""
    row["created_at"] = summary.created_at.replace(tzinfo=UTC).isoformat()
    low = high = None
    evaluated = summary.num_samples - summary.num_failed
    if summary.top1 is not None and evaluated > 0:
        low, high = top1_interval(round(summary.top1 * evaluated), evaluated)
    row["top1_ci_low"], row["top1_ci_high"] = low, high
    return {k: row.get(k) for k in EXPORT_COLUMNS}


def _attachment(name: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{name}"'}


@router.get(
    "/export",
    responses={200: {"content": {"text/csv": {"schema": {"type": "string"}}, "application/json": {}}}},
)
def export_runs(
    request: Request,
    principal: Annotated[Any, Depends(require("viewer"))],
    filters: Annotated[Any, Depends(run_filters)],
    format: ExportFormat = "csv",
    sort: Sort = "-created_at",
    limit: Annotated[int, Query(ge=1, le=MAX_EXPORT_ROWS)] = 10_000,
) -> Any:
    """Every run matching the filters of ``GET /runs`` (the runs page's query), sorted, at most ``limit``: CSV with
    a header row of :data:`EXPORT_COLUMNS`, or a JSON array of objects with those keys; streamed 500 runs at a
    time. CSV text cells are quoted and one starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return
    gets a leading ``'`` (no formula runs in a spreadsheet); numbers are written bare."""
    _refuse_unknown(request, (_QUERY_PARAMS - {"page", "page_size"}) | {"format", "limit"})
    store = store_of(request)
    roots = request_roots(request, principal)
    with store_errors():
        first, total = store.query_runs(filters, sort=sort, page=1, page_size=MAX_PAGE_SIZE)

    def batches() -> Iterator[list[dict[str, Any]]]:
        sent, page, batch = 0, 1, first
        while batch and sent < limit:
            labels = store.annotations.labels(summary.run_id for summary in batch[: limit - sent])
            rows = [
                hide_paths_in(export_row(summary, labels.get(summary.run_id)), roots)
                for summary in batch[: limit - sent]
            ]
            sent += len(rows)
            yield rows
            page += 1
            if len(batch) < MAX_PAGE_SIZE:
                break
            batch, _total = store.query_runs(filters, sort=sort, page=page, page_size=MAX_PAGE_SIZE)

    headers = {**_attachment(f"runs.{format}"), "X-Total-Count": str(total)}
    if format == "csv":
        return StreamingResponse(
            _csv_chunks(EXPORT_COLUMNS, batches()), media_type="text/csv; charset=utf-8", headers=headers
        )
    return StreamingResponse(_json_chunks(batches()), media_type="application/json", headers=headers)


def _csv_chunks(columns: tuple[str, ...], batches: Iterator[list[dict[str, Any]]]) -> Iterator[str]:
    """The header row, then one chunk of CSV lines per batch (one thread hop per batch, not per row); every cell
    through :func:`repliscope.report.csv_safe.csv_lines` (no text a spreadsheet reads as a formula)."""
    from repliscope.report.csv_safe import csv_lines

    yield csv_lines([columns])
    for rows in batches:
        yield csv_lines([row[c] for c in columns] for row in rows)


def _json_chunks(batches: Iterator[list[Any]]) -> Iterator[str]:
    """A JSON array, one chunk per batch."""
    yield "["
    first = True
    for items in batches:
        if items:
            yield ("" if first else ",") + ",".join(json.dumps(item, ensure_ascii=False) for item in items)
            first = False
    yield "]"


def _full_sweep_id(store: Any, sweep_id: str) -> str:
    """The stored sweep id that ``sweep_id`` is, or starts (the pages show 12 characters; at least
    ``MIN_PREFIX``): a 422 listing the candidates when several sweeps start with it; no match -> as given."""
    from repliscope.store.errors import AmbiguousIdError

    try:
        return str(store.runs.resolve_sweep_id(sweep_id))
    except AmbiguousIdError as exc:
        raise ApiError(422, str(exc), field="query.sweep_id", code="ambiguous") from None


@router.get("/compare")
def compare(
    request: Request,
    principal: Annotated[Any, Depends(require("viewer"))],
    a: Annotated[str, Query(min_length=1, max_length=100)],
    b: Annotated[str, Query(min_length=1, max_length=100)],
) -> dict[str, Any]:
    """What differs between runs ``a`` and ``b`` (deltas b - a, paired statistics such as McNemar, flipped
    samples): ``repliscope runs compare``; ``stack_differences``: the runtime / software / hardware items whose
    normalised values differ (:mod:`repliscope.service.web.stack_compare`: ``null`` = missing, unordered lists
    sorted, a conversion's cache state never a difference), as the compare page's "the stacks differ in"."""
    from repliscope.service.web.compare_cache import HEADS, comparison_of
    from repliscope.service.web.stack_compare import differing_items

    store = store_of(request)
    with store_errors("a"):
        record_a = HEADS.get(store, a)
    with store_errors("b"):
        record_b = HEADS.get(store, b)
    with store_errors("run_id"):  # neither deleted since it was cached (by another process)
        store.annotations.ensure_stored([record_a.run_id, record_b.run_id])
    # the whole records are read only when the comparison is not cached yet
    comparison = comparison_of(record_a, record_b, full=lambda r: get_record(store, r.run_id))
    result: dict[str, Any] = comparison.model_dump(mode="json")
    result["stack_differences"] = differing_items([record_a, record_b])
    return dict(hide_paths_in(result, request_roots(request, principal)))


@router.get("/{run_id}", response_model=dict[str, Any])
def get_run(request: Request, run_id: str, principal: Annotated[Any, Depends(require("viewer"))]) -> Any:
    """The run's record without its samples (``/samples`` pages them); ``num_samples`` counts them. Below the role
    admin, absolute server paths (model cache, dataset folder, interpreter, temporary folders) read relative to
    named roots: ``<model cache>/onnx/x.onnx``, ``<python prefix>/bin/python3``, else ``…/<last two parts>``."""
    with store_errors("run_id"):
        record, num_samples = store_of(request).get_without_samples(run_id)
    body: dict[str, Any] = record.model_dump(mode="json", exclude={"samples"})
    body["num_samples"] = num_samples
    return JSONResponse(
        hide_paths_in(body, request_roots(request, principal))
    )  # JSON-native already: no second encoding pass


@router.get("/{run_id}/samples", response_model=SamplePage)
def get_samples(
    request: Request,
    run_id: str,
    principal: Annotated[Any, Depends(require("viewer"))],
    page: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1,
    page_size: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = 100,
) -> Any:
    """The run's per-sample predictions, one page (in the record's order); server paths as in ``GET /runs/{id}``."""
    record = get_record(store_of(request), run_id)
    start = (page - 1) * page_size
    roots = request_roots(request, principal)
    items = [hide_paths_in(s.model_dump(mode="json"), roots) for s in record.samples[start : start + page_size]]
    return {"run_id": record.run_id, "items": items, "total": len(record.samples), "page": page, "page_size": page_size}


SAMPLE_COLUMNS = (
    "position",
    "sample_id",
    "label",
    "top1",
    "top1_probability",
    "correct",
    "topk_indices",
    "topk_probs",
    "num_detections",
    "detections",
    "truth_classes",
    "predicted_classes",
    "iou",
    "pixel_accuracy",
    "error",
)
"""The columns of a run's samples download: classification fills ``top1`` .. ``topk_probs`` (lists as JSON
text), detection ``num_detections`` and ``detections`` (JSON text of ``[{box, score, class_id}]``), semantic
segmentation ``truth_classes`` / ``predicted_classes`` (JSON lists of class indices with scored pixels), ``iou``
(the image's mean IoU over the classes either holds) and ``pixel_accuracy``; ``correct`` is 1/0 when the sample
has a label and a prediction, empty otherwise."""


def sample_row(position: int, sample: Any) -> dict[str, Any]:
    """One sample of a download: :data:`SAMPLE_COLUMNS`."""
    from repliscope.service.web.samples import mask_figures

    top1 = sample.topk_indices[0] if sample.topk_indices else None
    dets = sample.detections
    masks = mask_figures(sample.segmentation) if sample.segmentation is not None else None
    return {
        "position": position,
        "sample_id": sample.sample_id,
        "label": sample.label,
        "top1": top1,
        "top1_probability": sample.topk_probs[0] if sample.topk_probs else None,
        "correct": None if top1 is None or sample.label is None else int(top1 == sample.label),
        "topk_indices": json.dumps(sample.topk_indices) if sample.topk_indices else None,
        "topk_probs": json.dumps(sample.topk_probs) if sample.topk_probs else None,
        "num_detections": None if dets is None else len(dets),
        "detections": None if dets is None else json.dumps([d.model_dump(mode="json") for d in dets]),
        "truth_classes": None if masks is None else json.dumps(masks.truth_classes),
        "predicted_classes": None if masks is None else json.dumps(masks.predicted_classes),
        "iou": None if masks is None else masks.iou,
        "pixel_accuracy": None if masks is None else masks.pixel_accuracy,
        "error": sample.error,
    }


@router.get(
    "/{run_id}/samples/export",
    responses={200: {"content": {"text/csv": {"schema": {"type": "string"}}, "application/json": {}}}},
)
def export_samples(
    request: Request,
    run_id: str,
    principal: Annotated[Any, Depends(require("viewer"))],
    format: ExportFormat = "csv",
) -> Any:
    """Every per-sample prediction of the run, in the record's order: CSV of :data:`SAMPLE_COLUMNS`, or a JSON
    array of the samples as the record stores them (segmentation masks included); streamed. CSV text cells are
    escaped as in ``GET /runs/export`` (a sample id ``=HYPERLINK(...)`` comes out as ``'=HYPERLINK(...)``)."""
    _refuse_unknown(request, frozenset({"format"}))
    record = get_record(store_of(request), run_id)
    headers = _attachment(f"samples-{record.run_id[:12]}.{format}")
    spans = range(0, len(record.samples), MAX_PAGE_SIZE)
    roots = request_roots(request, principal)
    if format == "csv":
        rows = (
            [
                hide_paths_in(sample_row(i, s), roots)
                for i, s in enumerate(record.samples[k : k + MAX_PAGE_SIZE], start=k)
            ]
            for k in spans
        )
        return StreamingResponse(
            _csv_chunks(SAMPLE_COLUMNS, rows), media_type="text/csv; charset=utf-8", headers=headers
        )
    items = (
        [hide_paths_in(s.model_dump(mode="json"), roots) for s in record.samples[k : k + MAX_PAGE_SIZE]] for k in spans
    )
    return StreamingResponse(_json_chunks(items), media_type="application/json", headers=headers)


MAX_SWEEP_REPORT_RUNS = 1000
"""The most runs of one sweep whose records a sweep's report reads (as ``repliscope report SWEEP``)."""


@router.get("/{run_id}/report", responses={200: {"content": {"text/html": {"schema": {"type": "string"}}}}})
def get_report(request: Request, run_id: str, principal: Annotated[Any, Depends(require("viewer"))]) -> Any:
    """The run's self-contained HTML report (as ``repliscope report ID``), with its stored trace's per-layer
    chart when there is one; a pitfall sweep's id gives the sweep's report (pitfall table, Δ top-1 chart, visual
    testing, each variant's flipped samples). Below the role admin its server paths read as on the run's page."""
    from repliscope.errors import StoreError
    from repliscope.report.build import build_run_view, build_sweep_view
    from repliscope.report.html import render_view_html

    store = store_of(request)
    try:
        record = store.get(run_id)
    except StoreError as run_error:
        sweep = _sweep_or_none(store, run_id)
        if sweep is None:
            with store_errors("run_id"):
                raise run_error from None
        view = build_sweep_view(sweep, _sweep_records(store, sweep), _trace_figures(store, sweep.sweep_id) or None)
    else:
        view = build_run_view(record, _trace_figures(store, record.run_id) or None)
    roots = request_roots(request, principal)
    if roots is not None:
        from repliscope.service.redaction import redact_view

        view = redact_view(view, roots)
    return HTMLResponse(render_view_html(view))


def _sweep_or_none(store: Any, sweep_id: str) -> Any:
    """The stored sweep ``sweep_id`` (or a unique prefix), None when there is none."""
    from repliscope.errors import StoreError

    try:
        return store.get_sweep(sweep_id)
    except StoreError:
        return None


def _sweep_records(store: Any, sweep: Any) -> dict[str, Any]:
    """The stored records of ``sweep``'s runs by run id (its reference's too; a run not stored is left out)."""
    from repliscope.errors import StoreError

    ids = [s.run_id for s in store.list(limit=MAX_SWEEP_REPORT_RUNS, sweep_id=sweep.sweep_id)]
    if sweep.reference.run_id and sweep.reference.run_id not in ids:
        ids.append(sweep.reference.run_id)
    records = {}
    for run_id in ids:
        try:
            records[run_id] = store.get(run_id)
        except StoreError:
            continue
    return records


def _trace_figures(store: Any, object_id: str) -> list[tuple[str, bytes]]:
    """The per-layer time chart of the trace stored with a run or a sweep; [] when there is none."""
    doc = store.load_trace(object_id)
    if doc is None:
        return []
    from repliscope.report.trace_sections import trace_figures

    return list(trace_figures(doc))
