"""The store keeps detections per sample, and opens stores created before the ``detections`` column existed."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.orm import Session

from repliscope.evaluation.record import Detection, EvaluationRecord, SamplePrediction
from repliscope.store import RunStore
from repliscope.store.migrations.versions.r0001_baseline import BASELINE
from repliscope.store.repository import _run_row
from tests.store.records import TOP1_A, make_record

OLD_SAMPLE_TABLE = """CREATE TABLE sample_predictions (
    run_id VARCHAR NOT NULL, position INTEGER NOT NULL, sample_id TEXT NOT NULL, label INTEGER,
    topk_indices JSON NOT NULL, topk_probs JSON NOT NULL, error TEXT,
    PRIMARY KEY (run_id, position), FOREIGN KEY(run_id) REFERENCES runs (run_id) ON DELETE CASCADE)"""
"""``sample_predictions`` as the release before object detection created it."""


def _old_store(path: Path) -> str:
    """A SQLite store with the previous schema holding one classification run (written without RunStore)."""
    url = f"sqlite:///{path}"
    engine = create_engine(url)
    BASELINE.create_all(engine, tables=[t for t in BASELINE.sorted_tables if t.name != "sample_predictions"])
    record = make_record("a" * 32, TOP1_A)
    runs = BASELINE.tables["runs"]
    row = _run_row(record)
    with Session(engine) as session, session.begin():
        session.execute(runs.insert().values({c.name: getattr(row, c.name) for c in runs.columns}))
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE runs DROP COLUMN ap"))  # the runs table of that release
        conn.execute(text(OLD_SAMPLE_TABLE))
    with Session(engine) as session, session.begin():
        session.execute(
            text(
                "INSERT INTO sample_predictions (run_id, position, sample_id, label, topk_indices, "
                "topk_probs, error) VALUES (:r, :p, :s, :l, :ti, :tp, :e)"
            ),
            [
                {
                    "r": record.run_id,
                    "p": i,
                    "s": s.sample_id,
                    "l": s.label,
                    "ti": str(s.topk_indices),
                    "tp": str(s.topk_probs),
                    "e": s.error,
                }
                for i, s in enumerate(record.samples)
            ],
        )
    engine.dispose()
    return url


def test_old_store_opens_gains_the_column_and_keeps_its_runs(tmp_path: Path) -> None:
    url = _old_store(tmp_path / "old.db")
    old = inspect(create_engine(url))
    assert "detections" not in {c["name"] for c in old.get_columns("sample_predictions")}
    assert "ap" not in {c["name"] for c in old.get_columns("runs")}
    with RunStore(url) as store:
        assert "detections" in {c["name"] for c in inspect(store.engine).get_columns("sample_predictions")}
        assert store.list()[0].ap is None
        old = store.get("a" * 32)
        assert old == make_record("a" * 32, TOP1_A)
        assert all(s.detections is None for s in old.samples)
        detection = _detection_record("b" * 32)
        store.save(detection)
        assert store.get("b" * 32) == detection
    with RunStore(url) as again:  # a second open adds nothing
        assert sorted(r.run_id for r in again.list()) == ["a" * 32, "b" * 32]


def _detection_record(run_id: str) -> EvaluationRecord:
    rec = make_record(run_id, TOP1_A)
    samples = [
        SamplePrediction(
            sample_id=s.sample_id,
            label=None,
            detections=[Detection(box=[1.5, 2.0, 30.25, 40.0], score=0.875, class_id=3)] * (i % 3),
        )
        for i, s in enumerate(rec.samples)
    ]
    samples[4] = SamplePrediction(sample_id=samples[4].sample_id, label=None, error="SampleError: truncated")
    return rec.model_copy(update={"samples": samples, "metrics": [], "task": "object_detection"})


def test_detection_round_trip_and_summary_columns(tmp_path: Path) -> None:
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        record = _detection_record("c" * 32)
        store.save(record)
        back = store.get("c" * 32)
        assert back == record
        assert back.samples[2].detections == [Detection(box=[1.5, 2.0, 30.25, 40.0], score=0.875, class_id=3)] * 2
        assert back.samples[0].detections == [] and back.samples[4].detections is None
        summary = store.list()[0]
        assert summary.top1 is None and summary.top5 is None and summary.num_failed == 1 and summary.ap is None
        with store.engine.connect() as conn:
            rows = conn.execute(text("SELECT detections FROM sample_predictions ORDER BY position")).all()
        assert rows[4][0] is None and rows[0][0] == "[]"


def test_compare_carries_the_tasks_paired_statistics() -> None:
    from repliscope.store.compare import compare_runs
    from tests.store.records import TOP1_B

    a, b = make_record("a" * 32, TOP1_A), make_record("b" * 32, TOP1_B)
    c = compare_runs(a, b)
    assert c.task == "image_classification" and c.paired is not None
    assert c.paired["n"] == c.common_evaluated and c.paired["flipped"] == len(c.top1_flips)
    from repliscope.store.compare import MixedTasksError

    with pytest.raises(MixedTasksError, match=r"run aaaaaaaaaaaa is image_classification.*is object_detection"):
        compare_runs(a, _detection_record("d" * 32))  # refused, never half compared (issue 36 item 9)
