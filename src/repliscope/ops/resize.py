"""``resize``: spatial resize following Pillow, OpenCV, PyTorch, TensorFlow or Go disintegration/imaging
semantics."""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
import PIL
from PIL import Image
from pydantic import Field

from repliscope.errors import OpSpecError
from repliscope.ops._common import require_image, spatial_size, tensorflow
from repliscope.ops.base import OPS, Geometry, Item, OpParams, PreOp, StaticShape
from repliscope.ops.limits import check_output_pixels

Method = Literal["nearest", "bilinear", "bicubic", "area", "lanczos"]
PositiveInt = Annotated[int, Field(gt=0)]

_PILLOW_FILTERS: dict[str, Image.Resampling] = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "area": Image.Resampling.BOX,
    "lanczos": Image.Resampling.LANCZOS,
}
_OPENCV_FLAGS = {
    "nearest": "INTER_NEAREST",
    "bilinear": "INTER_LINEAR",
    "bicubic": "INTER_CUBIC",
    "area": "INTER_AREA",
    "lanczos": "INTER_LANCZOS4",
}
_GO_IMAGING_VERSION = "v1.6.2 (numpy port of resize.go, imaging.Linear)"
_TORCH_MODES = {"nearest": "nearest", "bilinear": "bilinear", "bicubic": "bicubic", "area": "area"}
_TF_METHODS = ("nearest", "bilinear", "bicubic", "area")
"""``tf.image.resize`` methods reproduced (``ResizeMethod`` NEAREST_NEIGHBOR, BILINEAR, BICUBIC, AREA)."""


class ResizeParams(OpParams):
    size: PositiveInt | Annotated[list[PositiveInt], Field(min_length=2, max_length=2)]
    """int: shorter side (keep_aspect_ratio) or square side; [height, width]: exact output size."""
    keep_aspect_ratio: bool
    method: Method
    library: Literal["pillow", "opencv", "torch", "go_imaging", "tensorflow"]
    antialias: bool
    long_side: Literal["round", "truncate"] = "round"
    """With ``keep_aspect_ratio``: how the longer side is rounded (optional; recorded either way)."""
    fit: Literal["inside", "cover"] | None = None
    """Only with ``size: [height, width]`` + ``keep_aspect_ratio: true`` (then required): scale the image by one
    factor so that it fits INSIDE the box (both sides <= box) or COVERS it (both sides >= box)."""


