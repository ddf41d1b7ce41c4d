"""Immutable stored objects (sweeps, benchmarks, stack matrices): inserted once, never replaced."""

from __future__ import annotations

from typing import Any

from repliscope.store.database import Database
from repliscope.store.errors import ConflictError


def add_once(db: Database, row: Any, what: str, object_id: str) -> None:
    """Insert ``row`` (the ORM row of a sweep, a benchmark or a stack matrix); stored objects are immutable, so an
    existing id is a ConflictError."""
    with db.session(
        write=True,
        failing=f"{what} {object_id} could not be written to",
        conflict=f"{what} {object_id} could not be stored",
    ) as session:
        if session.get(type(row), object_id) is not None:
            raise ConflictError(f"{what} {object_id} is already stored")
        session.add(row)
