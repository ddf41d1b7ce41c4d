"""The databases the store tests run on: a temporary SQLite file, and PostgreSQL when
``$REPLISCOPE_TEST_POSTGRES`` is a URL (``.ci/postgres.sh`` starts one)."""

from __future__ import annotations

import os

from sqlalchemy import Engine, MetaData

POSTGRES = os.environ.get("REPLISCOPE_TEST_POSTGRES")
BACKENDS = ["sqlite", "postgresql"] if POSTGRES else ["sqlite"]


def wipe(engine: Engine) -> None:
    """Drop every table of the database, ``alembic_version`` included (a shared PostgreSQL starts empty)."""
    meta = MetaData()
    meta.reflect(engine)
    meta.drop_all(engine)
