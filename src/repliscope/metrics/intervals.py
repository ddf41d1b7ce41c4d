"""Confidence intervals for proportions, and the exact paired test on two classifiers' correctness.

No ``scipy.stats`` import (it costs 0.6 s of start-up quiet, ~1 s on a loaded machine, which ``runs compare``
would pay on top of its work; only a McNemar test of more than :data:`EXACT_PAIRS_LIMIT` discordant pairs uses
it): the Wilson interval is scipy's own formula
(``binomtest(...).proportion_ci(method="wilson")``) written out, equal to it bit for bit, and the exact McNemar
test sums the binomial tail in integers (``tests/metrics/test_intervals_wilson.py``).
"""

from __future__ import annotations

import operator
from math import sqrt

MAX_HALF_WIDTH = 0.02
"""The widest 95 % interval (half-width, on the metric's 0..1 scale: 2 points) that can confirm a claim: claims
are compared with other models' numbers a point or two apart. A claim inside a wider interval is "not
comparable" (:func:`repliscope.evaluation.claims.judge_claim`)."""

MIN_BOOTSTRAP_SAMPLES = 30
"""The fewest images a bootstrap interval over images (COCO AP and AR, segmentation IoU) judges a claim with: the
smallest size at which the COCO AP interval's coverage was measured near 95 % (``benchmarks/
bench_interval_coverage.py``, docs/benchmarks.md "Interval coverage"). Below it a claim on such a metric is "not
comparable" (:func:`repliscope.evaluation.claims.judge_claim`)."""

MIN_SEGMENTATION_IMAGES = 200
"""The fewest images a segmentation metric's bootstrap interval (mIoU, fwIoU, pixel accuracy, a class's IoU) judges
a claim with: ``bench_interval_coverage.py --part segmentation`` measured the mIoU interval's coverage at 79.5 /
87.0 / 90.5 % on 30 / 60 / 100 images and 95.5 / 93.0 % on 200 / 400 (a class's IoU 91.4 / 92.9 %, the rarest
classes' 88.7 / 91.5 %: their spread comes from which images hold the class, which no bootstrap of one sample sees)."""

MIN_OBJECTS_PER_CATEGORY = 30.0
"""The fewest ground-truth objects per category (the median over the categories present) a COCO number's bootstrap
interval judges a claim with. AP's small-sample bias grows as the objects per category shrink, whatever the image
count: ``benchmarks/bench_interval_coverage.py`` measured the interval's coverage at 94-95.5 % from 30 per category
in both simulated worlds, 92-94.5 % at 15 (docs/benchmarks.md "Interval coverage")."""

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


EXACT_PAIRS_LIMIT = 20_000
"""Up to this many discordant pairs the McNemar p-value is summed in integers (at most ~30 ms); beyond, scipy."""


def mcnemar_exact_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant pairs (``b``: only the first is right, ``c``: only
    the second): the binomial test of ``min(b, c)`` in ``n = b + c`` trials at 0.5, ``2 * P(X <= min(b, c))``
    capped at 1; 1.0 when there is no discordant pair.

    Summed in Python integers and divided once, so the float is the correctly rounded exact value (scipy's
    ``binomtest(b, n, 0.5).pvalue`` agrees to ~1e-14 relative and needs a 0.6 s import); beyond
    :data:`EXACT_PAIRS_LIMIT` pairs, scipy's."""
    b, c = operator.index(b), operator.index(c)  # numpy integers too, as Python ints (no int64 overflow)
    if b < 0 or c < 0:
        raise ValueError(f"mcnemar_exact_p: counts must be >= 0, got b={b}, c={c}")
    n, k = b + c, min(b, c)
    if 2 * k + 1 >= n:  # b == c, or they differ by one: the two tails cover every outcome
        return 1.0
    if n > EXACT_PAIRS_LIMIT:
        from scipy.stats import binomtest

        return min(1.0, float(binomtest(b, n, 0.5, alternative="two-sided").pvalue))
    term = total = 1  # C(n, 0)
    for i in range(k):
        term = term * (n - i) // (i + 1)  # C(n, i + 1), exact
        total += term
    return min(1.0, total / (1 << (n - 1)))  # 2 * total / 2**n, correctly rounded
