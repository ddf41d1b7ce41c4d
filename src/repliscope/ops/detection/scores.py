"""``score_activation``, ``score_threshold``, ``max_detections``: the score side of detection post-processing."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from repliscope.errors import OpSpecError, RepliscopeError
from repliscope.ops.base import OPS, Boxes, OpParams, PostOp, Predictions
from repliscope.ops.detection._common import require_detections, require_output, select, with_detections


class ScoreActivationParams(OpParams):
    function: Literal["sigmoid", "softmax", "none"]
    clip: Annotated[float, Field(gt=0)] | None
    """Clip the raw scores to [-clip, clip] BEFORE the function (MediaPipe ``score_clipping_thresh``); null:
    no clipping."""
    output: str | None
    """A model output to activate in place, (N, ..., C) (before ``anchor_decode``); null: the detections'
    scores (sigmoid or none only: softmax needs the class axis)."""


@OPS.register("score_activation")
class ScoreActivation(PostOp):
    """Turn raw scores into probabilities: ``sigmoid(x) = 1 / (1 + exp(-x))`` or a numerically stable softmax
    over the LAST axis, computed in float64 and stored float32; ``none`` only clips (or does nothing).

    Out: the output ``output`` replaced (same shape), or every row's ``Boxes.scores`` replaced.
    """

    name = "score_activation"
    Params = ScoreActivationParams
    params: ScoreActivationParams

    def __init__(self, params: ScoreActivationParams) -> None:
        super().__init__(params)
        if params.output is None and params.function == "softmax":
            raise OpSpecError(
                "function",
                "softmax needs the class axis of a model output: give 'output' (the detections hold one score per box)",
                allowed=["none", "sigmoid"],
            )

    def activate(self, x: np.ndarray) -> np.ndarray:
        v = np.asarray(x, dtype=np.float64)
        if self.params.clip is not None:
            v = np.clip(v, -self.params.clip, self.params.clip)
        if self.params.function == "sigmoid":
            v = 1.0 / (1.0 + np.exp(-v))
        elif self.params.function == "softmax":
            e = np.exp(v - v.max(axis=-1, keepdims=True))
            v = e / e.sum(axis=-1, keepdims=True)
        return v.astype(np.float32)

    def __call__(self, preds: Predictions) -> Predictions:
        if self.params.output is not None:
            raw = require_output(self, preds, self.params.output)
            outputs = {**preds.outputs, self.params.output: self.activate(raw)}
            return dataclasses.replace(preds, outputs=outputs)
        dets = require_detections(self, preds)
        return with_detections(preds, [Boxes(b.boxes, self.activate(b.scores), b.classes, b.format) for b in dets])


class ScoreThresholdParams(OpParams):
    threshold: float
    keep: Literal["ge", "gt"]
    """Keep scores ``>=`` (ge, MediaPipe's ``min_score_thresh``) or ``>`` (gt) the threshold."""


@OPS.register("score_threshold")
class ScoreThreshold(PostOp):
    """Drop detections scoring below the threshold (``keep`` states the comparison); order kept."""

    name = "score_threshold"
    Params = ScoreThresholdParams
    params: ScoreThresholdParams

    def __call__(self, preds: Predictions) -> Predictions:
        dets = require_detections(self, preds)
        t = np.float32(self.params.threshold)
        out = [select(b, b.scores >= t if self.params.keep == "ge" else b.scores > t) for b in dets]
        return with_detections(preds, out)


class MaxDetectionsParams(OpParams):
    k: Annotated[int, Field(ge=1)]


@OPS.register("max_detections")
class MaxDetections(PostOp):
    """Keep each sample's ``k`` best detections, best first; ties go to the LOWER index (stable sort of
    -score). A sample with fewer keeps them all, sorted."""

    name = "max_detections"
    Params = MaxDetectionsParams
    params: MaxDetectionsParams

    def __call__(self, preds: Predictions) -> Predictions:
        dets = require_detections(self, preds)
        return with_detections(preds, [select(b, best_first(b.scores)[: self.params.k]) for b in dets])


def best_first(scores: np.ndarray) -> np.ndarray:
    """Indices sorting ``scores`` descending; equal scores keep their order (lower index first)."""
    if not np.all(np.isfinite(scores)):
        raise RepliscopeError("detection scores contain NaN or infinity")
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