@OPS.register("resize")
class Resize(PreOp):
    """Resize one image; output dtype and layout = input dtype and layout (HWC or CHW).

    Geometry (boxes): pixel edges scale by ``s = new / old`` per axis (``item.geometry.then((th/H, tw/W))``),
    whatever the library; an aspect-keeping resize scales the two axes by its two rounded sides' ratios.

    Output size (``output_size``):

    - ``size: int`` + ``keep_aspect_ratio: true``: shorter side = size, longer side =
      ``round(longer * size / shorter)`` with Python ``round`` of the exact ratio (half to even), or with
      ``long_side: truncate`` ``int(size * longer / shorter)`` as torchvision / timm compute it; they differ
      when the fraction is >= .5 (e.g. 375x500 -> 224: 299 rounded, 298 truncated).
    - ``size: int`` + ``keep_aspect_ratio: false``: a size x size square.
    - ``size: [height, width]`` + ``keep_aspect_ratio: false``: exactly that size.
    - ``size: [height, width]`` + ``keep_aspect_ratio: true`` needs ``fit``, as timm's ``ResizeKeepRatio``
      computes it: ``ratio = max(H / height, W / width)`` (``fit: inside``, timm ``longest=1``) or ``min(...)``
      (``fit: cover``, timm ``longest=0``), output ``(round(H / ratio), round(W / ratio))`` with Python
      ``round`` (half to even), at least 1. E.g. 375x500 into [256, 256]: inside (192, 256), cover (256, 341).

    Libraries (combinations are checked when the op is built):

    - ``pillow``: ``Image.resize((w, h), filter, reducing_gap=None)``; area = ``BOX``. Always antialiased
      (the filter support scales with the downscale factor), so ``antialias`` must be true. uint8 images
      are resized as one RGB image, float32 per channel in mode ``F``; other dtypes are rejected.
    - ``opencv``: ``cv2.resize`` with INTER_NEAREST (floor sampling, not NEAREST_EXACT) / LINEAR / CUBIC
      (a=-0.75) / AREA / LANCZOS4. Only INTER_AREA averages when downscaling, so ``antialias`` must be true
      for ``area`` and false otherwise. uint8 results are rounded and saturated by OpenCV.
    - ``torch``: ``torch.nn.functional.interpolate`` (align_corners=False) with modes nearest (floor
      sampling; antialias false), bilinear / bicubic (antialias true or false; bicubic uses a=-0.75 without
      and Pillow's a=-0.5 with antialias) and area (adaptive average pooling; antialias true); no lanczos.
      Computed in float32 (float64 for float64 input); integer results are rounded half to even and
      clipped to the dtype's range.
    - ``go_imaging``: Go ``disintegration/imaging.Resize(img, w, h, imaging.Linear)`` reproduced bit for bit
      (method bilinear, the triangle filter; antialias true: its support scales with the downscale factor),
      or ``imaging.NearestNeighbor`` (method nearest: source index ``int((i + 0.5) * src / dst)`` per axis;
      antialias true as with pillow, it only samples). uint8 only (imaging works on 8-bit NRGBA; opaque
      alpha, any channel count). Linear: horizontal pass then vertical pass, each with float64 weights
      normalised per output pixel and rounded half up / clamped to uint8 after EACH pass; a pass whose size
      is unchanged is skipped. Reproduces Go on amd64 (no fused multiply-add).
    - ``tensorflow``: ``tf.image.resize(image, [h, w], method, antialias)`` (TF 2, half-pixel centres, no
      align_corners), the TF Model Garden's resize; methods nearest / bilinear / bicubic / area (no lanczos
      here). bilinear and bicubic take antialias true (TF's ``scale_and_translate`` kernels, whose support scales
      with the downscale factor: bilinear equals torch's antialiased bilinear to 2e-4 of 255 when downscaling)
      or false (two / four taps: bilinear equals OpenCV's INTER_LINEAR and torch's bilinear on float32 to 8e-3
      of 255; bicubic is Keys' a = -0.5, within 0.13 of 255 of Pillow's BICUBIC when upscaling, not OpenCV's /
      torch's a = -0.75). area is ``resize_area`` (box averaging of the exact pixel footprints, within 0.02 of
      255 of OpenCV's INTER_AREA on float32), antialias true. nearest is
      ``resize_nearest_neighbor(half_pixel_centers=True)``: source index ``min(floor((i + 0.5) * (in / out)),
      in - 1)`` computed in float32 (OpenCV's INTER_NEAREST_EXACT and Pillow's NEAREST when upscaling, not
      when downscaling), antialias false, any dtype (kept). The other methods return float32 in TF, so they
      take float32 images only (put ``to_float`` first); computed by TF in float32, no rounding.
    """

    name = "resize"
    Params = ResizeParams
    params: ResizeParams

    def __init__(self, params: ResizeParams) -> None:
        super().__init__(params)
        p = params
        if p.long_side != "round" and not (p.keep_aspect_ratio and isinstance(p.size, int)):
            raise OpSpecError(
                "long_side",
                "only applies to an int size with keep_aspect_ratio: true (the longer side is computed); remove it",
                ["round", "truncate"],
            )
        if isinstance(p.size, list) and p.keep_aspect_ratio and p.fit is None:
            raise OpSpecError(
                "keep_aspect_ratio",
                "size [height, width] with keep_aspect_ratio: true is ambiguous without fit; give fit (inside: "
                "the image fits in the box, cover: it covers the box), an int size (the shorter side) or "
                "keep_aspect_ratio: false",
                ["inside", "cover"],
            )
        if p.fit is not None and not (isinstance(p.size, list) and p.keep_aspect_ratio):
            raise OpSpecError(
                "fit",
                "only applies to size [height, width] with keep_aspect_ratio: true; remove it",
                ["inside", "cover"],
            )
        combo = f"library {p.library} with method {p.method}"
        if p.library == "pillow" and not p.antialias:
            raise OpSpecError("antialias", f"{combo} always antialiases downscaling; set antialias: true")
        if p.library == "opencv" and p.antialias != (p.method == "area"):
            need = "true" if p.method == "area" else "false (only method area averages when downscaling)"
            raise OpSpecError("antialias", f"{combo} needs antialias: {need}")
        if p.library == "go_imaging":
            if p.method not in ("bilinear", "nearest"):
                raise OpSpecError(
                    "method",
                    f"library go_imaging has no method {p.method} (imaging.Linear and "
                    "imaging.NearestNeighbor are the ones reproduced)",
                    allowed=["bilinear", "nearest"],
                )
            if not p.antialias:
                raise OpSpecError(
                    "antialias",
                    f"{combo}: imaging's filters always antialias downscaling (as "
                    "with pillow, nearest samples whatever the flag); set antialias: true",
                )
        if p.library == "tensorflow":
            if p.method not in _TF_METHODS:
                raise OpSpecError(
                    "method", f"library tensorflow has no method {p.method} here", allowed=list(_TF_METHODS)
                )
            if p.method == "nearest" and p.antialias:
                raise OpSpecError("antialias", f"{combo} samples one pixel; set antialias: false")
            if p.method == "area" and not p.antialias:
                raise OpSpecError("antialias", f"{combo} always averages; set antialias: true")
        if p.library == "torch":
            if p.method not in _TORCH_MODES:
                raise OpSpecError("method", f"library torch has no method {p.method}", allowed=_TORCH_MODES)
            if p.method == "nearest" and p.antialias:
                raise OpSpecError("antialias", f"{combo} cannot antialias; set antialias: false")
            if p.method == "area" and not p.antialias:
                raise OpSpecError("antialias", f"{combo} always averages; set antialias: true")

    def library(self) -> tuple[str, str]:
        if self.params.library == "pillow":
            return "pillow", PIL.__version__
        if self.params.library == "opencv":
            import cv2

            return "opencv", cv2.__version__
        if self.params.library == "go_imaging":
            return "go_imaging", _GO_IMAGING_VERSION
        if self.params.library == "tensorflow":
            return "tensorflow", tensorflow().__version__
        import torch

        return "torch", torch.__version__

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) of the output for an input of (height, width); see the class docstring."""
        size = self.params.size
        if isinstance(size, list) and self.params.fit is not None:
            ratio_h, ratio_w = height / size[0], width / size[1]
            ratio = max(ratio_h, ratio_w) if self.params.fit == "inside" else min(ratio_h, ratio_w)
            return max(1, round(height / ratio)), max(1, round(width / ratio))
        if isinstance(size, list):
            return size[0], size[1]
        if not self.params.keep_aspect_ratio:
            return size, size
        short, long = min(height, width), max(height, width)
        new_long = int(size * long / short) if self.params.long_side == "truncate" else round(long * size / short)
        return (size, new_long) if height <= width else (new_long, size)

    def static_shape(self, shape: StaticShape) -> StaticShape:
        shape = super().static_shape(shape)
        size = self.params.size
        known = shape.height is not None and shape.width is not None
        if isinstance(size, int) and self.params.keep_aspect_ratio and not known:
            return StaticShape(shape.layout, channels=shape.channels, min_side=size)
        if isinstance(size, list) and self.params.fit is not None and not known:
            return StaticShape(shape.layout, channels=shape.channels)  # the sides depend on the aspect ratio
        if shape.height is not None and shape.width is not None:
            h, w = self.output_size(shape.height, shape.width)
        else:
            h, w = self.output_size(1, 1)  # a fixed output size does not depend on the input
        return StaticShape(shape.layout, h, w, min(h, w), shape.channels)

    def __call__(self, item: Item) -> Item:
        require_image(self, item)
        th, tw = self.output_size(*spatial_size(item))
        check_output_pixels(th, tw, self.name)  # before any library allocates the output
        hwc = item.data if item.layout == "HWC" else item.data.transpose(1, 2, 0)
        if self.params.library == "pillow":
            out = _resize_pillow(hwc, th, tw, self.params.method)
        elif self.params.library == "opencv":
            out = _resize_opencv(hwc, th, tw, self.params.method)
        elif self.params.library == "go_imaging":
            out = _resize_go_imaging(hwc, th, tw, self.params.method)
        elif self.params.library == "tensorflow":
            out = _resize_tensorflow(hwc, th, tw, self.params.method, self.params.antialias)
        else:
            out = _resize_torch(hwc, th, tw, self.params.method, self.params.antialias)
        if item.layout == "CHW":
            out = out.transpose(2, 0, 1)
        return item.with_data(np.ascontiguousarray(out), geometry=resized_geometry(item, th, tw))


def resized_geometry(item: Item, th: int, tw: int) -> Geometry | None:
    """``item.geometry`` followed by a resize to (th, tw): pixel edges scale by ``new / old`` per axis (y, x)."""
    if item.geometry is None:
        return None
    height, width = spatial_size(item)
    return item.geometry.then((th / height, tw / width))


def _resize_pillow(hwc: np.ndarray, th: int, tw: int, method: str) -> np.ndarray:
    resample = _PILLOW_FILTERS[method]
    if hwc.dtype == np.uint8 and hwc.shape[2] == 3:
        im = Image.fromarray(np.ascontiguousarray(hwc))
        return np.asarray(im.resize((tw, th), resample, reducing_gap=None))
    if hwc.dtype not in (np.uint8, np.float32):
        raise OpSpecError(
            "library",
            f"pillow resize supports uint8 and float32 images, got {hwc.dtype}; "
            "put resize before to_float/cast or use library opencv or torch",
        )
    planes = [Image.fromarray(np.ascontiguousarray(hwc[..., c])) for c in range(hwc.shape[2])]
    channels = [np.asarray(p.resize((tw, th), resample, reducing_gap=None)) for p in planes]
    return np.stack(channels, axis=-1)


def _resize_opencv(hwc: np.ndarray, th: int, tw: int, method: str) -> np.ndarray:
    import cv2

    flag = getattr(cv2, _OPENCV_FLAGS[method])
    try:
        out = cv2.resize(np.ascontiguousarray(hwc), (tw, th), interpolation=flag)
    except cv2.error as exc:
        raise OpSpecError("library", f"opencv resize cannot handle a {hwc.dtype} image: {exc}") from exc
    return out[..., None] if out.ndim == 2 else out


def _resize_torch(hwc: np.ndarray, th: int, tw: int, method: str, antialias: bool) -> np.ndarray:
    import torch
    from torch.nn import functional

    work = np.float64 if hwc.dtype == np.float64 else np.float32
    t = torch.from_numpy(hwc.astype(work)).permute(2, 0, 1)[None]  # astype copies: torch needs writable
    mode = _TORCH_MODES[method]
    if mode in ("bilinear", "bicubic"):
        t = functional.interpolate(t, size=(th, tw), mode=mode, align_corners=False, antialias=antialias)
    else:
        t = functional.interpolate(t, size=(th, tw), mode=mode)
    out = t[0].permute(1, 2, 0).numpy()
    if np.issubdtype(hwc.dtype, np.integer):
        info = np.iinfo(hwc.dtype)
        return np.clip(np.round(out), info.min, info.max).astype(hwc.dtype)
    return out.astype(hwc.dtype)


def _resize_tensorflow(hwc: np.ndarray, th: int, tw: int, method: str, antialias: bool) -> np.ndarray:
    """``tf.image.resize(hwc, [th, tw], method, antialias)`` on one HWC image; see :class:`Resize`."""
    if method != "nearest" and hwc.dtype != np.float32:
        raise OpSpecError(
            "library",
            f"tensorflow resize with method {method} returns float32 (tf.image.resize), so it takes float32 "
            f"images, got {hwc.dtype}; put 'to_float' (dtype float32) before it, or use method nearest",
        )
    tf = tensorflow()
    out = tf.image.resize(np.ascontiguousarray(hwc), [th, tw], method=method, antialias=antialias).numpy()
    return out.astype(hwc.dtype, copy=False)


def _go_linear_weights(dst: int, src: int) -> tuple[np.ndarray, np.ndarray]:
    """imaging ``precomputeWeights(dst, src, Linear)``: (index [dst, taps] int, weight [dst, taps] float64).

    Taps are in Go's order (increasing source index); unused taps have index 0 and weight 0.
    """
    du = src / dst
    scale = max(du, 1.0)
    ru = math.ceil(scale * 1.0)  # Linear.Support = 1
    rows: list[list[tuple[int, float]]] = []
    for v in range(dst):
        fu = (v + 0.5) * du - 0.5
        begin, end = max(math.ceil(fu - ru), 0), min(math.floor(fu + ru), src - 1)
        taps, total = [], 0.0
        for u in range(begin, end + 1):
            x = abs((u - fu) / scale)
            w = 1.0 - x if x < 1.0 else 0.0
            if w != 0:
                total += w
                taps.append((u, w))
        rows.append([(u, w / total) for u, w in taps] if total != 0 else taps)
    width = max((len(r) for r in rows), default=0)
    index, weight = np.zeros((dst, width), np.intp), np.zeros((dst, width), np.float64)
    for v, taps in enumerate(rows):
        for k, (u, w) in enumerate(taps):
            index[v, k], weight[v, k] = u, w
    return index, weight


def _go_pass(src: np.ndarray, dst: int) -> np.ndarray:
    """One imaging resize pass along axis 0 of uint8 ``src`` [n, m, c] -> uint8 [dst, m, c].

    Per output pixel, as ``resizeHorizontal``/``resizeVertical`` with opaque alpha: ``aw = 255 * w``,
    ``r += s * aw`` and ``a += aw`` over the taps in order, then ``clamp(r * (1 / a))`` with
    ``clamp(x) = min(max(int64(x + 0.5), 0), 255)`` (round half up).
    """
    index, weight = _go_linear_weights(dst, src.shape[0])
    values = src.astype(np.float64)
    r = np.zeros((dst, *src.shape[1:]), np.float64)
    a = np.zeros(dst, np.float64)
    for k in range(index.shape[1]):
        aw = 255.0 * weight[:, k]
        r = r + values[index[:, k]] * aw[:, None, None]
        a = a + aw
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = r * (1.0 / a)[:, None, None]
    out = np.clip(np.trunc(scaled + 0.5), 0, 255)
    return np.where((a != 0)[:, None, None], out, 0).astype(np.uint8)


def _resize_go_imaging(hwc: np.ndarray, th: int, tw: int, method: str) -> np.ndarray:
    """``imaging.Resize(img, tw, th, imaging.Linear)`` (horizontal pass first) or ``imaging.NearestNeighbor``
    (``resizeNearest``) on a uint8 HWC image; the same size is a copy (imaging's ``Clone``)."""
    if hwc.dtype != np.uint8:
        raise OpSpecError(
            "library", f"go_imaging resize works on 8-bit images, got {hwc.dtype}; put resize before to_float/cast"
        )
    if method == "nearest" and (hwc.shape[0], hwc.shape[1]) != (th, tw):
        rows = ((np.arange(th) + 0.5) * (hwc.shape[0] / th)).astype(np.intp)  # Go int(): truncation
        cols = ((np.arange(tw) + 0.5) * (hwc.shape[1] / tw)).astype(np.intp)
        return hwc[rows[:, None], cols[None, :]]
    out = hwc
    if out.shape[1] != tw:
        out = _go_pass(out.transpose(1, 0, 2), tw).transpose(1, 0, 2)
    if out.shape[0] != th:
        out = _go_pass(out, th)
    return out.copy() if out is hwc else out
