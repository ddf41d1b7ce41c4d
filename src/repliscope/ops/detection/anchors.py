"""``anchor_decode``: SSD / BlazeFace box regression decoded against generated anchors (MediaPipe's
``SsdAnchorsCalculator`` + ``TensorsToDetectionsCalculator`` box coder, TF OD API ``FasterRcnnBoxCoder``)."""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from repliscope.errors import OpSpecError, RepliscopeError
from repliscope.ops.base import OPS, Boxes, BoxFormat, OpParams, PostOp, Predictions
from repliscope.ops.detection._common import require_output, with_detections

PositiveInt = Annotated[int, Field(gt=0)]
Positive = Annotated[float, Field(gt=0)]

ANCHOR_OUTPUT_FORMAT = BoxFormat("xyxy", normalized=True, one_based=False, space="input")
"""What ``anchor_decode`` produces: xyxy normalised to the model input."""


class AnchorDecodeParams(OpParams):
    boxes: str
    """Output name of the raw box regression, (N, A, R), R >= 4 (extra values, e.g. keypoints, are ignored)."""
    scores: str
    """Output name of the scores, (N, A) or (N, A, C), already activated (``score_activation`` before)."""
    class_selection: Literal["max", "all"]
    """``max``: one detection per anchor, its best class (ties: lower class index); ``all``: one per (anchor,
    class), anchor-major (multi-class NMS after). With (N, A) scores every class is 0."""
    num_layers: PositiveInt
    strides: Annotated[list[PositiveInt], Field(min_length=1)]
    """One per layer (len = num_layers); feature map side = ceil(input side / stride)."""
    input_size: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)]
    """[height, width] the anchors are laid out on (the model input)."""
    min_scale: Positive
    max_scale: Positive
    aspect_ratios: Annotated[list[Positive], Field(min_length=1)]
    anchor_offset_x: float
    anchor_offset_y: float
    fixed_anchor_size: bool
    """true: every anchor is 1 x 1 (BlazeFace: sizes come from the scales alone)."""
    interpolated_scale_aspect_ratio: float
    """> 0: one more anchor per location, scale sqrt(s_i * s_i+1), this aspect ratio; 0: none."""
    reduce_boxes_in_lowest_layer: bool
    """true: layer 0 uses MediaPipe's fixed (ratio 1 scale 0.1, ratio 2, ratio 0.5) anchors."""
    box_order: Literal["xywh", "yxhw"]
    """Order of the first 4 regression values: ``xywh`` (x_center, y_center, w, h: MediaPipe / BlazeFace) or
    ``yxhw`` (ty, tx, th, tw: TF OD API)."""
    x_scale: Positive
    y_scale: Positive
    w_scale: Positive
    h_scale: Positive
    apply_exp_scaling: bool
    """true: w = exp(raw_w / w_scale) * anchor_w (TF OD API); false: w = raw_w / w_scale * anchor_w."""


def layer_scale(min_scale: float, max_scale: float, index: int, count: int) -> float:
    """MediaPipe ``CalculateScale``: the mean for one stride, else linear from min to max over the strides."""
    if count == 1:
        return (min_scale + max_scale) * 0.5
    return min_scale + (max_scale - min_scale) * index / (count - 1.0)


def ssd_anchors(p: AnchorDecodeParams) -> np.ndarray:
    """(A, 4) float32 anchors [x_center, y_center, w, h] normalised, in MediaPipe's order: per group of
    consecutive layers with the same stride, rows y, then columns x, then the group's anchors."""
    anchors: list[tuple[float, float, float, float]] = []
    strides = p.strides
    layer = 0
    while layer < p.num_layers:
        ratios: list[float] = []
        scales: list[float] = []
        last = layer
        while last < len(strides) and strides[last] == strides[layer]:
            scale = layer_scale(p.min_scale, p.max_scale, last, len(strides))
            if last == 0 and p.reduce_boxes_in_lowest_layer:
                ratios += [1.0, 2.0, 0.5]
                scales += [0.1, scale, scale]
            else:
                ratios += list(p.aspect_ratios)
                scales += [scale] * len(p.aspect_ratios)
                if p.interpolated_scale_aspect_ratio > 0.0:
                    nxt = (
                        1.0
                        if last == len(strides) - 1
                        else layer_scale(p.min_scale, p.max_scale, last + 1, len(strides))
                    )
                    scales.append(math.sqrt(scale * nxt))
                    ratios.append(p.interpolated_scale_aspect_ratio)
            last += 1
        sizes = [(s / math.sqrt(r), s * math.sqrt(r)) for s, r in zip(scales, ratios, strict=True)]  # (h, w)
        fh = math.ceil(p.input_size[0] / strides[layer])
        fw = math.ceil(p.input_size[1] / strides[layer])
        for y in range(fh):
            for x in range(fw):
                cx, cy = (x + p.anchor_offset_x) / fw, (y + p.anchor_offset_y) / fh
                for h, w in sizes:
                    anchors.append((cx, cy, 1.0, 1.0) if p.fixed_anchor_size else (cx, cy, w, h))
        layer = last
    return np.asarray(anchors, np.float32)


