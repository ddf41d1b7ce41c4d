"""Processing ops: importing this package registers every op in :data:`repliscope.ops.base.OPS`.

Needs only numpy and Pillow; OpenCV and PyTorch are imported when an op using them runs.
"""

from repliscope.ops import (
    classify,
    color,
    crop,
    darknet,
    decode,
    detection,
    dtype,
    layout,
    max_scale,
    normalize,
    resize,
    segmentation,
)
from repliscope.ops.base import OPS, BuildContext, Item, Op, OpParams, PostOp, Predictions, PreOp
from repliscope.ops.pipeline import Pipeline, build_op, decode_input, op_names

__all__ = [
    "OPS",
    "BuildContext",
    "Item",
    "Op",
    "OpParams",
    "Pipeline",
    "PostOp",
    "PreOp",
    "Predictions",
    "build_op",
    "classify",
    "color",
    "crop",
    "darknet",
    "decode",
    "decode_input",
    "detection",
    "dtype",
    "layout",
    "max_scale",
    "normalize",
    "op_names",
    "resize",
    "segmentation",
]
