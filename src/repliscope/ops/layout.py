"""``data_layout``: HWC <-> CHW per sample (NHWC / NCHW once batched)."""

from __future__ import annotations

from typing import Literal

import numpy as np

from repliscope.ops._common import require_image
from repliscope.ops.base import OPS, Item, OpParams, PreOp, StaticShape


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

    def static_shape(self, shape: StaticShape) -> StaticShape:
        shape = super().static_shape(shape)
        return StaticShape(
            "CHW" if self.params.layout == "NCHW" else "HWC", shape.height, shape.width, shape.min_side, shape.channels
        )

    def __call__(self, item: Item) -> Item:
        require_image(self, item)
        target = "CHW" if self.params.layout == "NCHW" else "HWC"
        if item.layout == target:
            return item
        return item.with_data(self._move(item.data, target), layout=target)

    def _move(self, data: np.ndarray, target: str) -> np.ndarray:
        axes = (2, 0, 1) if target == "CHW" else (1, 2, 0)
        return np.ascontiguousarray(data.transpose(axes))


@OPS.register("reshape_layout")
class ReshapeLayout(DataLayout):
    """THE CLASSIC BUG, as an op: reinterpret the buffer in the target layout's shape without moving data.

    In: HWC (or CHW), any dtype. Out: the same memory read as CHW (``NCHW``) or HWC (``NHWC``), i.e.
    ``data.reshape(C, H, W)`` of an HWC buffer. Values land in the wrong places; the shape looks right.
    Exists so the pitfall sweep (and a manifest reproducing a bug) can express it; never use it on purpose.
    """

    name = "reshape_layout"

    def _move(self, data: np.ndarray, target: str) -> np.ndarray:
        a, b, c = data.shape  # HWC -> read as (c, a, b); CHW -> read as (b, c, a)
        shape = (c, a, b) if target == "CHW" else (b, c, a)
        return np.ascontiguousarray(data).reshape(shape).copy()
