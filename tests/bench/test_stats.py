"""Statistics against LoadGen's definitions and brute-force references."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom
from scipy.stats import t as student

from repliscope.bench.stats import (
    early_stopping_estimate,
    early_stopping_odds,
    loadgen_index,
    mean_interval,
    min_passing_queries,
    percentile,
    quantile_interval,
    server_early_stopping,
)

ONE_TO_1000 = np.arange(1, 1001, dtype=np.float64)


def brute_min_passing(t: int, p: float, c: float = 0.99) -> int:
    """The smallest h with P(Binomial(h + t, 1 - p) <= t) < 1 - c, by scanning every h up to 20000."""
    hs = np.arange(1, 20001)
    return int(hs[np.argmax(binom.cdf(t, hs + t, 1 - p) < 1 - c)])


def loadgen_loop_estimate(lat: np.ndarray, p: float) -> tuple[float, int] | None:
    """LoadGen's single-stream loop (results.cc) written out with the brute-force h(t)."""
    ordered = np.sort(lat)
    n = len(ordered)
    if n < brute_min_passing(1, p) + 1:
        return None
    t = 1
    for i in range(2, n + 1):
        if n < brute_min_passing(i, p) + i:
            t = i - 1
            break
    return float(ordered[n - t]), t - 1


def test_loadgen_percentile_is_the_floor_np_order_statistic() -> None:
    shuffled = np.random.default_rng(3).permutation(ONE_TO_1000)
    assert [percentile(shuffled, p) for p in (0.5, 0.9, 0.99, 0.999)] == [501.0, 901.0, 991.0, 1000.0]
    assert loadgen_index(64, 0.9) == 57 and loadgen_index(10, 0.999) == 9
    with pytest.raises(ValueError):
        loadgen_index(10, 1.0)


@pytest.mark.parametrize(("t", "p"), [(0, 0.9), (1, 0.9), (5, 0.9), (20, 0.9), (0, 0.99), (1, 0.99), (3, 0.99)])
def test_min_passing_queries_matches_the_binomial_definition(t: int, p: float) -> None:
    h = min_passing_queries(t, p)
    assert h == brute_min_passing(t, p)
    assert early_stopping_odds(h, t, p) == pytest.approx(binom.cdf(t, h + t, 1 - p), rel=1e-9)


def test_loadgen_minimum_query_counts() -> None:
    """LoadGen's documented minimums: 64 queries for a p90 estimate, 662 for p99."""
    assert min_passing_queries(1, 0.9) + 1 == 64
    assert min_passing_queries(1, 0.99) + 1 == 662


@pytest.mark.parametrize(("n", "p"), [(64, 0.9), (200, 0.9), (1000, 0.9), (700, 0.99)])
def test_early_stopping_estimate_equals_loadgen_loop(n: int, p: float) -> None:
    lat = np.random.default_rng(n).lognormal(2.0, 0.3, size=n)
    est = early_stopping_estimate(lat, p)
    ref = loadgen_loop_estimate(lat, p)
    assert ref is not None and (est.estimate, est.discarded) == ref


def test_early_stopping_golden_and_too_few() -> None:
    est = early_stopping_estimate(ONE_TO_1000, 0.9)
    assert (est.estimate, est.discarded, est.min_queries) == (923.0, 77, 64)
    short = early_stopping_estimate(ONE_TO_1000[:63], 0.9)
    assert short.estimate is None and short.min_queries == 64


def test_server_early_stopping_counts_strictly_over_the_bound() -> None:
    srv = server_early_stopping(ONE_TO_1000, bound=995.0, p=0.99)
    assert srv.overlatency == 5 and srv.needed == brute_min_passing(5, 0.99) + 5 and not srv.passed
    ok = server_early_stopping(ONE_TO_1000, bound=1000.0, p=0.9)
    assert ok.overlatency == 0 and ok.needed == 44 and ok.passed


def test_quantile_interval_ranks_coverage_and_extremality() -> None:
    ci = quantile_interval(ONE_TO_1000, 0.9)
    assert (ci.low_rank, ci.high_rank, ci.low, ci.high) == (881, 919, 881.0, 919.0)
    n, p = 1000, 0.9
    assert ci.coverage == pytest.approx(binom.cdf(918, n, p) - binom.cdf(880, n, p))
    assert ci.coverage >= 0.95
    assert binom.cdf(881, n, p) > 0.025 and binom.cdf(917, n, p) < 0.975  # no tighter rank is allowed


def test_quantile_interval_open_upper_bound_for_small_samples() -> None:
    ci = quantile_interval(ONE_TO_1000[:100], 0.999)
    assert ci.high is None and ci.high_rank is None
    assert (ci.low_rank, ci.low) == (99, 99.0)  # P(B <= 98) = 0.0046 <= 0.025 < P(B <= 99)
    assert ci.coverage == pytest.approx(1 - binom.cdf(98, 100, 0.999))


def test_mean_interval_is_student_t() -> None:
    x = np.array([1.0, 2.0, 4.0, 8.0])
    m, low, high = mean_interval(x)
    ref = student.interval(0.95, 3, loc=x.mean(), scale=x.std(ddof=1) / 2)
    assert m == 3.75 and (low, high) == pytest.approx(ref)
