"""MLModelScope's read step (decode + resize) -> repliscope ``decode`` / ``resize`` ops.

Sources (read 2026-11-23): rai-project/dlframework @ 4aaa12c ``steps/read_image.go`` (passes ``Resized(H, W)`` when
``dimensions`` has 3 entries, ``MaxDimension``, ``KeepAspectRatio``), c3sr/dlframework @ 11c2c11 (the same plus
``MinDimension``); rai-project/image @ 407d61a ``read.go`` ``Read`` (decode, then ``Resize`` when a size or
``maxDimension`` is set), ``jpeg.go`` ``getDecoder`` (libjpeg DCT scaling only when BOTH ``dimensions`` sides are
set; otherwise a full-size decode, ISLOW, no fancy upsampling) and ``resize.go`` ``computeScaledDimension``;
c3sr/image @ 0b896ff ``resize.go`` (min_dimension, ``math.Round``).

- ``dimensions`` only: the image is stretched to exactly H x W (``keep_aspect_ratio`` is ignored:
  ``mlmodelscope.keep_aspect_ratio_ignored``).
- nothing: the image is fed at its own size (the model takes any size, e.g. a TF Object Detection API graph).
- ``max_dimension: M`` + ``keep_aspect_ratio: true``: one factor ``float32(M) / float32(longer side)`` for both
  axes (upscaling too). rai-project truncates each side, ``int(ratio * side)`` in float32; c3sr rounds it,
  ``math.Round``. Written as ``resize size [M, M] keep_aspect_ratio fit: inside`` (Python ``round`` of the float64
  ratio), which matches c3sr except in 161 of 29,455 sizes (1..1500 px, M 513) and rai-project's longer side
  always but its shorter side in only half of them: ``mlmodelscope.resize_rounding``.
- ``min_dimension: m`` + ``keep_aspect_ratio: true`` (c3sr only; rai-project ignores the key): the shorter side
  becomes m, the longer ``math.Round(float32 ratio * side)``: ``resize size m keep_aspect_ratio long_side: round``
  (88 of 29,455 sizes differ by 1 px at m 600, float32 and half-away-from-zero ties: ``resize_rounding``).
- ``max_dimension`` without ``keep_aspect_ratio``: each side becomes ``max(side, M)`` (grow only, each axis on its
  own); ``min_dimension`` without it: ``min(side, m)`` (shrink only). No repliscope resize does either: refused.
  Both keys (c3sr): ``computeScaledDimension`` returns (0, 0), a 0 x 0 image: refused.
"""

from __future__ import annotations

from typing import Any

from repliscope.importers.mlmodelscope_rules import Ctx, number
from repliscope.importers.reading import check_image_size

_RESIZE = {"method": "bilinear", "library": "go_imaging", "antialias": True}
"""disintegration/imaging ``Linear``, reproduced bit for bit by ``resize`` ``library: go_imaging``."""


def _int_param(ctx: Ctx, p: dict[str, Any], key: str, field: str) -> int | None:
    if p.get(key) is None:
        return None
    val = number(p[key], f"{field}.{key}")
    if val != int(val) or val <= 0:
        raise ctx.fail(f"{field}.{key}", f"{p[key]!r}: expected a positive whole number of pixels")
    check_image_size(int(val), int(val), f"{ctx.path}: {field}.{key}")
    return int(val)


