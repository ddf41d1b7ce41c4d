"""Pair each detection of a run with a ground-truth box or with a reference run's detection.

:func:`match_detections`: greedy by score (highest first), each detection takes the still unmatched reference
box of highest IoU when that IoU >= ``iou_threshold`` (0.5), of the same class in ``class_aware`` mode;
ground-truth crowd / ignore boxes are never matched. :func:`pair_by_rank` pairs the k-th best detection of two
runs of the same model (for transforms that move boxes too far for IoU matching, e.g. a format swap).
Boxes are ``(K, 4)`` float64 ``[x1, y1, x2, y2]`` in source pixels; the IoU is COCO's (pycocotools ``bbIou``,
:func:`repliscope.metrics.bootstrap.box_iou`) of their ``[x, y, w, h]`` form: a ground-truth box's own ``xywh``
when the dataset gives it, else ``[x1, y1, x2 - x1, y2 - y1]`` — the numbers the COCO metrics use, so a pair
matched here at IoU 0.5 is one COCOeval matches at .50. Unit evaluation (:mod:`repliscope.units`) and
the detection task's paired statistics (:mod:`repliscope.metrics.detection_paired`) share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from repliscope.datasets.base import Sample
from repliscope.metrics.bootstrap import box_iou
from repliscope.records.evaluation import SamplePrediction


@dataclass(frozen=True)
class ImageBoxes:
    """One image's boxes: ``boxes`` (K, 4) float64 xyxy, ``classes`` (K,) int64, ``scores`` (K,) float64 (1 for
    ground truth), the image ``size_hw`` when known, and ``xywh`` (K, 4): the boxes as the annotation file gives
    them (COCO ``bbox``), None to derive them from ``boxes``."""

    sample_id: str
    boxes: np.ndarray
    classes: np.ndarray
    scores: np.ndarray
    size_hw: tuple[int, int] | None = None
    xywh: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.boxes)

    def coco_boxes(self) -> np.ndarray:
        """(K, 4) ``[x, y, w, h]``: ``xywh`` when given, else ``[x1, y1, x2 - x1, y2 - y1]``."""
        return self.xywh if self.xywh is not None else _xywh(self.boxes)


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
    boxes = np.array([o.box for o in kept], float).reshape(-1, 4)
    derived = _xywh(boxes)
    xywh = np.array([o.xywh if o.xywh is not None else derived[i] for i, o in enumerate(kept)], float).reshape(-1, 4)
    return ImageBoxes(
        sample.id,
        boxes,
        np.array([o.class_id for o in kept], np.int64),
        np.ones(len(kept)),
        sample.size_hw,
        xywh,
    )


def _xywh(boxes: np.ndarray) -> np.ndarray:
    """``[x1, y1, x2 - x1, y2 - y1]`` of (K, 4) xyxy boxes (what a COCO results file of them holds)."""
    out = np.array(boxes, float).reshape(-1, 4)
    return np.stack([out[:, 0], out[:, 1], out[:, 2] - out[:, 0], out[:, 3] - out[:, 1]], axis=1)


def _coco_iou(dt: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """(len(dt), len(gt)) COCO IoU of ``[x, y, w, h]`` boxes (no crowd); a box with a NaN coordinate overlaps
    nothing (0)."""
    iou = box_iou(dt, gt, np.zeros(len(gt), bool))
    return np.nan_to_num(iou, nan=0.0)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) IoU of xyxy boxes: COCO's (pycocotools ``bbIou``) of ``[x1, y1, x2 - x1, y2 - y1]``; 0 for
    boxes that do not overlap, empty or inverted boxes, and boxes with a NaN coordinate."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    return _coco_iou(_xywh(a), _xywh(b))


def match_detections(
    pred: ImageBoxes, ref: ImageBoxes, *, iou_threshold: float = 0.5, class_aware: bool = True
) -> list[tuple[int, int, float]]:
    """Greedy matching: [(index in ``pred``, index in ``ref``, IoU)] in ``pred``'s score order (stable)."""
    ious = _coco_iou(pred.coco_boxes(), ref.coco_boxes()) if len(pred) and len(ref) else np.zeros((len(pred), len(ref)))
    if class_aware and ious.size:
        ious = np.where(pred.classes[:, None] == ref.classes[None, :], ious, 0.0)
    if not len(ref):
        return []
    best = ious.max(axis=1)
    matchable = (best >= iou_threshold) & (best > 0)  # a detection below the threshold with every ref never matches
    taken = np.zeros(len(ref), bool)
    out = []
    for d in np.argsort(-pred.scores, kind="stable"):
        if not matchable[d]:
            continue
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
    ious = _coco_iou(pred.coco_boxes()[p[:n]], ref.coco_boxes()[r[:n]]) if n else np.zeros((0, 0))
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
