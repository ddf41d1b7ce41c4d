"""``darknet_letterbox``: Darknet's ``letterbox_image`` with its own ``resize_image``, ported to numpy float32."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from repliscope.errors import OpSpecError
from repliscope.ops._common import require_image, spatial_size
from repliscope.ops.base import OPS, Item, OpParams, PreOp, StaticShape
from repliscope.ops.limits import check_output_pixels
from repliscope.ops.resize import Method, Resize, ResizeParams

PositiveInt = Annotated[int, Field(gt=0)]


def resize_image(chw: np.ndarray, w: int, h: int) -> np.ndarray:
    """Darknet ``resize_image(im, w, h)`` on float32 (C, H, W), bit for bit (float32 arithmetic, same order).

    Separable: each row is first resized horizontally (``sx = c * (W-1)/(w-1)``, ``ix = (int) sx``,
    ``(1-dx)*p[ix] + dx*p[ix+1]``; the last column copies the last source column), then each output row
    ``r`` is ``(1-dy)*part[iy]`` plus ``dy*part[iy+1]`` added separately (not on the last row). Corners map to
    corners: this is not OpenCV's or Pillow's bilinear.
    """
    im = np.asarray(chw, dtype=np.float32)
    c, ih, iw = im.shape
    f32 = np.float32
    w_scale = f32(iw - 1) / f32(w - 1) if w > 1 else f32(0)
    h_scale = f32(ih - 1) / f32(h - 1) if h > 1 else f32(0)
    part = np.empty((c, ih, w), np.float32)
    cols = np.arange(w)
    sx = cols.astype(np.float32) * w_scale
    ix = sx.astype(np.int64)
    dx = (sx - ix.astype(np.float32)).astype(np.float32)
    inner = cols < w - 1 if iw > 1 else np.zeros(w, bool)
    ixc = np.where(inner, ix, 0)
    ix1 = np.minimum(ixc + 1, iw - 1)
    left = (f32(1) - dx)[None, None, :] * im[:, :, ixc]
    right = dx[None, None, :] * im[:, :, ix1]
    part[:] = np.where(inner[None, None, :], left + right, im[:, :, iw - 1 : iw])
    rows = np.arange(h)
    sy = rows.astype(np.float32) * h_scale
    iy = sy.astype(np.int64)
    dy = (sy - iy.astype(np.float32)).astype(np.float32)
    out = (f32(1) - dy)[None, :, None] * part[:, iy, :]
    add = (rows < h - 1) & (ih > 1)
    iy1 = np.minimum(iy + 1, ih - 1)
    out = np.where(add[None, :, None], out + dy[None, :, None] * part[:, iy1, :], out)
    return out.astype(np.float32)


def letterbox_size(width: int, height: int, net_w: int, net_h: int) -> tuple[int, int]:
    """(new_w, new_h) of ``letterbox_image`` / ``correct_yolo_boxes``: the float comparison and integer division
    Darknet uses (``new_h = (im.h * w) / im.w`` truncates)."""
    if np.float32(net_w) / np.float32(width) < np.float32(net_h) / np.float32(height):
        return net_w, (height * net_w) // width
    return (width * net_h) // height, net_h


class DarknetLetterboxParams(OpParams):
    size: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)]
    """[height, width] of the network input (the cfg's ``[net]`` height, width)."""
    fill: float
    """The border value (Darknet: 0.5, in the [0, 1] range its images have)."""
    keep_aspect_ratio: bool
    """True: ``letterbox_image`` (pjreddie's ``detector test/valid``); false: ``resize_image`` straight to
    ``size`` (a stretch, no border: what AlexeyAB's fork and many ports do; pair it with
    ``darknet_correct_boxes letterbox: false``)."""
    order: Literal["resize_then_pad", "pad_then_resize"] = "resize_then_pad"
    """With ``keep_aspect_ratio``: ``resize_then_pad`` is ``letterbox_image`` (resize the image, embed it in the
    border); ``pad_then_resize`` pads the SOURCE image with ``fill`` to the network's aspect ratio first and
    resizes that canvas with ``resize_image`` (what ports that pad to a square before resizing do). Optional,
    recorded either way; ``resize_then_pad`` is Darknet's own."""
    resize_library: Literal["darknet", "pillow", "opencv", "torch", "go_imaging", "tensorflow"] = "darknet"
    """Optional: ``darknet`` (Darknet's own ``resize_image``), or another library's resampling as the ``resize`` op
    does it, with ``resize_method`` and ``resize_antialias`` (e.g. a port's ``cv2.resize(..., INTER_LINEAR)``:
    ``resize_library: opencv, resize_method: bilinear, resize_antialias: false``)."""
    resize_method: Method = "bilinear"
    """With ``resize_library`` other than darknet: the ``resize`` op's ``method`` (Darknet's own is bilinear)."""
    resize_antialias: bool = False
    """With ``resize_library`` other than darknet: the ``resize`` op's ``antialias`` (Darknet's own has none)."""


@OPS.register("darknet_letterbox")
class DarknetLetterbox(PreOp):
    """Darknet ``letterbox_image(im, w, h)``: keep the aspect ratio (:func:`letterbox_size`), resize with
    Darknet's ``resize_image`` (:func:`resize_image`), centre with ``embed_image`` at ``((w - new_w) / 2,
    (h - new_h) / 2)`` (integer division) on a canvas filled with ``fill``.

    In: float32 HWC or CHW (Darknet: RGB in [0, 1], ``load_image_color``'s ``x / 255.``). Out: same layout,
    float32, exactly ``size``. Geometry: scale (new_h / H, new_w / W), offset (top, left); the ops that undo it
    for Darknet's boxes are ``darknet_correct_boxes`` (``correct_yolo_boxes``).

    ``order: pad_then_resize`` (with ``keep_aspect_ratio``) instead pads the H x W source with ``fill`` to a
    canvas of the network's aspect ratio, (height, width) = ``(round(W * net_h / net_w), W)`` when the image is
    relatively wider (``W * net_h > H * net_w``), else ``(H, round(H * net_w / net_h))`` (Python round), the
    image at ``((canvas_h - H) // 2, (canvas_w - W) // 2)``, then resizes the canvas to the network size with
    ``resize_image``: the border is resampled with the image (its edge pixels mix image and fill) and the
    content lands up to a network pixel from where ``letterbox_image`` puts it. Geometry: offset (top, left),
    then scale (net_h / canvas_h, net_w / canvas_w).

    ``resize_library`` other than ``darknet`` (optional) resamples with the ``resize`` op's code for that library,
    ``resize_method`` and ``resize_antialias`` (same sizes, same border) instead of ``resize_image``: how a port
    that calls ``cv2.resize`` or Pillow differs.
    """

    name = "darknet_letterbox"
    Params = DarknetLetterboxParams
    params: DarknetLetterboxParams

    def __init__(self, params: DarknetLetterboxParams) -> None:
        super().__init__(params)
        if params.order == "pad_then_resize" and not params.keep_aspect_ratio:
            raise OpSpecError(
                "order",
                "pad_then_resize only applies with keep_aspect_ratio: true (a stretch has no border); remove it",
                ["resize_then_pad", "pad_then_resize"],
            )
        if params.resize_library == "darknet":
            if (params.resize_method, params.resize_antialias) != ("bilinear", False):
                raise OpSpecError(
                    "resize_method",
                    "Darknet's resize_image is bilinear without antialiasing: resize_method and resize_antialias "
                    "apply to another resize_library",
                    ["bilinear"],
                )
        else:  # the library / method / antialias combination, checked as resize checks it
            self._resize(1, 1)

    def _resize(self, w: int, h: int) -> Resize:
        p = self.params
        return Resize(
            ResizeParams(
                size=[h, w],
                keep_aspect_ratio=False,
                method=p.resize_method,
                library=p.resize_library,  # type: ignore[arg-type]  # not darknet: checked by the caller
                antialias=p.resize_antialias,
            )
        )

    def _resample(self, chw: np.ndarray, w: int, h: int) -> np.ndarray:
        """float32 (C, H, W) resized to (C, h, w): Darknet's ``resize_image``, or the ``resize`` op of
        ``resize_library``."""
        if self.params.resize_library == "darknet":
            return resize_image(chw, w, h)
        out = self._resize(w, h)(Item(np.ascontiguousarray(chw), "CHW", "RGB")).data
        return out.astype(np.float32, copy=False)

    def library(self) -> tuple[str, str]:
        if self.params.resize_library != "darknet":
            lib, version = self._resize(1, 1).library()
            return f"darknet letterbox (numpy) resampled by {lib}", version
        return "darknet (numpy port of image.c letterbox_image/resize_image)", np.__version__

    def static_shape(self, shape: StaticShape) -> StaticShape:
        shape = super().static_shape(shape)
        h, w = self.params.size
        return StaticShape(shape.layout, h, w, min(h, w), shape.channels)

    def __call__(self, item: Item) -> Item:
        require_image(self, item)
        if item.data.dtype != np.float32:
            raise OpSpecError(
                "op",
                f"'darknet_letterbox' works on float32 images as Darknet does (got "
                f"{item.data.dtype}): put 'to_float' and 'divide_std 255' before it",
            )
        height, width = spatial_size(item)
        net_h, net_w = self.params.size
        keep = self.params.keep_aspect_ratio
        if keep and self.params.order == "pad_then_resize":
            return self._pad_then_resize(item, height, width)
        new_w, new_h = letterbox_size(width, height, net_w, net_h) if keep else (net_w, net_h)
        chw = item.data if item.layout == "CHW" else np.transpose(item.data, (2, 0, 1))
        resized = self._resample(chw, new_w, new_h)
        canvas = np.full((chw.shape[0], net_h, net_w), np.float32(self.params.fill), np.float32)
        top, left = (net_h - new_h) // 2, (net_w - new_w) // 2
        canvas[:, top : top + new_h, left : left + new_w] = resized
        out = canvas if item.layout == "CHW" else np.ascontiguousarray(np.transpose(canvas, (1, 2, 0)))
        geometry = (
            None
            if item.geometry is None
            else item.geometry.then((new_h / height, new_w / width), (float(top), float(left)))
        )
        return item.with_data(out, geometry=geometry)

    def _pad_then_resize(self, item: Item, height: int, width: int) -> Item:
        """``order: pad_then_resize``: the source padded to the network's aspect ratio, then ``resize_image``."""
        net_h, net_w = self.params.size
        if width * net_h > height * net_w:
            canvas_h, canvas_w = round(width * net_h / net_w), width
        else:
            canvas_h, canvas_w = height, round(height * net_w / net_h)
        check_output_pixels(canvas_h, canvas_w, self.name)
        top, left = (canvas_h - height) // 2, (canvas_w - width) // 2
        chw = item.data if item.layout == "CHW" else np.transpose(item.data, (2, 0, 1))
        canvas = np.full((chw.shape[0], canvas_h, canvas_w), np.float32(self.params.fill), np.float32)
        canvas[:, top : top + height, left : left + width] = chw
        resized = self._resample(canvas, net_w, net_h)
        out = resized if item.layout == "CHW" else np.ascontiguousarray(np.transpose(resized, (1, 2, 0)))
        geometry = (
            None
            if item.geometry is None
            else item.geometry.then((1.0, 1.0), (float(top), float(left))).then((net_h / canvas_h, net_w / canvas_w))
        )
        return item.with_data(out, geometry=geometry)
