"""``center_crop``: the central window of an image, zero-padded when the image is smaller."""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field

from repliscope.errors import OpSpecError
from repliscope.ops._common import require_image, spatial_size
from repliscope.ops.base import OPS, Item, OpParams, PreOp, StaticShape

PositiveInt = Annotated[int, Field(gt=0)]


class CenterCropParams(OpParams):
    size: PositiveInt | Annotated[list[PositiveInt], Field(min_length=2, max_length=2)] | None = None
    """int: a square side; [height, width]. Give exactly one of ``size`` and ``fraction``."""
    fraction: Annotated[float, Field(gt=0, le=1)] | None = None
    """Square crop whose side is this fraction of the shorter image side, e.g. 0.875."""


@OPS.register("center_crop")
class CenterCrop(PreOp):
    """Crop the centre, following torchvision's ``center_crop``.

    In: HWC or CHW, any dtype. Out: same layout and dtype, (h, w) spatial size, a contiguous copy.

    - crop size: ``size`` as given, or with ``fraction`` a square of side ``round(fraction * min(H, W))``
      (Python round, half to even).
    - offsets: ``top = int(round((H - h) / 2.0))``, ``left = int(round((W - w) / 2.0))`` (torchvision's rule;
      Python round is half to even, so an odd difference of 1 gives 0, 3 gives 2, 5 gives 2, 117 gives 58).
      This equals ``(H - h) // 2`` except when ``H - h`` is 3 mod 4, where it is one more.
    - an image smaller than the crop is first zero-padded like torchvision: ``(h - H) // 2`` rows before
      and ``(h - H + 1) // 2`` after (same for columns); the crop is then the whole padded image.
    """

    name = "center_crop"
    Params = CenterCropParams
    params: CenterCropParams

    def __init__(self, params: CenterCropParams) -> None:
        super().__init__(params)
        if (params.size is None) == (params.fraction is None):
            raise OpSpecError("size", "give exactly one of size and fraction", allowed=("fraction", "size"))

    def crop_size(self, height: int, width: int) -> tuple[int, int]:
        """(h, w) of the crop for an input of (height, width)."""
        size, fraction = self.params.size, self.params.fraction
        if isinstance(size, list):
            return size[0], size[1]
        if size is not None:
            return size, size
        assert fraction is not None
        side = max(1, round(fraction * min(height, width)))
        return side, side

    def static_shape(self, shape: StaticShape) -> StaticShape:
        """Fixed output size (``size``, or ``fraction`` of a known shorter side). A crop larger than the image
        it gets (known from a preceding resize) is refused: it would be zero-padded, never what a reference
        evaluation does."""
        shape = super().static_shape(shape)
        if self.params.size is None and shape.min_side is None:
            return StaticShape(shape.layout, channels=shape.channels)
        ch, cw = self.crop_size(shape.height or shape.min_side or 0, shape.width or shape.min_side or 0)
        limit_h = shape.height if shape.height is not None else shape.min_side
        limit_w = shape.width if shape.width is not None else shape.min_side
        if (limit_h is not None and ch > limit_h) or (limit_w is not None and cw > limit_w):
            got = (f"{shape.height}x{shape.width}" if shape.height is not None and shape.width is not None
                   else f"one with shorter side {shape.min_side}")
            raise OpSpecError("size", f"crop {ch}x{cw} is larger than the image it gets ({got}, from the "
                              "resize before it): it would be zero-padded. Resize to at least the crop size")
        return StaticShape(shape.layout, ch, cw, min(ch, cw), shape.channels)

    def __call__(self, item: Item) -> Item:
        require_image(self, item)
        height, width = spatial_size(item)
        ch, cw = self.crop_size(height, width)
        data = item.data
        if ch > height or cw > width:
            pad_h = ((ch - height) // 2, (ch - height + 1) // 2) if ch > height else (0, 0)
            pad_w = ((cw - width) // 2, (cw - width + 1) // 2) if cw > width else (0, 0)
            pads = (pad_h, pad_w, (0, 0)) if item.layout == "HWC" else ((0, 0), pad_h, pad_w)
            data = np.pad(data, pads, mode="constant", constant_values=0)
            height, width = height + sum(pad_h), width + sum(pad_w)
        top = round((height - ch) / 2.0)  # torchvision: int(round(...))
        left = round((width - cw) / 2.0)
        if item.layout == "HWC":
            out = data[top : top + ch, left : left + cw, :]
        else:
            out = data[:, top : top + ch, left : left + cw]
        return item.with_data(np.ascontiguousarray(out))
