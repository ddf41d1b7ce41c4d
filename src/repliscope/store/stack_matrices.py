"""The stack matrices store: a ``repliscope stacks`` matrix (``stack_matrices`` table; its runs are runs)."""

from __future__ import annotations

from sqlalchemy import select

from repliscope.records.stack_matrix import StackMatrix
from repliscope.store.database import Database, resolve_id, utc_naive
from repliscope.store.models import StackMatrixRow
from repliscope.store.stored_once import add_once


class StackMatrixStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save(self, matrix: StackMatrix) -> None:
        """Store a stack matrix (a stored id is a ConflictError)."""
        row = StackMatrixRow(
            matrix_id=matrix.matrix_id,
            created_at=utc_naive(matrix.created_at),
            manifest_name=matrix.manifest.name,
            runtime=matrix.runtime,
            dataset_identity=str(matrix.dataset.identity),
            result=matrix.model_dump(mode="json"),
        )
        add_once(self.db, row, "stack matrix", matrix.matrix_id)

    def get(self, matrix_id: str) -> StackMatrix:
        """The stack matrix ``matrix_id`` (or a unique prefix of at least 6 characters)."""
        with self.db.session() as session:
            full_id = resolve_id(
                session,
                StackMatrixRow.matrix_id,
                matrix_id,
                "stack matrix",
                newest_first=StackMatrixRow.created_at,
                recent_in=self.db.shown_url,
            )
            return StackMatrix.model_validate(session.get_one(StackMatrixRow, full_id).result)

    def list(self, limit: int = 50, manifest_name: str | None = None) -> list[StackMatrix]:
        """Stack matrices, newest first (of one model with ``manifest_name``)."""
        query = select(StackMatrixRow.result).order_by(StackMatrixRow.created_at.desc())
        if manifest_name is not None:
            query = query.where(StackMatrixRow.manifest_name == manifest_name)
        with self.db.session() as session:
            return [StackMatrix.model_validate(r) for r in session.scalars(query.limit(limit))]
