"""Claim verdicts: does the measured metric support the published number?

Accuracy claims are judged on evaluation records (:func:`judge_claim`), performance claims (latency /
throughput) on benchmark records (:func:`judge_performance_claim`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from repliscope.evaluation.record import ClaimVerdict, MetricValue
from repliscope.manifest.schema import ClaimSpec, DatasetRef, claim_metric_spec

Verdict = Literal["consistent", "inconsistent", "not comparable"]


def dataset_label(ref: DatasetRef | None) -> str:
    return f"{ref.name}/{ref.split}" if ref is not None else "undeclared"


def judge_claim(
    claim: ClaimSpec, metric: MetricValue | None, evaluated_as: DatasetRef | None, evaluated_name: str, failed: int = 0
) -> ClaimVerdict:
    """``consistent`` when the claim lies inside the metric's 95 % interval, ``inconsistent`` when outside,
    ``not comparable`` when the evaluated data is not declared to be the claim's dataset and split (the
    numbers are kept, never presented as a reproduction) or the metric could not be computed.

    Classification claims are in percent (75.1 -> 0.751); detection claims (COCO's AP, AR...) are fractions
    as COCOeval prints them and are compared as written. Detection intervals are bootstraps over images."""
    # 75.1 -> 0.751 exactly as printed
    spec = claim_metric_spec(claim.metric)
    claimed = round(claim.value / 100.0, 10) if spec is not None and spec.unit == "percent" else claim.value
    evaluated = f"{evaluated_name} (as {dataset_label(evaluated_as)})" if evaluated_as else evaluated_name

    def verdict(v: Verdict, reason: str) -> ClaimVerdict:
        if failed:
            reason += f"; {failed} samples failed and are not in n"
        return ClaimVerdict(
            metric=claim.metric,
            claimed=claimed,
            claim_dataset=dataset_label(claim.dataset),
            source=claim.source,
            measured=metric.value if metric else None,
            ci_low=metric.ci_low if metric else None,
            ci_high=metric.ci_high if metric else None,
            evaluated_dataset=evaluated,
            verdict=v,
            reason=reason,
        )

    if claim.is_performance:
        return verdict(
            "not comparable",
            f"'{claim.metric}' is a performance claim: `repliscope bench` judges it, "
            "an accuracy evaluation does not measure it",
        )
    if metric is None:
        return verdict(
            "not comparable",
            f"metric '{claim.metric}' could not be computed (no labelled sample "
            "evaluated, or the postprocess keeps fewer predictions than it needs)",
        )
    if evaluated_as is None or (evaluated_as.name, evaluated_as.split) != (claim.dataset.name, claim.dataset.split):
        return verdict(
            "not comparable",
            f"the claim is about {dataset_label(claim.dataset)}; the evaluated data "
            f"'{evaluated}' is not declared to be that dataset",
        )
    inside = metric.ci_low <= claimed <= metric.ci_high
    return verdict(
        "consistent" if inside else "inconsistent",
        (
            f"claimed {claimed:.2%} is {'inside' if inside else 'outside'} the 95 % interval "
            f"[{metric.ci_low:.2%}, {metric.ci_high:.2%}] of the measured {metric.value:.2%} (n={metric.n})"
        ),
    )


@dataclass(frozen=True)
class MeasuredPerformance:
    """What one benchmark measured, for :func:`judge_performance_claim`. ``values``: metric name
    (``latency_p90_ms``, ``latency_p99_ms``, ``throughput``) -> (measured, interval low, interval high), a bound
    None when the run was too short to have one."""

    scenario: str
    batch_size: int
    cpu_model: str
    threads: int
    runtime: str
    values: dict[str, tuple[float, float | None, float | None]]
    description: str
    """How the benchmark ran, e.g. ``single-stream, batch 1, 2 threads on <cpu>, onnxruntime``."""


def _threads(n: int) -> str:
    return f"{n} thread{'' if n == 1 else 's'}"


def _same_cpu(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def judge_performance_claim(claim: ClaimSpec, measured: MeasuredPerformance) -> ClaimVerdict:
    """``not comparable`` (naming every difference) unless the benchmark ran the claim's scenario and batch size
    on the same CPU model with the same threads; then ``consistent`` when the claimed value lies inside the
    measured 95 % interval (latency: distribution-free order-statistic interval of the percentile; throughput:
    Student-t interval of the per-query rate), else ``inconsistent``."""
    assert claim.hardware is not None and claim.scenario is not None and claim.batch_size is not None
    setting = (
        f"{claim.scenario}, batch {claim.batch_size}, {_threads(claim.hardware.threads)} on "
        f"{claim.hardware.cpu_model}, {claim.runtime}"
    )
    value = measured.values.get(claim.metric)

    def verdict(v: Verdict, reason: str) -> ClaimVerdict:
        return ClaimVerdict(
            metric=claim.metric,
            claimed=claim.value,
            claim_dataset=setting,
            source=claim.source,
            measured=value[0] if value else None,
            ci_low=value[1] if value else None,
            ci_high=value[2] if value else None,
            evaluated_dataset=measured.description,
            verdict=v,
            reason=reason,
        )

    differences = []
    if claim.scenario != measured.scenario:
        differences.append(f"scenario {claim.scenario} vs {measured.scenario}")
    if claim.batch_size != measured.batch_size:
        differences.append(f"batch size {claim.batch_size} vs {measured.batch_size}")
    if not _same_cpu(claim.hardware.cpu_model, measured.cpu_model):
        differences.append(f"CPU '{claim.hardware.cpu_model}' vs '{measured.cpu_model}'")
    if claim.hardware.threads != measured.threads:
        differences.append(f"{_threads(claim.hardware.threads)} vs {measured.threads}")
    if claim.runtime != measured.runtime:
        differences.append(f"runtime {claim.runtime} vs {measured.runtime}")
    if differences:
        return verdict("not comparable", "the claim was measured in other conditions: " + "; ".join(differences))
    if value is None:
        return verdict("not comparable", f"the {measured.scenario} benchmark does not measure {claim.metric}")
    got, low, high = value
    if low is None or high is None:
        return verdict(
            "not comparable",
            f"too few queries for a 95 % interval of {claim.metric} (measured {got:.4g}); run longer (--min-queries)",
        )
    inside = low <= claim.value <= high
    return verdict(
        "consistent" if inside else "inconsistent",
        f"claimed {claim.value:.4g} is {'inside' if inside else 'outside'} the 95 % interval "
        f"[{low:.4g}, {high:.4g}] of the measured {got:.4g}",
    )
