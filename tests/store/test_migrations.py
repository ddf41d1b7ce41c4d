"""Alembic migrations: a fresh store is created at head; a store made by the release before migrations (no
``alembic_version``) is stamped at the baseline, upgraded, and keeps its records; ``repliscope db upgrade``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, insert, inspect, select
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.store import RunStore
from repliscope.store.migrate import BASELINE, current, head, upgrade
from repliscope.store.migrations.versions.r0001_baseline import BASELINE as BASELINE_TABLES
from repliscope.store.models import Base, RunRow
from repliscope.store.repository import _run_row
from tests.store.backends import BACKENDS, POSTGRES, wipe
from tests.store.records import TOP1_A, TOP1_B, make_record


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
        return
    engine = create_engine(str(POSTGRES))
    wipe(engine)
    try:
        yield str(POSTGRES)
    finally:
        wipe(engine)
        engine.dispose()


def _previous_release_store(url: str, with_detection_columns: bool = True) -> None:
    """What the release before migrations wrote: its tables via ``create_all`` (no alembic_version), one stored
    record with its samples."""
    engine = create_engine(url)
    BASELINE_TABLES.create_all(engine)
    record = make_record("a" * 32, TOP1_A)
    row = _run_row(record)
    runs, samples = BASELINE_TABLES.tables["runs"], BASELINE_TABLES.tables["sample_predictions"]
    with engine.begin() as conn:
        conn.execute(insert(runs).values({c.name: getattr(row, c.name) for c in runs.columns}))
        conn.execute(
            insert(samples),
            [
                {"run_id": record.run_id, "position": i, **s.model_dump(mode="json")}
                for i, s in enumerate(record.samples)
            ],
        )
        if not with_detection_columns:
            conn.exec_driver_sql("ALTER TABLE sample_predictions DROP COLUMN detections")
            conn.exec_driver_sql("ALTER TABLE runs DROP COLUMN ap")
    engine.dispose()


def _schema_diff(url: str) -> list[object]:
    engine = create_engine(url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    return list(diff)


def test_fresh_store_is_created_at_head_and_matches_the_models(url: str) -> None:
    with RunStore(url) as store:
        assert current(store.engine) == head() == "0009"
        assert {
            "runs",
            "sample_predictions",
            "sweeps",
            "benchmarks",
            "traces",
            "tokens",
            "datasets_registry",
            "manifests",
            "jobs",
            "alembic_version",
        } <= set(inspect(store.engine).get_table_names())
    assert _schema_diff(url) == []
    if url.startswith("sqlite"):  # the large record JSON is the last column (filter columns stay in-row)
        assert [c["name"] for c in inspect(create_engine(url)).get_columns("runs")][-1] == "record"
    result = upgrade(url)  # already at head: nothing to do
    assert (result.from_revision, result.to_revision, result.changed) == ("0009", "0009", False)


@pytest.mark.parametrize("detection_columns", [True, False])
def test_store_of_the_previous_release_is_stamped_upgraded_and_keeps_its_run(url: str, detection_columns: bool) -> None:
    _previous_release_store(url, with_detection_columns=detection_columns)
    assert "alembic_version" not in inspect(create_engine(url)).get_table_names()
    result = upgrade(url)
    assert result.legacy and result.from_revision is None and result.to_revision == head()
    expected_added = [] if detection_columns else ["sample_predictions.detections", "runs.ap"]
    assert result.added == expected_added
    assert _schema_diff(url) == []
    if url.startswith("sqlite"):
        assert [c["name"] for c in inspect(create_engine(url)).get_columns("runs")][-1] == "record"
    with RunStore(url) as store:
        assert store.get("a" * 32) == make_record("a" * 32, TOP1_A)
        summary = store.list()[0]
        # the new query columns are filled from the stored record
        assert (summary.framework_version, summary.cpu_model, summary.verdict) == (
            "1.31.1",
            "AMD EPYC",
            "not comparable",
        )
        new = make_record("b" * 32, TOP1_B)
        store.save(new)
        assert store.get("b" * 32) == new
        with store.engine.connect() as conn:
            assert conn.scalar(select(RunRow.verdict).where(RunRow.run_id == "b" * 32)) == "not comparable"


def test_runstore_opens_a_previous_release_store_directly(url: str) -> None:
    _previous_release_store(url)
    with RunStore(url) as store:
        assert current(store.engine) == head()
        assert store.get("a" * 32) == make_record("a" * 32, TOP1_A)


def test_db_upgrade_command_prints_the_revisions(url: str) -> None:
    _previous_release_store(url)
    runner = CliRunner()
    out = runner.invoke(app, ["db", "upgrade", "--db", url])
    assert out.exit_code == 0, out.output
    assert f"from: none (created before migrations; stamped {BASELINE})" in out.output
    assert f"to: {head()}" in out.output
    again = runner.invoke(app, ["db", "upgrade", "--db", url])
    assert again.exit_code == 0, again.output
    assert f"from: {head()}" in again.output and "already at the newest revision" in again.output


def test_db_upgrade_of_an_empty_database(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["db", "upgrade", "--db", f"sqlite:///{tmp_path / 'new.db'}"])
    assert out.exit_code == 0, out.output
    assert "from: none (empty database)" in out.output and f"to: {head()}" in out.output


def test_db_upgrade_refuses_a_missing_folder(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["db", "upgrade", "--db", f"sqlite:///{tmp_path / 'nope' / 'x.db'}"])
    assert out.exit_code == 2
    assert "does not exist" in out.output


def test_concurrent_opens_of_a_fresh_store_all_succeed(tmp_path: Path) -> None:
    """The service opens stores from several threads; Alembic's context is process-global (upgrades serialised)."""
    import threading

    url = f"sqlite:///{tmp_path / 'race.db'}"
    errors: list[BaseException] = []

    def open_store() -> None:
        try:
            RunStore(url).close()
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert current(create_engine(url)) == head()


