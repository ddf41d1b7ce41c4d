"""Stored diffs (the ``diffs`` table, migration 0005): task-level, layer-level, pipeline and training diffs
(augmentation, loss, gradient, training step) exactly as ``repliscope diff --json`` prints them, with a listing
summary and an optional PNG (a pipeline diff's heatmaps).

Each kind has one describer (:data:`DESCRIBERS`) that turns its result into the listing columns; ``DIFF_KINDS`` is
their keys. The loss, gradient and training-step diffs share one headline contract (:class:`TrainingDiffHeadline`).

:class:`DiffStore` is the store; the module functions (:func:`store_diff`, :func:`list_diffs`, :func:`get_diff`,
:func:`get_figure`) take an open :class:`~repliscope.store.repository.RunStore` (anything holding a ``db``), and
:func:`save_diff` a URL (None: the default store), as the CLI calls it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from sqlalchemy import func, select

from repliscope.errors import StoreError
from repliscope.store.database import Database, HasDatabase, resolve_id
from repliscope.store.models import DiffRow

MAX_FIGURE_BYTES = 8 << 20
"""A stored figure is at most 8 MiB (three heatmap rows are about 200 KB)."""


class DiffSummary(BaseModel):
    """One listed diff (the stored ``result`` is fetched by :func:`get_diff`)."""

    model_config = ConfigDict(extra="forbid")
    diff_id: str
    created_at: datetime
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


class StoredDiff(DiffSummary):
    result: dict[str, Any]


class TrainingDiffHeadline(BaseModel):
    """What a loss, gradient or training-step diff result must carry to be stored (its other fields are kept
    as they are): ``reference`` and ``candidate`` name the two sides, ``samples`` counts what was compared (samples
    or steps), ``passed`` is the verdict, ``first_divergent`` names the first quantity over tolerance."""

    model_config = ConfigDict(extra="allow")
    kind: str
    reference: str
    candidate: str
    samples: int
    passed: bool
    manifest: str = ""
    dataset: str = ""
    first_divergent: str | None = None
    summary: str | None = None
    """The result's own one-line summary, listed as it is (else one is made from ``first_divergent``)."""


Columns = dict[str, Any]


def _pipeline_columns(result: dict[str, Any], manifest_name: str) -> Columns:
    diag = result.get("diagnosis") or {}
    return {
        "manifest_name": result.get("manifest_name", manifest_name),
        "a": f"{result.get('manifest_name', manifest_name)} pre-processing",
        "b": str(result.get("candidate", "")),
        "dataset": str(result.get("dataset", "")),
        "samples": int(result.get("samples", 0)),
        "verdict": str(result.get("verdict", "")),
        "summary": str(diag.get("message", "")),
    }


def _layer_columns(result: dict[str, Any], manifest_name: str) -> Columns:
    first = {m: d for m, d in (result.get("first_divergent") or {}).items() if d}
    verdict = "failed" if first or not (result.get("output") or {}).get("passed", True) else "passed"
    where = "; ".join(f"{m}: first divergent {d.get('path', '?')}" for m, d in first.items())
    return {
        "manifest_name": manifest_name,
        "a": str((result.get("reference") or {}).get("framework", "")),
        "b": str((result.get("candidate") or {}).get("candidate", "")),
        "dataset": "",
        "samples": len(result.get("samples") or []),
        "verdict": verdict,
        "summary": where or f"{len(result.get('layers') or [])} layers within tolerance",
    }


def _task_columns(result: dict[str, Any], manifest_name: str) -> Columns:
    agreement = result.get("agreement")
    flips = len(result.get("flips") or [])
    mc = result.get("mcnemar")
    text = "no sample compared" if agreement is None else f"agreement {agreement:.2%}, {flips} flipped"
    if mc:
        text += f", McNemar p = {mc.get('p_value', 1.0):.3g}"
    return {
        "manifest_name": manifest_name,
        "a": str(result.get("a", "")),
        "b": str(result.get("b", "")),
        "dataset": str(result.get("dataset", "")),
        "samples": int(result.get("compared", 0)),
        "verdict": "agree" if agreement == 1.0 else "differ",
        "summary": text,
    }


