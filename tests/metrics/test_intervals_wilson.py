"""The written-out Wilson interval equals scipy's ``binomtest(...).proportion_ci(method="wilson")`` bit for bit,
the exact McNemar p-value is the correctly rounded exact binomial tail (scipy's ``binomtest`` within 1e-12);
neither imports ``scipy.stats``."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from math import comb

import numpy as np
import pytest
from scipy.special import ndtri
from scipy.stats import binomtest

from repliscope.metrics.intervals import EXACT_PAIRS_LIMIT, Z_975, mcnemar_exact_p, wilson_interval


def test_z_constant_is_scipys_quantile() -> None:
    assert float(ndtri(0.975)) == Z_975


@pytest.mark.parametrize("confidence", [0.95, 0.9, 0.99])
def test_wilson_equals_scipy_bit_for_bit(confidence: float) -> None:
    rng = np.random.default_rng(26)
    cases = [(k, n) for n in range(1, 120) for k in range(n + 1)]
    cases += [(int(rng.integers(0, n + 1)), int(n)) for n in rng.integers(1, 10**7, 2000)]
    cases += [(0, 50_000), (50_000, 50_000), (49_500, 50_000)]
    for k, n in cases:
        ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
        assert wilson_interval(k, n, confidence) == (float(ci.low), float(ci.high)), (k, n)
    assert len(cases) == 7259 + 2000 + 3


def test_wilson_edges_and_errors() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(10, 10)[1] == 1.0
    with pytest.raises(ValueError, match=r"successes must be in \[0, n=5\], got 6"):
        wilson_interval(6, 5)
    with pytest.raises(ValueError, match="confidence must be in"):
        wilson_interval(1, 5, 1.5)


def _exact_two_sided(b: int, c: int) -> float:
    """The definition in exact rationals: 2 * P(X <= min(b, c)), X ~ Binomial(b + c, 1/2), capped at 1."""
    n, k = b + c, min(b, c)
    return float(min(Fraction(1), Fraction(2 * sum(comb(n, i) for i in range(k + 1)), 2**n)))


def test_mcnemar_is_the_correctly_rounded_exact_value_and_agrees_with_scipy() -> None:
    rng = np.random.default_rng(27)
    cases = [(b, c) for b in range(60) for c in range(60) if b + c]
    cases += [(int(b), int(c)) for b, c in rng.integers(0, 1_000, (100, 2))]  # the reference sums comb(): small n
    cases += [(9_999, 10_001), (0, 20_000), (3_000, 0), (1, 1), (7, 8), (250, 260)]
    for b, c in cases:
        ours = mcnemar_exact_p(b, c)
        if b + c <= 2_000:  # the reference sums comb() from scratch: quick for small n only
            assert ours == _exact_two_sided(b, c), (b, c)
        assert ours == pytest.approx(min(1.0, float(binomtest(b, b + c, 0.5).pvalue)), rel=1e-12, abs=1e-300)
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(3, 3) == mcnemar_exact_p(3, 4) == 1.0
    assert mcnemar_exact_p(5, 2) == 2 * 29 / 128
    assert mcnemar_exact_p(np.int64(30), np.int64(70)) == _exact_two_sided(30, 70)  # type: ignore[arg-type]  # numpy ints too; no overflow
    with pytest.raises(ValueError, match="counts must be >= 0, got b=-1"):
        mcnemar_exact_p(-1, 4)


def test_mcnemar_beyond_the_exact_limit_is_scipys() -> None:
    b, c = 10_300, 9_900
    assert b + c > EXACT_PAIRS_LIMIT
    assert mcnemar_exact_p(b, c) == float(binomtest(b, b + c, 0.5).pvalue)


def test_mcnemar_does_not_load_scipy_stats() -> None:
    code = (
        "import sys; from repliscope.metrics.intervals import mcnemar_exact_p as m; "
        "print(m(30, 45), 'scipy.stats' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == [repr(_exact_two_sided(30, 45)), "False"]


def test_import_does_not_load_scipy_stats() -> None:
    code = "import sys, repliscope.metrics.intervals; print('scipy.stats' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
