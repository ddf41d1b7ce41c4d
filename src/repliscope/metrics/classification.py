"""Classification metrics over per-sample predictions, registered under the names claims use."""

from __future__ import annotations

from collections.abc import Callable, Sequence

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
    return topk_accuracy(samples, 1, "top1")


@METRICS.register("top5")
def top5(samples: Sequence[SamplePrediction]) -> MetricValue | None:
    return topk_accuracy(samples, 5, "top5")


def compute_metrics(samples: Sequence[SamplePrediction]) -> list[MetricValue]:
    """Every registered metric that applies to these samples."""
    out = []
    for name in METRICS.names():
        value = METRICS.get(name)(samples)
        if value is not None:
            out.append(value)
    return out
