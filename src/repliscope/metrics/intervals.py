"""Confidence intervals for proportions, and the exact paired test on two classifiers' correctness."""

from __future__ import annotations

from scipy.stats import binomtest


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of ``successes``/``n`` (scipy); (0, 1) when n == 0."""
    if n == 0:
        return 0.0, 1.0
    ci = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def mcnemar_exact_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant pairs (``b``: only the first is right, ``c``: only
    the second): binomial test of b in b + c trials at 0.5 (scipy); 1.0 when there is no discordant pair."""
    if b + c == 0:
        return 1.0
    return min(1.0, float(binomtest(b, b + c, 0.5, alternative="two-sided").pvalue))
