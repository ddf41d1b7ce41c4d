"""Semantic segmentation metrics from per-image confusion matrices, with bias-corrected bootstrap intervals over
images.

A run is a stack of per-image confusion matrices ``(n_images, K, K + 1)``: rows are ground-truth classes (the
model's K class indices; void pixels are not in it), columns predicted classes plus a last column for
predictions outside the K classes (always wrong). From the summed matrix ``M``:

- ``IoU_c = M[c, c] / (sum_row_c + sum_col_c - M[c, c])``, undefined (left out) when class c is neither in
  the ground truth nor predicted;
- ``mIoU``: the mean of the defined IoUs; ``fwIoU``: ``sum_c (sum_row_c / total) * IoU_c`` (frequency-weighted
  by ground-truth pixels); ``pixel_accuracy``: ``trace / total``.

Intervals: ``replicates`` draws of the images with replacement (numpy ``default_rng(seed)`` multinomial counts,
as :mod:`repliscope.metrics.bootstrap` draws them), each replicate's matrix ``counts @ per_image``, and its delta
from the full set's number (each replicate's mIoU compared with the full set's mean over the classes the
replicate defines: :func:`repliscope.metrics.bootstrap.bootstrap_deltas`'s rule, a replicate missing every image
of a rare class does not move the interval by that change of composition). The interval is
:func:`repliscope.metrics.bootstrap.corrected_interval` of the deltas with :data:`BIAS_FACTOR`: an mIoU or a
class's IoU on a sample of images is biased DOWNWARD (a class predicted on images that hold none of it counts
with IoU 0; a rare class's few images against the false positives of all of them), and the percentile interval
(the value plus the deltas' 2.5 / 97.5 percentiles) it replaced covered a population's mIoU 29.5 % of the time
at 30 images and 88.5 % at 400 (``benchmarks/bench_interval_coverage.py --part segmentation``; the figures in
docs/benchmarks.md, "Interval coverage").
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from repliscope.metrics.bootstrap import corrected_interval
from repliscope.records.evaluation import MetricValue

DEFAULT_REPLICATES = 1000
BIAS_FACTOR = 1.0
"""How many times the bootstrap's bias estimate the segmentation intervals subtract
(:func:`repliscope.metrics.bootstrap.corrected_interval`). Unlike a COCO AP's (whose bootstrap sees about half
its bias: twice), the bootstrap sees most of an mIoU's bias (63 % at 30 images, 94-128 % from 100 images of the
benchmark's world), and once covers better than twice at every size from 100 images (mIoU 90.5-95.5 % against
85.0-90.5 %; each class's IoU 89.8-92.9 % against 88.2-91.9 %)."""
METRIC_NAMES = ("mIoU", "fwIoU", "pixel_accuracy")


def iou_per_class(matrix: np.ndarray) -> np.ndarray:
    """(..., K, K + 1) summed confusion -> (..., K) IoU per class, NaN where undefined."""
    k = matrix.shape[-2]
    diag = np.diagonal(matrix[..., :k], axis1=-2, axis2=-1).astype(np.float64)
    rows = matrix.sum(axis=-1).astype(np.float64)
    cols = matrix[..., :k].sum(axis=-2).astype(np.float64)
    union = rows + cols - diag
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, diag / np.where(union > 0, union, 1.0), np.nan)


def summary(matrix: np.ndarray) -> np.ndarray:
    """(..., K, K + 1) -> (..., 3): mIoU, fwIoU, pixel accuracy (NaN when the matrix is empty)."""
    iou = iou_per_class(matrix)
    defined = ~np.isnan(iou)
    rows = matrix.sum(axis=-1).astype(np.float64)
    total = rows.sum(axis=-1)
    k = matrix.shape[-2]
    trace = np.trace(matrix[..., :k], axis1=-2, axis2=-1).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        miou = np.where(
            defined.any(axis=-1), np.where(defined, iou, 0.0).sum(axis=-1) / np.maximum(defined.sum(axis=-1), 1), np.nan
        )
        fw = np.where(total > 0, (rows * np.nan_to_num(iou)).sum(axis=-1) / np.where(total > 0, total, 1), np.nan)
        acc = np.where(total > 0, trace / np.where(total > 0, total, 1), np.nan)
    return np.stack([miou, fw, acc], axis=-1)


