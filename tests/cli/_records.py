"""Hand-made, complete evaluation records for the CLI tests (stored without running a model)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from repliscope.evaluation.record import (
    EvaluationRecord,
    ManifestInfo,
    MetricValue,
    SamplePrediction,
    Timings,
    result_hash,
)
from tests.conftest import LITE0


def record(
    samples: list[SamplePrediction],
    *,
    model: str = "efficientnet-lite0",
    version: str = "1.0.0",
    runtime: str = "onnxruntime",
    dataset: str = "foolbox_imagenet",
    manifest_path: str = str(LITE0),
    manifest_text: str | None = None,
    created: datetime | None = None,
    run_id: str | None = None,
    kind: str = "evaluation",
    sweep_id: str | None = None,
    variant: str | None = None,
) -> EvaluationRecord:
    """A record as ``evaluate`` stores it; top-1 is computed from ``samples`` (labelled, evaluated ones)."""
    evaluated = [s for s in samples if s.error is None and s.label is not None]
    hits = sum(1 for s in evaluated if s.top1 == s.label)
    metrics = (
        [
            MetricValue(
                name="top1", value=hits / len(evaluated), ci_low=0.0, ci_high=1.0, n=len(evaluated), successes=hits
            )
        ]
        if evaluated
        else []
    )
    failed = sum(1 for s in samples if s.error is not None)
    return EvaluationRecord(
        run_id=run_id or uuid.uuid4().hex,
        created_at=created or datetime.now(UTC),
        repliscope_version="0.1.0",
        kind=kind,
        sweep_id=sweep_id,
        variant=variant,
        manifest=ManifestInfo(
            name=model,
            version=version,
            path=manifest_path,
            sha256="0" * 64,
            text=LITE0.read_text() if manifest_text is None else manifest_text,
        ),
        pipeline={"preprocess": [], "postprocess": []},
        runtime={"runtime": runtime, "framework": runtime, "framework_version": "1", "threads": 2},
        software={},
        hardware={},
        dataset={"name": dataset, "identity": f"id-{dataset}", "num_samples": len(samples), "label_rule": "none"},
        options={},
        metrics=metrics,
        claims=[],
        counts={
            "total": len(samples),
            "evaluated": len(samples) - failed,
            "failed": failed,
            "labelled": sum(1 for s in samples if s.label is not None),
        },
        timings=Timings(
            total_seconds=1.0,
            inference_seconds=0.5,
            batch_latencies_seconds=[0.5],
            throughput_samples_per_second=float(len(samples)),
        ),
        samples=samples,
        result_hash=result_hash(samples),
    )


def pred(sid: str, label: int | None, top: list[int], probs: list[float] | None = None) -> SamplePrediction:
    return SamplePrediction(
        sample_id=sid,
        label=label,
        topk_indices=top,
        topk_probs=probs or [round(1.0 / (i + 2), 4) for i in range(len(top))],
    )


def failed(sid: str, label: int | None, error: str = "cannot decode") -> SamplePrediction:
    return SamplePrediction(sample_id=sid, label=label, error=error)