def read_ops(
    ctx: Ctx, p: dict[str, Any], field: str, mode: str, dims: list[int] | None, *, fixed_size: bool
) -> tuple[list[dict[str, Any]], tuple[int, int] | None]:
    """The ``decode`` (+ ``resize``) ops MLModelScope's read step amounts to, and the fixed (H, W) they produce
    (None when it depends on the image). ``fixed_size``: the task needs one input size (classification); then an
    image-dependent size is refused."""
    max_dim = _int_param(ctx, p, "max_dimension", field)
    min_dim = _int_param(ctx, p, "min_dimension", field)
    keep = p.get("keep_aspect_ratio")
    if keep is not None and not isinstance(keep, bool):
        raise ctx.fail(f"{field}.keep_aspect_ratio", f"{keep!r} (allowed: true, false)")
    if fixed_size and max_dim is not None:
        raise ctx.fail(
            f"{field}.max_dimension",
            "rai-project/image computeScaledDimension sizes the image from "
            "its own aspect ratio (no crop follows), so the fixed input shape of a classifier is "
            "undefined",
            "image_dependent_size",
        )
    if fixed_size and min_dim is not None:
        raise ctx.fail(
            f"{field}.min_dimension",
            "c3sr/image resizes the shorter side to min_dimension and, as no "
            "crop follows, feeds an image whose size depends on the input: the fixed input shape of a "
            "classifier is undefined",
            "image_dependent_size",
        )
    if fixed_size and dims is None:
        raise ctx.fail(
            f"{field}.dimensions",
            "absent (and no max_dimension): MLModelScope fed images at their own size, so the input shape is undefined",
            "image_dependent_size",
        )
    decode = {
        "op": "decode",
        "library": "libjpeg_turbo",
        "channels": mode,
        "dct_scale_to": [dims[1], dims[2]] if dims else None,
        "fancy_upsampling": False,
        "dct_method": "islow",
    }
    if max_dim is not None and min_dim is not None:
        raise ctx.fail(
            f"{field}.min_dimension",
            f"max_dimension {max_dim} and min_dimension {min_dim} together: "
            "c3sr/image computeScaledDimension returns (0, 0) and resizes to a 0 x 0 image "
            "(rai-project/image ignores min_dimension): the pipeline is undefined",
            "image_dependent_size",
        )
    if max_dim is not None or min_dim is not None:
        key, size = ("max_dimension", max_dim) if max_dim is not None else ("min_dimension", int(min_dim or 0))
        if keep is not True:
            rule = (
                "max(side, max_dimension): only the sides shorter than it grow"
                if max_dim is not None
                else "min(side, min_dimension): only the sides longer than it shrink"
            )
            raise ctx.fail(
                f"{field}.{key}",
                f"{key} {size} without keep_aspect_ratio: true makes each side "
                f"{rule}, each axis on its own (computeScaledDimension); no repliscope resize does "
                "that (allowed: keep_aspect_ratio: true, or dimensions alone)",
                "image_dependent_size",
            )
        return [decode, _scaled(ctx, field, key, size)], None
    if keep is not None:
        ctx.warn(
            "keep_aspect_ratio_ignored",
            f"{field}.keep_aspect_ratio",
            f"keep_aspect_ratio: {str(keep).lower()} "
            "without max_dimension / min_dimension: rai-project/image Resize only reads it in "
            "computeScaledDimension, so "
            + (f"the image was stretched to {dims[1]}x{dims[2]}" if dims else "the image kept its own size")
            + " (translated so)",
        )
    if dims is None:
        return [decode], None
    h, w = dims[1], dims[2]
    return [decode, {"op": "resize", "size": [h, w], "keep_aspect_ratio": False, **_RESIZE}], (h, w)


def _scaled(ctx: Ctx, field: str, key: str, size: int) -> dict[str, Any]:
    if key == "max_dimension":
        ctx.warn(
            "resize_rounding",
            f"{field}.{key}",
            f"the longer side becomes {size} and the other is scaled by "
            f"the same float32 ratio: rai-project/image truncates it (int(ratio * side)), c3sr/image rounds it "
            "(math.Round); repliscope's resize fit: inside rounds the float64 ratio, as c3sr does except in 161 "
            f"of 29,455 sizes; rai-project's shorter side is 1 px smaller in half of them (640x480 -> "
            "513x384 there, 513x385 here)",
        )
        return {"op": "resize", "size": [size, size], "keep_aspect_ratio": True, "fit": "inside", **_RESIZE}
    ctx.warn(
        "resize_rounding",
        f"{field}.{key}",
        f"c3sr/image: the shorter side becomes {size}, the longer "
        "math.Round(float32 ratio * side); repliscope's resize (long_side: round) rounds the float64 ratio "
        "half to even: 1 px apart in 88 of 29,455 sizes (64x188 -> 1763 there, 1762 here); rai-project's "
        "dlframework does not read min_dimension at all (it would have kept the image size)",
    )
    return {"op": "resize", "size": size, "keep_aspect_ratio": True, "long_side": "round", **_RESIZE}
