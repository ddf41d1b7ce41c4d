"""Claim verdicts: the one rule on interval width / sample size, the direction, and how the samples were chosen."""

from __future__ import annotations

import pytest

from repliscope.errors import RepliscopeError
from repliscope.evaluation.claims import (
    Sampling,
    check_sampling_option,
    judge_claim,
    objects_per_category,
    sample_selection,
)
from repliscope.evaluation.record import MetricValue
from repliscope.manifest.schema import ClaimSpec, DatasetRef
from repliscope.metrics.intervals import (
    MIN_BOOTSTRAP_SAMPLES,
    MIN_OBJECTS_PER_CATEGORY,
    MIN_SEGMENTATION_IMAGES,
    wilson_interval,
)

CLAIM = ClaimSpec(metric="top1", value=75.1, dataset=DatasetRef(name="imagenet-1k", split="val"), source="paper")
AP_CLAIM = ClaimSpec(metric="AP", value=0.30, dataset=DatasetRef(name="coco", split="val2017"), source="paper")
VAL = DatasetRef(name="imagenet-1k", split="val")
COCO_VAL = DatasetRef(name="coco", split="val2017")
WHOLE = Sampling("whole split", "the whole split, 50,000 of 50,000")
PICKED = sample_selection(1000, VAL)


def top1(hits: int, n: int) -> MetricValue:
    low, high = wilson_interval(hits, n)
    return MetricValue(name="top1", value=hits / n, ci_low=low, ci_high=high, n=n, successes=hits)


def test_consistent_needs_a_narrow_interval() -> None:
    v = judge_claim(CLAIM, top1(37_560, 50_000), VAL, "val-folder", sampling=WHOLE)  # 75.12 % ± 0.38 pt
    assert (v.verdict, v.claimed, v.direction, v.sampling) == ("consistent", 0.751, "within", "whole split")
    assert v.reason.startswith("the claimed 75.10 % is inside the 95 % interval [74.74, 75.50] %")
    assert "n=50000, ±0.4 pt" in v.reason and "samples: the whole split, 50,000 of 50,000; the interval" in v.reason
    assert "the interval assumes a random sample of imagenet-1k/val" in v.reason


def test_the_20_image_lite0_case_is_not_comparable() -> None:
    """Issue 35: Lite0 gets 18 of the 20 foolbox images right; declared imagenet-1k/val, the claimed 75.1 % lies
    inside the Wilson interval [69.9 %, 97.2 %] (±13.6 pt): too few samples to judge, never "consistent"."""
    metric = top1(18, 20)
    assert (round(metric.ci_low, 3), round(metric.ci_high, 3)) == (0.699, 0.972)
    v = judge_claim(CLAIM, metric, VAL, "foolbox_imagenet", sampling=sample_selection(20, VAL))
    assert (v.verdict, v.direction, v.sampling) == ("not comparable", "within", "selection")
    assert v.reason.startswith(
        "too few samples to judge: the claimed 75.10 % is inside the 95 % interval [69.90, 97.21] % of the measured "
        "90.00 % (n=20), but the interval is ±13.7 pt and a verdict needs ±2 pt or narrower (about n >= 933); "
    )
    assert v.reason.endswith(
        "; samples: 20 of the split's 50,000 samples, chosen in a way not declared (--as imagenet-1k/val@random if "
        "they were drawn at random); the interval assumes a random sample of imagenet-1k/val, so it does not cover "
        "a bias of the selection"
    )


def test_a_wide_interval_that_excludes_the_claim_refutes_it_with_its_direction() -> None:
    short = judge_claim(CLAIM, top1(8, 20), VAL, "x", sampling=PICKED)  # 40 %: [21.9 %, 61.3 %]
    assert (short.verdict, short.direction) == ("inconsistent", "falls short")
    assert short.reason.startswith("the model falls short of its claim: the claimed 75.10 % is above the 95 %")
    beats = judge_claim(CLAIM, top1(990, 1000), VAL, "x", sampling=PICKED)
    assert (beats.verdict, beats.direction) == ("inconsistent", "beats")
    assert beats.reason.startswith("the model beats its claim: the claimed 75.10 % is below the 95 % interval")
    assert "; samples: 1,000 of the split's 50,000 samples, chosen in a way not declared" in beats.reason


def test_the_width_bound_is_inclusive_at_two_points() -> None:
    metric = MetricValue(name="top1", value=0.74, ci_low=0.73, ci_high=0.77, n=1800, successes=1332)  # ±2.0 pt
    assert judge_claim(CLAIM, metric, VAL, "x", sampling=WHOLE).verdict == "consistent"
    wider = metric.model_copy(update={"ci_high": 0.7702})
    assert judge_claim(CLAIM, wider, VAL, "x", sampling=WHOLE).verdict == "not comparable"


