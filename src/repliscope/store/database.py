"""One run database: its URL, its engine (migrated on open), and the ONE session wrapper every per-domain store
uses (:meth:`Database.session`), which turns a database failure into a repliscope error
(:mod:`repliscope.store.errors`); and the one id-prefix resolver (:func:`resolve_id`).

Nothing above the store (the CLI, the service) opens a session or sees an ORM row: the stores return pydantic
models or dataclasses (MLflow's ``SqlAlchemyStore`` shape: a ``ManagedSessionMaker`` that maps errors, per-entity
stores behind it).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import platformdirs
from sqlalchemy import Engine, create_engine, event, select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import InstrumentedAttribute, Session

from repliscope.errors import RepliscopeError, StoreError
from repliscope.store import revision
from repliscope.store.errors import AmbiguousIdError, ConflictError, DatabaseError, UnknownIdError

ENV_VAR = "REPLISCOPE_DB"
MIN_PREFIX = 6
"""The shortest id prefix a store resolves (``runs show 0f3a9c``)."""


def default_url() -> str:
    """``$REPLISCOPE_DB`` (a URL, or a path to a SQLite file), else ``repliscope.db`` in the user data dir."""
    env = os.environ.get(ENV_VAR)
    if env:
        return env if "://" in env else sqlite_url(Path(env))
    return user_data_url()


def user_data_url() -> str:
    """The default store: ``repliscope.db`` in the user data dir."""
    return sqlite_url(Path(platformdirs.user_data_dir("repliscope")) / "repliscope.db")


def sqlite_url(path: Path) -> str:
    """SQLAlchemy URL of a SQLite database file."""
    return URL.create("sqlite", database=str(path.expanduser().resolve())).render_as_string()


def hide_password(url: str) -> str:
    """``url`` with any password replaced by ``***`` (also when it does not parse)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def utc_naive(dt: datetime) -> datetime:
    """``dt`` in UTC without an offset (how every time column is stored)."""
    return dt.astimezone(UTC).replace(tzinfo=None) if dt.tzinfo is not None else dt


def now() -> datetime:
    """The current time, naive UTC."""
    return datetime.now(UTC).replace(tzinfo=None)


def _enable_sqlite_foreign_keys(dbapi_conn: Any, _record: Any) -> None:
    """Foreign keys on; a writer waits up to 30 s for a lock (the service's job thread and its API write at
    once) and WAL lets readers go on while one writes."""
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    # switching a new file to WAL can answer "database is locked" at once while another connection migrates it
    # (the busy handler is not always consulted for the journal-mode change): retry for up to 30 s
    deadline = time.monotonic() + 30.0
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            break
        except Exception as exc:  # sqlite3.OperationalError; the DBAPI module is the driver's
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    cursor.close()


