"""Claim verdicts."""

from __future__ import annotations

from repliscope.evaluation.claims import judge_claim
from repliscope.evaluation.record import MetricValue
from repliscope.manifest.schema import ClaimSpec, DatasetRef

CLAIM = ClaimSpec(metric="top1", value=75.1, dataset=DatasetRef(name="imagenet-1k", split="val"), source="paper")
VAL = DatasetRef(name="imagenet-1k", split="val")


def metric(value: float, low: float, high: float) -> MetricValue:
    return MetricValue(name="top1", value=value, ci_low=low, ci_high=high, n=1000, successes=int(value * 1000))


def test_consistent_inside_interval() -> None:
    v = judge_claim(CLAIM, metric(0.74, 0.712, 0.766), VAL, "val-folder")
    assert v.verdict == "consistent" and v.claimed == 0.751 and "inside" in v.reason


def test_inconsistent_outside_interval() -> None:
    v = judge_claim(CLAIM, metric(0.70, 0.67, 0.728), VAL, "val-folder")
    assert v.verdict == "inconsistent" and "outside" in v.reason


def test_not_comparable_other_dataset_keeps_numbers() -> None:
    v = judge_claim(CLAIM, metric(0.9, 0.7, 0.97), None, "foolbox_imagenet")
    assert v.verdict == "not comparable" and v.measured == 0.9
    v2 = judge_claim(CLAIM, metric(0.9, 0.7, 0.97), DatasetRef(name="imagenet-1k", split="train"), "x")
    assert v2.verdict == "not comparable"


def test_not_comparable_without_metric() -> None:
    assert judge_claim(CLAIM, None, VAL, "x").verdict == "not comparable"
