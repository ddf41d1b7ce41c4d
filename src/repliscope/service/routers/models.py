"""``/api/v1/models``: each stored manifest name with its versions, claims, the best-supported claim verdict per
runtime and dataset (:mod:`repliscope.service.model_verdicts`: a judged verdict beats "not comparable", then the
most samples and the narrowest interval) and the latest per runtime and hardware (from the stored runs)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from repliscope.service.auth import require
from repliscope.service.errors import ERROR_RESPONSES, ApiError
from repliscope.service.routers.common import store_errors, store_of

router = APIRouter(prefix="/models", tags=["models"], responses=ERROR_RESPONSES)
_RUNS_SCANNED = 500


class JudgedClaim(BaseModel):
    """One accuracy claim as the run judged it: the measured value and its 95 % interval against the claimed value
    (fractions), and the direction: ``beats`` (claim below the interval), ``short`` (above), ``within``,
    ``unjudged`` (not comparable, or nothing measured); ``sampling``: how the judged samples were chosen, as in the
    run's claims (``GET /api/v1/runs/{id}``; the record's ``dataset.sampling`` has the details), None when no
    interval was judged and in records stored before it existed."""

    metric: str
    claimed: float | None
    measured: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str
    direction: str
    evaluated_dataset: str
    sampling: Literal["whole split", "random sample", "selection"] | None = Field(
        None,
        description="how the judged samples were chosen (the run record's dataset.sampling has the details); "
        "null when no interval was judged",
    )


class LatestVerdict(BaseModel):
    runtime: str
    hardware: str | None
    verdict: str | None
    run_id: str
    manifest_version: str
    top1: float | None
    ap: float | None
    claims: list[JudgedClaim] = []
    """The run's accuracy claims with value, interval and direction (performance claims: ``repliscope bench``)."""


def _judged(store: Any, run_id: str) -> list[dict[str, Any]]:
    """The accuracy claims of run ``run_id`` as :class:`JudgedClaim` dicts ([] when its record cannot be read)."""
    from repliscope.errors import StoreError
    from repliscope.manifest.schema import PERFORMANCE_METRICS
    from repliscope.service.web.claim_cells import direction_of

    try:
        record = store.get(run_id)
    except StoreError:
        return []
    out = []
    for c in record.claims:
        if c.metric in PERFORMANCE_METRICS:
            continue
        claim = c.model_dump(mode="json")
        out.append(
            {
                **{k: claim.get(k) for k in ("metric", "claimed", "measured", "ci_low", "ci_high", "verdict")},
                "direction": direction_of(claim),
                "evaluated_dataset": str(claim.get("evaluated_dataset", "")),
                "sampling": claim.get("sampling"),
            }
        )
    return out


class BestVerdict(BaseModel):
    """The best-supported verdict of the model on one runtime and dataset, and the run it comes from."""

    runtime: str
    dataset: str
    verdict: str
    judged: bool
    """Whether the chosen run judged a claim (consistent or inconsistent); False: no run on this runtime and
    dataset could (the newest run's "not comparable" or "no claim")."""
    run_id: str
    manifest_version: str
    hardware: str | None
    samples: int
    """Evaluated samples of the chosen run."""
    runs: int
    """Plain runs of the model on this runtime and dataset, the chosen one included."""
    why: str
    evaluated_dataset: str
    claims: list[JudgedClaim] = []


def _best(store: Any, name: str) -> list[dict[str, Any]]:
    from repliscope.service.model_verdicts import best_verdicts
    from repliscope.service.web.claim_cells import direction_of

    out = []
    for row in best_verdicts(store, name):
        for cell in row.cells:
            out.append(
                {
                    "runtime": cell.runtime,
                    "dataset": cell.dataset,
                    "verdict": cell.verdict,
                    "judged": cell.judged,
                    "run_id": cell.run_id,
                    "manifest_version": cell.version,
                    "hardware": None if cell.hardware == "—" else cell.hardware,
                    "samples": cell.samples,
                    "runs": cell.runs,
                    "why": cell.why,
                    "evaluated_dataset": cell.evaluated,
                    "claims": [
                        {
                            **{k: c.get(k) for k in ("metric", "claimed", "measured", "ci_low", "ci_high")},
                            "verdict": cell_claim.verdict,
                            "direction": direction_of(c),
                            "evaluated_dataset": str(c.get("evaluated_dataset", "")),
                            "sampling": c.get("sampling"),
                        }
                        for c, cell_claim in zip(cell.claim_dicts, cell.claims, strict=True)
                    ],
                }
            )
    return out


class ModelOut(BaseModel):
    name: str
    versions: list[str]
    task: str | None
    claims: list[dict[str, Any]]
    """The claims of the newest stored version."""
    best: list[BestVerdict] = []
    """Per (runtime, dataset): the best-supported verdict (what the models pages show)."""
    latest: list[LatestVerdict]
    """Per (runtime, hardware): the newest run's verdict."""


def _model(store: Any, name: str, manifests: list[Any]) -> dict[str, Any]:
    from repliscope.service.routers.manifests import load_text
    from repliscope.store.repository import RunQuery

    claims: list[dict[str, Any]] = []
    task = None
    if manifests:
        try:
            loaded = load_text(manifests[-1].text)
            claims = [c.model_dump(mode="json") for c in loaded.manifest.claims]
            task = loaded.manifest.task
        except ApiError:  # stored before a stricter loader: shown without claims
            pass
    rows, _total = store.query_runs(RunQuery(model=name), sort="-created_at", page=1, page_size=_RUNS_SCANNED)
    latest: dict[tuple[str, str | None], dict[str, Any]] = {}
    for r in rows:
        if r.variant is not None:  # a sweep's variant is not the model as claimed
            continue
        key = (r.runtime, r.cpu_model)
        if key not in latest:
            latest[key] = {
                "runtime": r.runtime,
                "hardware": r.cpu_model,
                "verdict": r.verdict,
                "run_id": r.run_id,
                "manifest_version": r.manifest_version,
                "top1": r.top1,
                "ap": r.ap,
                "claims": _judged(store, r.run_id),
            }
    return {
        "name": name,
        "versions": [m.version for m in manifests],
        "task": task,
        "claims": claims,
        "best": _best(store, name),
        "latest": list(latest.values()),
    }


def _by_name(store: Any) -> dict[str, list[Any]]:
    from repliscope.store.service_tables import list_manifests

    out: dict[str, list[Any]] = {}
    for m in list_manifests(store):
        out.setdefault(m.name, []).append(m)
    return out


@router.get("", response_model=list[ModelOut])
def list_models(request: Request, _: Annotated[Any, Depends(require("viewer"))]) -> Any:
    """Every model with a stored manifest or a stored run."""
    store = store_of(request)
    with store_errors():
        names = _by_name(store)
        for s in store.list(limit=_RUNS_SCANNED):
            names.setdefault(s.manifest_name, [])
        return [_model(store, name, names[name]) for name in sorted(names)]


@router.get("/{name}", response_model=ModelOut)
def get_model(request: Request, name: str, _: Annotated[Any, Depends(require("viewer"))]) -> Any:
    from repliscope.store.repository import RunQuery

    store = store_of(request)
    with store_errors():
        manifests = _by_name(store).get(name, [])
        if not manifests and store.query_runs(RunQuery(model=name), page=1, page_size=1)[1] == 0:
            raise ApiError(404, f"no stored manifest or run of a model '{name}'", field="name", code="not_found")
        return _model(store, name, manifests)