def _augmentation_columns(result: dict[str, Any], manifest_name: str) -> Columns:
    """``repliscope diff --augment`` (``diff.augment.driver.AugmentDiffResult``)."""
    pipeline = result.get("pipeline") or {}
    first = result.get("first_divergent")
    return {
        "manifest_name": str(result.get("manifest") or manifest_name),
        "a": f"{pipeline.get('pipeline', '')} ({pipeline.get('origin', '')})",
        "b": str(result.get("candidate", "")),
        "dataset": str(result.get("dataset", "")),
        "samples": int(result.get("samples", 0)),
        "verdict": "passed" if first is None else "failed",
        "summary": (
            f"{result.get('draws', '')} draws: "
            + ("every op matches the original" if first is None else f"first divergent op: {first}")
        ),
    }


def _training_columns(result: dict[str, Any], manifest_name: str) -> Columns:
    """A loss, gradient or training-step diff (:class:`TrainingDiffHeadline`)."""
    try:
        head = TrainingDiffHeadline.model_validate(result)
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) + f" ({e['msg']})" for e in exc.errors())
        raise StoreError(
            f"a {result.get('kind')} result cannot be stored: {fields}; it needs reference, candidate (str), "
            "samples (int) and passed (bool)"
        ) from None
    return {
        "manifest_name": head.manifest or manifest_name,
        "a": head.reference,
        "b": head.candidate,
        "dataset": head.dataset,
        "samples": head.samples,
        "verdict": "passed" if head.passed else "failed",
        "summary": head.summary
        or ("within tolerance" if head.first_divergent is None else f"first divergent: {head.first_divergent}"),
    }


DESCRIBERS: dict[str, Callable[[dict[str, Any], str], Columns]] = {
    "task_diff": _task_columns,
    "layer_diff": _layer_columns,
    "pipeline_diff": _pipeline_columns,
    "augmentation_diff": _augmentation_columns,
    "loss_diff": _training_columns,
    "gradient_diff": _training_columns,
    "training_step_diff": _training_columns,
}
"""The listing columns of each stored diff kind (the kind a result's ``kind`` field names)."""

DIFF_KINDS: tuple[str, ...] = tuple(DESCRIBERS)


def describe(result: dict[str, Any], manifest_name: str = "") -> dict[str, Any]:
    """The listing columns of one diff result (its ``kind`` decides where they come from)."""
    kind = result.get("kind")
    describer = DESCRIBERS.get(kind) if isinstance(kind, str) else None
    if describer is None:
        raise StoreError(f"unknown diff kind {kind!r} (allowed: {', '.join(DIFF_KINDS)})")
    return describer(result, manifest_name)


def diff_row(
    result: dict[str, Any], *, manifest_name: str = "", figure: bytes | None = None, created_by: str | None = None
) -> DiffRow:
    """The ``diffs`` row of one diff result, with a new id (also stored with a diff job's results:
    :mod:`repliscope.store.job_results`)."""
    if figure is not None and len(figure) > MAX_FIGURE_BYTES:
        raise StoreError(f"the diff figure is {len(figure)} bytes (at most {MAX_FIGURE_BYTES})")
    return DiffRow(
        diff_id=uuid.uuid4().hex,
        created_at=datetime.now(UTC).replace(tzinfo=None),
        kind=str(result.get("kind")),
        created_by=created_by,
        result=result,
        figure=figure,
        **describe(result, manifest_name),
    )


_LISTED = [c for c in DiffRow.__table__.columns if c.name not in ("result", "figure")]


