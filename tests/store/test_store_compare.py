"""compare_runs on two hand-made records: one flipped sample, one failure fixed, slight probability drift."""

import pytest

from repliscope.store import compare_runs
from tests.store.records import TOP1_A, TOP1_B, TOP1_PROBS, make_record, wilson

PROBS_B = list(TOP1_PROBS)
PROBS_B[3] += 3e-7  # numeric drift on an unchanged prediction
PROBS_B[7] = 0.7038164734840393  # the flipped sample, now confident


def test_golden_deltas_flips_and_failures() -> None:
    a = make_record("a" * 32, TOP1_A)
    b = make_record("b" * 32, TOP1_B, PROBS_B, runtime="torch")
    c = compare_runs(a, b)

    assert c.run_a == "a" * 32 and c.run_b == "b" * 32
    assert c.same_dataset and c.warnings == []
    assert c.common_samples == 20 and c.only_in_a == 0 and c.only_in_b == 0
    assert not c.same_result_hash

    top1, top5 = c.metric_deltas
    assert (top1.name, top1.a, top1.b) == ("top1", 17 / 19, 19 / 20)
    assert top1.delta == 19 / 20 - 17 / 19 == pytest.approx(0.0552631578947368, abs=1e-15)
    assert top1.ci_a == wilson(17, 19) and top1.ci_b == wilson(19, 20)
    assert (top5.name, top5.delta) == ("top5", 19 / 20 - 18 / 19)

    assert [f.model_dump() for f in c.top1_flips] == [
        {"sample_id": "imagenet_07_609.jpg", "label": 609, "top1_a": 511, "top1_b": 609}
    ]
    assert c.failed_only_in_a == ["imagenet_19_305.jpg"] and c.failed_only_in_b == []
    assert c.failed_in_one == 1
    assert c.max_abs_top1_prob_diff == abs(0.7038164734840393 - 0.2901332378387451)
    assert c.max_abs_top1_prob_diff_sample == "imagenet_07_609.jpg"


def test_identical_runs() -> None:
    a = make_record("a" * 32, TOP1_A)
    c = compare_runs(a, make_record("c" * 32, TOP1_A))
    assert c.same_result_hash and c.top1_flips == [] and c.failed_in_one == 0
    assert c.max_abs_top1_prob_diff == 0.0
    assert all(d.delta == 0.0 for d in c.metric_deltas)


def test_different_datasets_compare_common_ids_with_warning() -> None:
    a = make_record("a" * 32, TOP1_A)
    b = make_record("b" * 32, TOP1_B, PROBS_B, dataset_identity="f" * 64)
    b.samples = b.samples[5:]  # b saw only 15 of a's images
    c = compare_runs(a, b)
    assert not c.same_dataset
    assert c.common_samples == 15 and c.only_in_a == 5 and c.only_in_b == 0
    assert len(c.warnings) == 1 and "dataset identities differ" in c.warnings[0]
    assert [f.sample_id for f in c.top1_flips] == ["imagenet_07_609.jpg"]


def test_metric_only_in_one_run_is_skipped() -> None:
    a = make_record("a" * 32, TOP1_A)
    b = make_record("b" * 32, TOP1_B)
    b.metrics = b.metrics[:1]
    assert [d.name for d in compare_runs(a, b).metric_deltas] == ["top1"]


def test_serialises_to_json() -> None:
    c = compare_runs(make_record("a" * 32, TOP1_A), make_record("b" * 32, TOP1_B, PROBS_B))
    data = c.model_dump(mode="json")
    assert data["metric_deltas"][0]["ci_a"] == list(wilson(17, 19))
    assert data["failed_in_one"] == 1
