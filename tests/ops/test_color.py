"""color_layout: channel reversal on HWC and CHW, exact values."""

from __future__ import annotations

import numpy as np
import pytest

from repliscope.errors import OpSpecError
from repliscope.ops import Item
from tests.ops._helpers import check_pre_op, chw_item, hwc_item, pre, smooth_rgb


class TestColorLayout:
    @pytest.mark.parametrize("dtype", [np.uint8, np.float32])
    def test_swap_hwc_and_chw(self, dtype: type) -> None:
        img: np.ndarray = smooth_rgb(5, 6).astype(dtype)
        out = check_pre_op(pre(op="color_layout", order="BGR"), hwc_item(img), keep_channels=False)
        assert out.channels == "BGR"
        np.testing.assert_array_equal(out.data, img[..., ::-1])
        out = check_pre_op(pre(op="color_layout", order="BGR"), chw_item(img), keep_channels=False)
        np.testing.assert_array_equal(out.data, img.transpose(2, 0, 1)[::-1])

    def test_same_order_is_identity(self) -> None:
        img = smooth_rgb(5, 6)
        out = check_pre_op(pre(op="color_layout", order="RGB"), hwc_item(img))
        np.testing.assert_array_equal(out.data, img)

    def test_double_swap_is_identity(self) -> None:
        img = smooth_rgb(5, 6)
        to_bgr, to_rgb = pre(op="color_layout", order="BGR"), pre(op="color_layout", order="RGB")
        out = to_rgb(to_bgr(hwc_item(img)))
        assert out.channels == "RGB"
        np.testing.assert_array_equal(out.data, img)

    def test_needs_decoded_image(self) -> None:
        with pytest.raises(OpSpecError, match="decode"):
            pre(op="color_layout", order="BGR")(Item(np.zeros(4, np.uint8), "encoded"))
        with pytest.raises(OpSpecError, match="channel order"):
            pre(op="color_layout", order="BGR")(Item(np.zeros((2, 2, 3), np.uint8), "HWC"))