def sqlite_folder(url: str, create: bool) -> None:
    """The folder of a SQLite file must exist: created for the default location, else a StoreError (a typo in
    ``--db`` or ``$REPLISCOPE_DB`` must not silently create a new, empty database somewhere)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return  # reported by open_engine
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return
    folder = Path(parsed.database).expanduser().parent
    if folder.is_dir():
        return
    if create:
        folder.mkdir(parents=True, exist_ok=True)
        return
    what = "is not a folder" if folder.exists() else "does not exist"
    raise StoreError(
        f"the folder {folder} of the run database {hide_password(url)} {what}; create it first "
        f"or choose another --db / ${ENV_VAR}"
    )


def open_engine(url: str) -> Engine:
    """An engine on ``url`` whose database is at the newest schema revision (migrated when it is not: Alembic is
    imported only then, :mod:`repliscope.store.revision`)."""
    try:
        parsed = make_url(url)
        engine = create_engine(parsed)
        if parsed.get_backend_name() == "sqlite":
            event.listen(engine, "connect", _enable_sqlite_foreign_keys)
        if not revision.check(engine):
            try:
                from repliscope.store.migrate import upgrade_engine
            except ImportError as exc:  # alembic is a dependency; a broken install says so
                raise StoreError(f"cannot migrate the run database: {exc}; pip install alembic") from exc
            upgrade_engine(engine)
    except ImportError as exc:
        raise StoreError(
            f"the database driver for {hide_password(url)!r} is not installed ({exc}); for PostgreSQL: "
            f"pip install 'repliscope[postgres]'"
        ) from exc
    except (SQLAlchemyError, OSError) as exc:
        raise StoreError(f"cannot open the run database {hide_password(url)}: {exc}") from exc
    return engine


def failure_reason(exc: BaseException) -> str:
    """The first line of a database failure (the driver's message, without the statement SQLAlchemy adds)."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Database:
    """The run database at ``url`` (None: :func:`default_url`), migrated to the newest schema on open. The
    folder of a SQLite file is created only for the default location; for any other URL a missing folder is a
    StoreError."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        sqlite_folder(self.url, create=self.url == user_data_url())
        self.engine = open_engine(self.url)

    @property
    def shown_url(self) -> str:
        """The URL as messages show it (password hidden)."""
        return hide_password(self.url)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def session(
        self, *, write: bool = False, failing: str | None = None, conflict: str | None = None
    ) -> Iterator[Session]:
        """A session (``write``: inside one transaction, committed at the end, rolled back on any error) whose
        objects stay readable after it ends. A repliscope error raised inside passes unchanged; a unique or
        foreign key violation is a :class:`ConflictError` (``conflict``: what could not be stored, the driver's
        reason appended); any other database failure (and an ``OSError``: a full disk) a :class:`DatabaseError`
        "``failing`` the run database URL: reason" (``failing`` defaults to "cannot use")."""
        try:
            with Session(self.engine, expire_on_commit=False) as session:
                if write:
                    with session.begin():
                        yield session
                else:
                    yield session
        except RepliscopeError:
            raise
        except IntegrityError as exc:
            what = conflict or f"{failing or 'a write to'} the run database {self.shown_url} conflicts"
            raise ConflictError(f"{what}: {exc.orig}") from exc
        except (SQLAlchemyError, OSError) as exc:
            reason = failure_reason(exc)
            raise DatabaseError(
                f"{failing or 'cannot use'} the run database {self.shown_url}: {reason}", reason
            ) from exc

    @contextmanager
    def raw_session(self, *, write: bool = False) -> Iterator[Session]:
        """:meth:`session` without the error mapping: SQLAlchemy's exceptions pass as they are (for a caller that
        must tell a failed write from a conflict itself: :mod:`repliscope.store.job_results`)."""
        with Session(self.engine, expire_on_commit=False) as session:
            if write:
                with session.begin():
                    yield session
            else:
                yield session


class HasDatabase(Protocol):
    """What the per-domain stores' module functions take: a :class:`~repliscope.store.repository.RunStore` (or
    anything else holding a :class:`Database` as ``db``)."""

    @property
    def db(self) -> Database: ...


def resolve_id(
    session: Session,
    column: InstrumentedAttribute[Any],
    given: str,
    what: str,
    *,
    newest_first: InstrumentedAttribute[Any] | None = None,
    distinct: bool = False,
    recent_in: str | None = None,
) -> str:
    """The stored ``what`` id that ``given`` is, or is the unique prefix of (at least :data:`MIN_PREFIX`
    characters), in ``column``: the one resolver of runs, sweeps, benchmarks, stack matrices, traces and diffs.

    ``newest_first``: the creation time column (candidates newest first, else by id); ``distinct``: ``column`` is
    not a key (a run's ``sweep_id``); ``recent_in``: the database as messages name it, when an unknown id should
    list the five most recent ones. Unknown: :class:`UnknownIdError`; several matches:
    :class:`AmbiguousIdError` listing ten."""
    if session.scalar(select(column).where(column == given).limit(1)) is not None:
        return given
    if len(given) < MIN_PREFIX:
        raise UnknownIdError(
            f"unknown {what} id '{given}' (a prefix needs at least {MIN_PREFIX} characters)", what, given
        )
    order = [newest_first.desc(), column.desc()] if newest_first is not None else [column]
    query = select(column).where(column.startswith(given, autoescape=True))
    query = query.distinct().order_by(column) if distinct else query.order_by(*order)
    matches: list[str] = list(session.scalars(query.limit(11)).all())
    if len(matches) == 1:
        return matches[0]
    if not matches:
        hint = ""
        if recent_in is not None:
            recent = session.scalars(select(column).order_by(*order).limit(5)).all()
            hint = f" in {recent_in}" + (f"; most recent: {', '.join(recent)}" if recent else "; none stored")
        raise UnknownIdError(f"unknown {what} id '{given}'{hint}", what, given)
    more = " and more" if len(matches) > 10 else ""
    raise AmbiguousIdError(
        f"{what} id prefix '{given}' is ambiguous; candidates: {', '.join(matches[:10])}{more}",
        what,
        given,
        matches[:10],
    )
