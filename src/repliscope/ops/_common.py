"""Helpers shared by the op modules: layout checks and channel-axis lookup."""

from __future__ import annotations

import numpy as np

from repliscope.errors import OpSpecError
from repliscope.ops.base import Item, Op


def require_image(op: Op, item: Item) -> int:
    """Return the channel axis of a decoded ``item`` (-1 for HWC, 0 for CHW).

    An encoded item here means the pipeline is mis-ordered (e.g. no ``decode`` first): that is a spec
    error for every sample, so it raises :class:`OpSpecError` rather than a per-sample error.
    """
    if item.layout == "HWC":
        axis = -1
    elif item.layout == "CHW":
        axis = 0
    else:
        raise OpSpecError(
            "op", f"'{op.name}' needs a decoded image (HWC or CHW), got layout '{item.layout}': put 'decode' first"
        )
    if item.data.ndim != 3:
        raise OpSpecError("op", f"'{op.name}' needs a 3-D image, got shape {item.data.shape}")
    return axis


def spatial_size(item: Item) -> tuple[int, int]:
    """(height, width) of a decoded HWC or CHW item."""
    shape = item.data.shape
    return (shape[0], shape[1]) if item.layout == "HWC" else (shape[1], shape[2])


def per_channel(values: float | list[float], axis: int, dtype: np.dtype) -> np.ndarray:
    """A scalar or a per-channel vector shaped to broadcast along ``axis`` of a 3-D image."""
    arr = np.asarray(values, dtype=dtype)
    if arr.ndim == 0:
        return arr
    return arr.reshape((1, 1, -1) if axis == -1 else (-1, 1, 1))
