"""RunStore.query_run_rows / get_without_samples (what the runs API serves) against query_runs / get, and the
API's pre-serialised runs page against its response model."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from repliscope.errors import StoreError
from repliscope.store import RunQuery, RunStore
from repliscope.store.runs import RunSummary, _runs_statements
from repliscope.store.service_tables import InvalidInputError
from tests.store.records import TOP1_A, TOP1_B, make_record

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RunStore]:
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as s:
        for i in range(7):
            runtime = ("onnxruntime", "torch", "opencv_dnn")[i % 3]
            variant = "100%_axb" if i == 2 else "100x_a_b" if i == 3 else None  # LIKE would match both
            s.save(
                make_record(
                    f"{i:02d}" + "0" * 30,
                    list(TOP1_A if i % 2 else TOP1_B),
                    created_at=T0 + timedelta(hours=i),
                    runtime=runtime,
                    variant=variant,
                    sweep_id="5" * 32 if variant else None,
                )
            )
        yield s


NAMES = tuple(RunSummary.model_fields)
QUERIES = [
    RunQuery(),
    RunQuery(runtime="torch"),
    RunQuery(search="100%"),  # '%' is literal: only run 2
    RunQuery(search="a_b"),  # '_' is literal: only run 3
    RunQuery(search="TORCH", created_from=T0 + timedelta(hours=1), created_to=T0 + timedelta(hours=4)),
    RunQuery(sweep_id="5" * 32, kind="evaluation"),
    RunQuery(model="nope"),
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("sort", ["-created_at", "runtime", "-variant"])
def test_rows_equal_the_summaries(store: RunStore, query: RunQuery, sort: str) -> None:
    for page, page_size in ((1, 50), (1, 2), (2, 2), (9, 2)):
        summaries, total = store.query_runs(query, sort, page, page_size)
        rows, row_total = store.query_run_rows(query, sort, page, page_size, NAMES)
        assert row_total == total
        assert [RunSummary.model_validate(dict(zip(NAMES, r, strict=True))) for r in rows] == summaries


def test_totals_and_literal_search(store: RunStore) -> None:
    assert store.query_run_rows(RunQuery(), "-created_at", 1, 50, ("run_id",)) == (
        [(f"{i:02d}" + "0" * 30,) for i in range(6, -1, -1)],
        7,
    )
    assert store.query_run_rows(RunQuery(), "-created_at", 9, 2, ("run_id",)) == ([], 7)  # past the end
    assert store.query_run_rows(RunQuery(), "-created_at", 2, 2, ("run_id",))[1] == 7
    assert store.query_run_rows(RunQuery(search="100%"), "-created_at", 1, 50, ("variant",)) == ([("100%_axb",)], 1)
    assert store.query_run_rows(RunQuery(search="A_B"), "-created_at", 1, 50, ("variant",)) == ([("100x_a_b",)], 1)
    assert store.query_run_rows(RunQuery(runtime="torch"), "-created_at", 1, 50, ("run_id", "runtime"))[0] == [
        ("04" + "0" * 30, "torch"),
        ("01" + "0" * 30, "torch"),
    ]


def test_statements_are_built_once_per_shape(store: RunStore) -> None:
    store.query_run_rows(RunQuery(runtime="torch"), "top1", 1, 5, ("run_id",))
    before = _runs_statements.cache_info()
    store.query_run_rows(RunQuery(runtime="onnxruntime"), "top1", 2, 3, ("run_id",))
    after = _runs_statements.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)


def test_bad_input_names_the_field(store: RunStore) -> None:
    with pytest.raises(InvalidInputError, match="unknown run column 'record'") as exc:
        store.query_run_rows(RunQuery(), "-created_at", 1, 50, ("run_id", "record"))
    assert exc.value.field == "columns"
    with pytest.raises(InvalidInputError, match="sort 'size' is not allowed"):
        store.query_run_rows(RunQuery(), "size", 1, 50, ("run_id",))


def test_get_without_samples(store: RunStore) -> None:
    full = store.get("03" + "0" * 30)
    record, count = store.get_without_samples("030000")  # a prefix
    assert count == len(full.samples) == 20 and record.samples == []
    assert record.model_dump(exclude={"samples"}) == full.model_dump(exclude={"samples"})
    with pytest.raises(StoreError, match="unknown run id 'ffffff'"):
        store.get_without_samples("ffffff")


def test_runs_page_json_is_the_response_models_json(store: RunStore) -> None:
    from repliscope.service.routers.runs import RUN_ROW_COLUMNS, RunPage, run_page_json

    rows, total = store.query_run_rows(RunQuery(), "-created_at", 1, 4, RUN_ROW_COLUMNS)
    summaries, _ = store.query_runs(RunQuery(), "-created_at", 1, 4)
    adapter = TypeAdapter(RunPage)  # validated, then serialised: what FastAPI does with the response model
    page = {"items": [s.model_dump() for s in summaries], "total": total, "page": 1, "page_size": 4}
    expected = adapter.dump_json(adapter.validate_python(page))
    assert run_page_json(rows, total, 1, 4) == expected
    assert b'"created_at":"2026-11-21T18:00:00Z"' in expected
