"""``color_layout``: RGB <-> BGR channel order."""

from __future__ import annotations

import numpy as np

from repliscope.errors import OpSpecError
from repliscope.ops._common import require_image
from repliscope.ops.base import OPS, Channels, Item, OpParams, PreOp


class ColorLayoutParams(OpParams):
    order: Channels
    """Channel order wanted after this op."""


@OPS.register("color_layout")
class ColorLayout(PreOp):
    """Put the channel axis in ``order``: reverses it when ``item.channels`` differs, else passes through.

    In: HWC or CHW, any dtype, ``channels`` set by ``decode``. Out: same shape, dtype and layout, values of
    the channel axis reversed (contiguous copy), ``channels=order``.
    """

    name = "color_layout"
    Params = ColorLayoutParams
    params: ColorLayoutParams

    def __call__(self, item: Item) -> Item:
        axis = require_image(self, item)
        if item.channels is None:
            raise OpSpecError("op", "'color_layout' needs the current channel order: put 'decode' first")
        if item.channels == self.params.order:
            return item
        flipped = np.flip(item.data, axis=axis)
        return item.with_data(np.ascontiguousarray(flipped), channels=self.params.order)
