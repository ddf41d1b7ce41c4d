"""Realistic EvaluationRecord / SweepResult instances for the report tests (no model, no dataset needed).

Values follow a real Lite0 run on the 20 foolbox images (onnxruntime, 2 threads): 18/20 top-1, Wilson
[0.699, 0.972]; the variants' predictions are made up but consistent (metrics, McNemar, agreement, flips).
"""

from __future__ import annotations

import base64
import io
import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
from PIL import Image

from repliscope.evaluation.record import (
    ClaimVerdict,
    EvaluationRecord,
    ManifestInfo,
    MetricValue,
    SamplePrediction,
    Timings,
    result_hash,
)
from repliscope.metrics.intervals import wilson_interval
from repliscope.pitfalls.result import PairedStats, SweepResult, VariantOutcome, VisualEntry, VisualPanel

INJECTION = "<script>alert('pwned')</script><img src=x onerror=alert(1)>"
LABELS = [243, 559, 438, 990, 949, 853, 609, 609, 915, 455, 541, 630, 741, 471, 129, 99, 251, 22, 317, 305]
LITE0_TOP1 = [243, 559, 438, 990, 949, 853, 436, 511, 915, 455, 541, 630, 741, 471, 129, 99, 251, 22, 317, 305]
SAMPLE_IDS = [f"imagenet_{i:02d}_{label}.jpg" for i, label in enumerate(LABELS)]
MANIFEST_TEXT = f"""\
name: efficientnet-lite0
version: 1.0.0
task: image_classification
description: "EfficientNet-Lite0 (ReLU6). {INJECTION}"
framework: {{name: torch, version: ">=2.1,<3"}}
preprocess:
  - {{op: decode, library: pillow, channels: RGB}}
  - {{op: resize, size: 256, keep_aspect_ratio: true, method: bicubic, library: pillow, antialias: true}}
  - {{op: center_crop, size: 224}}
  - {{op: to_float, dtype: float32}}
  - {{op: subtract_mean, value: 127.0}}
  - {{op: divide_std, value: 128.0}}
  - {{op: data_layout, layout: NCHW}}
labels: {{source: "builtin:imagenet-1k", num_classes: 1000}}
claims:
  - metric: top1
    value: 75.1
    dataset: {{name: imagenet-1k, split: val}}
    source: https://github.com/tensorflow/tpu/tree/master/models/official/efficientnet/lite (README, table)
"""
NUMPY, PILLOW = "2.4.6", "13.0.0"
PIPELINE: dict[str, list[dict[str, Any]]] = {
    "preprocess": [
        {"op": "decode", "library": "pillow", "channels": "RGB", "library_version": PILLOW},
        {
            "op": "resize",
            "size": 256,
            "keep_aspect_ratio": True,
            "method": "bicubic",
            "library": "pillow",
            "antialias": True,
            "library_version": PILLOW,
        },
        {"op": "center_crop", "size": 224, "fraction": None, "library": "numpy", "library_version": NUMPY},
        {"op": "to_float", "dtype": "float32", "library": "numpy", "library_version": NUMPY},
        {"op": "subtract_mean", "value": 127.0, "library": "numpy", "library_version": NUMPY},
        {"op": "divide_std", "value": 128.0, "library": "numpy", "library_version": NUMPY},
        {"op": "data_layout", "layout": "NCHW", "library": "numpy", "library_version": NUMPY},
    ],
    "postprocess": [
        {"op": "softmax", "axis": -1, "library": "numpy", "library_version": NUMPY},
        {"op": "topk", "k": 5, "library": "numpy", "library_version": NUMPY},
        {"op": "labels", "library": "numpy", "library_version": NUMPY},
    ],
}
RUNTIME: dict[str, Any] = {
    "runtime": "onnxruntime",
    "framework": "onnxruntime",
    "framework_version": "1.31.1",
    "threads": 2,
    "export": {
        "exported_from": "torch",
        "exporter": "torch.onnx.export(dynamo=True)",
        "opset": 18,
        "torch_version": "2.13.0+cpu",
        "export_seconds": 5.019,
        "cached": True,
        "onnx_sha256": "4b2552bcb7fdad57d090230dabc9e4fdb8ffd7edf49495df9a43e3eb2a7c13c9",
    },
    "providers": ["CPUExecutionProvider"],
    "model_sha256": "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db",
}
SOFTWARE: dict[str, Any] = {
    "python": "3.11.7",
    "python_implementation": "CPython",
    "platform": "Linux-6.18-x86_64-with-glibc2.36",
    "numpy": NUMPY,
    "pillow": PILLOW,
    "pillow_libraries": {"libjpeg_turbo": "3.2.0", "zlib": "1.2.13"},
    "distributions": {"torch": "2.13.0+cpu", "onnxruntime": "1.31.1", "opencv-python": None},
    "threadpools": [
        {
            "user_api": "openmp",
            "internal_api": "openmp",
            "prefix": "libgomp",
            "version": None,
            "num_threads": 2,
            "filepath": "/venv/lib/python3.11/site-packages/torch/lib/libgomp.so.1",
        }
    ],
    "env": {"OMP_NUM_THREADS": None, "MKL_NUM_THREADS": None},
}
HARDWARE: dict[str, Any] = {
    "cpu_model": "AMD EPYC",
    "cpu_flags": ["avx2", "fma", "avx512f"],
    "logical_cores": 2,
    "usable_cores": 2,
    "memory_gib": 23.54,
    "machine": "x86_64",
    "threads_used": 2,
}
DATASET: dict[str, Any] = {
    "name": "foolbox_imagenet",
    "identity": "99bb2a439b0b352c4bcc7b70e841ca21fb2af45d2dede8b9cd5648b90586ac7d",
    "num_samples": 20,
    "num_labelled": 20,
    "label_rule": "filename_index",
    "description": "20 ImageNet images bundled with foolbox 3.3.4.",
    "evaluated_as": None,
}
OPTIONS: dict[str, Any] = {"batch_size": 8, "threads": 2, "prep_workers": 2, "prefetch_batches": 2, "fail_fast": False}
CREATED = datetime(2026, 11, 21, 23, 31, 26, tzinfo=UTC)


