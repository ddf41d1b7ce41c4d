"""``yolo_decode``: the YOLOv3 head as Darknet's ``get_yolo_detections`` reads its yolo layers."""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field

from repliscope.errors import RepliscopeError
from repliscope.ops.base import OPS, BoxFormat, OpParams, PostOp, Predictions
from repliscope.ops.darknet._dets import DarknetDetections
from repliscope.ops.detection._common import require_output, with_detections

PositiveInt = Annotated[int, Field(gt=0)]


class YoloDecodeParams(OpParams):
    outputs: Annotated[list[str], Field(min_length=1)]
    """The yolo layers' outputs (N, A*(5+C), H, W), in the network's layer order (Darknet's detection order)."""
    masks: list[list[int]]
    """Per output, the anchor indices it predicts (the cfg's ``mask``)."""
    anchors: Annotated[list[Annotated[list[PositiveInt], Field(min_length=2, max_length=2)]], Field(min_length=1)]
    """Every anchor [w, h] in network-input pixels (the cfg's ``anchors``)."""
    classes: PositiveInt
    input_size: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)]
    """[height, width] of the network input (``net->h``, ``net->w``)."""
    threshold: Annotated[float, Field(ge=0)]
    """Darknet's ``thresh``: a box is kept when objectness > threshold, a class when its probability is
    (``detector valid``: 0.005; ``detector test``: 0.25; the Python example: 0.5)."""
    activated: bool
    """True: x, y, objectness and classes are already logistic (Darknet's yolo layer output, and the ONNX
    conversion's); false: apply the logistic here (a raw head)."""
    multiply_objectness: bool
    """True (Darknet): probability = objectness x class probability; false is the pitfall of scoring classes alone."""


@OPS.register("yolo_decode")
class YoloDecode(PostOp):
    """Darknet ``get_yolo_detections`` for each output, concatenated in order; cells row-major, then anchors.

    Per kept cell/anchor (objectness > threshold): ``x = (col + sx) / W``, ``y = (row + sy) / H`` (float32),
    ``w = exp(tw) * anchor_w / net_w``, ``h = exp(th) * anchor_h / net_h`` (computed in double as C's ``exp``,
    stored float32), ``prob[k] = objectness * class_k`` kept when > threshold else 0. Out: per image
    :class:`DarknetDetections`, boxes cx, cy, w, h normalised to the network input (before
    ``darknet_correct_boxes``).
    """

    name = "yolo_decode"
    Params = YoloDecodeParams
    params: YoloDecodeParams

    def __init__(self, params: YoloDecodeParams) -> None:
        super().__init__(params)
        if len(params.masks) != len(params.outputs):
            raise RepliscopeError(f"'yolo_decode': {len(params.outputs)} outputs but {len(params.masks)} masks")
        bad = [m for mask in params.masks for m in mask if not 0 <= m < len(params.anchors)]
        if bad:
            raise RepliscopeError(f"'yolo_decode': mask indices {bad} outside the {len(params.anchors)} anchors")

    def decode_one(self, outputs: list[np.ndarray]) -> DarknetDetections:
        p = self.params
        net_h, net_w = p.input_size
        thresh = np.float32(p.threshold)
        boxes, objs, probs = [], [], []
        for out, mask in zip(outputs, p.masks, strict=True):
            a = len(mask)
            _, lh, lw = out.shape
            if out.shape[0] != a * (5 + p.classes):
                raise RepliscopeError(
                    f"'yolo_decode': an output has {out.shape[0]} channels, mask {mask} x (5 + "
                    f"{p.classes}) = {a * (5 + p.classes)}"
                )
            x = out.reshape(a, 5 + p.classes, lh * lw).astype(np.float32)
            if not p.activated:
                x = x.copy()
                x[:, [0, 1]] = 1 / (1 + np.exp(-x[:, [0, 1]]))
                x[:, 4:] = 1 / (1 + np.exp(-x[:, 4:]))
            flat = np.transpose(x, (2, 0, 1)).reshape(lh * lw * a, 5 + p.classes)  # cell-major, then anchor
            keep = flat[:, 4] > thresh
            cell = np.repeat(np.arange(lh * lw), a)[keep]
            anchor = np.tile(np.asarray(mask), lh * lw)[keep]
            k = flat[keep]
            col = (cell % lw).astype(np.float32)
            row = (cell // lw).astype(np.float32)
            bx = (col + k[:, 0]) / np.float32(lw)
            by = (row + k[:, 1]) / np.float32(lh)
            aw = np.asarray([p.anchors[m][0] for m in anchor], np.float32)
            ah = np.asarray([p.anchors[m][1] for m in anchor], np.float32)
            bw = (np.exp(k[:, 2].astype(np.float64)) * aw.astype(np.float64) / net_w).astype(np.float32)
            bh = (np.exp(k[:, 3].astype(np.float64)) * ah.astype(np.float64) / net_h).astype(np.float32)
            o = k[:, 4]
            cls = k[:, 5:]
            prob = (o[:, None] * cls).astype(np.float32) if p.multiply_objectness else cls.astype(np.float32)
            probs.append(np.where(prob > thresh, prob, np.float32(0)).astype(np.float32))
            boxes.append(np.stack([bx, by, bw, bh], axis=1).astype(np.float32))
            objs.append(o.astype(np.float32))
        b = np.concatenate(boxes) if boxes else np.zeros((0, 4), np.float32)
        o = np.concatenate(objs)
        return DarknetDetections(
            b,
            o,
            np.full(len(o), -1, np.int64),
            BoxFormat("cxcywh", True, False, "input"),
            np.concatenate(probs),
            o.copy(),
        )

    def __call__(self, preds: Predictions) -> Predictions:
        arrays = [require_output(self, preds, name) for name in self.params.outputs]
        n = arrays[0].shape[0]
        dets = [self.decode_one([a[i] for a in arrays]) for i in range(n)]
        return with_detections(preds, list(dets))