def test_model_and_runtime_filter_uses_its_index(tmp_path: Path) -> None:
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store, store.engine.connect() as conn:
        plan = " ".join(
            str(row[-1])
            for row in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN SELECT run_id FROM runs WHERE manifest_name = 'm' AND runtime = 'onnxruntime' "
                "ORDER BY created_at DESC LIMIT 50"
            )
        )
    assert "ix_runs_model_runtime" in plan, plan


def test_revision_files_are_alembics_and_known_stores_skip_alembic(url: str, tmp_path: Path) -> None:
    from alembic.script import ScriptDirectory

    from repliscope.store import revision
    from repliscope.store.migrate import SCRIPT_LOCATION, _config

    script = ScriptDirectory.from_config(_config())
    assert revision.known() == tuple(reversed([s.revision for s in script.walk_revisions()]))
    assert revision.head() == head() == revision.known()[-1] and revision.VERSIONS.parent == SCRIPT_LOCATION
    engine = create_engine(url)
    assert revision.stored_revision(engine) is None and not revision.check(engine)  # empty: the migration runs
    RunStore(url).close()
    assert revision.stored_revision(engine) == head() and revision.check(engine)
    engine.dispose()
    if not url.startswith("sqlite"):
        return
    code = (
        "import sys; from repliscope.store import RunStore; RunStore(sys.argv[1]).close(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))"
    )
    out = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # an up-to-date store opens without importing Alembic
    older = tmp_path / "older.db"
    _previous_release_store(f"sqlite:///{older}")
    out = subprocess.run(
        [sys.executable, "-c", code, f"sqlite:///{older}"], capture_output=True, text=True, check=True
    ).stdout
    assert "'alembic'" in out  # a legacy store is migrated by Alembic
    assert current(create_engine(f"sqlite:///{older}")) == head()


def test_a_store_from_a_newer_release_is_a_clear_error(tmp_path: Path) -> None:
    from repliscope.errors import StoreError

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    RunStore(url).close()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0099'")
    with pytest.raises(StoreError, match=r"schema revision 0099, which this repliscope does not know \(it knows "):
        RunStore(url)
    with engine.begin() as conn:  # two rows: not a revision the fast path trusts; Alembic then refuses it too
        conn.exec_driver_sql(f"UPDATE alembic_version SET version_num = '{head()}'")
        conn.exec_driver_sql("INSERT INTO alembic_version VALUES ('0005')")
    from repliscope.store.revision import stored_revision

    assert stored_revision(engine) is None
    engine.dispose()


def test_unreachable_database_is_one_clear_error() -> None:
    pytest.importorskip("psycopg")
    from repliscope.errors import StoreError

    url = "postgresql+psycopg://nobody:secret@127.0.0.1:1/none"  # nothing listens on port 1
    with pytest.raises(StoreError, match=r"cannot open the run database .*127\.0\.0\.1:1/none") as err:
        RunStore(url)
    assert "secret" not in str(err.value)
