"""Classification metrics over per-sample predictions, registered under the names claims use.

``top1`` / ``top5``: the fraction of labelled, evaluated samples whose label is among the first 1 / 5 classes of
the manifest's ``topk`` op, with a 95 % Wilson score interval. **Ties**: ``topk`` orders classes by score, best
first, and a tie goes to the LOWER class index (a stable sort of the negated scores, numpy's
``argsort(kind="stable")``; torch.topk and tf.math.top_k make no such promise). So a label whose score equals the
k-th best score while the tied group straddles position k is in or out of the top-k by that rule alone. The
record counts those samples (:func:`tie_counts`: ``counts["label_ties_top1"]`` / ``counts["label_ties_top5"]``)
and the rows whose scores are all equal (``counts["all_equal_rows"]``: a constant output, whose top-k is classes
0..k-1 by the rule), each only when not 0; ``evaluate`` and the report show them (:func:`tie_line`). A model
output holding a NaN or an infinity is not a prediction: the sample is failed with the reason (``non-finite model
output: ...``) and is left out of ``n``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from repliscope.metrics.intervals import wilson_interval
from repliscope.records.evaluation import MetricValue, SamplePrediction
from repliscope.registry import Registry

Metric = Callable[[Sequence[SamplePrediction]], MetricValue | None]
METRICS: Registry[Metric] = Registry("metric")


def topk_accuracy(samples: Sequence[SamplePrediction], k: int, name: str) -> MetricValue | None:
    """Fraction of labelled, successfully evaluated samples whose label is among the first ``k`` predictions.

    Failed samples (``error`` set) and unlabelled ones are not in ``n``; the record counts them apart.
    Returns None when there is no labelled sample or fewer than ``k`` predictions were kept.
    """
    n = hits = 0
    for s in samples:  # one pass, no intermediate list: a 50,000-sample run is scored twice per comparison
        if s.label is None or s.error is not None:
            continue
        top = s.topk_indices
        if len(top) < k:
            return None
        n += 1
        if s.label in top[:k]:
            hits += 1
    if n == 0:
        return None
    low, high = wilson_interval(hits, n)
    return MetricValue(name=name, value=hits / n, ci_low=low, ci_high=high, n=n, successes=hits)


@METRICS.register("top1")
def top1(samples: Sequence[SamplePrediction]) -> MetricValue | None:
    """Top-1 accuracy (Wilson 95 %); ties go to the lower class index (:mod:`repliscope.metrics.classification`)."""
    return topk_accuracy(samples, 1, "top1")


@METRICS.register("top5")
def top5(samples: Sequence[SamplePrediction]) -> MetricValue | None:
    """Top-5 accuracy (Wilson 95 %); ties go to the lower class index (:mod:`repliscope.metrics.classification`)."""
    return topk_accuracy(samples, 5, "top5")


TIE_KS = (1, 5)
"""The top-k boundaries whose label ties are counted (the metrics' k)."""


def tie_counts(scores: np.ndarray, labels: Sequence[int | None], kept: int) -> dict[str, int]:
    """Ties in the (N, C) ``scores`` ``topk`` ranked (``kept``: its k): ``all_equal_rows`` (rows of C > 1 equal
    scores) and, per k of :data:`TIE_KS` with k <= ``kept`` and k < C, ``label_ties_top{k}``: labelled rows whose
    label's score equals the k-th best score while the classes of that score straddle position k (more of them
    than the top-k has room for), so the tie rule alone put the label in or out of the top-k."""
    x = np.asarray(scores)
    c = x.shape[1]
    out = {"all_equal_rows": int(np.count_nonzero((x == x[:, :1]).all(axis=1))) if c > 1 else 0}
    rows = np.array([i for i, label in enumerate(labels) if label is not None and 0 <= label < c], np.int64)
    best = -np.sort(-x, axis=1)
    for k in TIE_KS:
        if k > kept or k >= c:
            continue
        if not rows.size:
            out[f"label_ties_top{k}"] = 0
            continue
        sub = x[rows]
        edge = best[rows, k - 1][:, None]
        straddle = ((sub > edge).sum(axis=1) < k) & ((sub >= edge).sum(axis=1) > k)
        label_scores = sub[np.arange(len(rows)), [labels[i] for i in rows]]
        out[f"label_ties_top{k}"] = int(np.count_nonzero(straddle & (label_scores == edge[:, 0])))
    return out


def tie_line(counts: dict[str, int]) -> str | None:
    """``2 all-equal output rows; labels tied at the top-k boundary: top-1 2, top-5 0 (a tie goes to the lower
    class index)`` when a record counted any tie; None otherwise (and for records made before ties were
    counted)."""
    keys = ["all_equal_rows", *(f"label_ties_top{k}" for k in TIE_KS)]
    if not any(counts.get(k) for k in keys):
        return None
    ks = ", ".join(f"top-{k} {counts.get(f'label_ties_top{k}', 0)}" for k in TIE_KS)
    return (
        f"{counts.get('all_equal_rows', 0)} all-equal output rows; labels tied at the top-k boundary: {ks} "
        "(a tie goes to the lower class index)"
    )


def compute_metrics(samples: Sequence[SamplePrediction]) -> list[MetricValue]:
    """Every registered metric that applies to these samples."""
    out = []
    for name in METRICS.names():
        value = METRICS.get(name)(samples)
        if value is not None:
            out.append(value)
    return out
