"""The ``traces`` table: save_trace / load_trace round trip, replacement, prefixes, compression."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.errors import StoreError
from repliscope.store.models import TraceRow
from repliscope.store.repository import RunStore, sqlite_url

CHROME = {
    "traceEvents": [
        {"name": "query", "ph": "X", "ts": 10.5, "dur": 3.25, "pid": 1, "tid": 7, "args": {"i": i}} for i in range(200)
    ],
    "displayTimeUnit": "ms",
}


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore(sqlite_url(tmp_path / "t.db"))


def test_round_trip_equal_and_compressed(store: RunStore) -> None:
    store.save_trace("bench-abcdef123", "model", CHROME)
    assert store.load_trace("bench-abcdef123") == CHROME
    from sqlalchemy.orm import Session

    with Session(store.engine) as session:
        row = session.get_one(TraceRow, "bench-abcdef123")
        assert row.level == "model"
        import json

        assert len(row.trace) < len(json.dumps(CHROME)) / 5


def test_unknown_is_none_and_prefix_resolves(store: RunStore) -> None:
    assert store.load_trace("nothing-here") is None
    store.save_trace("run-aaaa1111", "application", {"traceEvents": []})
    store.save_trace("run-aaaa2222", "model", {"traceEvents": [{"name": "x"}]})
    assert store.load_trace("run-aaaa2") == {"traceEvents": [{"name": "x"}]}
    assert store.load_trace("run-a") is None  # under 6 characters: exact ids only
    with pytest.raises(StoreError, match=r"ambiguous.*run-aaaa1111"):
        store.load_trace("run-aaaa")


def test_second_save_replaces(store: RunStore) -> None:
    store.save_trace("r1-000000", "model", {"traceEvents": [1]})
    store.save_trace("r1-000000", "framework", {"traceEvents": [2]})
    assert store.load_trace("r1-000000") == {"traceEvents": [2]}
