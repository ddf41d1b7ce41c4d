"""Helpers shared by the op modules: layout checks, channel-axis lookup and the lazy TensorFlow import."""

from __future__ import annotations

import os
import sys
from types import ModuleType

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


def tensorflow() -> ModuleType:
    """TensorFlow, imported on first use by the ops whose ``library`` is ``tensorflow`` (the core imports no ML
    framework at module level). ``TF_CPP_MIN_LOG_LEVEL`` defaults to 2 before the first import (its C++ info
    lines are start-up noise); a missing install is an :class:`OpSpecError` naming the field and the extra."""
    if "tensorflow" not in sys.modules:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise OpSpecError(
            "library", f"library tensorflow needs TensorFlow installed (pip install 'repliscope[keras]'): {exc}"
        ) from exc
    return tf
