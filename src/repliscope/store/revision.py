"""The store's schema revision read with one SQL query, so opening a store that is up to date imports no Alembic.

Alembic (and its script directory) costs ~0.1-0.15 s of start-up; every CLI command that opens the store paid it
to learn that there was nothing to migrate. :func:`up_to_date` answers that from ``alembic_version`` and
:data:`HEAD`; only a store that is not at :data:`HEAD` (empty, legacy, older or newer) goes through
:func:`repliscope.store.migrate.upgrade_engine`. ``tests/store/test_migrations.py`` pins :data:`HEAD` to the
migrations' own head.
"""

from __future__ import annotations

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

HEAD = "0006"
"""The newest migration's revision (``migrations/versions/r<HEAD>_*.py``); a new migration updates it."""


def stored_revision(engine: Engine) -> str | None:
    """The revision in ``alembic_version`` (None when the table is absent, empty or holds several rows). A
    database that cannot be reached raises (SQLAlchemyError) rather than being retried by the migration."""
    with engine.connect() as conn:
        try:
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).all()
        except SQLAlchemyError:  # no such table: an empty or legacy store
            return None
    return str(rows[0][0]) if len(rows) == 1 else None


def up_to_date(engine: Engine) -> bool:
    """True when the database of ``engine`` is at :data:`HEAD`: nothing to migrate."""
    return stored_revision(engine) == HEAD
