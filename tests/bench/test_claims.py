"""Performance claims in the manifest schema, and their verdicts."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from repliscope.evaluation.claims import MeasuredPerformance, judge_claim, judge_performance_claim, sample_selection
from repliscope.evaluation.record import MetricValue
from repliscope.manifest.schema import ClaimSpec, DatasetRef

CPU = "AMD EPYC 7B13"
BASE: dict[str, Any] = {
    "metric": "latency_p90_ms",
    "value": 9.5,
    "dataset": {"name": "imagenet-1k", "split": "val"},
    "source": "paper",
    "scenario": "single-stream",
    "batch_size": 1,
    "hardware": {"cpu_model": CPU, "threads": 1},
    "runtime": "onnxruntime",
}


def measured(**kw: Any) -> MeasuredPerformance:
    fields: dict[str, Any] = {
        "scenario": "single-stream",
        "batch_size": 1,
        "cpu_model": "amd  EPYC 7b13",
        "threads": 1,
        "runtime": "onnxruntime",
        "description": "ours",
        "values": {"latency_p90_ms": (9.6, 9.4, 9.8), "throughput": (104.0, None, None)},
    }
    return MeasuredPerformance(**{**fields, **kw})


def test_performance_claim_needs_its_setting() -> None:
    with pytest.raises(ValidationError, match="needs scenario, batch_size, hardware, runtime"):
        ClaimSpec.model_validate(
            {k: v for k, v in BASE.items() if k not in ("scenario", "batch_size", "hardware", "runtime")}
        )
    with pytest.raises(ValidationError, match="needs runtime"):
        ClaimSpec.model_validate({k: v for k, v in BASE.items() if k != "runtime"})
    with pytest.raises(ValidationError, match="must be above 0"):
        ClaimSpec.model_validate({**BASE, "value": 0})
    assert ClaimSpec.model_validate({**BASE, "value": 250.0}).is_performance  # ms are not percent


def test_accuracy_claim_unchanged() -> None:
    acc = {"metric": "top1", "value": 75.1, "dataset": {"name": "imagenet-1k", "split": "val"}, "source": "x"}
    assert not ClaimSpec.model_validate(acc).is_performance
    with pytest.raises(ValidationError, match="above 100"):
        ClaimSpec.model_validate({**acc, "value": 101})
    with pytest.raises(ValidationError, match="scenario only belong to performance claims"):
        ClaimSpec.model_validate({**acc, "scenario": "offline"})
    with pytest.raises(ValidationError, match="latency_p50_ms"):
        ClaimSpec.model_validate({**BASE, "metric": "latency_p50_ms"})


def test_verdicts() -> None:
    claim = ClaimSpec.model_validate(BASE)
    ok = judge_performance_claim(claim, measured())
    assert (ok.verdict, ok.measured, ok.ci_low, ok.ci_high) == ("consistent", 9.6, 9.4, 9.8)
    assert ok.claim_dataset == f"single-stream, batch 1, 1 thread on {CPU}, onnxruntime"
    assert (
        judge_performance_claim(ClaimSpec.model_validate({**BASE, "value": 9.9}), measured()).verdict == "inconsistent"
    )
    other = judge_performance_claim(
        claim, measured(scenario="server", batch_size=8, cpu_model="Intel", threads=4, runtime="torch")
    )
    assert other.verdict == "not comparable" and other.reason == (
        "the claim was measured in other conditions: scenario single-stream vs server; batch size 1 vs 8; "
        f"CPU '{CPU}' vs 'Intel'; 1 thread vs 4; runtime onnxruntime vs torch"
    )
    tp = judge_performance_claim(ClaimSpec.model_validate({**BASE, "metric": "throughput", "value": 100}), measured())
    assert tp.verdict == "not comparable" and "too few queries" in tp.reason


def test_accuracy_evaluation_leaves_performance_claims_to_bench() -> None:
    metric = MetricValue(name="latency_p90_ms", value=0.5, ci_low=0.4, ci_high=0.6, n=10, successes=5)
    val = DatasetRef(name="imagenet-1k", split="val")
    v = judge_claim(ClaimSpec.model_validate(BASE), metric, val, "x", sampling=sample_selection(10, val))
    assert v.verdict == "not comparable" and "repliscope bench" in v.reason
