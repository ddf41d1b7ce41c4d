"""Issue 33 item 5, the store boundary: one session wrapper maps database failures to the store's errors (naming
the operation, the database and the reason; nothing half-written), one id-prefix resolver for every kind of id
(hostile prefixes included), the runs queries the pages make return typed results, and nothing in the command line
or the service imports the ORM rows or opens a session."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import event, insert

import repliscope
from repliscope.errors import StoreError
from repliscope.store.database import Database, resolve_id
from repliscope.store.datasets import list_datasets
from repliscope.store.errors import (
    AmbiguousIdError,
    ConflictError,
    DatabaseError,
    InvalidInputError,
    UnknownIdError,
)
from repliscope.store.jobs import create_job, list_jobs
from repliscope.store.manifests import list_manifests, put_manifest
from repliscope.store.models import JobResultRow, TraceRow
from repliscope.store.repository import RunStore
from repliscope.store.runs import LatestRun
from tests.store.records import TOP1_A, TOP1_B, make_record

T0 = datetime(2026, 11, 21, 23, 30, 5, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RunStore]:
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as s:
        yield s


def _read_only(store: RunStore) -> None:
    """Every new connection of ``store`` refuses writes (SQLite's ``query_only``), as a read-only database."""

    def on_connect(dbapi_connection: object, _: object) -> None:
        cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
        cursor.execute("PRAGMA query_only = ON")
        cursor.close()

    event.listen(store.engine, "connect", on_connect)
    store.engine.dispose()


def test_a_failing_write_is_a_database_error_naming_the_operation_and_the_database(store: RunStore) -> None:
    create_job(store, "evaluate", "tiny-resnet@1.0.0", "torch", "foolbox", {}, job_id="job-1")
    _read_only(store)
    with pytest.raises(DatabaseError) as err:
        create_job(store, "evaluate", "tiny-resnet@1.0.0", "torch", "foolbox", {}, job_id="job-2")
    assert str(err.value) == (
        f"job job-2 could not be created in the run database {store.url}: attempt to write a readonly database"
    )
    assert err.value.reason == "attempt to write a readonly database"
    with pytest.raises(DatabaseError, match=r"^manifest m@1 could not be written to the run database .*readonly"):
        put_manifest(store, "m", "1", "name: m\n")
    assert [j.id for j in list_jobs(store)] == ["job-1"]  # reads go on; nothing of the writes is stored
    assert list_manifests(store) == []


def test_a_unique_key_taken_is_a_conflict_error_and_the_transaction_is_rolled_back(store: RunStore) -> None:
    row = {"idempotency_key": "k", "kind": "evaluate", "result_ids": {}, "created_at": T0.replace(tzinfo=None)}
    refused = r"^the results of k could not be stored: UNIQUE constraint failed"
    with (
        pytest.raises(ConflictError, match=refused),
        store.db.session(write=True, conflict="the results of k could not be stored") as session,
    ):
        session.execute(insert(JobResultRow), [row])
        session.add(TraceRow(run_id="t-1", created_at=T0.replace(tzinfo=None), level="model", trace=b"x"))
        session.execute(insert(JobResultRow), [row])
    assert store.count_job_results() == 0 and store.load_trace("t-1") is None  # nothing of it was written


def test_the_password_of_the_url_is_never_in_a_message(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'a.db'}")
    db.url = "postgresql://reader:s3cret@db.example:5432/runs"  # only how messages name it
    try:
        with pytest.raises(DatabaseError) as err, db.session(failing="x could not be read from"):
            raise OSError(28, "No space left on device")
        assert str(err.value) == (
            "x could not be read from the run database postgresql://reader:***@db.example:5432/runs: "
            "[Errno 28] No space left on device"
        )
    finally:
        db.close()


def test_one_resolver_for_every_id_exact_prefix_unknown_ambiguous(store: RunStore) -> None:
    for i in range(12):
        store.save_trace(f"bench-{i:02d}", "model", {"traceEvents": [{"name": str(i)}]})
    with store.db.session() as session:
        assert resolve_id(session, TraceRow.run_id, "bench-07", "trace") == "bench-07"
        with pytest.raises(AmbiguousIdError) as err:
            resolve_id(session, TraceRow.run_id, "bench-", "trace", newest_first=TraceRow.created_at)
        assert str(err.value).startswith("trace id prefix 'bench-' is ambiguous; candidates: bench-")
        assert str(err.value).endswith(" and more") and len(err.value.candidates) == 10
        with pytest.raises(UnknownIdError, match=r"^unknown trace id 'bench' \(a prefix needs at least 6 characters\)"):
            resolve_id(session, TraceRow.run_id, "bench", "trace")
        with pytest.raises(UnknownIdError) as unknown:
            resolve_id(session, TraceRow.run_id, "nothing-here", "trace", newest_first=TraceRow.created_at,
                       recent_in="the db")  # fmt: skip
        assert str(unknown.value).startswith("unknown trace id 'nothing-here' in the db; most recent: bench-")
        assert (unknown.value.what, unknown.value.given) == ("trace", "nothing-here")


@pytest.mark.parametrize("hostile", ["%%%%%%", "______", "bench%", "bench_0", "/bench-0", "bench-0' OR '1'='1"])
def test_a_prefix_with_like_wildcards_or_quotes_matches_nothing(store: RunStore, hostile: str) -> None:
    store.save_trace("bench-01", "model", {"traceEvents": []})
    store.save(make_record("b" * 32, TOP1_A))
    assert store.load_trace(hostile) is None
    with pytest.raises(UnknownIdError, match="unknown run id"):
        store.get(hostile)
    assert store.runs.resolve_sweep_id(hostile) == hostile


def test_unknown_and_ambiguous_ids_are_store_errors_the_cli_and_the_api_already_handle(store: RunStore) -> None:
    store.save(make_record("abcdef" + "1" * 26, TOP1_A))
    store.save(make_record("abcdef" + "2" * 26, TOP1_B))
    with pytest.raises(StoreError, match=r"^run id prefix 'abcdef' is ambiguous; candidates: abcdef2+, abcdef1+$"):
        store.get("abcdef")
    with pytest.raises(StoreError, match=r"^unknown sweep id 'ffffff' in .*; none stored$"):
        store.get_sweep("ffffff")
    assert store.delete("abcdef1") == "abcdef" + "1" * 26


def test_the_pages_queries_return_typed_results(store: RunStore) -> None:
    store.save(make_record("a" * 32, TOP1_A, created_at=T0))
    store.save(make_record("b" * 32, TOP1_B, created_at=T0 + timedelta(hours=1)))
    store.save(make_record("c" * 32, TOP1_B, created_at=T0 + timedelta(hours=2), runtime="torch"))
    store.save(make_record("d" * 32, TOP1_B, created_at=T0 + timedelta(hours=3), sweep_id="s" * 32, variant="v"))
    latest = store.runs.latest_per_model()
    assert all(isinstance(r, LatestRun) for r in latest)
    assert [(r.runtime, r.run_id) for r in latest] == [("onnxruntime", "b" * 32), ("torch", "c" * 32)]
    assert latest[0].created_at == (T0 + timedelta(hours=1)).replace(tzinfo=None)
    assert latest[0].claims == tuple(make_record("b" * 32, TOP1_B).model_dump(mode="json")["claims"])
    assert store.runs.latest_per_model("another-model") == []
    assert store.runs.filter_values(["runtime", "hardware"]) == {
        "runtime": ["onnxruntime", "torch"],
        "hardware": ["AMD EPYC"],
    }
    with pytest.raises(InvalidInputError, match=r"unknown run filter 'record' \(allowed: model, version, ") as err:
        store.runs.filter_values(["runtime", "record"])
    assert err.value.field == "filters"
    assert store.runs.count_by_dataset(["foolbox_imagenet", "imagenet-sample"]) == {"foolbox_imagenet": 4}
    assert store.runs.resolve_sweep_id("ssssssss") == "s" * 32
    assert list_datasets(store) == []


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


def test_nothing_above_the_store_imports_its_rows_or_opens_a_session() -> None:
    """What the import contract of pyproject.toml checks, plus SQLAlchemy's ORM (import-linter sees only the
    top-level package of an external library); function-level imports included."""
    root = Path(repliscope.__file__).parent
    offending = [
        f"{path.relative_to(root)}: {name}"
        for package in ("cli", "service")
        for path in sorted((root / package).rglob("*.py"))
        for name in _imports(path)
        if name.startswith(("repliscope.store.models", "sqlalchemy.orm")) or name == "repliscope.store.models"
    ]
    assert offending == []
