"""Pair each detection of a run with a ground-truth box or with a reference run's detection.

:func:`match_detections`: greedy by score (highest first), each detection takes the still unmatched reference
box of highest IoU when that IoU >= ``iou_threshold`` (0.5), of the same class in ``class_aware`` mode;
ground-truth crowd / ignore boxes are never matched. :func:`pair_by_rank` pairs the k-th best detection of two
runs of the same model (for transforms that move boxes too far for IoU matching, e.g. a format swap).
Boxes are ``(K, 4)`` float64 ``[x1, y1, x2, y2]`` in source pixels. Unit evaluation (:mod:`repliscope.units`) and
the detection task's paired statistics (:mod:`repliscope.metrics.detection_paired`) share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from repliscope.datasets.base import Sample
from repliscope.records.evaluation import SamplePrediction


@dataclass(frozen=True)
class ImageBoxes:
    """One image's boxes: ``boxes`` (K, 4) float64, ``classes`` (K,) int64, ``scores`` (K,) float64 (1 for
    ground truth), and the image ``size_hw`` when known."""

    sample_id: str
    boxes: np.ndarray
    classes: np.ndarray
    scores: np.ndarray
    size_hw: tuple[int, int] | None = None

    def __len__(self) -> int:
        return len(self.boxes)


def from_prediction(pred: SamplePrediction, size_hw: tuple[int, int] | None = None) -> ImageBoxes:
    dets = pred.detections or []
    return ImageBoxes(
        pred.sample_id,
        np.array([d.box for d in dets], float).reshape(-1, 4),
        np.array([d.class_id for d in dets], np.int64),
        np.array([d.score for d in dets], float),
        size_hw,
    )


def from_truth(sample: Sample) -> ImageBoxes:
    """The scored ground truth of ``sample`` (crowd and ignore boxes left out)."""
    kept = [o for o in sample.objects or () if not (o.iscrowd or o.ignore)]
    return ImageBoxes(
        sample.id,
        np.array([o.box for o in kept], float).reshape(-1, 4),
        np.array([o.class_id for o in kept], np.int64),
        np.ones(len(kept)),
        sample.size_hw,
    )


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) IoU of xyxy boxes (continuous coordinates; 0 for empty boxes)."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    iw = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    ih = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = iw * ih
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def match_detections(
    pred: ImageBoxes, ref: ImageBoxes, *, iou_threshold: float = 0.5, class_aware: bool = True
) -> list[tuple[int, int, float]]:
    """Greedy matching: [(index in ``pred``, index in ``ref``, IoU)] in ``pred``'s score order (stable)."""
    ious = iou_matrix(pred.boxes, ref.boxes)
    if class_aware and ious.size:
        ious = np.where(pred.classes[:, None] == ref.classes[None, :], ious, 0.0)
    taken = np.zeros(len(ref), bool)
    out = []
    for d in np.argsort(-pred.scores, kind="stable"):
        if not len(ref):
            break
        row = np.where(taken, -1.0, ious[d])
        g = int(np.argmax(row))
        if row[g] >= iou_threshold and row[g] > 0:
            taken[g] = True
            out.append((int(d), g, float(row[g])))
    return out


def pair_by_rank(pred: ImageBoxes, ref: ImageBoxes) -> list[tuple[int, int, float]]:
    """The k-th highest-scoring detection of ``pred`` with the k-th of ``ref`` (k < the smaller count)."""
    p = np.argsort(-pred.scores, kind="stable")
    r = np.argsort(-ref.scores, kind="stable")
    n = min(len(p), len(r))
    ious = iou_matrix(pred.boxes[p[:n]], ref.boxes[r[:n]])
    return [(int(p[k]), int(r[k]), float(ious[k, k])) for k in range(n)]


@dataclass(frozen=True)
class Pair:
    """One paired detection: ``box`` (observed) against ``ref_box`` (ground truth or the reference run)."""

    image: int
    sample_id: str
    box: tuple[float, float, float, float]
    ref_box: tuple[float, float, float, float]
    class_id: int
    ref_class: int
    score: float
    iou: float
    size_hw: tuple[int, int] | None


def collect_pairs(
    preds: Sequence[ImageBoxes],
    refs: Sequence[ImageBoxes],
    *,
    mode: str = "iou",
    iou_threshold: float = 0.5,
    class_aware: bool = True,
) -> list[Pair]:
    """Pairs over every image (``preds[i]`` with ``refs[i]``); ``mode`` ``iou`` (:func:`match_detections`) or
    ``rank`` (:func:`pair_by_rank`)."""
    if mode not in ("iou", "rank"):
        raise ValueError(f"pairing mode '{mode}' (allowed: iou, rank)")
    out = []
    for i, (p, r) in enumerate(zip(preds, refs, strict=True)):
        found = (
            match_detections(p, r, iou_threshold=iou_threshold, class_aware=class_aware)
            if mode == "iou"
            else pair_by_rank(p, r)
        )
        for d, g, iou in found:
            out.append(
                Pair(
                    i,
                    p.sample_id,
                    _box(p.boxes[d]),
                    _box(r.boxes[g]),
                    int(p.classes[d]),
                    int(r.classes[g]),
                    float(p.scores[d]),
                    iou,
                    p.size_hw or r.size_hw,
                )
            )
    return out


def _box(row: np.ndarray) -> tuple[float, float, float, float]:
    return float(row[0]), float(row[1]), float(row[2]), float(row[3])
