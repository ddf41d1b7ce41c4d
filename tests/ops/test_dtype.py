"""to_float and cast: plain casts, C-style truncation, wrap-around or saturation."""

from __future__ import annotations

import numpy as np
import pytest

from repliscope.ops.dtype import cast_array
from tests.ops._helpers import check_pre_op, chw_item, hwc_item, pre, smooth_rgb


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_to_float_does_not_scale(dtype: str) -> None:
    img = smooth_rgb(4, 5)
    out = check_pre_op(pre(op="to_float", dtype=dtype), hwc_item(img), keep_dtype=False)
    assert out.data.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out.data, img.astype(dtype))
    assert out.data.max() > 1


def test_to_float_keeps_layout_chw() -> None:
    out = check_pre_op(pre(op="to_float", dtype="float32"), chw_item(smooth_rgb(4, 5)), keep_dtype=False)
    assert out.layout == "CHW" and out.data.shape == (3, 4, 5)


FLOATS = np.array([300.7, -1.5, 255.9, 0.4, -0.6, 127.5, 256.0, -129.0])


@pytest.mark.parametrize(
    ("dtype", "saturate", "expected"),
    [
        ("uint8", False, [44, 255, 255, 0, 0, 127, 0, 127]),
        ("uint8", True, [255, 0, 255, 0, 0, 127, 255, 0]),
        ("int8", False, [44, -1, -1, 0, 0, 127, 0, 127]),
        ("int8", True, [127, -1, 127, 0, 0, 127, 127, -128]),
        ("int32", False, [300, -1, 255, 0, 0, 127, 256, -129]),
    ],
)
def test_float_to_int_truncates_then_wraps_or_saturates(dtype: str, saturate: bool, expected: list[int]) -> None:
    out = cast_array(FLOATS.astype(np.float32), np.dtype(dtype), saturate)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, expected)


def test_int_to_int() -> None:
    x = np.array([-300, -1, 0, 200, 300], dtype=np.int32)
    np.testing.assert_array_equal(cast_array(x, np.dtype("uint8"), False), [212, 255, 0, 200, 44])
    np.testing.assert_array_equal(cast_array(x, np.dtype("uint8"), True), [0, 0, 0, 200, 255])
    np.testing.assert_array_equal(cast_array(x, np.dtype("int8"), True), [-128, -1, 0, 127, 127])


def test_to_float16_saturates_only_when_asked() -> None:
    x = np.array([1e6, -1e6, 1.0])
    assert np.isinf(cast_array(x, np.dtype("float16"), False)[:2]).all()
    np.testing.assert_array_equal(cast_array(x, np.dtype("float16"), True), [65504, -65504, 1])


def test_cast_op_contract() -> None:
    img = smooth_rgb(4, 5).astype(np.float32) * 1.5
    out = check_pre_op(pre(op="cast", dtype="uint8", saturate=True), hwc_item(img), keep_dtype=False)
    assert out.data.dtype == np.uint8
    np.testing.assert_array_equal(out.data, np.clip(np.trunc(img), 0, 255).astype(np.uint8))