@OPS.register("anchor_decode")
class AnchorDecode(PostOp):
    """Decode SSD-style regression against anchors generated from the stated parameters.

    Per anchor (x_a, y_a, w_a, h_a) and raw values (order ``box_order``), in float64:
    ``x = raw_x / x_scale * w_a + x_a``, ``y = raw_y / y_scale * h_a + y_a``, ``w = raw_w / w_scale * w_a``
    (or ``exp(raw_w / w_scale) * w_a`` with ``apply_exp_scaling``), same for h; box = (x - w/2, y - h/2,
    x + w/2, y + h/2). Out: ``detections`` xyxy normalised to the input (float32), scores from ``scores``
    (see ``class_selection``), classes int64 (the score column). No threshold: use ``score_threshold``.
    """

    name = "anchor_decode"
    Params = AnchorDecodeParams
    params: AnchorDecodeParams

    def __init__(self, params: AnchorDecodeParams) -> None:
        super().__init__(params)
        if len(params.strides) != params.num_layers:
            raise OpSpecError(
                "strides",
                f"{len(params.strides)} strides for num_layers {params.num_layers}: give one stride per layer",
            )
        if params.min_scale > params.max_scale:
            raise OpSpecError("min_scale", f"{params.min_scale} is above max_scale {params.max_scale}")
        self.anchors = ssd_anchors(params)

    def decode(self, raw: np.ndarray) -> np.ndarray:
        """(A, R) raw regression -> (A, 4) float64 xyxy normalised."""
        p = self.params
        r = np.asarray(raw, dtype=np.float64)
        tx, ty, tw, th = (
            (r[:, 0], r[:, 1], r[:, 2], r[:, 3]) if p.box_order == "xywh" else (r[:, 1], r[:, 0], r[:, 3], r[:, 2])
        )
        a = self.anchors.astype(np.float64)
        x = tx / p.x_scale * a[:, 2] + a[:, 0]
        y = ty / p.y_scale * a[:, 3] + a[:, 1]
        if p.apply_exp_scaling:
            w, h = np.exp(tw / p.w_scale) * a[:, 2], np.exp(th / p.h_scale) * a[:, 3]
        else:
            w, h = tw / p.w_scale * a[:, 2], th / p.h_scale * a[:, 3]
        return np.stack([x - w / 2.0, y - h / 2.0, x + w / 2.0, y + h / 2.0], axis=1)

    def __call__(self, preds: Predictions) -> Predictions:
        p = self.params
        raw = np.asarray(require_output(self, preds, p.boxes))
        scores = np.asarray(require_output(self, preds, p.scores))
        count = len(self.anchors)
        if raw.ndim != 3 or raw.shape[1] != count or raw.shape[2] < 4:
            raise RepliscopeError(
                f"'anchor_decode': output {p.boxes!r} has shape {raw.shape}, expected (N, {count}, "
                f">=4) for the {count} anchors the parameters generate"
            )
        if scores.ndim == 2:
            scores = scores[:, :, None]
        if scores.ndim != 3 or scores.shape[:2] != raw.shape[:2]:
            raise RepliscopeError(
                f"'anchor_decode': output {p.scores!r} has shape {scores.shape}, expected "
                f"(N, {count}) or (N, {count}, C)"
            )
        rows = []
        for i in range(raw.shape[0]):
            boxes = self.decode(raw[i])
            s = scores[i]
            if p.class_selection == "max":
                cls = np.argmax(s, axis=1).astype(np.int64)
                best = s[np.arange(count), cls]
            else:
                c = s.shape[1]
                boxes, best = np.repeat(boxes, c, axis=0), s.reshape(-1)
                cls = np.tile(np.arange(c, dtype=np.int64), count)
            rows.append(Boxes(boxes.astype(np.float32), best.astype(np.float32), cls, ANCHOR_OUTPUT_FORMAT))
        return with_detections(preds, rows)
