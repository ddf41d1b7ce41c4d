"""``to_float`` and ``cast``: change the element type, never the scale."""

from __future__ import annotations

from typing import Literal

import numpy as np

from repliscope.ops._common import require_image
from repliscope.ops.base import OPS, Item, OpParams, PreOp

FloatName = Literal["float16", "float32", "float64"]
DtypeName = Literal["float16", "float32", "float64", "uint8", "int8", "int32"]


class ToFloatParams(OpParams):
    dtype: FloatName


@OPS.register("to_float")
class ToFloat(PreOp):
    """Plain cast to a float dtype: NO scaling (uint8 255 becomes 255.0, not 1.0).

    In: HWC or CHW, any dtype. Out: same shape and layout, ``dtype`` (numpy ``astype``; float narrowing rounds
    to nearest even).
    """

    name = "to_float"
    Params = ToFloatParams
    params: ToFloatParams

    def __call__(self, item: Item) -> Item:
        require_image(self, item)
        return item.with_data(item.data.astype(self.params.dtype))


class CastParams(OpParams):
    dtype: DtypeName
    saturate: bool
    """Clip to the target type's range before casting (else integers wrap around)."""


@OPS.register("cast")
class Cast(PreOp):
    """Cast to ``dtype`` the way C does, optionally saturating. In/out: HWC or CHW, same shape and layout.

    - float -> integer: truncates toward zero (no rounding). With ``saturate: false`` the truncated value
      wraps modulo 2**bits (two's complement, i.e. a C cast through a 64-bit integer: 300.7 -> uint8 44,
      -1.5 -> uint8 255); with ``saturate: true`` it is clipped first (300.7 -> 255, -1.5 -> 0).
      NaN is undefined.
    - integer -> integer: wraps (numpy ``astype``) or, with ``saturate``, clips.
    - any -> float: numpy ``astype``; ``saturate`` clips to the finite range of the float type.
    """

    name = "cast"
    Params = CastParams
    params: CastParams

    def __call__(self, item: Item) -> Item:
        require_image(self, item)
        return item.with_data(cast_array(item.data, np.dtype(self.params.dtype), self.params.saturate))


def cast_array(x: np.ndarray, target: np.dtype, saturate: bool) -> np.ndarray:
    """``Cast`` semantics on one array (see :class:`Cast`); numpy's overflow warnings are muted."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _cast(x, target, saturate)


def _cast(x: np.ndarray, target: np.dtype, saturate: bool) -> np.ndarray:
    if np.issubdtype(target, np.floating):
        if saturate:
            info = np.finfo(target)
            x = np.clip(x, info.min, info.max)
        return x.astype(target)
    info_i = np.iinfo(target)
    if np.issubdtype(x.dtype, np.floating):
        x = np.trunc(x.astype(np.float64))
        if saturate:
            return np.clip(x, info_i.min, info_i.max).astype(target)
        return x.astype(np.int64).astype(target)
    if saturate:
        return np.clip(x.astype(np.int64), info_i.min, info_i.max).astype(target)
    return x.astype(target)
