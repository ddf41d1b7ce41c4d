"""The traces store: one Chrome-trace JSON per run or benchmark id (``traces`` table, zlib-compressed)."""

from __future__ import annotations

import json
import zlib
from typing import Any

from repliscope.store.database import Database, now, resolve_id
from repliscope.store.errors import UnknownIdError
from repliscope.store.models import TraceRow


class TraceStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save(self, run_id: str, level: str, chrome: dict[str, Any]) -> None:
        """Store the Chrome-trace JSON ``chrome`` of run / benchmark ``run_id``; a trace already stored under
        ``run_id`` is replaced (one trace per id, the latest)."""
        blob = zlib.compress(json.dumps(chrome, separators=(",", ":")).encode(), 6)
        row = TraceRow(run_id=run_id, created_at=now(), level=level, trace=blob)
        with self.db.session(write=True, failing=f"the trace of {run_id} could not be written to") as session:
            session.merge(row)

    def load(self, run_id: str) -> dict[str, Any] | None:
        """The Chrome-trace JSON stored for ``run_id`` (exact id, or a unique prefix of at least 6 characters);
        None when no trace matches; an ambiguous prefix is an AmbiguousIdError."""
        with self.db.session() as session:
            try:
                full_id = resolve_id(session, TraceRow.run_id, run_id, "trace", newest_first=TraceRow.created_at)
            except UnknownIdError:
                return None
            data: dict[str, Any] = json.loads(zlib.decompress(session.get_one(TraceRow, full_id).trace))
        return data
