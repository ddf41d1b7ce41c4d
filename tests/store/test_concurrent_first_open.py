"""Issue 20 item 12: four processes opening a NEW SQLite store at once all succeed (before: one in two trials
exited with Alembic's 'revision 0004 overlaps 0001'); the migrations run once, under the lock beside the file."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from repliscope.store.migrate import head, lock_path
from repliscope.store.repository import RunStore
from tests.store.backends import POSTGRES

OPENER = """
import sys, time
from pathlib import Path
from repliscope.store.repository import RunStore
Path(sys.argv[3]).touch()  # imported: ready to race
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.005)
with RunStore(sys.argv[1]) as store:
    print(len(store.list()))
"""


def _race(url: str, go: Path) -> list[tuple[int, str, str]]:
    """Four processes that import the store, say so, wait for ``go`` and open ``url`` at once: (rc, out, err) each.
    ``go`` is touched as soon as all four are ready (no fixed sleep: a process that exits early fails the race)."""
    ready = [go.with_name(f"{go.name}.ready{i}") for i in range(4)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, url, str(go), str(r)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in ready
    ]
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in ready) and all(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    return [(p.wait(timeout=120), *p.communicate()) for p in procs]


@pytest.mark.slow  # 3 trials x 4 processes importing repliscope's store (about 6 s)
def test_four_processes_open_a_new_store_at_once(tmp_path: Path) -> None:
    for trial in range(3):
        db = tmp_path / f"trial{trial}" / "runs.db"
        db.parent.mkdir()
        url = f"sqlite:///{db}"
        results = _race(url, tmp_path / f"go{trial}")
        assert [(rc, out.strip()) for rc, out, _ in results] == [(0, "0")] * 4, [err[-800:] for *_, err in results]
        with RunStore(url) as store:
            from repliscope.store.migrate import current

            assert current(store.engine) == head()
        assert lock_path(store.engine) == db.with_name("runs.db.migrate.lock")
        assert lock_path(store.engine).exists()  # type: ignore[union-attr]


def test_lock_path_only_for_a_sqlite_file(tmp_path: Path) -> None:
    from sqlalchemy import create_engine

    assert lock_path(create_engine(f"sqlite:///{tmp_path}/x.db")) == tmp_path / "x.db.migrate.lock"
    assert lock_path(create_engine("sqlite://")) is None
    assert lock_path(create_engine("sqlite:///:memory:")) is None


@pytest.mark.slow  # 3 trials x 4 processes on a fresh PostgreSQL database each (about 6 s)
@pytest.mark.skipif(not POSTGRES, reason="needs $REPLISCOPE_TEST_POSTGRES (.ci/postgres.sh starts one)")
def test_four_processes_open_a_new_postgres_store_at_once(tmp_path: Path) -> None:
    """The same race on PostgreSQL: the advisory lock serialises the first migration of a new database."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from repliscope.store.migrate import current

    assert POSTGRES is not None
    admin = create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    for trial in range(3):
        name = f"repliscope_first_open_{trial}"
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
            conn.execute(text(f"CREATE DATABASE {name}"))
        url = make_url(POSTGRES).set(database=name).render_as_string(hide_password=False)
        results = _race(url, tmp_path / f"go{trial}")
        try:
            assert [(rc, out.strip()) for rc, out, _ in results] == [(0, "0")] * 4, [e[-800:] for *_, e in results]
            with RunStore(url) as store:
                assert current(store.engine) == head()
                store.engine.dispose()
        finally:
            with admin.connect() as conn:
                conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()