class DiffStore:
    """The stored diffs of ``db``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def save(
        self,
        result: dict[str, Any],
        *,
        manifest_name: str = "",
        figure: bytes | None = None,
        created_by: str | None = None,
    ) -> str:
        """Store one diff result; returns its new id (32 hex characters)."""
        row = diff_row(result, manifest_name=manifest_name, figure=figure, created_by=created_by)
        with self.db.session(write=True, failing=f"the {row.kind} could not be written to") as session:
            session.add(row)
        return row.diff_id

    def list(
        self, *, kind: str | None = None, manifest_name: str | None = None, limit: int = 50, offset: int = 0
    ) -> tuple[list[DiffSummary], int]:
        """Newest first -> (page, total matching)."""
        if kind is not None and kind not in DIFF_KINDS:
            raise StoreError(f"unknown diff kind {kind!r} (allowed: {', '.join(DIFF_KINDS)})")
        query = select(*_LISTED, DiffRow.figure.is_not(None).label("has_figure"))
        count = select(func.count()).select_from(DiffRow)
        if kind is not None:
            query, count = query.where(DiffRow.kind == kind), count.where(DiffRow.kind == kind)
        if manifest_name is not None:
            query = query.where(DiffRow.manifest_name == manifest_name)
            count = count.where(DiffRow.manifest_name == manifest_name)
        with self.db.session() as session:
            page = query.order_by(DiffRow.created_at.desc()).offset(offset).limit(limit)
            rows = session.execute(page).mappings().all()
            total = int(session.scalar(count) or 0)
        return [DiffSummary(**dict(r)) for r in rows], total

    def get(self, diff_id: str) -> StoredDiff:
        """One stored diff by id or unique prefix (UnknownIdError / AmbiguousIdError)."""
        with self.db.session() as session:
            row = session.get_one(DiffRow, resolve_id(session, DiffRow.diff_id, diff_id, "diff"))
            return StoredDiff(**_summary(row).model_dump(), result=row.result)

    def figure(self, diff_id: str) -> bytes | None:
        """The stored figure (PNG) of a diff, None when it has none."""
        with self.db.session() as session:
            return session.get_one(DiffRow, resolve_id(session, DiffRow.diff_id, diff_id, "diff")).figure


def _summary(row: DiffRow) -> DiffSummary:
    return DiffSummary(
        diff_id=row.diff_id,
        created_at=row.created_at,
        kind=row.kind,
        manifest_name=row.manifest_name,
        a=row.a,
        b=row.b,
        dataset=row.dataset,
        samples=row.samples,
        verdict=row.verdict,
        summary=row.summary,
        created_by=row.created_by,
        has_figure=row.figure is not None,
    )


# ---- the function API (what the CLI, the service and other modules call) -----------------------------------


def store_diff(
    store: HasDatabase,
    result: dict[str, Any],
    *,
    manifest_name: str = "",
    figure: bytes | None = None,
    created_by: str | None = None,
) -> str:
    """Store one diff result; returns its new id (32 hex characters)."""
    return DiffStore(store.db).save(result, manifest_name=manifest_name, figure=figure, created_by=created_by)


def save_diff(url: str | None, result: dict[str, Any], *, manifest_name: str = "", figure: bytes | None = None) -> str:
    """:func:`store_diff` into the store at ``url`` (None: the default store)."""
    db = Database(url)
    try:
        return DiffStore(db).save(result, manifest_name=manifest_name, figure=figure)
    finally:
        db.close()


def list_diffs(
    store: HasDatabase, *, kind: str | None = None, manifest_name: str | None = None, limit: int = 50, offset: int = 0
) -> tuple[list[DiffSummary], int]:
    """Newest first -> (page, total matching)."""
    return DiffStore(store.db).list(kind=kind, manifest_name=manifest_name, limit=limit, offset=offset)


def get_diff(store: HasDatabase, diff_id: str) -> StoredDiff:
    """One stored diff by id or unique prefix (StoreError when unknown or ambiguous)."""
    return DiffStore(store.db).get(diff_id)


def get_figure(store: HasDatabase, diff_id: str) -> bytes | None:
    """The stored figure of a diff (id or unique prefix), None when it has none."""
    return DiffStore(store.db).figure(diff_id)
