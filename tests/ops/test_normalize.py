"""subtract_mean / divide_std / scale: float arithmetic in the input dtype, byte-domain wrap-around."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from repliscope.errors import OpSpecError
from tests.ops._helpers import check_pre_op, chw_item, hwc_item, pre, smooth_rgb


def one(value: Any, dtype: type = np.uint8) -> np.ndarray:
    return np.full((1, 1, 3), value, dtype=dtype)


class TestIntegerSemantics:
    """Mean/std applied to bytes before the float cast: the C-style bug, reproduced on purpose."""

    def test_subtract_mean_wraps(self) -> None:
        out = check_pre_op(pre(op="subtract_mean", value=127), hwc_item(one(100))).data
        assert out.dtype == np.uint8
        assert (out == 229).all()  # (100 - 127) % 256

    def test_subtract_mean_truncates_fractional_mean(self) -> None:
        out = pre(op="subtract_mean", value=127.9)(hwc_item(one(100))).data
        assert (out == 229).all()

    def test_subtract_mean_per_channel_wraps(self) -> None:
        img = np.array([[[10, 200, 130]]], dtype=np.uint8)
        out = pre(op="subtract_mean", value=[124, 116, 104])(hwc_item(img)).data
        np.testing.assert_array_equal(out[0, 0], [(10 - 124) % 256, 84, 26])

    def test_divide_std_floor_divides(self) -> None:
        img = np.array([[[200, 57, 255]]], dtype=np.uint8)
        out = check_pre_op(pre(op="divide_std", value=58.4), hwc_item(img)).data
        np.testing.assert_array_equal(out[0, 0], [3, 0, 4])

    def test_divide_std_int8_negative_floor(self) -> None:
        img = np.array([[[-7, 7, -128]]], dtype=np.int8)
        out = pre(op="divide_std", value=2)(hwc_item(img)).data
        assert out.dtype == np.int8
        np.testing.assert_array_equal(out[0, 0], [-4, 3, -64])

    def test_divide_std_truncating_to_zero_is_an_error(self) -> None:
        with pytest.raises(OpSpecError, match="truncates to 0"):
            pre(op="divide_std", value=0.5)(hwc_item(one(10)))

    def test_scale_truncates_and_wraps(self) -> None:
        img = np.array([[[200, 255, 1]]], dtype=np.uint8)
        np.testing.assert_array_equal(pre(op="scale", factor=1 / 255)(hwc_item(img)).data[0, 0], [0, 1, 0])
        np.testing.assert_array_equal(pre(op="scale", factor=2)(hwc_item(img)).data[0, 0], [144, 254, 2])

    def test_wrong_order_differs_from_right_order(self) -> None:
        """subtract_mean before to_float (bytes) vs after (floats) on the same pixels."""
        img = smooth_rgb(8, 8)
        to_float, mean = pre(op="to_float", dtype="float32"), pre(op="subtract_mean", value=127)
        right = mean(to_float(hwc_item(img))).data
        wrong = to_float(mean(hwc_item(img))).data
        low = img < 127
        np.testing.assert_array_equal(wrong[~low], right[~low])
        np.testing.assert_array_equal(wrong[low], right[low] + 256)


class TestFloatSemantics:
    @pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
    def test_dtype_kept(self, dtype: type) -> None:
        img: np.ndarray = smooth_rgb(4, 5).astype(dtype)
        for spec in (
            {"op": "subtract_mean", "value": 127},
            {"op": "divide_std", "value": [58.4, 57.1, 57.4]},
            {"op": "scale", "factor": 1 / 255},
        ):
            check_pre_op(pre(**spec), hwc_item(img))

    def test_values_match_numpy_float32(self) -> None:
        img: np.ndarray = smooth_rgb(4, 5).astype(np.float32)
        mean, std = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]
        out = pre(op="divide_std", value=std)(pre(op="subtract_mean", value=mean)(hwc_item(img))).data
        expected = (img - np.array(mean, np.float32)) / np.array(std, np.float32)
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, expected)
        scaled = pre(op="scale", factor=1 / 255)(hwc_item(img)).data
        np.testing.assert_array_equal(scaled, img * np.float32(1 / 255))

    def test_per_channel_follows_channel_axis_in_chw(self) -> None:
        img = np.zeros((2, 2, 3), dtype=np.float32)
        out = check_pre_op(pre(op="subtract_mean", value=[1, 2, 3]), chw_item(img)).data
        np.testing.assert_array_equal(out[:, 0, 0], [-1, -2, -3])
        out = check_pre_op(pre(op="subtract_mean", value=[1, 2, 3]), hwc_item(img)).data
        np.testing.assert_array_equal(out[0, 0], [-1, -2, -3])

    def test_per_channel_is_in_current_channel_order(self) -> None:
        img = np.zeros((1, 1, 3), dtype=np.float32)
        bgr = pre(op="color_layout", order="BGR")(hwc_item(img))
        out = pre(op="subtract_mean", value=[1, 2, 3])(bgr).data  # the list is B, G, R here
        np.testing.assert_array_equal(out[0, 0], [-1, -2, -3])


@pytest.mark.parametrize("value", [0, 0.0, [1.0, 0.0, 1.0]])
def test_zero_std_rejected_at_build(value: Any) -> None:
    with pytest.raises(OpSpecError, match="zero") as exc:
        pre(op="divide_std", value=value)
    assert exc.value.key == "value"


@pytest.mark.parametrize("value", [[1.0, 2.0], [1.0, 2.0, 3.0, 4.0]])
def test_per_channel_needs_three_values(value: list[float]) -> None:
    with pytest.raises(OpSpecError) as exc:
        pre(op="subtract_mean", value=value)
    assert exc.value.key == "value"
