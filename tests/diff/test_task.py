"""Task-level comparison: hand-made records with exact counts, and torch vs onnxruntime on real images."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.datasets import resolve_dataset
from repliscope.diff.task_level import diff_records, diff_runtimes, mcnemar_exact
from tests.conftest import LITE0
from tests.diff._records import pair


def test_records_one_flip_exact_counts() -> None:
    a, b = pair()
    r = diff_records(a, b)
    assert r.source == "records" and r.compared == 4
    assert r.failed_b == ["s5"] and r.failed_a == [] and r.only_in_a == 1 and r.only_in_b == 0
    assert r.agreements == 3 and r.agreement == pytest.approx(0.75)
    assert [(f.sample_id, f.label, f.top1_a, f.top1_b) for f in r.flips] == [("s2", 2, 2, 5)]
    m = r.mcnemar
    assert m is not None
    assert (m.n, m.both_correct, m.both_wrong, m.only_a_correct, m.only_b_correct) == (3, 1, 1, 1, 0)
    assert m.p_value == 1.0  # binomtest(1, 1, 0.5): two-sided p = 1
    (out,) = r.outputs
    assert "top-k" in out.quantity and "both" in out.quantity
    # s2: common classes 2, 5, 1? B's top-k is [5, 2, 9]: common {2, 5}: |0.44-0.5|, |0.45-0.4|
    assert out.max_abs == pytest.approx(0.06) and out.max_abs_sample == "s2"
    assert out.values == 3 + 2 + 2 + 3  # common classes per sample: s1 3, s2 2, s3 2, s4 3
    s4 = next(d for d in r.per_sample if d.sample_id == "s4")
    assert s4.correct_a is None and s4.max_abs == pytest.approx(0.01)
    assert r.notes == []


def test_mcnemar_exact_values() -> None:
    assert mcnemar_exact([]) is None
    m = mcnemar_exact([(True, False)] * 6 + [(True, True)] * 4)
    assert m is not None and m.only_a_correct == 6 and m.p_value == pytest.approx(2 * 0.5**6)
    m2 = mcnemar_exact([(True, False)] * 3 + [(False, True)] * 3)
    assert m2 is not None and m2.p_value == 1.0


def test_torch_vs_onnxruntime_on_foolbox_images(cache_dir: Path) -> None:
    r = diff_runtimes(
        LITE0, "torch", "onnxruntime", resolve_dataset("foolbox_imagenet"), batch_size=10, cache_dir=cache_dir
    )
    assert r.source == "runtimes" and r.compared == 20 and r.failed_a == []
    assert r.agreement == 1.0 and r.flips == []
    assert r.mcnemar is not None and r.mcnemar.n == 20 and r.mcnemar.p_value == 1.0
    assert r.mcnemar.both_correct == 18 and r.mcnemar.both_wrong == 2
    logits, probs = r.outputs
    assert logits.quantity.startswith("model outputs") and logits.values == 20 * 1000
    assert probs.quantity.startswith("probabilities") and probs.max_abs < 1e-4
    assert 0 < logits.max_abs < 1e-3
    assert len(r.per_sample) == 20 and r.per_sample[6].top1_a == 436  # a real miss, the same on both
