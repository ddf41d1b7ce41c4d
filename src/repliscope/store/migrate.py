"""Schema migrations of the run store (Alembic, run programmatically; no alembic.ini).

:func:`upgrade` brings any store to the newest revision: a fresh database gets every table; a database created
by a release before migrations (tables present, no ``alembic_version``) first gains the baseline tables and
columns it may lack (as that release's ``upgrade_schema`` did), is stamped at :data:`BASELINE`, then upgraded.
``RunStore`` calls it on open, so the CLI store and the service share one schema history.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

BASELINE = "0001"
"""The revision of the schema the last release before migrations created."""
SCRIPT_LOCATION = Path(__file__).parent / "migrations"
_LOCK = threading.Lock()
"""Alembic's ``context`` is process-global: one upgrade at a time per process (service threads open stores)."""
ADVISORY_KEY = 0x7265706C6973636F  # "replisco"
"""The PostgreSQL advisory lock key held while a store is migrated."""
WAIT_SECONDS = 10.0
"""How long an upgrade that failed waits for another process's concurrent upgrade to reach head."""


@dataclass(frozen=True)
class UpgradeResult:
    """``from_revision``: None for an empty database or one created before migrations (``legacy``);
    ``added``: ``table.column`` / table names a legacy store lacked and gained before it was stamped."""

    from_revision: str | None
    to_revision: str
    legacy: bool = False
    added: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.from_revision != self.to_revision


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPT_LOCATION))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def head() -> str:
    """The newest revision."""
    heads = ScriptDirectory.from_config(_config()).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"the store migrations must have exactly one head, found {heads}")
    return str(heads[0])


def current(engine: Engine) -> str | None:
    """The revision stored in ``alembic_version`` (None when the table is absent)."""
    with engine.connect() as conn:
        rev = MigrationContext.configure(conn).get_current_revision()
    return None if rev is None else str(rev)


def _prepare_legacy(conn: Connection) -> list[str]:
    """Give a pre-migration store the baseline tables and columns it lacks (NULL in existing rows)."""
    from repliscope.store.migrations.versions.r0001_baseline import ADDED_COLUMNS
    from repliscope.store.migrations.versions.r0001_baseline import BASELINE as TABLES

    added = []
    tables = set(inspect(conn).get_table_names())
    for table in TABLES.sorted_tables:
        if table.name not in tables:
            table.create(conn)
            added.append(table.name)
    for table_name, column, sql_type in ADDED_COLUMNS:
        if column not in {c["name"] for c in inspect(conn).get_columns(table_name)}:
            conn.execute(text(f"ALTER TABLE {table_name} ADD COLUMN {column} {sql_type}"))
            added.append(f"{table_name}.{column}")
    return added


def upgrade_engine(engine: Engine) -> UpgradeResult:
    """Upgrade the database of ``engine`` to :func:`head` (nothing to do when it is there already)."""
    target = head()
    before = current(engine)
    if before == target:
        return UpgradeResult(before, target)
    with _LOCK, _process_lock(engine):
        before = current(engine)
        if before == target:  # another thread or process upgraded it meanwhile
            return UpgradeResult(before, target)
        try:
            return _upgrade_locked(engine, before)
        except SQLAlchemyError:
            deadline = time.monotonic() + WAIT_SECONDS
            while time.monotonic() < deadline:  # another process may be creating the same tables
                if current(engine) == target:
                    return UpgradeResult(before, target)
                time.sleep(0.2)
            raise


def lock_path(engine: Engine) -> Path | None:
    """The lock file that serialises migrations of a SQLite store across processes: ``<database>.migrate.lock``
    beside the database file; None for an in-memory database or another dialect."""
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).with_name(Path(database).name + ".migrate.lock")


@contextlib.contextmanager
def _process_lock(engine: Engine) -> Iterator[None]:
    """Hold the migration lock of ``engine``'s database across processes: an exclusive ``flock`` on
    :func:`lock_path` for SQLite (two processes creating a new store raced to 'revision 0004 overlaps 0001'),
    ``pg_advisory_lock`` (:data:`ADVISORY_KEY`) for PostgreSQL; nothing for other dialects. A lock file that
    cannot be created (a read-only folder) is skipped: such a store cannot be migrated anyway."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": ADVISORY_KEY})
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_KEY})
                conn.commit()
        return
    path = lock_path(engine)
    if path is None:
        yield
        return
    try:
        handle = path.open("a+b")
    except OSError:
        yield
        return
    with handle:
        _flock(handle, True)
        try:
            yield
        finally:
            _flock(handle, False)


def _flock(handle: IO[bytes], lock: bool) -> None:
    if sys.platform == "win32":  # pragma: no cover - POSIX CI
        import msvcrt

        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK if lock else msvcrt.LK_UNLCK, 1)
        return
    import fcntl

    fcntl.flock(handle.fileno(), fcntl.LOCK_EX if lock else fcntl.LOCK_UN)


def _upgrade_locked(engine: Engine, before: str | None) -> UpgradeResult:
    legacy = False
    added: list[str] = []
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as conn:
        if sqlite:  # a table rebuild must not cascade to sample rows (a no-op inside a transaction: set before)
            conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
            conn.commit()
        try:
            with conn.begin():
                if before is None and "runs" in inspect(conn).get_table_names():
                    legacy = True
                    added = _prepare_legacy(conn)
                    command.stamp(_config(conn), BASELINE)
                command.upgrade(_config(conn), "head")
        finally:
            if sqlite:
                conn.exec_driver_sql("PRAGMA foreign_keys=ON")
                conn.commit()
    return UpgradeResult(before, current(engine) or "", legacy, added)


def upgrade(url: str) -> UpgradeResult:
    """Upgrade the database at ``url`` to the newest revision (``repliscope db upgrade``)."""
    engine = create_engine(make_url(url))
    try:
        return upgrade_engine(engine)
    finally:
        engine.dispose()
