"""``nms``: non-maximum suppression, hard (greedy), soft (Bodla et al. 2017) or weighted (MediaPipe)."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from repliscope.errors import OpSpecError
from repliscope.ops.base import OPS, Boxes, OpParams, PostOp, Predictions
from repliscope.ops.detection._common import iou_matrix, require_detections, to_xyxy, with_detections
from repliscope.ops.detection.scores import best_first

Fraction = Annotated[float, Field(ge=0, le=1)]


class NmsParams(OpParams):
    method: Literal["hard", "soft", "weighted"]
    iou_threshold: Fraction
    """hard / weighted: boxes with IoU > this (strictly) are suppressed / blended; soft linear: decayed above it."""
    class_aware: bool
    """true: only boxes of the same class suppress each other; false: class-agnostic."""
    max_output: Annotated[int, Field(ge=1)] | None
    """At most this many detections per sample (null: no limit)."""
    soft_function: Literal["linear", "gaussian"] | None
    """method soft only (required there): the score decay."""
    sigma: Annotated[float, Field(gt=0)] | None
    """soft gaussian only (required there): ``weight = exp(-iou ** 2 / sigma)``."""
    min_score: float | None
    """method soft only (required there): a box whose (decayed) score is below this is dropped."""


@OPS.register("nms")
class Nms(PostOp):
    """Non-maximum suppression per sample; vectorised numpy (one IoU row per kept box).

    Candidates are taken best first; equal scores go to the LOWER index (stable). IoU on xyxy pixel edges
    (area = (x2 - x1) * (y2 - y1), any box kind converted; normalised or pixels give the same IoU).

    - ``hard``: keep the best remaining box, drop every remaining box with IoU > ``iou_threshold``; repeat.
      Out: the kept boxes, best first, scores unchanged (torchvision ``nms`` semantics).
    - ``soft``: pick the best remaining box, decay every other's score: ``linear``: ``s *= 1 - iou`` when
      ``iou > iou_threshold``; ``gaussian``: ``s *= exp(-iou ** 2 / sigma)`` (whatever the threshold); drop
      boxes below ``min_score`` (also before the first pick); repeat. Out: picked boxes with their decayed
      scores, in pick order (scores non-increasing).
    - ``weighted`` (MediaPipe ``WEIGHTED`` NonMaxSuppression): take the best remaining box and every remaining
      box with IoU > ``iou_threshold`` (the best box itself always), output the score-weighted mean of their
      coordinates (in the stored box kind) with the best box's score and class, remove them all; repeat.
    """

    name = "nms"
    Params = NmsParams
    params: NmsParams

    def __init__(self, params: NmsParams) -> None:
        super().__init__(params)
        p = params
        soft_only = {"soft_function": p.soft_function, "min_score": p.min_score}
        if p.method == "soft":
            for key, value in soft_only.items():
                if value is None:
                    raise OpSpecError(
                        key, "method soft needs it", allowed=["gaussian", "linear"] if key == "soft_function" else None
                    )
            if (p.soft_function == "gaussian") != (p.sigma is not None):
                raise OpSpecError("sigma", "required for soft_function gaussian, null for linear")
        else:
            for key, value in {**soft_only, "sigma": p.sigma}.items():
                if value is not None:
                    raise OpSpecError(key, f"only applies to method soft, not {p.method}; set it to null")

    def __call__(self, preds: Predictions) -> Predictions:
        return with_detections(preds, [self.suppress(b) for b in require_detections(self, preds)])

    def suppress(self, b: Boxes) -> Boxes:
        """One sample's detections after NMS (see the class docstring)."""
        xyxy = to_xyxy(b.boxes, b.format.kind)
        if self.params.method == "hard":
            keep = _hard(
                xyxy, b.scores, b.classes, self.params.iou_threshold, self.params.class_aware, self.params.max_output
            )
            return Boxes(b.boxes[keep], b.scores[keep], b.classes[keep], b.format)
        if self.params.method == "soft":
            keep, scores = self._soft(xyxy, b.scores, b.classes)
            return Boxes(b.boxes[keep], scores.astype(np.float32), b.classes[keep], b.format)
        return self._weighted(xyxy, b)

    def _same(self, classes: np.ndarray, i: int, others: np.ndarray) -> np.ndarray:
        if not self.params.class_aware:
            return np.ones(others.size, bool)
        return classes[others] == classes[i]

    def _soft(self, xyxy: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = self.params
        s = np.asarray(scores, dtype=np.float64).copy()
        best_first(s)  # refuses NaN / infinity
        assert p.min_score is not None
        active = s >= p.min_score
        keep: list[int] = []
        kept_scores: list[float] = []
        while active.any() and (p.max_output is None or len(keep) < p.max_output):
            i = int(np.argmax(np.where(active, s, -np.inf)))  # first maximum: ties to the lower index
            keep.append(i)
            kept_scores.append(s[i])
            active[i] = False
            others = np.flatnonzero(active)
            others = others[self._same(classes, i, others)]
            iou = iou_matrix(xyxy[i], xyxy[others])[0]
            if p.soft_function == "linear":
                weight = np.where(iou > p.iou_threshold, 1.0 - iou, 1.0)
            else:
                assert p.sigma is not None
                weight = np.exp(-(iou * iou) / p.sigma)
            s[others] = s[others] * weight
            active[others] = s[others] >= p.min_score
        return np.asarray(keep, np.intp), np.asarray(kept_scores, np.float64)

    def _weighted(self, xyxy: np.ndarray, b: Boxes) -> Boxes:
        p = self.params
        remaining = best_first(b.scores)
        weights = np.asarray(b.scores, dtype=np.float64)
        coords = np.asarray(b.boxes, dtype=np.float64)
        out_boxes: list[np.ndarray] = []
        keep: list[int] = []
        while remaining.size and (p.max_output is None or len(keep) < p.max_output):
            i = int(remaining[0])
            iou = iou_matrix(xyxy[i], xyxy[remaining])[0]
            blend = (iou > p.iou_threshold) & self._same(b.classes, i, remaining)
            blend[0] = True
            members = remaining[blend]
            w = weights[members]
            total = w.sum()
            box = (coords[members] * w[:, None]).sum(axis=0) / total if total > 0 else coords[i]
            out_boxes.append(box)
            keep.append(i)
            remaining = remaining[~blend]
        idx = np.asarray(keep, np.intp)
        boxes = np.asarray(out_boxes, np.float64).reshape(-1, 4).astype(np.float32)
        return Boxes(boxes, b.scores[idx], b.classes[idx], b.format)


def _hard(
    xyxy: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    threshold: float,
    class_aware: bool,
    max_output: int | None,
) -> np.ndarray:
    """Indices kept by greedy NMS, best first (see :class:`Nms`)."""
    remaining = best_first(scores)
    keep: list[int] = []
    while remaining.size and (max_output is None or len(keep) < max_output):
        i = int(remaining[0])
        keep.append(i)
        rest = remaining[1:]
        iou = iou_matrix(xyxy[i], xyxy[rest])[0]
        survive = iou <= threshold
        if class_aware:
            survive |= classes[rest] != classes[i]
        remaining = rest[survive]
    return np.asarray(keep, np.intp)
