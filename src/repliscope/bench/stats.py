"""Latency statistics as MLPerf LoadGen computes them, with distribution-free confidence intervals.

Latencies are 1-D float arrays in any unit (the callers use milliseconds). Percentiles follow LoadGen
(``loadgen/results.cc``, ``PerformanceSummary::ProcessLatencies``): sort, then take the element at index
``floor(n * p)`` (0-based), i.e. the ``floor(n * p) + 1``-th smallest latency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

PERCENTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99, "p999": 0.999}
"""Reported percentiles by name."""

EARLY_STOPPING_CONFIDENCE = 0.99
EARLY_STOPPING_TOLERANCE = 0.0
"""LoadGen's constants (``PerformanceSummary::EarlyStopping``): 99 % confidence, tolerance 0."""


def loadgen_index(n: int, p: float) -> int:
    """0-based index of LoadGen's ``p`` percentile among ``n`` sorted latencies: ``floor(n * p)``."""
    if n < 1 or not 0.0 <= p < 1.0:
        raise ValueError(f"need n >= 1 and 0 <= p < 1, got n={n}, p={p}")
    return int(n * p)


def percentile(latencies: np.ndarray, p: float) -> float:
    """LoadGen's ``p`` percentile of ``latencies`` (1-D, unsorted is fine)."""
    ordered = np.sort(np.asarray(latencies, dtype=np.float64))
    return float(ordered[loadgen_index(len(ordered), p)])


@dataclass(frozen=True)
class QuantileInterval:
    """A distribution-free interval ``[low, high]`` for the ``p`` quantile of the latency distribution.

    ``low`` / ``high`` are order statistics of the sample (``low_rank`` / ``high_rank``, 1-based) chosen from the
    binomial distribution of the count of latencies below the true quantile, so that the exact ``coverage``
    is at least the requested confidence with no assumption on the distribution. A bound is None when the
    sample is too small to have one (e.g. an upper bound for p99.9 from 100 queries)."""

    p: float
    low: float | None
    high: float | None
    low_rank: int | None
    high_rank: int | None
    coverage: float


def quantile_interval(latencies: np.ndarray, p: float, confidence: float = 0.95) -> QuantileInterval:
    """Order-statistic interval for the ``p`` quantile (Conover, *Practical Nonparametric Statistics*, 3.2).

    With ``B ~ Binomial(n, p)`` the count of observations below the quantile, ``P(X_(l) <= q <= X_(u)) =
    F(u-1) - F(l-1)``; ``l`` is the largest rank with ``F(l-1) <= alpha/2`` and ``u`` the smallest with
    ``F(u-1) >= 1 - alpha/2`` (one-sided bounds are reported as None when the rank falls outside 1..n, and the
    coverage then counts the missing side as unbounded)."""
    from scipy.stats import binom

    ordered = np.sort(np.asarray(latencies, dtype=np.float64))
    n = len(ordered)
    if n < 1:
        raise ValueError("no latencies")
    alpha = 1.0 - confidence
    cdf = binom.cdf(np.arange(n + 1), n, p)  # cdf[k] = P(B <= k), k = 0..n
    below = np.nonzero(cdf <= alpha / 2)[0]
    low_rank = int(below[-1]) + 1 if len(below) else None  # l - 1 = k  ->  l = k + 1
    upper_k = int(np.argmax(cdf >= 1 - alpha / 2))  # the smallest k, exists since cdf[n] == 1
    high_rank = upper_k + 1 if upper_k + 1 <= n else None
    low_cdf = float(cdf[low_rank - 1]) if low_rank is not None else 0.0
    high_cdf = float(cdf[high_rank - 1]) if high_rank is not None else 1.0
    return QuantileInterval(
        p=p,
        low=float(ordered[low_rank - 1]) if low_rank is not None else None,
        high=float(ordered[high_rank - 1]) if high_rank is not None else None,
        low_rank=low_rank,
        high_rank=high_rank,
        coverage=high_cdf - low_cdf,
    )


def early_stopping_odds(h: int, t: int, p: float, d: float = EARLY_STOPPING_TOLERANCE) -> float:
    """LoadGen's ``odds(h, t, p, d)``: the probability of at most ``t`` over-latency queries among ``h + t``
    when each query is over the latency with probability ``1 - (p - d)``, i.e. ``BetaRegularized[p - d, h,
    1 + t]`` = ``Binomial(h + t, 1 - p + d).cdf(t)`` (``loadgen/early_stopping.cc``)."""
    from scipy.special import betainc

    return float(betainc(h, 1 + t, p - d))


