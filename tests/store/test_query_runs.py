"""RunStore.query_runs: filters, sorting, paging, totals, and errors naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from repliscope.evaluation.record import ClaimVerdict, EvaluationRecord
from repliscope.store import RunQuery, RunStore
from repliscope.store.service_tables import InvalidInputError
from tests.store.backends import BACKENDS, POSTGRES, wipe
from tests.store.records import TOP1_A, TOP1_B, make_record

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def _variant(i: int) -> EvaluationRecord:
    """Run i: runtime alternates onnxruntime/torch, every third on another CPU and framework version, i % 4 == 0
    has a consistent claim, i % 4 == 1 an inconsistent one, others not comparable."""
    runtime = "onnxruntime" if i % 2 == 0 else "torch"
    rec = make_record(
        f"{i:02d}" + "0" * 30, TOP1_A if i % 2 == 0 else TOP1_B, created_at=T0 + timedelta(hours=i), runtime=runtime
    )
    claim = rec.claims[0]
    verdict = {0: "consistent", 1: "inconsistent"}.get(i % 4, "not comparable")
    # a consistent verdict is stored as such only inside an interval of at most ±2 pt (the verdict rule)
    narrow = {"ci_low": claim.claimed - 0.01, "ci_high": claim.claimed + 0.01} if verdict == "consistent" else {}
    claims = [ClaimVerdict(**{**claim.model_dump(), "verdict": verdict, **narrow})]
    hardware = {**rec.hardware, "cpu_model": "Intel(R) Xeon(R) Gold 6130" if i % 3 == 0 else "AMD EPYC 7B13"}
    software_runtime = {**rec.runtime, "framework_version": "2.13.0" if i % 3 == 0 else "1.31.1"}
    manifest = rec.manifest.model_copy(update={"version": "1.0.0" if i < 6 else "1.1.0"})
    return rec.model_copy(
        update={"claims": claims, "hardware": hardware, "runtime": software_runtime, "manifest": manifest}
    )


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunStore]:
    url = f"sqlite:///{tmp_path / 'runs.db'}" if request.param == "sqlite" else str(POSTGRES)
    with RunStore(url) as s:
        try:
            for i in range(10):
                s.save(_variant(i))
            yield s
        finally:
            if request.param != "sqlite":
                wipe(s.engine)


def _ids(rows: list) -> list[int]:  # type: ignore[type-arg]
    return [int(r.run_id[:2]) for r in rows]


def test_filters(store: RunStore) -> None:
    rows, total = store.query_runs(RunQuery())
    assert total == 10 and _ids(rows) == [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
    assert _ids(store.query_runs(RunQuery(runtime="torch"))[0]) == [9, 7, 5, 3, 1]
    assert _ids(store.query_runs(RunQuery(verdict="inconsistent"))[0]) == [9, 5, 1]
    assert _ids(store.query_runs(RunQuery(hardware="Intel(R) Xeon(R) Gold 6130"))[0]) == [9, 6, 3, 0]
    assert store.query_runs(RunQuery(hardware="xeon"))[1] == 0  # the CPU model is exact
    assert _ids(store.query_runs(RunQuery(framework_version="2.13.0", runtime="onnxruntime"))[0]) == [6, 0]
    assert _ids(store.query_runs(RunQuery(model="efficientnet-lite0", version="1.1.0"))[0]) == [9, 8, 7, 6]
    assert store.query_runs(RunQuery(model="efficientnet"))[1] == 0  # the model name is exact
    assert _ids(store.query_runs(RunQuery(dataset="foolbox_imagenet", kind="evaluation"))[0]) == list(range(9, -1, -1))
    window = RunQuery(created_from=T0 + timedelta(hours=2), created_to=T0 + timedelta(hours=5))
    assert _ids(store.query_runs(window)[0]) == [4, 3, 2]
    summary = store.query_runs(RunQuery(verdict="consistent"), sort="created_at")[0][0]
    assert (summary.run_id[:2], summary.verdict, summary.cpu_model, summary.framework_version, summary.runtime) == (
        "00",
        "consistent",
        "Intel(R) Xeon(R) Gold 6130",
        "2.13.0",
        "onnxruntime",
    )


def test_sorting_and_paging(store: RunStore) -> None:
    page1, total = store.query_runs(RunQuery(), sort="created_at", page=1, page_size=4)
    page3, _ = store.query_runs(RunQuery(), sort="created_at", page=3, page_size=4)
    assert total == 10 and _ids(page1) == [0, 1, 2, 3] and _ids(page3) == [8, 9]
    assert store.query_runs(RunQuery(), page=4, page_size=4) == ([], 10)
    # top-1: run B (odd) 19/20, run A (even) 17/19 scored; ties by run id (descending with "-")
    assert _ids(store.query_runs(RunQuery(), sort="-top1")[0]) == [9, 7, 5, 3, 1, 8, 6, 4, 2, 0]
    assert _ids(store.query_runs(RunQuery(), sort="top1")[0]) == [0, 2, 4, 6, 8, 1, 3, 5, 7, 9]
    # runs without the metric (AP of classification runs: NULL) sort last both ways
    assert _ids(store.query_runs(RunQuery(), sort="ap", page_size=3)[0]) == [0, 1, 2]
    assert _ids(store.query_runs(RunQuery(), sort="runtime", page_size=2)[0]) == [0, 2]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"sort": "colour"}, "sort"),
        ({"page": 0}, "page"),
        ({"page_size": 501}, "page_size"),
        ({"page_size": 0}, "page_size"),
        ({"filters": RunQuery(verdict="maybe")}, "verdict"),
    ],
)
def test_bad_input_names_the_field(store: RunStore, kwargs: dict, field: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidInputError) as err:
        store.query_runs(**kwargs)
    assert err.value.field == field
