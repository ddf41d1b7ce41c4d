"""``subtract_mean``, ``divide_std``, ``scale``: separate ops so their order is the manifest's.

On float input they compute in the input's dtype (the value is first converted to it) and keep it. On
INTEGER input they deliberately use the integer semantics of the input dtype, like C code that
normalizes bytes before converting to float (the MLModelScope pitfall): the value is truncated toward
zero to an integer (``subtract_mean``, ``divide_std``) and the result computed exactly in int64, or the
float64 product is truncated toward zero (``scale``); then it is wrapped modulo 2**bits back into the input
dtype. Example: uint8 100 minus mean
127 is 229, not -27.

Per-channel values (a list of 3) are in the item's CURRENT channel order and broadcast along the channel
axis of HWC or CHW; in/out layout, shape and dtype are unchanged.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field

from repliscope.errors import OpSpecError
from repliscope.ops._common import per_channel, require_image
from repliscope.ops.base import OPS, Item, OpParams, PreOp

PerChannel = float | Annotated[list[float], Field(min_length=3, max_length=3)]


class SubtractMeanParams(OpParams):
    value: PerChannel


class DivideStdParams(OpParams):
    value: PerChannel


class ScaleParams(OpParams):
    factor: float


def _values(op_key: str, values: float | list[float], item: Item, axis: int) -> tuple[np.ndarray, bool]:
    """(values shaped for broadcasting, is_integer_input); checks the channel count."""
    if isinstance(values, list) and len(values) != item.data.shape[axis]:
        raise OpSpecError(op_key, f"{len(values)} values for an image with {item.data.shape[axis]} channels")
    integer = bool(np.issubdtype(item.data.dtype, np.integer))
    if integer:
        truncated = np.trunc(np.asarray(values, dtype=np.float64)).tolist()
        return per_channel(truncated, axis, np.dtype(np.int64)), True
    return per_channel(values, axis, item.data.dtype), False


@OPS.register("subtract_mean")
class SubtractMean(PreOp):
    """``x - value``; on integer input wraps modulo 2**bits (uint8: ``(x - int(value)) % 256``)."""

    name = "subtract_mean"
    Params = SubtractMeanParams
    params: SubtractMeanParams

    def __call__(self, item: Item) -> Item:
        axis = require_image(self, item)
        v, integer = _values("value", self.params.value, item, axis)
        if integer:
            return item.with_data((item.data.astype(np.int64) - v).astype(item.data.dtype))
        return item.with_data(item.data - v)


@OPS.register("divide_std")
class DivideStd(PreOp):
    """``x / value`` (true division, not multiplication by the reciprocal); on integer input floor
    division by ``int(value)`` wrapped into the input dtype (uint8 200 // 58 = 3). Zero is an error."""

    name = "divide_std"
    Params = DivideStdParams
    params: DivideStdParams

    def __init__(self, params: DivideStdParams) -> None:
        super().__init__(params)
        if 0.0 in np.atleast_1d(np.asarray(params.value, dtype=np.float64)):
            raise OpSpecError("value", "std must not be zero")

    def __call__(self, item: Item) -> Item:
        axis = require_image(self, item)
        v, integer = _values("value", self.params.value, item, axis)
        if integer:
            if np.any(v == 0):
                raise OpSpecError("value", f"std {self.params.value} truncates to 0 on {item.data.dtype}")
            return item.with_data((item.data.astype(np.int64) // v).astype(item.data.dtype))
        return item.with_data(item.data / v)


@OPS.register("scale")
class Scale(PreOp):
    """``x * factor``; on integer input the product is truncated toward zero and wrapped into the input
    dtype (uint8 200 * (1/255) = 0; 200 * 2 = 144)."""

    name = "scale"
    Params = ScaleParams
    params: ScaleParams

    def __call__(self, item: Item) -> Item:
        require_image(self, item)
        x = item.data
        if np.issubdtype(x.dtype, np.integer):
            product = np.trunc(x.astype(np.float64) * self.params.factor)
            return item.with_data(product.astype(np.int64).astype(x.dtype))
        return item.with_data(x * x.dtype.type(self.params.factor))