def test_a_bootstrap_metric_on_too_few_images_is_not_comparable() -> None:
    few = MetricValue(name="AP", value=0.6, ci_low=0.5, ci_high=0.7, n=MIN_BOOTSTRAP_SAMPLES - 1)
    v = judge_claim(AP_CLAIM, few, COCO_VAL, "coco-val-mini", sampling=sample_selection(few.n, COCO_VAL))
    assert (v.verdict, v.direction, v.sampling) == ("not comparable", None, None)
    assert v.reason == (
        f"too few samples for an interval of AP: {few.n} images, and a bootstrap interval over images is used from "
        f"{MIN_BOOTSTRAP_SAMPLES} (the smallest size its coverage was measured near 95 % at; claimed 0.3000, "
        "measured 0.6000)"
    )
    enough = few.model_copy(update={"n": MIN_BOOTSTRAP_SAMPLES})
    v = judge_claim(AP_CLAIM, enough, COCO_VAL, "coco-val-mini", sampling=sample_selection(enough.n, COCO_VAL))
    assert (v.verdict, v.direction) == ("inconsistent", "beats")


def test_a_segmentation_claim_needs_the_images_its_interval_covers_at() -> None:
    """mIoU's bias-corrected interval covered 79.5-90.5 % below 200 images (docs/benchmarks.md): a 150-image run
    that excludes the claim is not called inconsistent; from 200 images it is."""
    claim = ClaimSpec(metric="mIoU", value=0.70, dataset=DatasetRef(name="ade20k", split="val"), source="paper")
    ade = DatasetRef(name="ade20k", split="val")
    few = MetricValue(name="mIoU", value=0.60, ci_low=0.55, ci_high=0.65, n=MIN_SEGMENTATION_IMAGES - 1)
    v = judge_claim(claim, few, ade, "ade-sample", sampling=sample_selection(few.n, ade))
    assert (MIN_SEGMENTATION_IMAGES, v.verdict, v.direction) == (200, "not comparable", None)
    assert v.reason == (
        "too few samples for an interval of mIoU: 199 images, and a bootstrap interval over images is used from 200 "
        "(the smallest size its coverage was measured near 95 % at; claimed 0.7000, measured 0.6000)"
    )
    enough = few.model_copy(update={"n": MIN_SEGMENTATION_IMAGES})
    v = judge_claim(claim, enough, ade, "ade-sample", sampling=sample_selection(enough.n, ade))
    assert (v.verdict, v.direction) == ("inconsistent", "falls short")


def test_a_coco_number_on_too_few_objects_per_category_is_not_comparable() -> None:
    per_class = [{"n_objects": 400}, {"n_objects": 0}, {"n_objects": 3}, {"n_objects": 12}]  # person-like skew
    assert objects_per_category(per_class) == 12 and objects_per_category(per_class[:3]) == 201.5
    assert objects_per_category(None) is None and objects_per_category([{"n_objects": 0}]) is None
    metric = MetricValue(name="AP", value=0.6, ci_low=0.5, ci_high=0.7, n=200)
    sampling = sample_selection(200, COCO_VAL)
    v = judge_claim(AP_CLAIM, metric, COCO_VAL, "coco-mini", sampling=sampling, per_category=12)
    assert (v.verdict, v.direction) == ("not comparable", None)
    assert v.reason == (
        "too few objects for an interval of AP: a median of 12 ground-truth objects per category, and a bootstrap "
        f"interval of a COCO number is used from {MIN_OBJECTS_PER_CATEGORY:g} (its coverage was measured near 95 % "
        "from there; n=200 images, claimed 0.3000, measured 0.6000)"
    )
    v = judge_claim(AP_CLAIM, metric, COCO_VAL, "coco-mini", sampling=sampling, per_category=MIN_OBJECTS_PER_CATEGORY)
    assert (v.verdict, v.direction) == ("inconsistent", "beats")


def test_not_comparable_other_dataset_keeps_numbers() -> None:
    v = judge_claim(CLAIM, top1(18, 20), None, "foolbox_imagenet", sampling=PICKED)
    assert (v.verdict, v.measured, v.direction, v.sampling) == ("not comparable", 0.9, None, None)
    v2 = judge_claim(CLAIM, top1(18, 20), DatasetRef(name="imagenet-1k", split="train"), "x", sampling=PICKED)
    assert v2.verdict == "not comparable" and "is not declared to be that dataset" in v2.reason


def test_not_comparable_without_metric() -> None:
    assert judge_claim(CLAIM, None, VAL, "x", sampling=PICKED).verdict == "not comparable"


