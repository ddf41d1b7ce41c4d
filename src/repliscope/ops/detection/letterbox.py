"""``letterbox``: resize keeping the aspect ratio to fit inside [h, w], then pad to exactly [h, w]."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from repliscope.errors import OpSpecError
from repliscope.ops._common import require_image, spatial_size
from repliscope.ops.base import OPS, Item, OpParams, PreOp, StaticShape
from repliscope.ops.crop import _pad
from repliscope.ops.resize import Method, Resize, ResizeParams

PositiveInt = Annotated[int, Field(gt=0)]


class LetterboxParams(OpParams):
    size: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)]
    """[height, width] of the output."""
    color: Annotated[list[float], Field(min_length=3, max_length=3)]
    """Pad colour [r, g, b] in RGB order (written in the item's channel order: reversed for BGR)."""
    position: Literal["center", "top_left"]
    method: Method
    library: Literal["pillow", "opencv", "torch", "go_imaging"]
    antialias: bool


@OPS.register("letterbox")
class Letterbox(PreOp):
    """Aspect-keeping resize into [h, w] plus padding (YOLO / MediaPipe style letterbox).

    In: HWC or CHW, H x W. Out: same layout and dtype, exactly ``size``.

    - resized size = ``resize`` with ``size: [h, w]``, ``keep_aspect_ratio: true``, ``fit: inside`` (the same
      code, so the same rounding: ``ratio = max(H / h, W / w)``, sides ``round(H / ratio)``, ``round(W /
      ratio)``, Python round) and this op's ``method`` / ``library`` / ``antialias`` (resize's rules).
    - padding: ``position: center`` puts ``(h - nh) // 2`` rows above and the rest below (the odd pixel goes
      to the bottom / right, as Ultralytics' ``round(d - 0.1)``); ``top_left`` pads only below and right.
      Pad value ``color`` given in RGB, per channel in the item's order; for an integer dtype whole numbers
      in the dtype's range.
    - geometry (boxes): scale ``(nh / H, nw / W)`` per axis, then offset ``(top, left)``.
    """

    name = "letterbox"
    Params = LetterboxParams
    params: LetterboxParams

    def __init__(self, params: LetterboxParams) -> None:
        super().__init__(params)
        self.resize = Resize(ResizeParams(size=list(params.size), keep_aspect_ratio=True, fit="inside",
                                          method=params.method, library=params.library, antialias=params.antialias))

    def library(self) -> tuple[str, str]:
        return self.resize.library()

    def static_shape(self, shape: StaticShape) -> StaticShape:
        shape = super().static_shape(shape)
        h, w = self.params.size
        return StaticShape(shape.layout, h, w, min(h, w), shape.channels)

    def padding(self, height: int, width: int) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        """((nh, nw) resized size, (top, bottom), (left, right)) for an H x W input."""
        nh, nw = self.resize.output_size(height, width)
        h, w = self.params.size
        dh, dw = h - nh, w - nw
        if self.params.position == "center":
            return (nh, nw), (dh // 2, dh - dh // 2), (dw // 2, dw - dw // 2)
        return (nh, nw), (0, dh), (0, dw)

    def __call__(self, item: Item) -> Item:
        require_image(self, item)
        if item.channels is None:
            raise OpSpecError("op", "'letterbox' needs the channel order (RGB or BGR) to place the pad colour")
        height, width = spatial_size(item)
        (nh, nw), pad_h, pad_w = self.padding(height, width)
        resized = self.resize(item)
        color = self.params.color if item.channels == "RGB" else self.params.color[::-1]
        if np.issubdtype(item.data.dtype, np.integer):
            info = np.iinfo(item.data.dtype)
            if any(c != round(c) or not info.min <= c <= info.max for c in color):
                raise OpSpecError("color", f"{self.params.color} cannot be stored in a {item.data.dtype} image "
                                  f"(whole numbers in [{info.min}, {info.max}])")
        pads = (pad_h, pad_w, (0, 0)) if item.layout == "HWC" else ((0, 0), pad_h, pad_w)
        out = _pad(resized.data, pads, item.layout, list(color))
        geometry = None
        if item.geometry is not None:
            geometry = item.geometry.then((nh / height, nw / width), (float(pad_h[0]), float(pad_w[0])))
        return item.with_data(np.ascontiguousarray(out), geometry=geometry)
