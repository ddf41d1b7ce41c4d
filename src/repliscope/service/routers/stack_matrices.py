"""``/api/v1/stack-matrices``: the stored ``repliscope stacks`` matrices (the same samples on several software
stacks: top-1 per stack, and per pair agreement, flipped samples, max |Δ output| and result-hash equality)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel

from repliscope.service.auth import require
from repliscope.service.errors import ERROR_RESPONSES
from repliscope.service.routers.common import UtcDatetime, store_errors, store_of
from repliscope.stacks.matrix import StackMatrix

router = APIRouter(prefix="/stack-matrices", tags=["stacks"], responses=ERROR_RESPONSES)


class StackMatrixSummary(BaseModel):
    """One stored matrix in a list: what ran, on which stacks, and its headline figures."""

    matrix_id: str
    created_at: UtcDatetime
    manifest: str
    """name@version"""
    runtime: str
    dataset_identity: str
    samples: int
    stacks: list[str]
    """each stack's spec (``current`` = the service's own environment)"""
    failed_stacks: list[str]
    """the specs of the stacks that could not run the job (no run, no pair)"""
    min_agreement: float | None
    """the lowest top-1 agreement over the pairs (fraction 0..1); None with one stack"""
    all_hashes_equal: bool
    """every pair has the same result hash"""


def summary(m: StackMatrix) -> dict[str, Any]:
    agreements = [p.agreement for p in m.pairs if p.agreement is not None]
    return {
        "matrix_id": m.matrix_id,
        "created_at": m.created_at,
        "manifest": f"{m.manifest.name}@{m.manifest.version}",
        "runtime": m.runtime,
        "dataset_identity": str(m.dataset.identity),
        "samples": int(m.dataset.n),
        "stacks": [s.spec for s in m.stacks],
        "failed_stacks": [s.spec for s in m.stacks if s.error],
        "min_agreement": min(agreements) if agreements else None,
        "all_hashes_equal": all(p.result_hash_equal for p in m.pairs),
    }


@router.get("", response_model=list[StackMatrixSummary])
def list_matrices(
    request: Request,
    principal: Annotated[Any, Depends(require("viewer"))],
    model: Annotated[str | None, Query(max_length=200, description="only this manifest name")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> Any:
    """Stored stack matrices, newest first (below the role admin, server paths as in ``GET /stack-matrices/{id}``)."""
    from repliscope.service.redaction import hide_paths_in, request_roots

    with store_errors():
        matrices = store_of(request).list_stack_matrices(limit=limit, manifest_name=model)
    roots = request_roots(request, principal)
    return [hide_paths_in(summary(m), roots) for m in matrices]


@router.get("/{matrix_id}", response_model=StackMatrix)
def get_matrix(request: Request, matrix_id: str, principal: Annotated[Any, Depends(require("viewer"))]) -> Any:
    """One matrix (its id or a unique prefix of at least 6 characters): every stack's versions, agent, run,
    metrics and timing, and every pair's agreement, flipped sample ids and output differences. Below the role
    admin, server paths (a stack's environment, its error) read relative to named roots or as ``…/a/b``."""
    from repliscope.service.redaction import hide_paths_in, request_roots

    with store_errors("matrix_id"):
        matrix = store_of(request).get_stack_matrix(matrix_id)
    roots = request_roots(request, principal)
    return matrix if roots is None else hide_paths_in(matrix.model_dump(mode="json"), roots)
