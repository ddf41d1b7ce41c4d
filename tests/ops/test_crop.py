"""center_crop: torchvision's offsets (int(round((H - h) / 2.0))), fraction, zero padding, HWC and CHW."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from repliscope.errors import OpSpecError
from repliscope.ops.crop import CenterCrop
from tests.ops._helpers import check_pre_op, chw_item, hwc_item, pre, smooth_rgb


def crop(**params: Any) -> CenterCrop:
    op = pre(op="center_crop", **params)
    assert isinstance(op, CenterCrop)
    return op


def coords(height: int, width: int) -> np.ndarray:
    """HxWx3 int32 image whose pixel (y, x) holds (y, x, 0): the output tells where the window started."""
    yy, xx = np.mgrid[0:height, 0:width]
    return np.stack([yy, xx, np.zeros_like(yy)], axis=-1).astype(np.int32)


@pytest.mark.parametrize(
    ("height", "crop_h", "top"),
    [
        (10, 10, 0),
        (11, 10, 0),  # diff 1: round(0.5) = 0
        (12, 10, 1),
        (13, 10, 2),  # diff 3: round(1.5) = 2, not 3 // 2 = 1
        (15, 10, 2),  # diff 5: round(2.5) = 2
        (17, 10, 4),  # diff 7: round(3.5) = 4, not 3
        (341, 224, 58),  # diff 117: round(58.5) = 58
    ],
)
def test_offsets_follow_torchvision(height: int, crop_h: int, top: int) -> None:
    img = coords(height, height + 6)
    out = check_pre_op(crop(size=crop_h), hwc_item(img)).data
    assert out.shape == (crop_h, crop_h, 3)
    assert out[0, 0, 0] == top
    assert out[0, 0, 1] == round((height + 6 - crop_h) / 2.0)


def test_offset_rule_vs_floor_division() -> None:
    """torchvision's rule equals (H - h) // 2 except when H - h is 3 mod 4."""
    for diff in range(40):
        torchvision = int(round(diff / 2.0))  # noqa: RUF046
        assert torchvision == diff // 2 + (1 if diff % 4 == 3 else 0)


def test_rectangular_size_and_chw() -> None:
    img = coords(20, 30)
    out = check_pre_op(crop(size=[8, 12]), hwc_item(img)).data
    assert out.shape == (8, 12, 3)
    assert (out[0, 0, 0], out[0, 0, 1]) == (6, 9)
    out_chw = check_pre_op(crop(size=[8, 12]), chw_item(img)).data
    np.testing.assert_array_equal(out_chw, out.transpose(2, 0, 1))


@pytest.mark.parametrize(
    ("hw", "fraction", "side"),
    [
        ((256, 341), 0.875, 224),
        ((300, 400), 0.875, 262),  # 262.5 -> 262 (half to even)
        ((100, 50), 0.5, 25),
        ((7, 9), 1.0, 7),
    ],
)
def test_fraction_of_shorter_side(hw: tuple[int, int], fraction: float, side: int) -> None:
    op = crop(fraction=fraction)
    assert op.crop_size(*hw) == (side, side)
    assert check_pre_op(op, hwc_item(smooth_rgb(*hw))).data.shape == (side, side, 3)


@pytest.mark.parametrize("layout", ["HWC", "CHW"])
def test_smaller_image_is_zero_padded_like_torchvision(layout: str) -> None:
    img = smooth_rgb(3, 4) + 1  # no zeros inside
    item = hwc_item(img) if layout == "HWC" else chw_item(img)
    out = check_pre_op(crop(size=[6, 5]), item).data
    hwc = out if layout == "HWC" else out.transpose(1, 2, 0)
    assert hwc.shape == (6, 5, 3)
    # rows: (6-3)//2 = 1 before, 2 after; columns: (5-4)//2 = 0 before, 1 after
    np.testing.assert_array_equal(hwc[1:4, 0:4], img)
    assert (hwc[0] == 0).all() and (hwc[4:] == 0).all() and (hwc[:, 4] == 0).all()


def test_padding_in_one_dimension_only() -> None:
    img = coords(4, 20)
    out = crop(size=[6, 10])(hwc_item(img)).data
    assert out.shape == (6, 10, 3)
    assert (out[0] == 0).all()  # one padded row on top
    assert out[1, 0, 1] == 5  # columns still centred: round(10 / 2) = 5


@pytest.mark.parametrize("params", [{}, {"size": 4, "fraction": 0.5}])
def test_exactly_one_of_size_and_fraction(params: dict[str, Any]) -> None:
    with pytest.raises(OpSpecError, match="exactly one"):
        crop(**params)


@pytest.mark.parametrize("fraction", [0.0, 1.5, -0.1])
def test_fraction_range(fraction: float) -> None:
    with pytest.raises(OpSpecError) as exc:
        crop(fraction=fraction)
    assert exc.value.key == "fraction"


class TestFill:
    """timm's CenterCropOrPad(size, fill): pad (w - W) // 2 before, (w - W + 1) // 2 after with the fill colour."""

    def test_per_channel_fill_hwc_and_chw(self) -> None:
        img = np.full((3, 5, 3), 9, np.uint8)  # 3x5 into 6x4: rows padded 1 before, 2 after; columns cropped
        op = crop(size=[6, 4], fill=[124, 116, 104])
        out = check_pre_op(op, hwc_item(img)).data
        assert out.shape == (6, 4, 3)
        np.testing.assert_array_equal(out[1:4], 9)
        for rows in (out[:1], out[4:]):
            np.testing.assert_array_equal(rows, np.broadcast_to(np.array([124, 116, 104], np.uint8), rows.shape))
        out_chw = check_pre_op(op, chw_item(img)).data
        np.testing.assert_array_equal(out_chw, out.transpose(2, 0, 1))

    def test_scalar_fill_and_crop_offset_after_padding(self) -> None:
        img = coords(2, 7)  # 2x7 into 5x4: rows 1 before, 2 after; columns cropped at round(3 / 2) = 2
        out = crop(size=[5, 4], fill=-1)(hwc_item(img)).data
        np.testing.assert_array_equal(out[[0, 3, 4]], -1)
        np.testing.assert_array_equal(out[1:3, :, 1], [[2, 3, 4, 5], [2, 3, 4, 5]])

    def test_static_shape_accepts_padding_when_fill_is_given(self) -> None:
        from repliscope.ops.base import StaticShape

        small = StaticShape("HWC", 100, 120, 100, 3)
        assert crop(size=224, fill=0).static_shape(small) == StaticShape("HWC", 224, 224, 224, 3)
        with pytest.raises(OpSpecError, match="larger than the image"):
            crop(size=224).static_shape(small)
        with pytest.raises(OpSpecError, match="2 values for 3 channels") as exc:
            crop(size=224, fill=[1, 2]).static_shape(small)
        assert exc.value.key == "fill"

    @pytest.mark.parametrize("fill", [0.5, 256, -1, [1, 2]])
    def test_fill_must_fit_the_image(self, fill: Any) -> None:
        with pytest.raises(OpSpecError) as exc:
            crop(size=8, fill=fill)(hwc_item(smooth_rgb(4, 4)))
        assert exc.value.key == "fill"