def _miou_on(iou: np.ndarray, defined: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(defined, np.nan_to_num(iou), 0.0).sum(axis=-1) / np.maximum(defined.sum(axis=-1), 1)


def draw_counts(n: int, replicates: int, seed: int) -> np.ndarray:
    """(replicates, n) multinomial draw counts of ``n`` images with replacement (``default_rng(seed)``)."""
    rng = np.random.default_rng(seed)
    return (
        np.stack([rng.multinomial(n, np.full(n, 1.0 / n)) for _ in range(replicates)])
        if n
        else np.zeros((replicates, 0))
    )


def replicate_deltas(per_image: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(replicates, 3): each replicate's mIoU / fwIoU / pixel accuracy minus the full set's (mIoU on the classes
    the replicate defines)."""
    full = per_image.sum(axis=0)
    full_iou = iou_per_class(full)
    reps = np.einsum("bi,ikl->bkl", counts.astype(np.float64), per_image.astype(np.float64))
    rep_iou = iou_per_class(reps)
    defined = ~np.isnan(rep_iou)
    out = summary(reps) - summary(full)[None, :]
    out[:, 0] = _miou_on(rep_iou, defined) - _miou_on(np.broadcast_to(full_iou, rep_iou.shape), defined)
    return out


@dataclass(frozen=True)
class SegmentationEvaluation:
    """Metrics with intervals, per-class rows, and how they were computed."""

    metrics: list[MetricValue]
    per_class: list[dict[str, object]]
    n_images: int
    replicates: int
    seed: int
    seconds: float


def evaluate_confusions(
    per_image: np.ndarray, class_names: list[str], *, replicates: int = DEFAULT_REPLICATES, seed: int = 0
) -> SegmentationEvaluation:
    """The three metrics (fractions) with 95 % bootstrap intervals over images, and per class ``class_id``,
    ``name``, ``iou`` (None when undefined), ``iou_ci_low`` / ``iou_ci_high``, ``gt_pixels``, ``predicted_pixels``,
    ``images`` (images whose ground truth holds the class)."""
    start = time.perf_counter()
    n = int(per_image.shape[0])
    k = len(class_names)
    if n == 0:
        return SegmentationEvaluation([], [], 0, 0, seed, time.perf_counter() - start)
    full = per_image.sum(axis=0)
    values = summary(full)
    counts = draw_counts(n, replicates, seed)
    deltas = replicate_deltas(per_image, counts)
    metrics = []
    for j, name in enumerate(METRIC_NAMES):
        if np.isnan(values[j]):
            continue
        low, high = corrected_interval(float(values[j]), deltas[:, j], n, bias_factor=BIAS_FACTOR)
        metrics.append(MetricValue(name=name, value=float(values[j]), ci_low=low, ci_high=high, n=n))
    iou = iou_per_class(full)
    reps = np.einsum("bi,ikl->bkl", counts.astype(np.float64), per_image.astype(np.float64))
    rep_iou = iou_per_class(reps)
    rows = []
    for c in range(k):
        interval: tuple[float | None, float | None] = (
            (None, None)
            if np.isnan(iou[c])
            else corrected_interval(float(iou[c]), rep_iou[:, c] - iou[c], n, bias_factor=BIAS_FACTOR)
        )
        rows.append(
            {
                "class_id": c,
                "name": class_names[c],
                "iou": None if np.isnan(iou[c]) else float(iou[c]),
                "iou_ci_low": interval[0],
                "iou_ci_high": interval[1],
                "gt_pixels": int(full[c].sum()),
                "predicted_pixels": int(full[:, c].sum()),
                "images": int((per_image[:, c].sum(axis=-1) > 0).sum()),
            }
        )
    return SegmentationEvaluation(metrics, rows, n, replicates, seed, time.perf_counter() - start)


def paired_miou_deltas(reference: np.ndarray, variant: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(k,) each replicate's variant mIoU minus its reference mIoU, the same image draws ``counts``
    (:func:`draw_counts`) for both runs' per-image matrices; a replicate where either is undefined is left out."""
    c = counts.astype(np.float64)
    r = summary(np.einsum("bi,ikl->bkl", c, reference.astype(np.float64)))[:, 0]
    v = summary(np.einsum("bi,ikl->bkl", c, variant.astype(np.float64)))[:, 0]
    return (v - r)[~np.isnan(v - r)]


def paired_delta(
    reference: np.ndarray, variant: np.ndarray, *, replicates: int = DEFAULT_REPLICATES, seed: int = 0
) -> dict[str, float]:
    """mIoU of both runs on the same images (same order) and ``delta_miou`` = variant - reference with its paired
    bootstrap 95 % interval (the same image draws for both runs; :func:`corrected_interval` of each replicate's
    ΔmIoU minus the runs' ΔmIoU, within [-1, 1], with :data:`BIAS_FACTOR`: 78.5 % at 30 images, 94.0 % at 400 of
    the benchmark's world, where the percentile interval covered 67.5 % and 93.0 %)."""
    n = int(reference.shape[0])
    ref_m, var_m = summary(reference.sum(axis=0))[0], summary(variant.sum(axis=0))[0]
    d = paired_miou_deltas(reference, variant, draw_counts(n, replicates, seed))
    delta = float(var_m - ref_m)
    low, high = (
        corrected_interval(delta, d - delta, n, bounds=(-1.0, 1.0), bias_factor=BIAS_FACTOR)
        if d.size
        else (np.nan, np.nan)
    )
    return {
        "miou_reference": float(ref_m),
        "miou_variant": float(var_m),
        "delta_miou": delta,
        "delta_miou_ci_low": float(low),
        "delta_miou_ci_high": float(high),
        "replicates": replicates,
        "seed": seed,
    }
