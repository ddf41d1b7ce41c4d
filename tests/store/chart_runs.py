"""Stored runs with known metrics for the chart tests (store, pages, CLI, browser): six classification runs on two
runtimes, three framework versions, two stacks and a sweep, and two detection runs (one whose every image failed),
all of the model :data:`MODEL` (the factory sweep's runs are efficientnet-lite0's).

Classification top-1 over the 20 factory images: ``k`` correct -> k/20 with the Wilson interval of
:func:`tests.report.factories.metric`; each run is ``created`` a minute after the previous one."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from repliscope.evaluation.record import ClaimVerdict, EvaluationRecord, MetricValue
from tests.report.factories import CREATED, LABELS, RUNTIME, SOFTWARE, SWEEP_ID, claim, metric, record

CLASSIFICATION = (
    # run id, runtime, framework version, stack key, correct of 20, variant
    ("f1" * 16, "onnxruntime", "1.9.0", "ort-old", 14, None),
    ("f2" * 16, "onnxruntime", "1.31.1", "ort-new", 18, None),
    ("f3" * 16, "onnxruntime", "1.31.1", "current", 17, None),
    ("f4" * 16, "torch", "2.13.0", None, 16, None),
    ("f5" * 16, "onnxruntime", "1.31.1", "ort-new", 18, "reference"),
    ("f6" * 16, "onnxruntime", "1.31.1", "ort-new", 9, "color_layout_swapped"),
)
DETECTION = (("e1" * 16, 0.3312, 0.5120), ("e2" * 16, None, None))
"""Run id, AP, AP50 (None: every image failed)."""
AP50_CLAIM = 0.55
MODEL = "mobilenet-v2"
CURRENT_LOCK = "ab12cd34" + "0" * 56
"""The installed packages' hash of the run made outside a provisioned stack (stack key ``current``)."""


def predictions(correct: int) -> list[int]:
    """Top-1 predictions with the first ``correct`` of the 20 images right (class 0 is no image's label)."""
    return [label if i < correct else 0 for i, label in enumerate(LABELS)]


def classification_run(i: int) -> EvaluationRecord:
    run_id, runtime, version, stack, correct, variant = CLASSIFICATION[i]
    r = record(predictions(correct), run_id=run_id, sweep_id=SWEEP_ID if variant else None, variant=variant)
    software: dict[str, Any] = {**SOFTWARE}
    if stack is not None:
        lock = CURRENT_LOCK if stack == "current" else "0" * 64
        software["stack"] = {"key": stack, "spec": stack, "python": "3.11.7", "prefix": "/s", "lock_sha256": lock}
    return r.model_copy(
        update={
            "manifest": r.manifest.model_copy(update={"name": MODEL}),
            "created_at": CREATED + timedelta(minutes=i),
            "runtime": {**RUNTIME, "runtime": runtime, "framework_version": version},
            "software": software,
        }
    )


def _fraction(name: str, value: float | None) -> MetricValue | None:
    if value is None:
        return None
    return MetricValue(name=name, value=value, ci_low=round(value - 0.05, 4), ci_high=round(value + 0.05, 4), n=20)


def detection_run(i: int) -> EvaluationRecord:
    run_id, ap, ap50 = DETECTION[i]
    base = record(run_id=run_id)
    metrics = [m for m in (_fraction("AP", ap), _fraction("AP50", ap50)) if m is not None]
    claims = [] if ap50 is None else [claim(metrics[1]).model_copy(update={"metric": "AP50", "claimed": AP50_CLAIM})]
    return base.model_copy(
        update={
            "manifest": base.manifest.model_copy(update={"name": MODEL}),
            "task": "object_detection",
            "created_at": CREATED + timedelta(minutes=10 + i),
            "metrics": metrics,
            "claims": [ClaimVerdict.model_validate(c.model_dump()) for c in claims],
        }
    )


def seed(store: Any) -> None:
    """Store the eight runs in ``store`` (a RunStore)."""
    for i in range(len(CLASSIFICATION)):
        store.save(classification_run(i))
    for i in range(len(DETECTION)):
        store.save(detection_run(i))


def top1_of(correct: int) -> MetricValue:
    return metric("top1", correct)