def min_passing_queries(
    t: int, p: float, d: float = EARLY_STOPPING_TOLERANCE, c: float = EARLY_STOPPING_CONFIDENCE
) -> int:
    """LoadGen's ``MinPassingQueriesFinder(t, p, d, c)``: the smallest count ``h`` of under-latency queries such
    that ``odds(h, t, p, d) < 1 - c``, i.e. with ``t`` over-latency queries, ``h + t`` queries show at
    confidence ``c`` that the ``p`` percentile is at most the latency bound (``odds`` falls as ``h`` grows)."""
    low = max(1, math.ceil(math.log(1 - c) / math.log(p - d)) if t == 0 else 1)
    high = low
    while early_stopping_odds(high, t, p, d) >= 1 - c:
        low, high = high + 1, high * 2
    while low < high:  # the smallest passing h in [low, high]
        mid = (low + high) // 2
        if early_stopping_odds(mid, t, p, d) < 1 - c:
            high = mid
        else:
            low = mid + 1
    return low


@dataclass(frozen=True)
class EarlyStopping:
    """LoadGen's early-stopping estimate of the ``p`` percentile (single-/multi-stream): ``estimate`` is the
    latency after discarding the ``discarded`` highest ones, an upper bound of the true percentile at 99 %
    confidence; None (with ``min_queries`` needed) when too few queries ran."""

    p: float
    queries: int
    min_queries: int
    estimate: float | None
    discarded: int | None


def early_stopping_estimate(
    latencies: np.ndarray, p: float, d: float = EARLY_STOPPING_TOLERANCE, c: float = EARLY_STOPPING_CONFIDENCE
) -> EarlyStopping:
    """LoadGen's early-stopping percentile estimate (``PerformanceSummary::EarlyStopping``, single-stream and
    multi-stream cases; the method is described in MLCommons' ``loadgen/docs/early_stopping.md``).

    With ``n`` queries, ``t`` is the largest count of "over-latency" queries such that ``n >= h(t) + t`` where
    ``h(t)`` = :func:`min_passing_queries` (found by bisection, as ``h(t) + t`` increases with ``t``); the
    estimate is the latency at 0-based index ``n - t`` in sorted order, i.e. the ``t - 1`` highest
    latencies are discarded. Needs ``n >= h(1) + 1`` queries."""
    ordered = np.sort(np.asarray(latencies, dtype=np.float64))
    n = len(ordered)
    h_min = min_passing_queries(1, p, d, c)
    if n < h_min + 1:
        return EarlyStopping(p=p, queries=n, min_queries=h_min + 1, estimate=None, discarded=None)
    t, fails = 1, n  # h(i) + i grows with i: the largest passing i by bisection (LoadGen scans i = 2, 3, ...)
    while fails - t > 1:
        mid = (t + fails) // 2
        if min_passing_queries(mid, p, d, c) + mid <= n:
            t = mid
        else:
            fails = mid
    return EarlyStopping(p=p, queries=n, min_queries=h_min + 1, estimate=float(ordered[n - t]), discarded=t - 1)


@dataclass(frozen=True)
class ServerEarlyStopping:
    """LoadGen's server-scenario test: with ``overlatency`` queries above the bound, the run shows the ``p``
    percentile is within the bound at 99 % confidence iff ``queries >= needed`` (``h(t) + t``)."""

    p: float
    queries: int
    overlatency: int
    needed: int

    @property
    def passed(self) -> bool:
        return self.queries >= self.needed


def server_early_stopping(
    latencies: np.ndarray,
    bound: float,
    p: float,
    d: float = EARLY_STOPPING_TOLERANCE,
    c: float = EARLY_STOPPING_CONFIDENCE,
) -> ServerEarlyStopping:
    """LoadGen's server case: ``t`` = latencies strictly above ``bound``, ``needed = min_passing_queries(t) + t``."""
    lat = np.asarray(latencies, dtype=np.float64)
    t = int(np.count_nonzero(lat > bound))
    return ServerEarlyStopping(p=p, queries=len(lat), overlatency=t, needed=min_passing_queries(t, p, d, c) + t)


def mean_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval of the mean (the central limit theorem; not distribution-free,
    used for throughput = samples / mean latency of back-to-back queries). One value: (v, v, v)."""
    from scipy.stats import t as student

    x = np.asarray(values, dtype=np.float64)
    m = float(x.mean())
    if len(x) < 2:
        return m, m, m
    half = float(student.ppf(0.5 + confidence / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return m, m - half, m + half
