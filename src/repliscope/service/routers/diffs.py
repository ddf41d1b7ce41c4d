"""``/api/v1/diffs``: the stored diffs (task-level, layer-level, pipeline, augmentation, loss, gradient and
training-step diffs, as ``repliscope diff --json`` prints them): a page of summaries, one diff, and its figure (a
pipeline diff's heatmap panels, PNG)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel

from repliscope.service.auth import require
from repliscope.service.errors import ERROR_RESPONSES, ApiError
from repliscope.service.routers.common import MAX_PAGE, UtcDatetime, store_errors, store_of

router = APIRouter(prefix="/diffs", tags=["diffs"], responses=ERROR_RESPONSES)

Kind = Literal[
    "task_diff", "layer_diff", "pipeline_diff", "augmentation_diff", "loss_diff", "gradient_diff", "training_step_diff"
]
"""Every stored kind (:data:`repliscope.store.diffs.DIFF_KINDS`; a test checks they are the same)."""
MAX_PAGE_SIZE = 500
_QUERY_PARAMS = frozenset({"kind", "model", "page", "page_size"})


class DiffRow(BaseModel):
    diff_id: str
    created_at: UtcDatetime
    kind: str
    manifest_name: str
    a: str
    b: str
    dataset: str
    samples: int
    verdict: str
    summary: str
    created_by: str | None = None
    has_figure: bool = False


class DiffPage(BaseModel):
    items: list[DiffRow]
    total: int
    page: int
    page_size: int


@router.get("", response_model=DiffPage)
def list_diffs(
    request: Request,
    principal: Annotated[Any, Depends(require("viewer"))],
    kind: Kind | None = None,
    model: Annotated[str | None, Query(max_length=300, description="manifest name (exact)")] = None,
    page: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1,
    page_size: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = 50,
) -> Any:
    """Stored diffs, newest first, one page."""
    from repliscope.store.diffs import list_diffs as query

    unknown = sorted(set(request.query_params) - _QUERY_PARAMS)
    if unknown:  # a misspelt filter must not silently return every diff
        raise ApiError(
            422,
            f"unknown query parameter {unknown[0]!r} (allowed: {', '.join(sorted(_QUERY_PARAMS))})",
            field=f"query.{unknown[0]}",
        )
    with store_errors():
        rows, total = query(
            store_of(request), kind=kind, manifest_name=model, limit=page_size, offset=(page - 1) * page_size
        )
    from repliscope.service.redaction import hide_paths_in, request_roots

    roots = request_roots(request, principal)
    items = [hide_paths_in(r.model_dump(mode="json"), roots) for r in rows]
    return {"items": items, "total": total, "page": page, "page_size": page_size}


@router.get("/{diff_id}")
def get_diff(request: Request, diff_id: str, principal: Annotated[Any, Depends(require("viewer"))]) -> dict[str, Any]:
    """One stored diff (an id or a unique prefix of 6+ characters): its summary and the whole ``result``; below
    the role admin, server paths (a candidate model's file) read relative to named roots or as ``…/a/b``."""
    from repliscope.service.redaction import hide_paths_in, request_roots
    from repliscope.store.diffs import get_diff as fetch

    if len(diff_id) > 100:
        raise ApiError(422, "a diff id has at most 100 characters", field="path.diff_id", code="invalid")
    with store_errors("diff_id"):
        stored = fetch(store_of(request), diff_id)
    body: dict[str, Any] = hide_paths_in(stored.model_dump(mode="json"), request_roots(request, principal))
    return body


@router.get("/{diff_id}/figure", responses={200: {"content": {"image/png": {}}}})
def get_figure(request: Request, diff_id: str, _: Annotated[Any, Depends(require("viewer"))]) -> Response:
    """The diff's figure (PNG; a pipeline diff's heatmap panels of its worst samples); 404 when it has none."""
    from repliscope.store.diffs import get_figure as fetch

    if len(diff_id) > 100:
        raise ApiError(422, "a diff id has at most 100 characters", field="path.diff_id", code="invalid")
    with store_errors("diff_id"):
        png = fetch(store_of(request), diff_id)
    if png is None:
        raise ApiError(404, f"diff {diff_id} has no figure", field="diff_id", code="not_found")
    return Response(png, media_type="image/png")