def manifest() -> ManifestInfo:
    return ManifestInfo(
        name="efficientnet-lite0",
        version="1.0.0",
        path="examples/efficientnet-lite0.yaml",
        sha256="3c07c2cd3d2f585a79f3e32b6a53e38efa52802cf1eb2d239996f4872b502161",
        text=MANIFEST_TEXT,
    )


def metric(name: str, successes: int, n: int = 20) -> MetricValue:
    low, high = wilson_interval(successes, n)
    return MetricValue(name=name, value=successes / n, ci_low=low, ci_high=high, n=n, successes=successes)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p (binomial test on the discordant pairs)."""
    n = b + c
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n)


def samples(top1: list[int]) -> list[SamplePrediction]:
    out = []
    for sid, label, pred in zip(SAMPLE_IDS, LABELS, top1, strict=True):
        others = [x for x in (label, 242, 676, 159, 163) if x != pred][:4]
        out.append(
            SamplePrediction(
                sample_id=sid, label=label, topk_indices=[pred, *others], topk_probs=[0.70, 0.20, 0.05, 0.03, 0.01]
            )
        )
    return out


def claim(top1: MetricValue) -> ClaimVerdict:
    return ClaimVerdict(
        metric="top1",
        claimed=0.751,
        measured=top1.value,
        ci_low=top1.ci_low,
        ci_high=top1.ci_high,
        claim_dataset="imagenet-1k/val",
        evaluated_dataset="foolbox_imagenet",
        verdict="not comparable",
        reason="the claim is about imagenet-1k/val; the evaluated data 'foolbox_imagenet' is not "
        "declared to be that dataset",
        source="https://github.com/tensorflow/tpu/tree/master/models/official/efficientnet/lite (README, table)",
    )


def record(
    top1: list[int] | None = None,
    run_id: str = "310bfb341ef1400185577e4145366b17",
    sweep_id: str | None = None,
    variant: str | None = None,
    error_at: int | None = None,
) -> EvaluationRecord:
    """A Lite0 run on the 20 foolbox images (``error_at``: make that sample a failed one)."""
    preds = samples(top1 or LITE0_TOP1)
    if error_at is not None:
        preds[error_at] = SamplePrediction(
            sample_id=preds[error_at].sample_id,
            label=preds[error_at].label,
            error="decode: cannot identify image file (truncated JPEG)",
        )
    ok = [s for s in preds if s.error is None]
    top1_m = metric("top1", sum(s.top1 == s.label for s in ok), len(ok))
    top5_m = metric("top5", sum(s.label in s.topk_indices for s in ok), len(ok))
    return EvaluationRecord(
        run_id=run_id,
        created_at=CREATED,
        repliscope_version="0.1.0",
        manifest=manifest(),
        pipeline=PIPELINE,
        runtime=RUNTIME,
        software=SOFTWARE,
        hardware=HARDWARE,
        dataset=DATASET,
        options=OPTIONS,
        metrics=[top1_m, top5_m],
        claims=[claim(top1_m)],
        counts={"total": 20, "evaluated": len(ok), "failed": 20 - len(ok), "labelled": 20},
        timings=Timings(
            total_seconds=1.93,
            inference_seconds=0.64,
            batch_latencies_seconds=[0.291, 0.176, 0.173],
            throughput_samples_per_second=10.35,
        ),
        samples=preds,
        result_hash=result_hash(preds),
        sweep_id=sweep_id,
        variant=variant,
    )


DIFF_SCALE = 63.75  # a quarter of the reference input's range (0..255), as the sweep uses

# --- visual panels -------------------------------------------------------------------------------------------


def png_b64(array: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def reference_input(seed: int, size: int = 48) -> np.ndarray:
    """A smooth synthetic RGB 'photo' (uint8, HWC)."""
    y, x = np.mgrid[0:size, 0:size] / size
    rng = np.random.default_rng(seed)
    r = 0.5 + 0.5 * np.sin(6 * x + seed)
    g = y
    b = 0.5 + 0.5 * np.cos(5 * (x + y)) * rng.uniform(0.8, 1.0)
    return (np.stack([r, g, b], axis=-1) * 255).astype(np.uint8)


def heatmap(a: np.ndarray, b: np.ndarray) -> tuple[str, float, float]:
    diff = np.abs(a.astype(np.float32) - b.astype(np.float32)).mean(axis=-1) / 128.0
    scaled = diff / diff.max() if diff.max() > 0 else diff
    rgb = np.stack([scaled, scaled**2, np.zeros_like(scaled)], axis=-1)
    return png_b64((rgb * 255).astype(np.uint8)), float(diff.max()), float(diff.mean())


def visual_panel(index: int) -> VisualPanel:
    ref = reference_input(index)
    swapped = ref[..., ::-1].copy()
    scrambled = ref.reshape(3, ref.shape[0], ref.shape[1]).transpose(1, 2, 0).copy()
    label = LABELS[index]
    entries = [VisualEntry(variant="reference", image_png=png_b64(ref), top1=LITE0_TOP1[index], top1_prob=0.70)]
    for name, arr in (("color_layout_swapped", swapped), ("data_layout_bug", scrambled)):
        diff_png, mx, mean = heatmap(ref, arr)
        top1 = (COLOR_SWAPPED_TOP1 if name == "color_layout_swapped" else DATA_LAYOUT_TOP1)[index]
        entries.append(
            VisualEntry(
                variant=name,
                image_png=png_b64(arr),
                diff_png=diff_png,
                max_abs_diff=mx,
                mean_abs_diff=mean,
                diff_scale=DIFF_SCALE,
                top1=top1,
                top1_prob=0.42,
            )
        )
    entries.append(
        VisualEntry(
            variant="threads_changed",
            image_png=png_b64(ref),
            diff_png=heatmap(ref, ref)[0],
            max_abs_diff=0.0,
            mean_abs_diff=0.0,
            diff_scale=DIFF_SCALE,
            top1=LITE0_TOP1[index],
            top1_prob=0.70,
        )
    )
    squashed = np.asarray(Image.fromarray(ref).resize((40, 40)))
    entries.append(
        VisualEntry(
            variant="no_center_crop",
            image_png=png_b64(squashed),
            note="different field of view: compared by eye only",
            top1=NO_CROP_TOP1[index],
            top1_prob=0.55,
        )
    )
    return VisualPanel(sample_id=SAMPLE_IDS[index], label=label, entries=entries)


# --- the sweep -----------------------------------------------------------------------------------------------

COLOR_SWAPPED_TOP1 = list(LITE0_TOP1)
for _i, _wrong in ((0, 242), (9, 454), (12, 742)):
    COLOR_SWAPPED_TOP1[_i] = _wrong
COLOR_SWAPPED_TOP1[6] = 609  # one miss of the reference becomes right: b=3, c=1 -> 16/20
COLOR_SWAPPED_TOP1[7] = 434  # still wrong, but differently: a flip that is not discordant
DATA_LAYOUT_TOP1 = [111] * 20
NO_CROP_TOP1 = list(LITE0_TOP1)
NO_CROP_TOP1[3] = 991

SWEEP_ID = "5e2f0c1d9a8b4c7e8f6a2b3c4d5e6f70"
VARIANT_RUN_IDS = {
    "reference": "a1" * 16,
    "color_layout_swapped": "b2" * 16,
    "data_layout_bug": "c3" * 16,
    "no_center_crop": "d4" * 16,
}
_VARIANTS = {
    "color_layout_swapped": (
        "Channels in BGR order instead of RGB",
        "decode channels RGB -> BGR",
        COLOR_SWAPPED_TOP1,
        0.1843,
    ),
    "data_layout_bug": (
        "NHWC buffer reshaped (not transposed) to NCHW",
        "data_layout: reshape instead of transpose",
        DATA_LAYOUT_TOP1,
        4.8127,
    ),
    "no_center_crop": (
        "Squash the whole image to 224x224",
        "resize 224x224 (no crop), center_crop removed",
        NO_CROP_TOP1,
        0.0311,
    ),
}


def paired(top1: list[int], mean_kl: float) -> PairedStats:
    ref_ok = [p == label for p, label in zip(LITE0_TOP1, LABELS, strict=True)]
    var_ok = [p == label for p, label in zip(top1, LABELS, strict=True)]
    b = sum(r and not v for r, v in zip(ref_ok, var_ok, strict=True))
    c = sum(v and not r for r, v in zip(ref_ok, var_ok, strict=True))
    flipped = sum(p != q for p, q in zip(LITE0_TOP1, top1, strict=True))
    return PairedStats(
        n=20,
        agreement=(20 - flipped) / 20,
        flipped=flipped,
        mean_kl=mean_kl,
        max_abs_prob_diff=0.93 if flipped else 0.01,
        b=b,
        c=c,
        mcnemar_p=mcnemar_exact(b, c),
        delta_top1=(sum(var_ok) - sum(ref_ok)) / 20,
        delta_top5=None,
    )


def outcome(name: str, top1: list[int]) -> VariantOutcome:
    correct = sum(p == label for p, label in zip(top1, LABELS, strict=True))
    return VariantOutcome(
        name=name,
        description="",
        change="",
        status="ok",
        run_id=VARIANT_RUN_IDS[name],
        metrics=[metric("top1", correct), metric("top5", min(20, correct + 1))],
        evaluated_samples=20,
        pipeline=PIPELINE,
        inference_seconds=0.61,
    )


def sweep() -> SweepResult:
    reference = outcome("reference", LITE0_TOP1).model_copy(update={"description": "The manifest as written"})
    variants = []
    for name, (description, change, top1, kl) in _VARIANTS.items():
        variants.append(
            outcome(name, top1).model_copy(
                update={"description": description, "change": change, "paired": paired(top1, kl)}
            )
        )
    variants.append(
        VariantOutcome(
            name="resize_antialias_off",
            description="Resize without antialiasing",
            change="resize antialias true -> false",
            status="not applicable",
            reason="resize uses pillow, which always antialiases when downscaling; needs library opencv",
        )
    )
    variants.append(
        VariantOutcome(
            name="float16_inference",
            description="Model and input in float16",
            change="runtime dtype float32 -> float16",
            status="failed",
            reason="onnxruntime CPUExecutionProvider: no float16 kernel for Conv",
        )
    )
    return SweepResult(
        sweep_id=SWEEP_ID,
        created_at=CREATED,
        repliscope_version="0.1.0",
        manifest=manifest(),
        runtime=RUNTIME,
        dataset=DATASET,
        software=SOFTWARE,
        hardware=HARDWARE,
        options=OPTIONS,
        reference=reference,
        variants=variants,
        claims=[claim(reference.metrics[0]).model_dump(mode="json")],
        visual=[visual_panel(0), visual_panel(6)],
        timings={"total_seconds": 6.8, "decode_seconds": 1.1},
    )


def sweep_records() -> dict[str, EvaluationRecord]:
    """The variants' records as the store would give them, keyed by run id."""
    preds = {"reference": LITE0_TOP1, **{name: v[2] for name, v in _VARIANTS.items()}}
    return {
        VARIANT_RUN_IDS[name]: record(top1, run_id=VARIANT_RUN_IDS[name], sweep_id=SWEEP_ID, variant=name)
        for name, top1 in preds.items()
    }
