"""Samples read back from the store are built without validation (:func:`runs._stored_sample`): they must
be the same objects ``model_construct`` builds: equal, same dump, same fields set, still assignable."""

from pathlib import Path

from repliscope.evaluation.record import Detection, SamplePrediction, result_hash
from repliscope.store import RunStore, runs
from tests.store.test_store_scale import big_record


def test_stored_sample_equals_model_construct() -> None:
    dets = [Detection(box=[1.0, 2.0, 3.0, 4.0], score=0.5, class_id=3)]
    fast = runs._stored_sample("a.jpg", 7, [7, 1], [0.75, 0.25], None, dets)
    slow = SamplePrediction.model_construct(
        sample_id="a.jpg",
        label=7,
        topk_indices=[7, 1],
        topk_probs=[0.75, 0.25],
        error=None,
        detections=dets,
        segmentation=None,
    )
    assert fast == slow
    assert fast.model_dump() == slow.model_dump()
    assert fast.model_dump_json(exclude_unset=True) == slow.model_dump_json(exclude_unset=True)
    assert fast.model_fields_set == slow.model_fields_set == set(SamplePrediction.model_fields)
    assert repr(fast) == repr(slow)
    assert fast.top1 == 7
    fast.label = 8  # assignment still works and does not touch another instance's fields set
    other = runs._stored_sample("b.jpg", None, [], [], "SampleError: x", None)
    assert (fast.label, other.label, other.top1) == (8, None, None)
    assert other.model_fields_set is not fast.model_fields_set


def test_round_trip_keeps_result_hash(tmp_path: Path) -> None:
    record = big_record("r" + "0" * 31, 1200)
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        store.save(record)
        loaded = store.get(record.run_id)
    assert len(loaded.samples) == 1200
    assert loaded.samples == record.samples
    assert result_hash(loaded.samples) == record.result_hash
    assert sum(s.error is not None for s in loaded.samples) == 12


def test_non_finite_probabilities_and_exact_floats_round_trip(tmp_path: Path) -> None:
    """orjson decodes the top-k columns; what it refuses (``NaN`` / ``Infinity``, which the standard library's
    encoder writes for a model's non-finite output; SQLite keeps them, PostgreSQL refuses them on save) falls
    back to ``json``: nothing is lost, floats are exact."""
    import math

    record = big_record("n" + "0" * 31, 30)
    record.samples[3].topk_probs = [math.nan, 0.25, -math.inf, 0.1, 0.05]
    record.samples[4].topk_probs = [0.1 + 0.2, 1e-310, 5e-324, 0.9999999999999999, 1 / 3]
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        store.save(record)
        loaded = store.get(record.run_id)
    nan, quarter, minus_inf, *rest = loaded.samples[3].topk_probs
    assert math.isnan(nan) and quarter == 0.25 and minus_inf == -math.inf and rest == [0.1, 0.05]
    assert loaded.samples[4].topk_probs == [0.1 + 0.2, 1e-310, 5e-324, 0.9999999999999999, 1 / 3]
    assert [s.topk_indices for s in loaded.samples] == [s.topk_indices for s in record.samples]


def test_a_json_null_detections_cell_reads_as_none(tmp_path: Path) -> None:
    from sqlalchemy import text

    record = big_record("j" + "0" * 31, 5)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as store:
        store.save(record)
        with store.engine.begin() as conn:  # what a JSON column without none_as_null would have written
            conn.execute(text("UPDATE sample_predictions SET detections = 'null' WHERE position = 1"))
        loaded = store.get(record.run_id)
    assert [s.detections for s in loaded.samples] == [None] * 5
