"""``warp_resize``: the whole image stretched onto the model input by a corner-aligned perspective warp, as
MediaPipe's ``ImageToTensorCalculator`` does it on CPU (``image_to_tensor_converter_opencv.cc``)."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from repliscope.errors import OpSpecError
from repliscope.ops._common import require_image, spatial_size
from repliscope.ops.base import OPS, Item, OpParams, PreOp, StaticShape

PositiveInt = Annotated[int, Field(gt=0)]
OPENCV4_PORT = "OpenCV 4.x warpPerspective INTER_LINEAR (WarpPerspectiveInvoker + remapBilinear), numpy port"
INTER_BITS = 5
INTER_TAB_SIZE = 1 << INTER_BITS
COEF_BITS = 15


def warp_perspective_opencv4(
    image: np.ndarray, matrix: np.ndarray, size_hw: tuple[int, int], border: str, border_value: int
) -> np.ndarray:
    """``cv2.warpPerspective(image, matrix, (w, h), INTER_LINEAR, border)`` as OpenCV 4.x computes it, for an
    HxWxC (or HxW) uint8 array, rounded and saturated as OpenCV does.

    The inverse matrix (``cv::invert``, LU, double); per destination pixel, in 64-pixel-wide blocks as
    ``WarpPerspectiveInvoker`` walks them, ``X = cvRound((M0 * x0 + M1 * y + M2 + M0 * x1) * 32 / W)`` (round half to
    even) and the same for Y; source pixel ``X >> 5``, fraction ``X & 31``; bilinear weights in 1/32768
    (``initInterTab2D``: exact for INTER_LINEAR), ``(sum + 2**14) >> 15``; neighbours outside the image read the
    border (constant value, or replicated edge)."""
    import cv2

    if image.dtype != np.uint8:
        raise OpSpecError(
            "library",
            f"opencv4_numpy warps uint8 images, got {image.dtype}: put warp_resize before to_float",
            ["opencv"],
        )
    h_out, w_out = size_hw
    h_in, w_in = image.shape[:2]
    ok, inv = cv2.invert(np.asarray(matrix, np.float64), flags=cv2.DECOMP_LU)
    m = inv.ravel() if ok else np.zeros(9)
    bh0 = min(32 // 2, h_out)
    bw0 = min(32 * 32 // bh0, w_out)
    xs = np.arange(w_out)
    x0 = (xs // bw0) * bw0
    x1 = (xs - x0).astype(np.float64)
    ys = np.arange(h_out, dtype=np.float64)[:, None]
    x0f = x0.astype(np.float64)[None, :]
    big_x = m[0] * x0f + m[1] * ys + m[2]
    big_y = m[3] * x0f + m[4] * ys + m[5]
    big_w = m[6] * x0f + m[7] * ys + m[8]
    w = big_w + m[6] * x1[None, :]
    with np.errstate(divide="ignore"):
        w = np.where(w != 0, INTER_TAB_SIZE / np.where(w != 0, w, 1.0), 0.0)
    limit = (float(np.iinfo(np.int32).min), float(np.iinfo(np.int32).max))
    fx = np.clip((big_x + m[0] * x1[None, :]) * w, *limit)
    fy = np.clip((big_y + m[3] * x1[None, :]) * w, *limit)
    ix, iy = np.rint(fx).astype(np.int64), np.rint(fy).astype(np.int64)
    sx = np.clip(ix >> INTER_BITS, -32768, 32767)
    sy = np.clip(iy >> INTER_BITS, -32768, 32767)
    ax = (ix & (INTER_TAB_SIZE - 1)).astype(np.int64)
    ay = (iy & (INTER_TAB_SIZE - 1)).astype(np.int64)
    scale = 1 << COEF_BITS
    weights = [
        (INTER_TAB_SIZE - ay) * (INTER_TAB_SIZE - ax),
        (INTER_TAB_SIZE - ay) * ax,  # x 32: exact /32768
        ay * (INTER_TAB_SIZE - ax),
        ay * ax,
    ]
    img = image if image.ndim == 3 else image[:, :, None]
    # one pixel of border around the image: a neighbour outside reads it (the constant, or the replicated edge);
    # indices beyond it are clamped onto it, which reads the same value
    mode = {"mode": "edge"} if border == "replicate" else {"mode": "constant", "constant_values": border_value}
    padded = np.pad(img, ((1, 1), (1, 1), (0, 0)), **mode)  # type: ignore[call-overload,unused-ignore]
    flat = padded.reshape(-1, img.shape[2])
    wp = w_in + 2
    yy0 = np.clip(sy + 1, 0, h_in + 1)
    yy1 = np.clip(sy + 2, 0, h_in + 1)
    xx0 = np.clip(sx + 1, 0, w_in + 1)
    xx1 = np.clip(sx + 2, 0, w_in + 1)
    acc = np.zeros((h_out * w_out, img.shape[2]), np.int32)
    for (ry, rx), wt in zip(((yy0, xx0), (yy0, xx1), (yy1, xx0), (yy1, xx1)), weights, strict=True):
        pixels = flat[(ry * wp + rx).ravel()].astype(np.int32)
        acc += pixels * (wt.astype(np.int32).ravel() * (scale // (INTER_TAB_SIZE**2)))[:, None]
    out = ((acc + (1 << (COEF_BITS - 1))) >> COEF_BITS).reshape(h_out, w_out, img.shape[2])
    return np.clip(out, 0, 255).astype(np.uint8)


class WarpResizeParams(OpParams):
    size: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)]
    """[height, width] of the output."""
    method: Literal["bilinear", "nearest"]
    """OpenCV INTER_LINEAR (fixed-point weights, uint8 results rounded) or INTER_NEAREST."""
    border: Literal["constant", "replicate"]
    """Where a sample falls outside the image: BORDER_CONSTANT (``border_value``) or BORDER_REPLICATE."""
    border_value: Annotated[int, Field(ge=0, le=255)]
    library: Literal["opencv", "opencv4_numpy"]
    """opencv: the installed ``cv2.warpPerspective``; opencv4_numpy: :func:`warp_perspective_opencv4`, OpenCV
    4.x's fixed-point bilinear warp reproduced bit for bit (what MediaPipe links; OpenCV 5.0 rounds otherwise,
    1 grey level on ~3 % of the pixels). opencv4_numpy: bilinear only."""


@OPS.register("warp_resize")
class WarpResize(PreOp):
    """Stretch the whole image (no aspect ratio kept) to ``size`` with ``cv2.warpPerspective``.

    The matrix is ``cv2.getPerspectiveTransform`` from the image rectangle's corners ``(0, H), (0, 0), (W, 0),
    (W, H)`` (``cv::boxPoints`` of MediaPipe's whole-image ROI) to ``(0, h), (0, 0), (w, 0), (w, h)``: a pure scale
    ``s = w / W`` of pixel-centre coordinates, so output pixel ``i`` samples the source at ``i * W / w``
    (**corner-aligned**: pixel 0 on pixel 0), where ``cv2.resize`` samples at ``(i + 0.5) * W / w - 0.5``
    (half-pixel). Upscaling reads past the last pixel, which the border blends in (MediaPipe: BORDER_CONSTANT 0).
    Layout HWC or CHW and dtype kept (uint8 is warped as uint8 and rounded, as MediaPipe does before
    converting to float).

    Geometry: centres scale by ``s`` per axis, so pixel edges map as ``e' = e * s + (1 - s) / 2``.
    """

    name = "warp_resize"
    Params = WarpResizeParams
    params: WarpResizeParams

    def __init__(self, params: WarpResizeParams) -> None:
        super().__init__(params)
        if params.library == "opencv4_numpy" and params.method != "bilinear":
            raise OpSpecError("method", "library opencv4_numpy reproduces INTER_LINEAR only", ["bilinear"])

    def library(self) -> tuple[str, str]:
        import cv2

        if self.params.library == "opencv4_numpy":
            return "opencv4_numpy", f"{OPENCV4_PORT} (cv2 {cv2.__version__} for the matrix)"
        return "opencv", cv2.__version__

    def static_shape(self, shape: StaticShape) -> StaticShape:
        shape = super().static_shape(shape)
        h, w = self.params.size
        return StaticShape(shape.layout, h, w, min(h, w), shape.channels)

    def __call__(self, item: Item) -> Item:
        import cv2

        require_image(self, item)
        height, width = spatial_size(item)
        th, tw = self.params.size
        src = np.array([[0, height], [0, 0], [width, 0], [width, height]], np.float32)
        dst = np.array([[0, th], [0, 0], [tw, 0], [tw, th]], np.float32)
        matrix = cv2.getPerspectiveTransform(src, dst)
        hwc = item.data if item.layout == "HWC" else item.data.transpose(1, 2, 0)
        flags = cv2.INTER_LINEAR if self.params.method == "bilinear" else cv2.INTER_NEAREST
        border = cv2.BORDER_CONSTANT if self.params.border == "constant" else cv2.BORDER_REPLICATE
        value = (self.params.border_value,) * 4
        if self.params.library == "opencv4_numpy":
            out = warp_perspective_opencv4(hwc, matrix, (th, tw), self.params.border, self.params.border_value)
        else:
            out = cv2.warpPerspective(
                np.ascontiguousarray(hwc), matrix, (tw, th), flags=flags, borderMode=border, borderValue=value
            )
        if out.ndim == 2:
            out = out[:, :, None]
        data = out if item.layout == "HWC" else np.ascontiguousarray(out.transpose(2, 0, 1))
        geometry = item.geometry
        if geometry is not None:
            sy, sx = th / height, tw / width
            geometry = geometry.then((sy, sx), ((1 - sy) / 2, (1 - sx) / 2))
        return item.with_data(data, geometry=geometry)
