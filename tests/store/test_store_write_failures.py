"""Issue 20 item 10: a store write that fails (a full disk: SQLite's SQLITE_FULL, made real with
``PRAGMA max_page_count``; a read-only database) says so, naming the database and the error, keeps the record as
JSON, and ``repliscope runs import FILE`` stores it later. A read-only store can still be listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import event
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.errors import StoreError
from repliscope.evaluation.record import EvaluationRecord
from repliscope.store.repository import RunStore, keep_unsaved
from tests.store.records import make_record

TOP1 = [3, 3, 5, None, 7, 1, 2, 0, 9, 4] * 2


def _record(run_id: str, manifest_bytes: int = 0) -> EvaluationRecord:
    """20 samples; with ``manifest_bytes`` a manifest text that long (it needs new database pages)."""
    record = make_record(run_id, TOP1)
    if not manifest_bytes:
        return record
    return record.model_copy(update={"manifest": record.manifest.model_copy(update={"text": "#" * manifest_bytes})})


def _limit_pages(store: RunStore, pages: int | None = None, query_only: bool = False) -> None:
    """Every new connection of ``store`` gets a page limit (a full disk) or is read-only."""

    def on_connect(dbapi_connection: object, _: object) -> None:
        cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
        if pages is not None:
            cursor.execute(f"PRAGMA max_page_count = {pages}")
        if query_only:
            cursor.execute("PRAGMA query_only = ON")
        cursor.close()

    event.listen(store.engine, "connect", on_connect)
    store.engine.dispose()


def test_full_disk_keeps_the_record_and_runs_import_stores_it(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    store = RunStore(url)
    with store.engine.connect() as conn:
        pages = int(conn.exec_driver_sql("PRAGMA page_count").scalar_one())
    _limit_pages(store, pages=pages)
    record = _record("a" * 32, manifest_bytes=200_000)
    with pytest.raises(StoreError) as ei:
        store.save(record)
    kept = tmp_path / "unsaved-runs" / f"{'a' * 32}.json"
    assert str(ei.value) == (
        f"run {'a' * 32} could not be written to the run database {url}: database or disk is "
        f"full; the record is kept in {kept}: store it later with `repliscope runs import "
        f"{kept}`"
    )
    assert EvaluationRecord.model_validate_json(kept.read_bytes()) == record
    store.close()
    res = CliRunner().invoke(app, ["runs", "import", str(kept), "--db", url, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == [{"file": str(kept), "run_id": "a" * 32}]
    with RunStore(url) as again:
        assert again.get("a" * 32) == record
    twice = CliRunner().invoke(app, ["runs", "import", str(kept), "--db", url])
    assert twice.exit_code == 2
    assert twice.stderr == f"error: run {'a' * 32} is already stored; delete it first to replace it\n"


def test_read_only_store_lists_and_a_write_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as store:
        store.save(_record("b" * 32))
    store = RunStore(url)
    _limit_pages(store, query_only=True)
    assert [r.run_id for r in store.list()] == ["b" * 32]
    with pytest.raises(StoreError, match=r"attempt to write a readonly database; the record is kept in "):
        store.save(_record("c" * 32))
    assert (tmp_path / "unsaved-runs" / f"{'c' * 32}.json").is_file()


def test_keep_unsaved_falls_back_to_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "store"
    blocked.mkdir()
    (blocked / "unsaved-runs").write_text("a file where the folder would go")
    monkeypatch.setenv("REPLISCOPE_CACHE", str(tmp_path / "cache"))
    kept, problems = keep_unsaved(_record("d" * 32), f"sqlite:///{blocked / 'runs.db'}")
    assert kept == tmp_path / "cache" / "unsaved-runs" / f"{'d' * 32}.json" and problems == []


def test_runs_import_refuses_a_file_that_is_not_a_record(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"run_id": 3}')
    res = CliRunner().invoke(app, ["runs", "import", str(bad), "--db", f"sqlite:///{tmp_path / 'r.db'}"])
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: {bad}: not an evaluation record (")
