"""Hand-made evaluation records for the task-level tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from repliscope.evaluation.record import EvaluationRecord, ManifestInfo, SamplePrediction, Timings, result_hash


def make_record(runtime: str, samples: list[SamplePrediction], identity: str = "ds1") -> EvaluationRecord:
    return EvaluationRecord(
        run_id=uuid.uuid4().hex,
        created_at=datetime(2025, 1, 1, tzinfo=UTC),
        repliscope_version="0.1.0",
        manifest=ManifestInfo(name="m", version="1", path="m.yaml", sha256="0" * 64, text=""),
        pipeline={"preprocess": [], "postprocess": []},
        runtime={"runtime": runtime},
        software={},
        hardware={},
        dataset={"name": "hand-made", "identity": identity, "num_samples": len(samples)},
        options={},
        metrics=[],
        claims=[],
        counts={"total": len(samples)},
        timings=Timings(
            total_seconds=1.0, inference_seconds=1.0, batch_latencies_seconds=[], throughput_samples_per_second=1.0
        ),
        samples=samples,
        result_hash=result_hash(samples),
    )


def pred(sid: str, label: int | None, idx: list[int], probs: list[float]) -> SamplePrediction:
    return SamplePrediction(sample_id=sid, label=label, topk_indices=idx, topk_probs=probs)


def pair() -> tuple[EvaluationRecord, EvaluationRecord]:
    """Five samples; s2 flips from right (A) to wrong (B); s5 failed in B; s6 only in A."""
    a = [
        pred("s1", 1, [1, 2, 3], [0.7, 0.2, 0.1]),
        pred("s2", 2, [2, 5, 1], [0.5, 0.4, 0.1]),
        pred("s3", 3, [4, 3, 0], [0.6, 0.3, 0.1]),
        pred("s4", None, [7, 8, 9], [0.9, 0.05, 0.05]),
        pred("s5", 5, [5, 1, 2], [0.8, 0.1, 0.1]),
        pred("s6", 6, [6, 1, 2], [0.8, 0.1, 0.1]),
    ]
    b = [
        pred("s1", 1, [1, 2, 3], [0.7, 0.2, 0.1]),
        pred("s2", 2, [5, 2, 9], [0.45, 0.44, 0.11]),
        pred("s3", 3, [4, 3, 8], [0.6, 0.3, 0.1]),
        pred("s4", None, [7, 9, 8], [0.9, 0.06, 0.04]),
        SamplePrediction(sample_id="s5", label=5, error="unreadable"),
    ]
    return make_record("torch", a), make_record("onnxruntime", b)
