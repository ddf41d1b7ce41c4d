"""Claim verdicts: does the measured metric support the published number?"""

from __future__ import annotations

from typing import Literal

from repliscope.evaluation.record import ClaimVerdict, MetricValue
from repliscope.manifest.schema import ClaimSpec, DatasetRef

Verdict = Literal["consistent", "inconsistent", "not comparable"]


def dataset_label(ref: DatasetRef | None) -> str:
    return f"{ref.name}/{ref.split}" if ref is not None else "undeclared"


def judge_claim(claim: ClaimSpec, metric: MetricValue | None, evaluated_as: DatasetRef | None,
                evaluated_name: str, failed: int = 0) -> ClaimVerdict:
    """``consistent`` when the claim lies inside the metric's 95 % interval, ``inconsistent`` when outside,
    ``not comparable`` when the evaluated data is not declared to be the claim's dataset and split (the
    numbers are kept, never presented as a reproduction) or the metric could not be computed."""
    claimed = round(claim.value / 100.0, 10)  # 75.1 -> 0.751 exactly as printed
    evaluated = f"{evaluated_name} (as {dataset_label(evaluated_as)})" if evaluated_as else evaluated_name

    def verdict(v: Verdict, reason: str) -> ClaimVerdict:
        if failed:
            reason += f"; {failed} samples failed and are not in n"
        return ClaimVerdict(metric=claim.metric, claimed=claimed, claim_dataset=dataset_label(claim.dataset),
                            source=claim.source, measured=metric.value if metric else None,
                            ci_low=metric.ci_low if metric else None, ci_high=metric.ci_high if metric else None,
                            evaluated_dataset=evaluated, verdict=v, reason=reason)

    if metric is None:
        return verdict("not comparable", f"metric '{claim.metric}' could not be computed (no labelled sample "
                                         "evaluated, or the postprocess keeps fewer predictions than it needs)")
    if evaluated_as is None or (evaluated_as.name, evaluated_as.split) != (claim.dataset.name, claim.dataset.split):
        return verdict("not comparable", f"the claim is about {dataset_label(claim.dataset)}; the evaluated data "
                                         f"'{evaluated}' is not declared to be that dataset")
    inside = metric.ci_low <= claimed <= metric.ci_high
    return verdict(
        "consistent" if inside else "inconsistent",
        (f"claimed {claimed:.2%} is {'inside' if inside else 'outside'} the 95 % interval "
                f"[{metric.ci_low:.2%}, {metric.ci_high:.2%}] of the measured {metric.value:.2%} (n={metric.n})"),
    )
