"""``yolo_anchor_free_decode``: the anchor-free YOLOv5u/v8-style head of today's exports, ``[N, 4 + C, A]``."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from repliscope.errors import RepliscopeError
from repliscope.ops.base import OPS, Boxes, BoxFormat, OpParams, PostOp, Predictions
from repliscope.ops.detection._common import require_output, with_detections


class AnchorFreeDecodeParams(OpParams):
    output: str
    """The head's output: float (N, 4 + C, A), rows cx, cy, w, h in model-input pixels then C class scores (already
    sigmoid; no objectness)."""
    classes: Annotated[int, Field(gt=0)]
    threshold: float
    """A prediction is kept when its best class score passes it (Ultralytics ``conf``)."""
    keep: Literal["ge", "gt"]
    """``ge`` (``score >= threshold``) or ``gt``."""
    class_selection: Literal["max", "all"]
    """``max``: one detection per prediction, its best class (argmax; ties to the lower class); ``all``: every class
    passing the threshold (Ultralytics ``multi_label``)."""


@OPS.register("yolo_anchor_free_decode")
class YoloAnchorFreeDecode(PostOp):
    """Read ``[N, 4 + C, A]``: per prediction ``a`` the box (cx, cy, w, h) in input pixels and C scores; keep those
    whose score passes ``threshold``. Out: ``detections`` as cxcywh input pixels (then ``box_format`` to xyxy,
    ``to_source``, ``nms``), in prediction order; classes are the model's 0..C-1."""

    name = "yolo_anchor_free_decode"
    Params = AnchorFreeDecodeParams
    params: AnchorFreeDecodeParams

    def __call__(self, preds: Predictions) -> Predictions:
        out = np.asarray(require_output(self, preds, self.params.output), dtype=np.float32)
        c = self.params.classes
        if out.ndim != 3 or out.shape[1] != 4 + c:
            raise RepliscopeError(
                f"'yolo_anchor_free_decode': output {self.params.output!r} has shape {out.shape}, "
                f"expected (N, 4 + {c}, A)"
            )
        fmt = BoxFormat("cxcywh", False, False, "input")
        dets = []
        for row in out:
            boxes, scores = row[:4].T, row[4:].T  # (A, 4), (A, C)
            passed = scores >= self.params.threshold if self.params.keep == "ge" else scores > self.params.threshold
            if self.params.class_selection == "max":
                cls = np.argmax(scores, axis=1)
                idx = np.nonzero(passed[np.arange(len(cls)), cls])[0]
                cls = cls[idx]
            else:
                idx, cls = np.nonzero(passed)
            dets.append(
                Boxes(np.ascontiguousarray(boxes[idx]), scores[idx, cls].astype(np.float32), cls.astype(np.int64), fmt)
            )
        return with_detections(preds, dets)
