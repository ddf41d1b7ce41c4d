"""``data_layout``: HWC <-> CHW per sample (NHWC / NCHW once batched)."""

from __future__ import annotations

from typing import Literal

import numpy as np

from repliscope.ops._common import require_image
from repliscope.ops.base import OPS, Item, OpParams, PreOp


class DataLayoutParams(OpParams):
    layout: Literal["NCHW", "NHWC"]
    """Batch layout wanted; each sample becomes CHW (for NCHW) or HWC (for NHWC)."""


@OPS.register("data_layout")
class DataLayout(PreOp):
    """Transpose one sample to the layout whose batch form is ``layout``.

    In: HWC or CHW, any dtype. Out: CHW (``NCHW``) or HWC (``NHWC``), same dtype, a contiguous copy of the
    transposed values (``Pipeline.batch`` then stacks samples along a new axis 0).
    """

    name = "data_layout"
    Params = DataLayoutParams
    params: DataLayoutParams

    def __call__(self, item: Item) -> Item:
        require_image(self, item)
        target = "CHW" if self.params.layout == "NCHW" else "HWC"
        if item.layout == target:
            return item
        axes = (2, 0, 1) if target == "CHW" else (1, 2, 0)
        return item.with_data(np.ascontiguousarray(item.data.transpose(axes)), layout=target)


class ReshapeLayoutParams(OpParams):
    layout: Literal["NCHW", "NHWC"]
    """Batch layout the buggy code believes it produces."""


@OPS.register("reshape_layout")
class ReshapeLayout(PreOp):
    """THE CLASSIC BUG, as an op: reinterpret the buffer in the target layout's shape without moving data.

    In: HWC (or CHW), any dtype. Out: the same memory read as CHW (``NCHW``) or HWC (``NHWC``), i.e.
    ``data.reshape(C, H, W)`` of an HWC buffer. Values land in the wrong places; the shape looks right.
    Exists so the pitfall sweep (and a manifest reproducing a bug) can express it; never use it on purpose.
    """

    name = "reshape_layout"
    Params = ReshapeLayoutParams
    params: ReshapeLayoutParams

    def __call__(self, item: Item) -> Item:
        require_image(self, item)
        target = "CHW" if self.params.layout == "NCHW" else "HWC"
        if item.layout == target:
            return item
        data = np.ascontiguousarray(item.data)
        if item.layout == "HWC":
            h, w, c = data.shape
            out = data.reshape(c, h, w)
        else:
            c, h, w = data.shape
            out = data.reshape(h, w, c)
        return item.with_data(out.copy(), layout=target)
