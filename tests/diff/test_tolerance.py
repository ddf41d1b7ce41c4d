"""The tolerance formula and the error measures."""

from __future__ import annotations

import math

import numpy as np
import pytest

from repliscope.diff.tolerance import DEFAULT_K, TolerancePolicy, accumulate, compare_arrays, dtype_eps, output_scale

EPS32 = 2.0**-23


def test_formula_k_eps_sqrt_reduction_scale() -> None:
    tol = TolerancePolicy().tolerance("a", ["Conv2d"], np.float32, 144, 10.0)
    assert tol == pytest.approx(DEFAULT_K * EPS32 * 12 * 10.0)
    assert TolerancePolicy(k=2).tolerance("a", ["X"], "float64", 1, 1.0) == pytest.approx(2 * 2.0**-52)


def test_zero_scale_and_zero_reduction_use_one() -> None:
    assert TolerancePolicy(k=1).tolerance("a", [], np.float32, 0, 0.0) == pytest.approx(EPS32)


def test_overrides_kind_max_and_layer_atol() -> None:
    policy = TolerancePolicy(k=1, kind_k={"Linear": 100, "BatchNorm2d": 3}, layer_atol={"fc": 0.5})
    assert policy.tolerance("x", ["Conv2d", "BatchNorm2d"], np.float32, 4, 1.0) == pytest.approx(3 * EPS32 * 2)
    assert policy.tolerance("x", ["Linear", "BatchNorm2d"], np.float32, 4, 1.0) == pytest.approx(100 * EPS32 * 2)
    assert policy.tolerance("fc", ["Linear"], np.float32, 4, 1.0) == 0.5
    with pytest.raises(ValueError):
        TolerancePolicy(k=0)


def test_accumulate_in_quadrature() -> None:
    assert accumulate([3.0, 4.0, 0.0]) == pytest.approx([3.0, 5.0, 5.0])


def test_compare_arrays_measures() -> None:
    ref = np.array([[4.0, -2.0, 0.0, 1e-6]], dtype=np.float32)
    cand = ref + np.array([[1e-3, 0.0, 2e-3, 0.0]], dtype=np.float32)
    s = compare_arrays(ref, cand, tolerance=1e-3)
    assert s.max_abs == pytest.approx(2e-3, rel=1e-4)
    assert s.mean_abs == pytest.approx(3e-3 / 4, rel=1e-3)
    # relative error floor: 1e-3 * max|ref| = 4e-3 for the zero reference value
    assert s.max_rel == pytest.approx(2e-3 / 4e-3, rel=1e-3)
    assert s.ulp == pytest.approx(2e-3 / (EPS32 * 4.0), rel=1e-3)
    assert not s.passed and s.ratio == pytest.approx(2.0, rel=1e-3)
    assert compare_arrays(ref, ref.copy(), tolerance=0.0).passed  # exact passes a zero tolerance


def test_nonfinite_candidate_fails() -> None:
    ref = np.ones((2, 3), dtype=np.float32)
    cand = ref.copy()
    cand[0, 1] = np.nan
    cand[1, 2] = np.inf
    s = compare_arrays(ref, cand, tolerance=1.0)
    assert s.nonfinite == 2 and not s.passed and math.isinf(s.max_abs)


def test_nonfinite_reference_positions_ignored() -> None:
    ref = np.array([1.0, np.inf], dtype=np.float32)
    s = compare_arrays(ref, np.array([1.0, 5.0], dtype=np.float32), tolerance=0.0)
    assert s.passed and s.nonfinite == 0 and output_scale(ref) == 1.0


def test_dtype_eps() -> None:
    assert dtype_eps(np.float16) == 2.0**-10 and dtype_eps("int8") == 1.0
    with pytest.raises(ValueError, match="shape mismatch"):
        compare_arrays(np.zeros(3), np.zeros(4), 1.0)


def test_a_structural_divergence_reads_as_one() -> None:
    from repliscope.diff.layers.layer_result import Divergence

    d = Divergence(
        mode="golden",
        index=3,
        path="/relu#2",
        kind="relu",
        source="port.py:9",
        covers=["/add", "/relu#2"],
        max_abs=math.inf,
        tolerance=1e-6,
        ratio=math.inf,
    )
    assert d.describe() == (
        "/relu#2 (fused: /add + /relu#2): relu at port.py:9: the candidate's unit cannot be "
        "compared with the reference's (see the notes for why)"
    )
