"""Paired statistics of two detection runs on the same samples (the detection task's ``paired``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from repliscope.datasets.base import Dataset
from repliscope.metrics.bootstrap import CocoResampler
from repliscope.metrics.box_matching import from_prediction, match_detections
from repliscope.metrics.coco import CocoInputs, coco_inputs
from repliscope.records.evaluation import SamplePrediction

PAIRED_REPLICATES = 200
LISTED = 20


def _ok(s: SamplePrediction) -> bool:
    return s.error is None and s.detections is not None


def detection_paired(
    reference: Sequence[SamplePrediction],
    variant: Sequence[SamplePrediction],
    dataset: Dataset | None,
    *,
    replicates: int = PAIRED_REPLICATES,
    seed: int = 0,
) -> dict[str, Any] | None:
    """``variant`` against ``reference`` (same samples, same order) on the samples both evaluated; None when
    there is none.

    Keys: ``n_samples``; ``n_reference_detections`` / ``n_variant_detections``; ``matched_fraction`` (reference
    detections matched by a variant detection of the same class at IoU >= 0.5, greedy by score) and
    ``mean_iou`` of those matches; ``flipped_images`` (images whose matched set differs: a reference or variant
    detection left unmatched) with the first 20 ids in ``flipped_ids``; with ``dataset`` (its ground truth):
    ``ap_reference``, ``ap_variant``, ``delta_ap`` = variant - reference and its paired percentile-bootstrap
    95 % interval ``delta_ap_ci_low`` / ``delta_ap_ci_high`` (``replicates`` draws of images, the same draw
    for both runs, numpy ``default_rng(seed)``; capped for large runs, see ``CocoResampler.bounded``, and the
    number drawn is returned as ``replicates``).
    """
    if len(reference) != len(variant):
        raise ValueError(f"{len(reference)} reference samples for {len(variant)} variant samples")
    both = [(r, v) for r, v in zip(reference, variant, strict=True) if _ok(r) and _ok(v)]
    if not both:
        return None
    matched = n_ref = n_var = 0
    ious: list[float] = []
    flipped: list[str] = []
    for r, v in both:
        ref_boxes, var_boxes = from_prediction(r), from_prediction(v)
        found = match_detections(var_boxes, ref_boxes)
        matched += len(found)
        n_ref, n_var = n_ref + len(ref_boxes), n_var + len(var_boxes)
        ious += [iou for _, _, iou in found]
        if len(found) != len(ref_boxes) or len(found) != len(var_boxes):
            flipped.append(r.sample_id)
    out: dict[str, Any] = {
        "n_samples": len(both),
        "n_reference_detections": n_ref,
        "n_variant_detections": n_var,
        "matched_fraction": matched / n_ref if n_ref else (1.0 if not n_var else 0.0),
        "mean_iou": float(np.mean(ious)) if ious else None,
        "flipped_images": len(flipped),
        "flipped_ids": flipped[:LISTED],
    }
    if dataset is not None:
        out.update(_delta_ap([r for r, _ in both], [v for _, v in both], dataset, replicates, seed))
    return out


def _delta_ap(
    reference: list[SamplePrediction], variant: list[SamplePrediction], dataset: Dataset, replicates: int, seed: int
) -> dict[str, Any]:
    ref_in, var_in = coco_inputs(reference, dataset), coco_inputs(variant, dataset)
    cats = sorted(ref_in.categories)
    ref_rs = CocoResampler(ref_in.truths, ref_in.detections, cats)
    # the same detections on every image (two runs of one result): each AP the variant's resampler would give is
    # the reference's own, bit for bit, so it is computed once (half of a paired bootstrap's work)
    same = _same_detections(ref_in, var_in)
    var_rs = ref_rs if same else CocoResampler(var_in.truths, var_in.detections, cats)
    ap_ref = ref_rs.ap()
    ap_var = ap_ref if same else var_rs.ap()
    replicates = min(ref_rs.bounded(replicates), var_rs.bounded(replicates))
    low, high = delta_ap_interval(ap_var - ap_ref, paired_ap_deltas(ref_rs, var_rs, replicates, seed))
    return {
        "ap_reference": ap_ref,
        "ap_variant": ap_var,
        "delta_ap": ap_var - ap_ref,
        "delta_ap_ci_low": float(low),
        "delta_ap_ci_high": float(high),
        "replicates": replicates,
        "seed": seed,
    }


def paired_ap_deltas(ref_rs: CocoResampler, var_rs: CocoResampler, replicates: int, seed: int) -> np.ndarray:
    """(k,) each replicate's variant AP minus its reference AP, the same draw of images for both runs
    (``replicates`` draws, numpy ``default_rng(seed)`` multinomial counts; a replicate whose ΔAP is undefined is
    left out). ``var_rs`` may be ``ref_rs`` itself (the same detections): every delta is then 0, computed once."""
    rng = np.random.default_rng(seed)
    n = ref_rs.n_images
    deltas = []
    for _ in range(replicates):
        counts = rng.multinomial(n, np.full(n, 1.0 / n))
        on_ref = ref_rs.ap(counts)
        delta = (on_ref if var_rs is ref_rs else var_rs.ap(counts)) - on_ref
        if not np.isnan(delta):
            deltas.append(delta)
    return np.asarray(deltas, float)


def delta_ap_interval(delta: float, replicates: np.ndarray) -> tuple[float, float]:
    """The 95 % interval of a paired ``delta`` (variant AP - reference AP) from its ``replicates``' own ΔAPs
    (:func:`paired_ap_deltas`): their 2.5 / 97.5 percentiles; (NaN, NaN) without any. The bias correction of a
    COCO AP's interval (:func:`repliscope.metrics.bootstrap.corrected_interval`) does not improve it: a paired ΔAP
    is not biased the way an AP is (the two runs' upward biases cancel), and its coverage is set by the width
    (``benchmarks/bench_interval_coverage.py --part paired``; docs/benchmarks.md, "Interval coverage")."""
    if not replicates.size:
        return float("nan"), float("nan")
    low, high = np.percentile(replicates, [2.5, 97.5])
    return float(low), float(high)


def _same_detections(a: CocoInputs, b: CocoInputs) -> bool:
    """Do ``a`` and ``b`` (of one dataset) hold the same images in the same order, with the same detections?"""
    same_images = a.image_ids == b.image_ids and [s.id for s in a.samples] == [s.id for s in b.samples]
    return same_images and all(
        np.array_equal(x.boxes, y.boxes) and np.array_equal(x.scores, y.scores) and np.array_equal(x.classes, y.classes)
        for x, y in zip(a.detections, b.detections, strict=True)
    )
