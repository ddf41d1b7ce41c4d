"""The sweeps store: a pitfall sweep's summary (``sweeps`` table; its variants' records are runs)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select

from repliscope.pitfalls.result import SweepResult
from repliscope.store.database import Database, resolve_id, utc_naive
from repliscope.store.models import SweepRow
from repliscope.store.stored_once import add_once


class SweepSummary(BaseModel):
    """One stored sweep as listed (``created_at`` naive UTC)."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    sweep_id: str
    created_at: datetime
    manifest_name: str
    runtime: str
    dataset_identity: str
    num_variants: int


def sweep_row(sweep: SweepResult) -> SweepRow:
    return SweepRow(
        sweep_id=sweep.sweep_id,
        created_at=utc_naive(sweep.created_at),
        manifest_name=sweep.manifest.name,
        runtime=str(sweep.runtime.get("runtime")),
        dataset_identity=str(sweep.dataset.get("identity")),
        num_variants=len(sweep.variants),
        result=sweep.model_dump(mode="json"),
    )


class SweepStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save(self, sweep: SweepResult) -> None:
        """Store a sweep summary (its variants' records are stored as runs); a stored id is a ConflictError."""
        add_once(self.db, sweep_row(sweep), "sweep", sweep.sweep_id)

    def get(self, sweep_id: str) -> SweepResult:
        """The sweep ``sweep_id`` (or a unique prefix of at least 6 characters)."""
        with self.db.session() as session:
            full_id = resolve_id(
                session,
                SweepRow.sweep_id,
                sweep_id,
                "sweep",
                newest_first=SweepRow.created_at,
                recent_in=self.db.shown_url,
            )
            return SweepResult.model_validate(session.get_one(SweepRow, full_id).result)

    def list(self, limit: int = 50) -> list[SweepSummary]:
        """Stored sweeps, newest first."""
        with self.db.session() as session:
            rows = session.scalars(select(SweepRow).order_by(SweepRow.created_at.desc()).limit(limit)).all()
            return [SweepSummary.model_validate(r) for r in rows]
