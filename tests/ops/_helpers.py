"""Shared test helpers: in-memory images and torchvision-v2-style checkers for ops."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image

from repliscope.ops import BuildContext, Item, PreOp, build_op

CTX = BuildContext(class_names=tuple(f"class_{i}" for i in range(10)))


def pre(**spec: Any) -> PreOp:
    op = build_op(spec, "pre", CTX)
    assert isinstance(op, PreOp)
    return op


def encode(im: Image.Image, fmt: str, **kwargs: Any) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kwargs)
    return buf.getvalue()


def smooth_rgb(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A HxWx3 uint8 image with gradients plus mild noise (realistic for resampling and JPEG)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    img = np.stack([(xx * 0.6) % 256, (yy * 0.8) % 256, ((xx + yy) * 0.3) % 256], axis=-1)
    return np.clip(img + rng.normal(0, 12, img.shape), 0, 255).astype(np.uint8)


def hwc_item(data: np.ndarray, channels: str = "RGB") -> Item:
    return Item(data, layout="HWC", channels=channels)  # type: ignore[arg-type]


def chw_item(data: np.ndarray, channels: str = "RGB") -> Item:
    return Item(np.ascontiguousarray(data.transpose(2, 0, 1)), layout="CHW", channels=channels)  # type: ignore[arg-type]


def check_pre_op(
    op: PreOp, item: Item, *, keep_dtype: bool = True, keep_layout: bool = True, keep_channels: bool = True
) -> Item:
    """Run ``op`` on a read-only copy of ``item`` and check the op contract; returns the output.

    No in-place mutation (the input array is read-only and compared afterwards), a new contiguous array,
    the promised dtype / layout / channel metadata, a 3-D image with 3 channels on the right axis.
    """
    before = item.data.copy()
    frozen = item.data.copy()
    frozen.flags.writeable = False
    src = Item(frozen, item.layout, item.channels)
    out = op(src)
    assert isinstance(out, Item)
    np.testing.assert_array_equal(src.data, before)
    assert out.data.flags.c_contiguous
    if keep_dtype:
        assert out.data.dtype == item.data.dtype
    if keep_layout:
        assert out.layout == item.layout
    if keep_channels:
        assert out.channels == item.channels
    if out.layout in ("HWC", "CHW"):
        assert out.data.ndim == 3
        assert out.data.shape[-1 if out.layout == "HWC" else 0] == 3
    return out
