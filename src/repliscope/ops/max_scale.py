"""``divide_by_max``: divide an image by its own largest value (all channels together), as rembg's U²-Net
sessions do (``im_ary / np.max(im_ary)`` on the resized uint8 image, in float64)."""

from __future__ import annotations

import numpy as np

from repliscope.errors import OpSpecError, SampleError
from repliscope.ops._common import require_image
from repliscope.ops.base import OPS, Item, OpParams, PreOp


class DivideByMaxParams(OpParams):
    pass


@OPS.register("divide_by_max")
class DivideByMax(PreOp):
    """``x / x.max()`` over the whole image (every channel), in the input's float dtype; layout and shape kept.

    Float input only: rembg divides the uint8 array by its uint8 maximum with numpy's true division, which is
    float64 (put ``to_float`` with dtype float64 first to match it). An image whose maximum is 0 (all black)
    is a failed sample (rembg would produce NaN)."""

    name = "divide_by_max"
    Params = DivideByMaxParams
    params: DivideByMaxParams

    def __call__(self, item: Item) -> Item:
        require_image(self, item)
        x = item.data
        if not np.issubdtype(x.dtype, np.floating):
            raise OpSpecError("op", f"'{self.name}' needs float input, got {x.dtype}: put 'to_float' first")
        peak = x.max()
        if not peak > 0:
            raise SampleError(f"'{self.name}': the image's largest value is {peak} (an all-black image)")
        return item.with_data(x / peak)
