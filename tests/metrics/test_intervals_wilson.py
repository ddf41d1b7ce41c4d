"""The written-out Wilson interval equals scipy's ``binomtest(...).proportion_ci(method="wilson")`` bit for bit,
and importing :mod:`repliscope.metrics.intervals` no longer imports ``scipy.stats``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from scipy.special import ndtri
from scipy.stats import binomtest

from repliscope.metrics.intervals import Z_975, mcnemar_exact_p, wilson_interval


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


def test_mcnemar_unchanged() -> None:
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(3, 10) == float(binomtest(3, 13, 0.5).pvalue)


def test_import_does_not_load_scipy_stats() -> None:
    code = "import sys, repliscope.metrics.intervals; print('scipy.stats' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
