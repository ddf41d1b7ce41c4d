"""Claim verdicts: does the measured metric support the published number?

Accuracy claims are judged on evaluation records (:func:`judge_claim`), performance claims (latency /
throughput) on benchmark records (:func:`judge_performance_claim`).

The rule for an accuracy claim (docs/concepts.md, "Verdict"), in order:

1. the evaluated data is not declared to be the claim's dataset and split, or the metric could not be computed:
   ``not comparable``;
2. a bootstrap metric (COCO AP, mIoU: ``successes`` None) on fewer images than its spec's ``min_images``
   (:data:`MIN_BOOTSTRAP_SAMPLES`; a segmentation metric
   :data:`~repliscope.metrics.intervals.MIN_SEGMENTATION_IMAGES`), or
   a COCO number whose images hold a median of fewer than :data:`MIN_OBJECTS_PER_CATEGORY` ground-truth objects per
   category:
   ``not comparable`` (its coverage was not measured near 95 % there: docs/benchmarks.md, "Interval coverage");
3. the claim lies outside the measured 95 % interval: ``inconsistent``, with the direction (the model ``beats``
   its claim or ``falls short`` of it);
4. the claim lies inside and the interval's half-width is at most :data:`MAX_HALF_WIDTH` (2 points):
   ``consistent``;
5. the claim lies inside a wider interval: ``not comparable`` (too few samples to confirm it), with the
   number of samples that would do.

Every judged reason says how the samples were chosen (:class:`Sampling`: the whole split, a random sample or a
selection) and that the interval assumes a random sample of the claimed split.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from repliscope.errors import RepliscopeError
from repliscope.evaluation.record import ClaimVerdict, MetricValue
from repliscope.manifest.schema import ClaimSpec, DatasetRef, claim_metric_spec
from repliscope.metrics.intervals import MAX_HALF_WIDTH, MIN_BOOTSTRAP_SAMPLES, MIN_OBJECTS_PER_CATEGORY
from repliscope.number_text import unit_interval_text, unit_value_text

Verdict = Literal["consistent", "inconsistent", "not comparable"]
Direction = Literal["beats", "falls short", "within"]
DIRECTION_TEXT: dict[str, str] = {
    "beats": "beats its claim",
    "falls short": "falls short of its claim",
    "within": "within its interval",
}
"""The words of each :data:`Direction` (a reason, the report, the pages: the models pages' words)."""
SamplingKind = Literal["whole split", "random sample", "selection"]
SAMPLING_KINDS: tuple[SamplingKind, ...] = ("whole split", "random sample", "selection")
DECLARABLE_SAMPLING = {"whole": "whole split", "random": "random sample", "selection": "selection"}
"""What ``--as NAME/SPLIT@KIND`` declares (``RunSettings.sampling``) -> the recorded kind."""

KNOWN_SPLIT_SIZES: dict[tuple[str, str], int] = {
    ("imagenet-1k", "val"): 50_000,
    ("imagenet-1k", "train"): 1_281_167,
    ("coco", "val2017"): 5_000,
    ("coco", "val2014"): 40_504,
    ("coco", "train2017"): 118_287,
}
"""Samples in the published splits a claim is usually about: a run of exactly that many samples declared as the
split is the whole split; a declared ``whole`` with another count is refused."""


def dataset_label(ref: DatasetRef | None) -> str:
    return f"{ref.name}/{ref.split}" if ref is not None else "undeclared"


@dataclass(frozen=True)
class Sampling:
    """How the evaluated samples were chosen from the split they are declared to be: ``kind`` (the whole split, a
    random sample, a selection) and ``detail``, the words a reason and a page show (e.g. ``the first 100 samples
    in sorted order (--limit 100)``)."""

    kind: SamplingKind
    detail: str

    def as_record(self) -> dict[str, str]:
        """The record's ``dataset.sampling`` entry."""
        return {"kind": self.kind, "detail": self.detail}


def _narrowing(n_samples: int | None, limit: int | None, shard: str | None) -> list[str]:
    """The options that made the run a subset of its data: ``--limit`` (when it kept ``limit`` samples, or
    always when ``n_samples`` is not known yet) and a shard of several."""
    narrowed = []
    if limit is not None and (n_samples is None or n_samples >= limit):
        shown = n_samples if n_samples is not None else limit
        narrowed.append(f"the first {shown:,} samples in sorted order (--limit {limit})")
    if shard is not None and not shard.endswith("/1"):
        narrowed.append(f"the samples of shard {shard} (every N-th in sorted order)")
    return narrowed


def check_sampling_option(declared: str | None, *, limit: int | None, shard: str | None, option: str) -> None:
    """Refuse, before anything runs, a declared sampling (``--as NAME/SPLIT@KIND``) that is not one of
    :data:`DECLARABLE_SAMPLING` or that ``--limit`` / a shard contradicts (a subset of them is a selection);
    ``option`` names it."""
    if declared is None:
        return
    if declared not in DECLARABLE_SAMPLING:
        raise RepliscopeError(f"{option} {declared!r} is not allowed (allowed: {', '.join(DECLARABLE_SAMPLING)})")
    narrowed = _narrowing(None, limit, shard)
    if narrowed and declared != "selection":
        raise RepliscopeError(
            f"{option} {declared!r} contradicts {' and '.join(narrowed)}: that subset is a selection "
            "(allowed with it: selection)"
        )


def sample_selection(
    n_samples: int,
    evaluated_as: DatasetRef | None,
    *,
    limit: int | None = None,
    shard: str | None = None,
    declared: str | None = None,
) -> Sampling:
    """How the ``n_samples`` of a run were chosen, from what the run knows:

    - ``--limit N`` that kept N samples, or one shard ``I/N`` (N > 1) of a sharded run: a ``selection`` (the first
      N in sorted order; every N-th sample);
    - ``declared`` (``--as NAME/SPLIT@whole|random|selection``, checked by :func:`check_sampling_option`): ``random`` or
      ``selection`` as declared; ``whole`` as declared unless the split's size is known
      (:data:`KNOWN_SPLIT_SIZES`) and differs: then a ``selection`` whose detail says so;
    - else the whole split when the declared split's size is known and equal to ``n_samples``, otherwise a
      ``selection`` (how the files were chosen is not declared)."""
    known = KNOWN_SPLIT_SIZES.get((evaluated_as.name, evaluated_as.split)) if evaluated_as else None
    split = dataset_label(evaluated_as)
    narrowed = _narrowing(n_samples, limit, shard)
    if narrowed:
        return Sampling("selection", " and ".join(narrowed))
    if declared == "whole":
        if known is not None and known != n_samples:
            return Sampling(
                "selection",
                f"{n_samples:,} samples, declared the whole split but {split} has {known:,}",
            )
        return Sampling("whole split", f"the whole split, {n_samples:,} samples (declared)")
    if declared == "random":
        return Sampling("random sample", f"a random sample of {n_samples:,} samples (declared)")
    if declared == "selection":
        return Sampling("selection", f"{n_samples:,} samples, chosen by hand or by a rule (declared)")
    if known is not None and known == n_samples:
        return Sampling("whole split", f"the whole split, {n_samples:,} of {known:,}")
    of_known = f" of the split's {known:,}" if known is not None else ""
    declare = f"--as {split}@random" if evaluated_as is not None else "--as NAME/SPLIT@random"
    return Sampling(
        "selection",
        f"{n_samples:,}{of_known} samples, chosen in a way not declared ({declare} if they were drawn at random)",
    )


def objects_per_category(per_class: Sequence[Mapping[str, Any]] | None) -> float | None:
    """The median ground-truth objects per category over the categories that have any (a detection record's
    ``per_class`` ``n_objects``: the median, so one frequent category such as COCO's person does not hide the
    rare ones); None without per-class counts (classification, segmentation) or objects."""
    counts = sorted(int(r["n_objects"]) for r in per_class or () if r.get("n_objects"))
    if not counts:
        return None
    mid = len(counts) // 2
    return float(counts[mid]) if len(counts) % 2 else (counts[mid - 1] + counts[mid]) / 2


def direction_of(claimed: float, low: float, high: float) -> Direction:
    """Where the claim lies against the measured interval: below it (the model ``beats`` its claim), above it
    (``falls short``), inside (``within``)."""
    if claimed < low:
        return "beats"
    if claimed > high:
        return "falls short"
    return "within"


def samples_for(half_width: float, n: int) -> int:
    """About how many samples bring an interval of ``half_width`` at ``n`` down to :data:`MAX_HALF_WIDTH` (a 95 %
    interval narrows as one over the square root of n)."""
    return max(n + 1, math.ceil(n * (half_width / MAX_HALF_WIDTH) ** 2))


def judge_claim(
    claim: ClaimSpec,
    metric: MetricValue | None,
    evaluated_as: DatasetRef | None,
    evaluated_name: str,
    failed: int = 0,
    *,
    sampling: Sampling,
    per_category: float | None = None,
) -> ClaimVerdict:
    """The verdict of one accuracy claim by the rule of this module's docstring; ``sampling``: how the samples
    were chosen (:func:`sample_selection`), recorded with the verdict and said in its reason; ``per_category``:
    a detection run's median ground-truth objects per category (:func:`objects_per_category`; None: not a
    detection run).

    Classification claims are in percent (75.1 -> 0.751); detection claims (COCO's AP, AR...) are fractions
    as COCOeval prints them and are compared as written. Detection intervals are bootstraps over images."""
    # 75.1 -> 0.751 exactly as printed
    spec = claim_metric_spec(claim.metric)
    claimed = round(claim.value / 100.0, 10) if spec is not None and spec.unit == "percent" else claim.value
    evaluated = f"{evaluated_name} (as {dataset_label(evaluated_as)})" if evaluated_as else evaluated_name
    fraction = spec is not None and spec.unit == "fraction"
    unit = "fraction" if fraction else "percent"  # the house's format (number_text): 75.10 %, AP 0.331 reads 0.3310

    def num(value: float) -> str:
        return unit_value_text(unit, value)

    def spread(half: float) -> str:
        return f"±{half:.4f}" if fraction else f"±{100 * half:.1f} pt"

    limit = f"±{MAX_HALF_WIDTH:g}" if fraction else f"±{100 * MAX_HALF_WIDTH:g} pt"

    def verdict(v: Verdict, reason: str, direction: Direction | None = None) -> ClaimVerdict:
        if failed:
            reason += f"; {failed} samples failed and are not in n"
        judged = direction is not None
        if judged:
            split = dataset_label(claim.dataset)
            reason += f"; samples: {sampling.detail}; the interval assumes a random sample of {split}"
            if sampling.kind == "selection":
                reason += ", so it does not cover a bias of the selection"
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
            direction=direction,
            sampling=sampling.kind if judged else None,
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
    floor = spec.min_images if spec is not None else MIN_BOOTSTRAP_SAMPLES
    if metric.successes is None and metric.n < floor:
        return verdict(
            "not comparable",
            f"too few samples for an interval of {claim.metric}: {metric.n} images, and a bootstrap interval over "
            f"images is used from {floor} (the smallest size its coverage was measured near 95 % "
            f"at; claimed {num(claimed)}, measured {num(metric.value)})",
        )
    if metric.successes is None and per_category is not None and per_category < MIN_OBJECTS_PER_CATEGORY:
        return verdict(
            "not comparable",
            f"too few objects for an interval of {claim.metric}: a median of {per_category:g} ground-truth objects "
            f"per category, and a bootstrap interval of a COCO number is used from {MIN_OBJECTS_PER_CATEGORY:g} "
            f"(its coverage was measured near 95 % from there; n={metric.n} images, claimed {num(claimed)}, "
            f"measured {num(metric.value)})",
        )
    interval = (
        f"95 % interval {unit_interval_text(unit, metric.ci_low, metric.ci_high)} of the measured {num(metric.value)}"
    )
    half = (metric.ci_high - metric.ci_low) / 2.0
    direction = direction_of(claimed, metric.ci_low, metric.ci_high)
    if direction != "within":
        side = "below" if direction == "beats" else "above"
        return verdict(
            "inconsistent",
            f"the model {DIRECTION_TEXT[direction]}: the claimed {num(claimed)} is {side} the {interval} "
            f"(n={metric.n})",
            direction,
        )
    if round(half, 12) <= MAX_HALF_WIDTH:  # 0.74 - 0.70 is 0.04000000000000004 in floats
        return verdict(
            "consistent",
            f"the claimed {num(claimed)} is inside the {interval} (n={metric.n}, {spread(half)})",
            direction,
        )
    return verdict(
        "not comparable",
        f"too few samples to judge: the claimed {num(claimed)} is inside the {interval} (n={metric.n}), but the "
        f"interval is {spread(half)} and a verdict needs {limit} or narrower "
        f"(about n >= {samples_for(half, metric.n):,})",
        direction,
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

    def verdict(v: Verdict, reason: str, direction: Direction | None = None) -> ClaimVerdict:
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
            direction=direction,
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
    # a latency is better lower: a claim below the interval is one the machine falls short of
    lower_is_better = claim.metric.startswith("latency")
    direction = direction_of(-claim.value, -high, -low) if lower_is_better else direction_of(claim.value, low, high)
    return verdict(
        "consistent" if inside else "inconsistent",
        f"claimed {claim.value:.4g} is {'inside' if inside else 'outside'} the 95 % interval "
        f"[{low:.4g}, {high:.4g}] of the measured {got:.4g}"
        + ("" if inside else f": the model {DIRECTION_TEXT[direction]}"),
        direction,
    )


def shown_verdict(claim: Mapping[str, Any]) -> tuple[str, str]:
    """(verdict, reason) of a stored claim as pages show it. A record judged before the interval-width rule
    (:func:`repliscope.evaluation.claims.judge_claim`) may say ``consistent`` of a claim inside an interval wider
    than ±2 pt: it is shown as ``not comparable``, the reason saying why, never as a green verdict above a
    "too few samples" warning."""
    verdict = str(claim.get("verdict", "not comparable"))
    reason = str(claim.get("reason", ""))
    low, high = claim.get("ci_low"), claim.get("ci_high")
    if verdict == "consistent" and low is not None and high is not None:
        half = (float(high) - float(low)) / 2.0
        if round(half, 12) > MAX_HALF_WIDTH:
            return "not comparable", (
                f"too few samples to judge: the interval is ±{100 * half:.1f} pt and a verdict needs "
                f"±{100 * MAX_HALF_WIDTH:g} pt or narrower (recorded as consistent before that rule: {reason})"
            )
    return verdict, reason
