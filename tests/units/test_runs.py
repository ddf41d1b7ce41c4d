"""run_units on stored records: ground truth from the record or a --dataset checked by identity; refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.datasets import resolve_dataset
from repliscope.errors import RepliscopeError
from repliscope.evaluation.record import EvaluationRecord
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from repliscope.units.runs import ground_truth_for, run_units

MANIFEST = Path(__file__).parents[1] / "fixtures" / "detection" / "rect-detector.yaml"


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> EvaluationRecord:
    prepared = prepare(
        MANIFEST,
        RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path_factory.mktemp("cache")),
    )
    return evaluate(prepared, resolve_dataset("synthetic_detection"))


def test_stored_ground_truth_or_a_dataset_with_the_same_identity(record: EvaluationRecord) -> None:
    result = run_units(record, replicates=20)
    assert (result.truth.n_matched, result.truth.matched_fraction, result.truth.significant) == (33, 1.0, [])
    assert (result.truth.ap_class_aware, result.truth.ap_class_agnostic) == (1.0, 1.0)
    bare = record.model_copy(update={"ground_truth": None})
    with pytest.raises(RepliscopeError, match="stores no ground truth: give --dataset"):
        ground_truth_for(bare)
    same = run_units(bare, dataset=resolve_dataset("synthetic_detection"), replicates=20)
    assert same.truth == result.truth
    with pytest.raises(RepliscopeError, match=r"is not the data run .* was evaluated on"):
        ground_truth_for(bare, resolve_dataset("synthetic_detection", seed=1))


def test_refusals(record: EvaluationRecord) -> None:
    with pytest.raises(
        RepliscopeError, match="has task image_classification: unit evaluation needs an object_detection run"
    ):
        run_units(record.model_copy(update={"task": "image_classification"}))
    with pytest.raises(RepliscopeError, match="did not evaluate the same samples"):
        run_units(record, record.model_copy(update={"samples": record.samples[:-1]}))
    identical = run_units(record, record, replicates=20)
    assert identical.paired is not None and identical.paired["delta_ap"] == 0
    assert identical.against_reference is not None and identical.against_reference.diagnosis.box is None


def test_a_given_dataset_is_scored_on_the_records_categories_only(record: EvaluationRecord) -> None:
    """A record scored on a subset of the dataset's categories (the model detects only those): --dataset gets
    the same subset, as the stored ground truth has it."""
    partial = record.model_copy(
        update={
            "ground_truth": None,
            "dataset": {
                **record.dataset,
                "categories_evaluated": [[1, "red"], [3, "blue"]],
                "categories_left_out": [[2, "green"]],
            },
        }
    )
    truth = ground_truth_for(partial, resolve_dataset("synthetic_detection"))
    assert truth.categories == {1: "red", 3: "blue"}
    assert sum(len(s.objects or ()) for s in truth.samples) == 33 - 12
    assert {o.class_id for s in truth.samples for o in s.objects or ()} == {1, 3}
