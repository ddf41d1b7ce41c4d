"""Confidence intervals for proportions, and the exact paired test on two classifiers' correctness.

``scipy.stats`` is imported only by the exact McNemar test (it costs ~1 s of start-up on a loaded machine): the
Wilson interval is scipy's own formula (``binomtest(...).proportion_ci(method="wilson")``) written out, equal to
it bit for bit (``tests/metrics/test_intervals_wilson.py``).
"""

from __future__ import annotations

from math import sqrt

Z_975 = 1.959963984540054
"""``scipy.special.ndtri(0.975)``: the normal quantile of a two-sided 95 % interval."""


def _two_sided_z(confidence: float) -> float:
    if confidence == 0.95:
        return Z_975
    from scipy.special import ndtri

    return float(ndtri(0.5 + 0.5 * confidence))


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of ``successes``/``n`` (scipy's formula, Newcombe 1998); (0, 1) when n == 0."""
    if n == 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"wilson_interval: successes must be in [0, n={n}], got {successes}")
    if not 0 < confidence < 1:
        raise ValueError(f"wilson_interval: confidence must be in (0, 1), got {confidence}")
    k = successes
    p = k / n
    z = _two_sided_z(confidence)
    denom = 2 * (n + z**2)
    center = (2 * n * p + z**2) / denom
    q = 1 - p
    delta = z / denom * sqrt(4 * n * p * q + z**2)
    low = 0.0 if k == 0 else center - delta
    high = 1.0 if k == n else center + delta
    return float(low), float(high)


def mcnemar_exact_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant pairs (``b``: only the first is right, ``c``: only
    the second): binomial test of b in b + c trials at 0.5 (scipy); 1.0 when there is no discordant pair."""
    if b + c == 0:
        return 1.0
    from scipy.stats import binomtest

    return min(1.0, float(binomtest(b, b + c, 0.5, alternative="two-sided").pvalue))
