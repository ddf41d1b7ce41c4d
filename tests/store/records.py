"""Realistic hand-made evaluation records for the store tests (EfficientNet-Lite0 on the foolbox images)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from repliscope.evaluation.record import (
    ClaimVerdict,
    EvaluationRecord,
    ManifestInfo,
    MetricValue,
    SamplePrediction,
    Timings,
    result_hash,
)
from tests.conftest import FOOLBOX_LABELS

LABELS = FOOLBOX_LABELS
IDS = [f"imagenet_{i:02d}_{label}.jpg" for i, label in enumerate(LABELS)]
FOOLBOX_IDENTITY = "99bb2a439b0b352c4bcc7b70e841ca21fb2af45d2dede8b9cd5648b90586ac7d"
# top-1 probabilities as float32 softmax outputs widened to Python floats (many significant digits)
TOP1_PROBS = [
    0.9342861175537109,
    0.8123491406440735,
    0.9917839169502258,
    0.7751260995864868,
    0.9989231824874878,
    0.6612049341201782,
    0.4188176393508911,
    0.2901332378387451,
    0.8834127187728882,
    0.9561303853988647,
    0.7032485604286194,
    0.9210078120231628,
    0.5487431883811951,
    0.9675092101097107,
    0.8896055817604065,
    0.9998422861099243,
    0.7260435223579407,
    0.9449841976165771,
    0.8391197323799133,
    0.6109282970428467,
]


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def topk_metric(name: str, samples: list[SamplePrediction], k: int) -> MetricValue:
    scored = [s for s in samples if s.error is None and s.label is not None]
    hits = sum(1 for s in scored if s.label in s.topk_indices[:k])
    low, high = wilson(hits, len(scored))
    return MetricValue(name=name, value=hits / len(scored), ci_low=low, ci_high=high, n=len(scored), successes=hits)


def prediction(i: int, top1: int | None, p1: float, label_in_top5: bool = True) -> SamplePrediction:
    label = LABELS[i]
    if top1 is None:
        return SamplePrediction(sample_id=IDS[i], label=label, error="SampleError: image file is truncated")
    if label_in_top5:
        rest = [c for c in (label, 436, 511, 1, 2, 3) if c != top1]
    else:
        rest = [top1 + j for j in (1, 2, 3, 4)]
    probs = [p1] + [round((1 - p1) / (j + 2), 7) for j in range(4)]
    return SamplePrediction(sample_id=IDS[i], label=label, topk_indices=[top1, *rest[:4]], topk_probs=probs)


def make_record(
    run_id: str,
    top1: list[int | None],
    top1_probs: list[float] = TOP1_PROBS,
    *,
    created_at: datetime = datetime(2026, 11, 21, 23, 30, 5, 123456, tzinfo=UTC),
    runtime: str = "onnxruntime",
    kind: str = "evaluation",
    sweep_id: str | None = None,
    variant: str | None = None,
    dataset_identity: str = FOOLBOX_IDENTITY,
) -> EvaluationRecord:
    """Sample ``i`` predicts ``top1[i]`` (None = failed); sample 6's label is never in its top 5."""
    pairs = enumerate(zip(top1, top1_probs, strict=True))
    samples = [prediction(i, t, p, label_in_top5=i != 6) for i, (t, p) in pairs]
    metrics = [topk_metric("top1", samples, 1), topk_metric("top5", samples, 5)]
    failed = sum(1 for s in samples if s.error is not None)
    return EvaluationRecord(
        run_id=run_id,
        created_at=created_at,
        repliscope_version="0.1.0",
        kind=kind,
        manifest=ManifestInfo(
            name="efficientnet-lite0",
            version="1.0.0",
            path="examples/efficientnet-lite0.yaml",
            sha256="3f1c" + "0" * 56 + "9a2b",
            text="name: efficientnet-lite0\nversion: 1.0.0\n",
        ),
        pipeline={
            "preprocess": [
                {"op": "decode", "library": "pillow", "library_version": "13.0.0", "mode": "RGB"},
                {"op": "resize", "size": 256, "interpolation": "bilinear", "antialias": True},
                {"op": "center_crop", "size": 224},
                {"op": "normalize", "mean": [0.498, 0.498, 0.498], "std": [0.502, 0.502, 0.502]},
            ],
            "postprocess": [{"op": "softmax"}, {"op": "topk", "k": 5}],
        },
        runtime={
            "runtime": runtime,
            "framework": runtime,
            "framework_version": "1.31.1",
            "threads": 2,
            "model_sha256": "a" * 64,
        },
        software={
            "python": "3.11.7",
            "numpy": "2.4.6",
            "pillow": "13.0.0",
            "threadpools": [{"internal_api": "openblas", "version": "0.3.31.188.0", "num_threads": 2}],
            "env": {"OMP_NUM_THREADS": None},
        },
        hardware={
            "cpu_model": "AMD EPYC",
            "logical_cores": 2,
            "usable_cores": 2,
            "memory_gib": 23.54,
            "threads_used": 2,
        },
        dataset={
            "name": "foolbox_imagenet",
            "identity": dataset_identity,
            "num_samples": len(samples),
            "label_rule": "filename_index",
            "evaluated_as": None,
        },
        options={"batch_size": 8, "threads": 2, "prep_workers": 2, "fail_fast": False},
        metrics=metrics,
        claims=[
            ClaimVerdict(
                metric="top1",
                claimed=0.753,
                measured=metrics[0].value,
                ci_low=metrics[0].ci_low,
                ci_high=metrics[0].ci_high,
                claim_dataset="imagenet-1k/val",
                evaluated_dataset="foolbox_imagenet",
                verdict="not comparable",
                reason="evaluated on a different dataset",
                source="README.md",
            )
        ],
        counts={"total": len(samples), "evaluated": len(samples) - failed, "failed": failed, "labelled": len(samples)},
        timings=Timings(
            total_seconds=1.8734,
            inference_seconds=0.9121,
            batch_latencies_seconds=[0.3312, 0.3107, 0.2702],
            throughput_samples_per_second=10.1419,
        ),
        samples=samples,
        result_hash=result_hash(samples),
        sweep_id=sweep_id,
        variant=variant,
    )


# Run A: Lite0's golden predictions (two misses: 609 -> 436, 609 -> 511), the last image failed to decode.
TOP1_A: list[int | None] = [*LABELS[:6], 436, 511, *LABELS[8:19], None]
# Run B: sample 7 flips to the right class, sample 19 decodes.
TOP1_B: list[int | None] = [*LABELS[:6], 436, 609, *LABELS[8:]]