def test_sampling_whole_random_selection() -> None:
    assert sample_selection(50_000, VAL) == WHOLE
    assert sample_selection(100, VAL, limit=100) == Sampling(
        "selection", "the first 100 samples in sorted order (--limit 100)"
    )
    assert sample_selection(80, VAL, limit=100).kind == "selection"  # --limit kept every sample: not declared
    assert sample_selection(25_000, VAL, shard="0/2").detail == (
        "the samples of shard 0/2 (every N-th in sorted order)"
    )
    assert sample_selection(50_000, VAL, shard="0/1").kind == "whole split"
    assert sample_selection(1000, VAL, declared="random") == Sampling(
        "random sample", "a random sample of 1,000 samples (declared)"
    )
    assert sample_selection(1000, VAL, declared="selection").kind == "selection"
    assert sample_selection(1000, DatasetRef(name="mine", split="test"), declared="whole").kind == "whole split"
    lied = sample_selection(1000, VAL, declared="whole")  # imagenet-1k/val has 50,000: recorded, not believed
    assert lied == Sampling("selection", "1,000 samples, declared the whole split but imagenet-1k/val has 50,000")


def test_a_sampling_declaration_is_checked_before_the_run() -> None:
    check_sampling_option("random", limit=None, shard=None, option="--as")
    with pytest.raises(RepliscopeError, match=r"--as 'shuffled' is not allowed \(allowed: whole, random, selection\)"):
        check_sampling_option("shuffled", limit=None, shard=None, option="--as")
    with pytest.raises(RepliscopeError, match=r"--as 'random' contradicts the first 100 samples in sorted order"):
        check_sampling_option("random", limit=100, shard=None, option="--as")
    with pytest.raises(RepliscopeError, match=r"'whole' contradicts the samples of shard 1/4"):
        check_sampling_option("whole", limit=None, shard="1/4", option="--as")


def test_the_as_option_declares_the_sampling() -> None:
    from repliscope.cli.common import flag_of
    from repliscope.job_execution import RunOptions

    settings = RunOptions(evaluated_as="imagenet-1k/val@random").run_settings("onnxruntime", source="cli")
    assert (settings.evaluated_as, settings.sampling, settings.origin("sampling")) == (VAL, "random", "cli")
    plain = RunOptions(evaluated_as="imagenet-1k/val", limit=100).run_settings("onnxruntime")
    assert (plain.evaluated_as, plain.sampling, plain.limit) == (VAL, None, 100)
    with pytest.raises(RepliscopeError) as bad:
        RunOptions(evaluated_as="imagenet-1k/val@shuffled").run_settings("onnxruntime", name=flag_of)
    assert str(bad.value) == (
        "the sampling after '@' in --as 'shuffled' is not allowed (allowed: whole, random, selection)"
    )
    with pytest.raises(RepliscopeError, match=r"in option evaluated_as 'whole' contradicts the first 100 samples"):
        RunOptions(evaluated_as="imagenet-1k/val@whole", limit=100).run_settings("onnxruntime")


def test_a_performance_claim_gives_its_direction() -> None:
    """A latency is better lower: a claim below the measured interval is one the machine falls short of."""
    from repliscope.evaluation.claims import MeasuredPerformance, judge_performance_claim

    cpu = "AMD EPYC 7B13"
    base = {
        "metric": "latency_p90_ms",
        "dataset": {"name": "imagenet-1k", "split": "val"},
        "source": "paper",
        "scenario": "single-stream",
        "batch_size": 1,
        "hardware": {"cpu_model": cpu, "threads": 1},
        "runtime": "onnxruntime",
    }
    measured = MeasuredPerformance(
        scenario="single-stream",
        batch_size=1,
        cpu_model=cpu,
        threads=1,
        runtime="onnxruntime",
        values={"latency_p90_ms": (9.6, 9.4, 9.8), "throughput": (104.0, 100.0, 108.0)},
        description="ours",
    )

    def judged(metric: str, value: float) -> tuple[str, str | None, str]:
        v = judge_performance_claim(ClaimSpec.model_validate({**base, "metric": metric, "value": value}), measured)
        return v.verdict, v.direction, v.reason

    assert judged("latency_p90_ms", 5.0) == (
        "inconsistent",
        "falls short",
        "claimed 5 is outside the 95 % interval [9.4, 9.8] of the measured 9.6: the model falls short of its claim",
    )
    assert judged("latency_p90_ms", 20.0)[:2] == ("inconsistent", "beats")
    assert judged("latency_p90_ms", 9.5)[:2] == ("consistent", "within")
    assert judged("throughput", 120.0)[:2] == ("inconsistent", "falls short")
    assert judged("throughput", 90.0)[:2] == ("inconsistent", "beats")
