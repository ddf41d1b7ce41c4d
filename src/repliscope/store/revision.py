"""The store's schema revision read with one SQL query, so opening a store that is up to date imports no Alembic.

Alembic (and its script directory) costs ~0.1-0.15 s of start-up; every CLI command that opens the store paid it
to learn that there was nothing to migrate. :func:`check` answers that from ``alembic_version`` and the revisions
of the migration files (``migrations/versions/r<NNNN>_<what>.py``, whose ``revision`` is ``"<NNNN>"``: the
names are the revisions, so a new migration cannot be forgotten here); only a store that is not at the newest
(empty, legacy or older) goes through :func:`repliscope.store.migrate.upgrade_engine`, and a store written by a
newer repliscope is a clear error. ``tests/store/test_migrations.py`` pins :func:`known` to Alembic's own view.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from repliscope.errors import StoreError

VERSIONS = Path(__file__).parent / "migrations" / "versions"
_FILE = re.compile(r"r(\d{4})_\w+\.py")


@functools.cache
def known() -> tuple[str, ...]:
    """Every migration's revision, oldest first (``("0001", ..., "0006")``), from the file names."""
    return tuple(sorted(m.group(1) for p in VERSIONS.iterdir() if (m := _FILE.fullmatch(p.name))))


def head() -> str:
    """The newest revision."""
    return known()[-1]


def stored_revision(engine: Engine) -> str | None:
    """The revision in ``alembic_version``; None when the table cannot be read (absent: an empty or legacy store;
    or any other error, which the migration then meets and reports) or does not hold exactly one row. A
    database that cannot be reached raises (SQLAlchemyError) here rather than being retried by the migration."""
    with engine.connect() as conn:
        try:
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).all()
        except SQLAlchemyError:
            return None
    return str(rows[0][0]) if len(rows) == 1 else None


def check(engine: Engine) -> bool:
    """True when the database of ``engine`` is at :func:`head` (nothing to migrate), False when it needs the
    migration; StoreError when it is at a revision this repliscope does not know (a newer release wrote it)."""
    stored = stored_revision(engine)
    if stored is not None and stored not in known():
        raise StoreError(
            f"the run database is at schema revision {stored}, which this repliscope does not know (it knows "
            f"{known()[0]}..{head()}): it was written by a newer repliscope; upgrade repliscope to use it"
        )
    return stored == head()
