"""``darknet_boxes``: Darknet's detections -> one box per (detection, class), as ``print_cocos`` writes them."""

from __future__ import annotations

import numpy as np

from repliscope.errors import RepliscopeError
from repliscope.ops.base import OPS, Boxes, BoxFormat, OpParams, PostOp, Predictions
from repliscope.ops.darknet._dets import require_darknet
from repliscope.ops.detection._common import with_detections


class DarknetBoxesParams(OpParams):
    clip: bool
    """Clip to the image as ``print_cocos`` does (``xmin < 0 -> 0``, ``xmax > w -> w``)."""


@OPS.register("darknet_boxes")
class DarknetBoxes(PostOp):
    """``print_cocos`` (``detector valid`` with ``eval=coco``): ``xmin = x - w/2.`` etc. computed in double and
    stored float32, clipped to [0, W] x [0, H]; every class with a non-zero probability is one detection (same
    box, score = that probability), in Darknet's array order then class order. In: pixel cx, cy, w, h of the
    source (``darknet_correct_boxes relative: false``). Out: xyxy 0-based pixels of the source image, classes
    0..C-1 (then ``class_map coco80_to_91`` = Darknet's ``coco_ids``)."""

    name = "darknet_boxes"
    Params = DarknetBoxesParams
    params: DarknetBoxesParams

    def __call__(self, preds: Predictions) -> Predictions:
        out = []
        for i, d in enumerate(require_darknet(self, preds)):
            if d.format.space != "source" or d.format.normalized:
                raise RepliscopeError(
                    "'darknet_boxes' needs source-image pixels: put 'darknet_correct_boxes' "
                    "with relative: false before it"
                )
            b = d.boxes.astype(np.float64)
            x1 = (b[:, 0] - b[:, 2] / 2.0).astype(np.float32)
            x2 = (b[:, 0] + b[:, 2] / 2.0).astype(np.float32)
            y1 = (b[:, 1] - b[:, 3] / 2.0).astype(np.float32)
            y2 = (b[:, 1] + b[:, 3] / 2.0).astype(np.float32)
            if self.params.clip:
                geo = preds.geometry[i] if i < len(preds.geometry) else None
                if geo is None:
                    raise RepliscopeError("'darknet_boxes' clip needs each image's source size")
                h, w = geo.source_hw
                x1, y1 = np.maximum(x1, np.float32(0)), np.maximum(y1, np.float32(0))
                x2, y2 = np.minimum(x2, np.float32(w)), np.minimum(y2, np.float32(h))
            det, cls = np.nonzero(d.probs)
            xyxy = np.stack([x1, y1, x2, y2], axis=1)[det].astype(np.float32)
            out.append(
                Boxes(
                    xyxy,
                    d.probs[det, cls].astype(np.float32),
                    cls.astype(np.int64),
                    BoxFormat("xyxy", False, False, "source"),
                )
            )
        return with_detections(preds, out)
