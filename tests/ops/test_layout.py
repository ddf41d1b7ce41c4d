"""data_layout: HWC <-> CHW transposes, exact values."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops._helpers import check_pre_op, hwc_item, pre, smooth_rgb


class TestDataLayout:
    @pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64])
    def test_hwc_to_chw_and_back(self, dtype: type) -> None:
        img: np.ndarray = smooth_rgb(4, 7).astype(dtype)
        chw = check_pre_op(pre(op="data_layout", layout="NCHW"), hwc_item(img), keep_layout=False)
        assert chw.layout == "CHW" and chw.data.shape == (3, 4, 7)
        for c in range(3):
            np.testing.assert_array_equal(chw.data[c], img[..., c])
        back = check_pre_op(pre(op="data_layout", layout="NHWC"), chw, keep_layout=False)
        assert back.layout == "HWC"
        np.testing.assert_array_equal(back.data, img)

    def test_already_in_layout(self) -> None:
        img = smooth_rgb(4, 7)
        out = check_pre_op(pre(op="data_layout", layout="NHWC"), hwc_item(img))
        np.testing.assert_array_equal(out.data, img)


def test_reshape_layout_is_the_classic_bug_not_a_transpose() -> None:
    from repliscope.ops.base import BuildContext, Item
    from repliscope.ops.pipeline import build_op

    hwc = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    op = build_op({"op": "reshape_layout", "layout": "NCHW"}, "pre", BuildContext())
    out = op(Item(hwc, "HWC", "RGB"))  # type: ignore[operator]
    assert out.layout == "CHW" and out.data.shape == (3, 2, 3)
    assert np.array_equal(out.data, hwc.reshape(3, 2, 3))
    assert not np.array_equal(out.data, hwc.transpose(2, 0, 1))
    # channel 0 of the "CHW" result holds the first six bytes of the HWC buffer: pixels (0,0), (0,1) interleaved
    assert out.data[0].ravel().tolist() == [0, 1, 2, 3, 4, 5]
    back = build_op({"op": "reshape_layout", "layout": "NHWC"}, "pre", BuildContext())(out)  # type: ignore[operator]
    assert np.array_equal(back.data, hwc) and back.layout == "HWC"
