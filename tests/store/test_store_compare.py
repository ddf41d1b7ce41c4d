"""compare_runs on two hand-made records: one flipped sample, one failure fixed, slight probability drift."""

import pytest

from repliscope.evaluation.record import SamplePrediction
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
    assert c.same_dataset
    assert c.warnings == [
        "the runs evaluated different samples (1 failed only in A, 0 only in B): each metric "
        "value is over its run's own samples, the paired delta over the 19 samples both evaluated"
    ]
    assert c.common_samples == 20 and c.only_in_a == 0 and c.only_in_b == 0
    assert c.common_evaluated == 19 and c.comparable
    assert not c.same_result_hash

    top1, top5 = c.metric_deltas
    assert (top1.name, top1.a, top1.b) == ("top1", 17 / 19, 19 / 20)
    assert top1.delta == 19 / 20 - 17 / 19 == pytest.approx(0.0552631578947368, abs=1e-15)
    assert top1.ci_a == wilson(17, 19) and top1.ci_b == wilson(19, 20)
    assert (top5.name, top5.delta) == ("top5", 19 / 20 - 18 / 19)
    # paired, on the 19 samples both evaluated: A 17/19, B 18/19 (sample 7 flipped to right) -> +1/19, not +0.0553
    assert (top1.paired_n, top1.paired_a, top1.paired_b) == (19, 17 / 19, 18 / 19)
    assert top1.paired_delta == pytest.approx(1 / 19, abs=1e-15)
    assert (top5.paired_a, top5.paired_b, top5.paired_delta) == (18 / 19, 18 / 19, 0.0)

    assert [f.model_dump() for f in c.top1_flips] == [
        {"sample_id": "imagenet_07_609.jpg", "position_a": 7, "label": 609, "top1_a": 511, "top1_b": 609}
    ]
    assert c.failed_only_in_a == ["imagenet_19_305.jpg"] and c.failed_only_in_b == []
    assert c.failed_in_one == 1
    assert c.max_abs_top1_prob_diff == abs(0.7038164734840393 - 0.2901332378387451)
    assert c.max_abs_top1_prob_diff_sample == "imagenet_07_609.jpg"


def test_identical_runs() -> None:
    a = make_record("a" * 32, TOP1_A)
    c = compare_runs(a, make_record("c" * 32, TOP1_A))
    assert c.same_result_hash and c.top1_flips == [] and c.failed_in_one == 0
    assert c.warnings == [] and c.common_evaluated == 19
    assert all(d.paired_delta == 0.0 and d.paired_n == 19 for d in c.metric_deltas)
    assert c.max_abs_top1_prob_diff == 0.0
    assert all(d.delta == 0.0 for d in c.metric_deltas)


def test_a_run_compared_with_itself_says_so() -> None:
    a = make_record("a" * 32, TOP1_A)
    c = compare_runs(a, a)
    assert c.warnings == [f"A and B are the same run ({'a' * 32}): every difference is zero by construction"]
    assert c.comparable and c.top1_flips == [] and c.common_evaluated == 19


def test_different_datasets_compare_common_ids_with_warning() -> None:
    a = make_record("a" * 32, TOP1_A)
    b = make_record("b" * 32, TOP1_B, PROBS_B, dataset_identity="f" * 64)
    b.samples = b.samples[5:]  # b saw only 15 of a's images
    c = compare_runs(a, b)
    assert not c.same_dataset
    assert c.common_samples == 15 and c.only_in_a == 5 and c.only_in_b == 0
    assert len(c.warnings) == 2 and "dataset identities differ" in c.warnings[0]
    assert c.warnings[1].startswith("the runs evaluated different samples (1 failed only in A, 0 only in B)")
    assert c.common_evaluated == 14
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


def test_no_sample_evaluated_by_both_is_not_comparable() -> None:
    """Every sample that A evaluated failed in B (and B's one success failed in A): nothing to pair."""
    a = make_record("a" * 32, TOP1_A)
    b = make_record("b" * 32, TOP1_B)
    b.samples = [
        SamplePrediction(sample_id=s.sample_id, label=s.label, error="decode: truncated") for s in b.samples[:19]
    ] + b.samples[19:]
    c = compare_runs(a, b)
    assert c.common_samples == 20 and c.common_evaluated == 0 and not c.comparable
    assert c.warnings == [
        "no sample was evaluated by both runs (20 shared sample ids, 1 failed only in A, "
        "19 only in B): there is nothing to compare"
    ]
    assert c.model_dump(mode="json")["comparable"] is False
    assert all(d.paired_n == 0 and d.paired_delta is None for d in c.metric_deltas)
    assert c.top1_flips == []


def test_disjoint_sample_ids_are_not_comparable() -> None:
    a = make_record("a" * 32, TOP1_A)
    b = make_record("b" * 32, TOP1_B, dataset_identity="f" * 64)
    b.samples = [s.model_copy(update={"sample_id": "other_" + s.sample_id}) for s in b.samples]
    c = compare_runs(a, b)
    assert (c.common_samples, c.common_evaluated, c.only_in_a, c.only_in_b) == (0, 0, 20, 20)
    assert not c.comparable
    assert c.warnings[-1] == (
        "no sample was evaluated by both runs (0 shared sample ids, 0 failed only in A, "
        "0 only in B): there is nothing to compare"
    )
