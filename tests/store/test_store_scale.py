"""Big runs in the store: sample rows inserted in chunks, read back in decoded chunks, the head of a run (for
``runs show``) without its samples, SQL aggregates equal to the full load, bounded CLI and report listings."""

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from repliscope.cli.output import SHOWN_FLIPS
from repliscope.evaluation.record import Detection, EvaluationRecord, SamplePrediction, result_hash
from repliscope.report import sections
from repliscope.report.build import build_run_view
from repliscope.report.write import write_report
from repliscope.store import RunStore, runs
from repliscope.store.models import SampleRow
from tests.store.backends import BACKENDS, POSTGRES, wipe
from tests.store.records import TOP1_A, make_record


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunStore]:
    url = f"sqlite:///{tmp_path / 'runs.db'}" if request.param == "sqlite" else str(POSTGRES)
    with RunStore(url) as s:
        try:
            yield s
        finally:
            wipe(s.engine)


def big_record(run_id: str, n: int, seed: int = 1, fail_every: int = 97, miss: float = 0.25) -> EvaluationRecord:
    """A classification record of ``n`` samples: every ``fail_every``-th one failed, about ``miss`` of the others
    with a wrong top-1 (seeded)."""
    rng = random.Random(seed)
    samples = []
    for i in range(n):
        label = rng.randrange(1000)
        if i % fail_every == fail_every - 1:
            samples.append(SamplePrediction(sample_id=f"img{i:05d}.JPEG", label=label, error="SampleError: truncated"))
            continue
        top1 = label if rng.random() >= miss else (label + 1 + rng.randrange(998)) % 1000
        probs = sorted((round(rng.random(), 6) for _ in range(5)), reverse=True)
        samples.append(
            SamplePrediction(
                sample_id=f"img{i:05d}.JPEG",
                label=label,
                topk_indices=[top1, *((top1 + j) % 1000 for j in (1, 2, 3, 4))],
                topk_probs=probs,
            )
        )
    failed = sum(1 for s in samples if s.error is not None)
    record = make_record(run_id, TOP1_A)
    return record.model_copy(
        update={
            "samples": samples,
            "result_hash": result_hash(samples),
            "counts": {
                "total": n,
                "evaluated": n - failed,
                "failed": failed,
                "labelled": n,
            },
        }
    )


def test_chunked_insert_stores_exactly_n_rows(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "SAMPLE_CHUNK", 7)
    inserts: list[int] = []

    def count(
        conn: object, cursor: object, statement: str, parameters: Any, context: object, executemany: bool
    ) -> None:
        if statement.startswith("INSERT INTO sample_predictions"):
            inserts.append(len(parameters) if executemany else 1)

    event.listen(store.engine, "before_cursor_execute", count)
    record = big_record("e" * 32, 23)
    store.save(record)
    event.remove(store.engine, "before_cursor_execute", count)
    with Session(store.engine) as session:
        positions = session.scalars(select(SampleRow.position).order_by(SampleRow.position)).all()
        assert session.scalar(select(func.count()).select_from(SampleRow)) == 23
    assert positions == list(range(23))
    assert sum(inserts) == 23 and len(inserts) >= 4  # 7 + 7 + 7 + 2 rows (a driver may split a chunk further)
    back = store.get("e" * 32)  # read back in chunks of 7 too
    assert back == record and back.model_dump_json() == record.model_dump_json()


def test_detections_read_back_in_chunks_are_equal(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "SAMPLE_CHUNK", 3)
    rec = make_record("d" * 32, TOP1_A)
    samples = [
        SamplePrediction(
            sample_id=s.sample_id,
            label=None,
            detections=[Detection(box=[1.5, 2.0, 30.25, 40.0], score=0.875, class_id=3 + i)] * (i % 3),
        )
        for i, s in enumerate(rec.samples)
    ]
    samples[4] = SamplePrediction(sample_id=samples[4].sample_id, label=None, error="SampleError: truncated")
    record = rec.model_copy(update={"samples": samples, "metrics": [], "task": "object_detection"})
    store.save(record)
    back = store.get("d" * 32)
    assert back == record
    assert back.samples[5].detections == [Detection(box=[1.5, 2.0, 30.25, 40.0], score=0.875, class_id=8)] * 2
    assert back.samples[4].detections is None and back.samples[0].detections == []


def test_head_and_aggregates_equal_the_full_load(store: RunStore) -> None:
    record = big_record("f" * 32, 1000)
    store.save(record)
    full = store.get("ffffffff")
    head, n_failed = store.get_head("ffffffff", failed=5)
    failed = [s for s in full.samples if s.error is not None]
    assert n_failed == len(failed) == 10
    assert head.samples == failed[:5]
    assert head.model_dump(exclude={"samples"}) == full.model_dump(exclude={"samples"})
    assert (
        store.sample_counts("f" * 32)
        == full.counts
        == {
            "total": 1000,
            "evaluated": 990,
            "failed": 10,
            "labelled": 1000,
        }
    )
    assert store.list()[0].num_samples == 1000 and store.list()[0].num_failed == 10


def test_runs_show_of_a_big_run_lists_20_failed_and_counts_the_rest(tmp_path: Path) -> None:
    from repliscope.cli.main import app

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as store:
        store.save(big_record("a" * 32, 3000, fail_every=50))  # 60 failed
    result = CliRunner().invoke(app, ["runs", "show", "aaaaaaaa", "--db", url], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert sum(1 for line in lines if line.startswith("failed img")) == 20
    assert "failed img00049.JPEG: SampleError: truncated" in lines
    assert "... and 40 more failed samples (see --json)" in lines


def test_runs_compare_text_lists_at_most_50_flips(tmp_path: Path) -> None:
    from repliscope.cli.main import app

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    a, b = big_record("a" * 32, 3000, seed=1), big_record("b" * 32, 3000, seed=2)
    with RunStore(url) as store:
        store.save(a)
        store.save(b)
    flips = sum(
        1
        for sa, sb in zip(a.samples, b.samples, strict=True)
        if sa.top1 is not None and sb.top1 is not None and sa.top1 != sb.top1
    )
    result = CliRunner().invoke(app, ["runs", "compare", "aaaaaaaa", "bbbbbbbb", "--db", url], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the table title wraps
    assert f"{flips} samples whose top-1 differs (the first 50; all with --json)" in text and flips == 2967
    assert sum(1 for line in result.output.splitlines() if line.startswith("│ img")) == SHOWN_FLIPS == 50


def test_big_run_report_lists_25_misclassified_and_counts_the_rest(tmp_path: Path) -> None:
    record = big_record("c" * 32, 3000)
    errors = [s for s in record.samples if s.error is not None]
    misses = [s for s in record.samples if s.error is None and s.top1 != s.label]
    view = build_run_view(record)
    assert len(view.failures) == sections.MAX_FAILURES == 25
    assert [row.sample_id for row in view.failures] == [s.sample_id for s in (errors + misses)[:25]]
    assert view.failures_more == len(errors) + len(misses) - 25 == 30 + 728 - 25
    assert view.failures_summary == (
        "728 of 2970 labelled samples have a wrong top-1 prediction; 30 of 3000 samples failed."
    )
    html = write_report(record, "html", tmp_path / "r.html").read_text()
    assert "… and 733 more." in html
    assert html.count("img0") < 60  # the listed rows, not 3,000
