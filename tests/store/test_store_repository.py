"""RunStore on a temporary SQLite database, and on PostgreSQL when $REPLISCOPE_TEST_POSTGRES is a URL.

The PostgreSQL database named there is emptied (tables dropped) after every test.
"""

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from repliscope.errors import StoreError
from repliscope.store import RunStore, default_url
from repliscope.store.models import SampleRow
from tests.store.backends import BACKENDS, POSTGRES, wipe
from tests.store.records import TOP1_A, TOP1_B, make_record

T0 = datetime(2026, 11, 21, 23, 30, 5, 123456, tzinfo=UTC)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunStore]:
    url = f"sqlite:///{tmp_path / 'runs.db'}" if request.param == "sqlite" else str(POSTGRES)
    with RunStore(url) as s:
        try:
            yield s
        finally:
            wipe(s.engine)


def sample_rows(store: RunStore) -> int:
    with Session(store.engine) as session:
        return session.scalar(select(func.count()).select_from(SampleRow)) or 0


def test_round_trip_is_equal(store: RunStore) -> None:
    record = make_record("0f3a9c2e7b1d4e5f8a6b9c0d1e2f3a4b", TOP1_A)
    store.save(record)
    loaded = store.get(record.run_id)
    assert loaded == record
    assert loaded.samples[19].error is not None
    assert loaded.samples[0].topk_probs == record.samples[0].topk_probs
    assert loaded.model_dump_json() == record.model_dump_json()
    assert sample_rows(store) == 20


def test_round_trip_keeps_timezone(store: RunStore) -> None:
    plus2 = T0.astimezone(timezone(timedelta(hours=2)))
    record = make_record("1" * 32, TOP1_B, created_at=plus2)
    store.save(record)
    assert store.get(record.run_id).created_at == plus2
    assert store.get(record.run_id).created_at.utcoffset() == timedelta(hours=2)
    assert store.list()[0].created_at == T0.replace(tzinfo=None)  # the column is UTC


def test_record_survives_reopening(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    record = make_record("2" * 32, TOP1_A)
    with RunStore(url) as first:
        first.save(record)
    with RunStore(url) as second:
        assert second.get(record.run_id) == record


def test_saving_twice_is_an_error(store: RunStore) -> None:
    record = make_record("3" * 32, TOP1_A)
    store.save(record)
    with pytest.raises(StoreError, match="already stored"):
        store.save(record)


def test_prefix_lookup(store: RunStore) -> None:
    store.save(make_record("abcdef0123456789abcdef0123456789", TOP1_A))
    store.save(make_record("abcdef9876543210abcdef9876543210", TOP1_B))
    assert store.get("abcdef01").run_id == "abcdef0123456789abcdef0123456789"
    assert store.get("abcdef98").run_id == "abcdef9876543210abcdef9876543210"
    with pytest.raises(StoreError) as err:
        store.get("abcdef")
    assert "ambiguous" in str(err.value)
    assert "abcdef0123456789abcdef0123456789" in str(err.value)
    assert "abcdef9876543210abcdef9876543210" in str(err.value)
    with pytest.raises(StoreError, match="at least 6 characters"):
        store.get("abcde")
    with pytest.raises(StoreError, match=r"unknown run id 'fedcba'.*most recent"):
        store.get("fedcba")


def test_prefix_wildcards_are_literal(store: RunStore) -> None:
    store.save(make_record("run_2026_a", TOP1_A))
    with pytest.raises(StoreError, match="unknown"):
        store.get("run%20")


def test_list_newest_first_with_filters(store: RunStore) -> None:
    for i, (sweep, kind) in enumerate([("s1", "evaluation"), (None, "evaluation"), ("s1", "sweep")]):
        top1 = TOP1_A if i != 1 else TOP1_B
        store.save(
            make_record(
                f"{i}" * 32, top1, created_at=T0 + timedelta(minutes=i), sweep_id=sweep, kind=kind, variant=f"v{i}"
            )
        )
    assert [r.run_id[0] for r in store.list()] == ["2", "1", "0"]
    assert [r.run_id[0] for r in store.list(limit=2)] == ["2", "1"]
    assert [r.run_id[0] for r in store.list(sweep_id="s1")] == ["2", "0"]
    assert [r.run_id[0] for r in store.list(kind="evaluation")] == ["1", "0"]

    summary = store.list()[1]
    assert summary.run_id == "1" * 32
    assert (summary.manifest_name, summary.manifest_version) == ("efficientnet-lite0", "1.0.0")
    assert (summary.runtime, summary.dataset_name) == ("onnxruntime", "foolbox_imagenet")
    assert (summary.num_samples, summary.num_failed) == (20, 0)
    assert (summary.top1, summary.top5) == (19 / 20, 19 / 20)
    assert store.list()[2].num_failed == 1 and store.list()[2].top1 == 17 / 19
    assert summary.variant == "v1" and summary.sweep_id is None


def test_delete(store: RunStore) -> None:
    keep, drop = make_record("4" * 32, TOP1_A), make_record("5" * 32, TOP1_B)
    store.save(keep)
    store.save(drop)
    assert store.delete("555555") == drop.run_id
    assert [r.run_id for r in store.list()] == [keep.run_id]
    assert sample_rows(store) == 20
    with pytest.raises(StoreError, match="unknown"):
        store.get(drop.run_id)


def test_default_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REPLISCOPE_DB", str(tmp_path / "x.db"))
    assert default_url() == f"sqlite:///{tmp_path / 'x.db'}"
    monkeypatch.setenv("REPLISCOPE_DB", "postgresql+psycopg://me@db/runs")
    assert default_url() == "postgresql+psycopg://me@db/runs"
    monkeypatch.delenv("REPLISCOPE_DB")
    monkeypatch.setattr("platformdirs.user_data_dir", lambda app: str(tmp_path / "data" / app))
    assert default_url() == f"sqlite:///{tmp_path / 'data' / 'repliscope' / 'repliscope.db'}"
    with RunStore() as s:
        assert s.list() == []
    assert (tmp_path / "data" / "repliscope" / "repliscope.db").is_file()


def test_sqlite_file_in_a_missing_folder_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A typo in --db / $REPLISCOPE_DB must not create a new, empty database somewhere: nothing is created."""
    missing = tmp_path / "no" / "such"
    with pytest.raises(StoreError) as err:
        RunStore(f"sqlite:///{missing / 'runs.db'}")
    assert str(err.value) == (
        f"the folder {missing} of the run database sqlite:///{missing / 'runs.db'} does not "
        "exist; create it first or choose another --db / $REPLISCOPE_DB"
    )
    monkeypatch.setenv("REPLISCOPE_DB", str(missing / "env.db"))
    with pytest.raises(StoreError, match=rf"the folder {re.escape(str(missing))} of the run database .* does not"):
        RunStore()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(StoreError, match=r"afile of the run database .* is not a folder"):
        RunStore(f"sqlite:///{tmp_path / 'afile' / 'runs.db'}")
    assert not (tmp_path / "no").exists()


def test_unusable_database_is_a_store_error_without_password() -> None:
    with pytest.raises(StoreError) as err:
        RunStore("postgresql+psycopg://me:s3cret@127.0.0.1:1/runs")
    assert "s3cret" not in str(err.value)
    with pytest.raises(StoreError, match="cannot open"):
        RunStore("nosuchdialect://x")
