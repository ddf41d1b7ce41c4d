"""``RunStore.save_outcome``: a job's results are stored exactly once per idempotency key (the agents' retries and a
client's re-submission store nothing new), on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

from repliscope.store import RunStore
from tests.store.backends import BACKENDS, POSTGRES, wipe
from tests.store.records import TOP1_A, TOP1_B, make_record


@dataclass
class Outcome:
    records: list[dict[str, Any]]
    sweeps: list[dict[str, Any]] = field(default_factory=list)
    benchmarks: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunStore]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        url = str(POSTGRES)
        wipe(create_engine(url))
    with RunStore(url) as s:
        yield s
    if request.param != "sqlite":
        wipe(create_engine(url))


def _outcome(*run_ids: str) -> Outcome:
    return Outcome(
        [make_record(r, TOP1_A if i == 0 else TOP1_B).model_dump(mode="json") for i, r in enumerate(run_ids)]
    )


def test_first_save_stores_every_record_and_the_key(store: RunStore) -> None:
    stored = store.save_outcome(_outcome("run-aaaaaa01", "run-aaaaaa02"), "job-1")
    assert (stored.run_ids, stored.duplicate) == (["run-aaaaaa01", "run-aaaaaa02"], False)
    assert store.count_job_results() == 1
    assert store.get("run-aaaaaa02").samples == make_record("run-aaaaaa02", TOP1_B).samples
    assert store.get_job_result("job-1") == stored.model_copy(update={"duplicate": True})
    assert store.get_job_result("job-2") is None


def test_same_key_again_stores_nothing_even_with_other_run_ids(store: RunStore) -> None:
    """A re-run on another agent makes a new run id: the key, not the run id, decides."""
    store.save_outcome(_outcome("run-bbbbbb01"), "job-1")
    again = store.save_outcome(_outcome("run-bbbbbb99"), "job-1")
    assert (again.run_ids, again.duplicate) == (["run-bbbbbb01"], True)
    assert [r.run_id for r in store.list()] == ["run-bbbbbb01"]


def test_a_failing_record_stores_neither_records_nor_the_key(store: RunStore) -> None:
    store.save(make_record("run-cccccc02", TOP1_B))
    with pytest.raises(Exception, match="run-cccccc02 is already stored"):
        store.save_outcome(_outcome("run-cccccc01", "run-cccccc02"), "job-1")
    assert store.get_job_result("job-1") is None
    assert [r.run_id for r in store.list()] == ["run-cccccc02"]


def test_concurrent_saves_of_one_key_store_one_record(store: RunStore) -> None:
    results: list[Any] = []

    def save(i: int) -> None:
        results.append(store.save_outcome(_outcome(f"run-dddddd{i:02d}"), "job-1"))

    threads = [threading.Thread(target=save, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.list()) == 1
    assert sorted(r.duplicate for r in results) == [False, True, True, True]
    assert len({tuple(r.run_ids) for r in results}) == 1
