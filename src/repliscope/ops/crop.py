"""``center_crop``: the central window of an image, padded (zeros or ``fill``) when the image is smaller."""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field

from repliscope.errors import OpSpecError
from repliscope.ops._common import require_image, spatial_size
from repliscope.ops.base import OPS, Item, OpParams, PreOp, StaticShape
from repliscope.ops.limits import check_output_pixels

PositiveInt = Annotated[int, Field(gt=0)]


class CenterCropParams(OpParams):
    size: PositiveInt | Annotated[list[PositiveInt], Field(min_length=2, max_length=2)] | None = None
    """int: a square side; [height, width]. Give exactly one of ``size`` and ``fraction``."""
    fraction: Annotated[float, Field(gt=0, le=1)] | None = None
    """Square crop whose side is this fraction of the shorter image side, e.g. 0.875."""
    fill: float | Annotated[list[float], Field(min_length=1)] | None = None
    """Pad value for an image smaller than the crop: one number, or one per channel in the image's channel
    order (timm ``CenterCropOrPad(fill=...)``). Giving it declares the padding intended (see static_shape)."""
    offset: Annotated[list[int], Field(min_length=2, max_length=2)] | None = None
    """[rows, columns] added to the centred window's top and left (a crop box off by a pixel or two, e.g. a
    port's ``//`` where torchvision rounds). Optional; the moved window must stay inside the image."""


@OPS.register("center_crop")
class CenterCrop(PreOp):
    """Crop the centre, following torchvision's ``center_crop``.

    In: HWC or CHW, any dtype. Out: same layout and dtype, (h, w) spatial size, a contiguous copy.

    - crop size: ``size`` as given, or with ``fraction`` a square of side ``round(fraction * min(H, W))``
      (Python round, half to even).
    - offsets: ``top = int(round((H - h) / 2.0))``, ``left = int(round((W - w) / 2.0))`` (torchvision's rule;
      Python round is half to even, so an odd difference of 1 gives 0, 3 gives 2, 5 gives 2, 117 gives 58).
      This equals ``(H - h) // 2`` except when ``H - h`` is 3 mod 4, where it is one more.
    - an image smaller than the crop is first padded like torchvision / timm ``center_crop_or_pad``:
      ``(h - H) // 2`` rows before and ``(h - H + 1) // 2`` after (same for columns) with ``fill`` (per channel
      when a list; for an integer dtype each value must be a whole number in the dtype's range), zeros
      without it; the crop is then the whole padded axis.
    - ``offset: [dy, dx]`` moves the window by dy rows and dx columns from there (an error naming ``offset`` when
      it would leave the image).
    - geometry (boxes): shifted by ``(pad_top - top, pad_left - left)`` pixels, scale unchanged.
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
        """Fixed output size (``size``, or ``fraction`` of a known shorter side). Without ``fill``, a crop larger
        than the image it gets (known from a preceding resize) is refused: it would be zero-padded, never what
        a reference evaluation does by accident; with ``fill`` padding is intended (timm's 'border' mode)."""
        shape = super().static_shape(shape)
        if self.params.fill is not None:
            if (
                isinstance(self.params.fill, list)
                and shape.channels is not None
                and len(self.params.fill) != shape.channels
            ):
                raise OpSpecError("fill", f"{len(self.params.fill)} values for {shape.channels} channels")
            if self.params.size is not None:  # padding is intended: the size is fixed whatever the image
                ch, cw = self.crop_size(0, 0)
                return StaticShape(shape.layout, ch, cw, min(ch, cw), shape.channels)
        if self.params.size is None and shape.min_side is None:
            return StaticShape(shape.layout, channels=shape.channels)
        ch, cw = self.crop_size(shape.height or shape.min_side or 0, shape.width or shape.min_side or 0)
        limit_h = shape.height if shape.height is not None else shape.min_side
        limit_w = shape.width if shape.width is not None else shape.min_side
        if (limit_h is not None and ch > limit_h) or (limit_w is not None and cw > limit_w):
            got = (
                f"{shape.height}x{shape.width}"
                if shape.height is not None and shape.width is not None
                else f"one with shorter side {shape.min_side}"
            )
            raise OpSpecError(
                "size",
                f"crop {ch}x{cw} is larger than the image it gets ({got}, from the "
                "resize before it): it would be zero-padded. Resize to at least the crop size",
            )
        return StaticShape(shape.layout, ch, cw, min(ch, cw), shape.channels)

    def __call__(self, item: Item) -> Item:
        require_image(self, item)
        height, width = spatial_size(item)
        ch, cw = self.crop_size(height, width)
        check_output_pixels(ch, cw, self.name)  # a padded crop allocates ch x cw
        data = item.data
        pad_top = pad_left = 0
        if ch > height or cw > width:
            pad_h = ((ch - height) // 2, (ch - height + 1) // 2) if ch > height else (0, 0)
            pad_w = ((cw - width) // 2, (cw - width + 1) // 2) if cw > width else (0, 0)
            pads = (pad_h, pad_w, (0, 0)) if item.layout == "HWC" else ((0, 0), pad_h, pad_w)
            data = _pad(data, pads, item.layout, self.params.fill)
            height, width = height + sum(pad_h), width + sum(pad_w)
            pad_top, pad_left = pad_h[0], pad_w[0]
        top = round((height - ch) / 2.0)  # torchvision: int(round(...))
        left = round((width - cw) / 2.0)
        if self.params.offset is not None:
            dy, dx = self.params.offset
            if not (0 <= top + dy <= height - ch and 0 <= left + dx <= width - cw):
                raise OpSpecError(
                    "offset",
                    f"{self.params.offset} moves the {ch}x{cw} window of a {height}x{width} image outside it "
                    f"(rows {top + dy}..{top + dy + ch}, columns {left + dx}..{left + dx + cw})",
                )
            top, left = top + dy, left + dx
        if item.layout == "HWC":
            out = data[top : top + ch, left : left + cw, :]
        else:
            out = data[:, top : top + ch, left : left + cw]
        geometry = None if item.geometry is None else item.geometry.then((1.0, 1.0), (pad_top - top, pad_left - left))
        return item.with_data(np.ascontiguousarray(out), geometry=geometry)


def _pad(
    data: np.ndarray, pads: tuple[tuple[int, int], ...], layout: str, fill: float | list[float] | None
) -> np.ndarray:
    """``data`` padded by ``pads`` (per axis) with ``fill`` (None: zeros; a list: one value per channel)."""
    values = np.atleast_1d(np.asarray(0 if fill is None else fill, dtype=np.float64))
    caxis = 2 if layout == "HWC" else 0
    if values.size not in (1, data.shape[caxis]):
        raise OpSpecError("fill", f"{values.size} values for an image with {data.shape[caxis]} channels")
    if np.issubdtype(data.dtype, np.integer):
        info = np.iinfo(data.dtype)
        if np.any(values != np.round(values)) or values.min() < info.min or values.max() > info.max:
            raise OpSpecError(
                "fill", f"{fill} cannot be stored in a {data.dtype} image (whole numbers in [{info.min}, {info.max}])"
            )
    shape = [n + a + b for n, (a, b) in zip(data.shape, pads, strict=True)]
    out = np.empty(shape, data.dtype)
    out[...] = values.astype(data.dtype).reshape([-1 if i == caxis else 1 for i in range(3)])
    inner = tuple(slice(a, a + n) for n, (a, _) in zip(data.shape, pads, strict=True))
    out[inner] = data
    return out
