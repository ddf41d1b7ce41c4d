"""Top-k accuracy with Wilson intervals, against hand-computed values."""

from __future__ import annotations

import math

import pytest

from repliscope.evaluation.record import SamplePrediction
from repliscope.metrics.classification import compute_metrics, top1, top5
from repliscope.metrics.intervals import wilson_interval


def wilson_by_hand(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize(("k", "n"), [(18, 20), (0, 20), (20, 20), (751, 1000)])
def test_wilson_matches_formula(k: int, n: int) -> None:
    low, high = wilson_interval(k, n)
    exp_low, exp_high = wilson_by_hand(k, n)
    assert low == pytest.approx(exp_low, abs=1e-9) and high == pytest.approx(exp_high, abs=1e-9)


def test_topk_counts_and_exclusions() -> None:
    samples = [
        SamplePrediction(sample_id="a", label=1, topk_indices=[1, 2, 3, 4, 5], topk_probs=[0.5] * 5),
        SamplePrediction(sample_id="b", label=3, topk_indices=[1, 2, 3, 4, 5], topk_probs=[0.5] * 5),
        SamplePrediction(sample_id="c", label=9, topk_indices=[1, 2, 3, 4, 5], topk_probs=[0.5] * 5),
        SamplePrediction(sample_id="d", label=1, error="cannot decode"),
        SamplePrediction(sample_id="e", label=None, topk_indices=[1, 2, 3, 4, 5], topk_probs=[0.5] * 5),
    ]
    t1, t5 = top1(samples), top5(samples)
    assert t1 is not None and (t1.successes, t1.n) == (1, 3)
    assert t5 is not None and (t5.successes, t5.n) == (2, 3)
    assert t1.value == pytest.approx(1 / 3)
    assert [m.name for m in compute_metrics(samples)] == ["top1", "top5"]


def test_no_labels_no_metrics() -> None:
    samples = [SamplePrediction(sample_id="e", label=None, topk_indices=[1], topk_probs=[1.0])]
    assert compute_metrics(samples) == []


def test_mcnemar_exact_p_against_the_binomial_by_hand() -> None:
    from repliscope.metrics.intervals import mcnemar_exact_p

    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(18, 0) == pytest.approx(2 * 0.5**18)
    # b=5, c=2: two-sided exact p = 2 * P(X <= 2 | n=7, 1/2) = 2 * (1 + 7 + 21) / 128
    assert mcnemar_exact_p(5, 2) == pytest.approx(2 * 29 / 128)
    assert mcnemar_exact_p(3, 3) == 1.0
