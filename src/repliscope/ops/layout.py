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
