"""decode -> resize -> center_crop / letterbox: Item.geometry says where a source box lands (pixel edges)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from PIL import Image

from repliscope.ops import decode_input
from repliscope.ops.base import Geometry, Item
from repliscope.ops.pipeline import Pipeline
from tests.ops._helpers import encode

DECODE = {"op": "decode", "library": "pillow", "channels": "RGB"}
RESIZE = {"op": "resize", "method": "bilinear", "library": "pillow", "antialias": True}


def box_image(height: int, width: int, box: tuple[int, int, int, int]) -> bytes:
    """PNG of a black image with a white xyxy box (integer pixel edges)."""
    img = np.zeros((height, width, 3), np.uint8)
    x1, y1, x2, y2 = box
    img[y1:y2, x1:x2] = 255
    return encode(Image.fromarray(img), "PNG")


def run(pre: list[dict[str, Any]], data: bytes) -> Item:
    pipe = Pipeline.from_specs([DECODE, *pre], [])
    return pipe.preprocess(decode_input(data))


def centroid(item: Item) -> tuple[float, float]:
    """Intensity-weighted centre (x, y) of the first channel, in pixel-edge coordinates."""
    plane = item.data[..., 0].astype(np.float64)
    yy, xx = np.mgrid[0 : plane.shape[0], 0 : plane.shape[1]]
    return float((plane * (xx + 0.5)).sum() / plane.sum()), float((plane * (yy + 0.5)).sum() / plane.sum())


def mapped(g: Geometry, box: tuple[int, int, int, int]) -> np.ndarray:
    (sy, sx), (oy, ox) = g.scale, g.offset
    x1, y1, x2, y2 = box
    return np.array([x1 * sx + ox, y1 * sy + oy, x2 * sx + ox, y2 * sy + oy])


CASES = [
    (
        (375, 500),
        [{**RESIZE, "size": 256, "keep_aspect_ratio": True}, {"op": "center_crop", "size": 224}],
        Geometry((375, 500), (256 / 375, 341 / 500), (-16.0, -58.0)),
    ),
    (
        (375, 500),
        [{**RESIZE, "size": [224, 224], "keep_aspect_ratio": False}],
        Geometry((375, 500), (224 / 375, 224 / 500), (0.0, 0.0)),
    ),
    (
        (375, 500),
        [
            {
                "op": "letterbox",
                "size": [320, 320],
                "color": [0, 0, 0],
                "position": "center",
                "order": "resize_then_pad",
                "method": "bilinear",
                "library": "pillow",
                "antialias": True,
            }
        ],
        Geometry((375, 500), (0.64, 0.64), (40.0, 0.0)),
    ),
    (
        (480, 360),
        [
            {
                "op": "letterbox",
                "size": [256, 320],
                "color": [0, 0, 0],
                "position": "center",
                "order": "resize_then_pad",
                "method": "area",
                "library": "opencv",
                "antialias": True,
            }
        ],
        Geometry((480, 360), (256 / 480, 192 / 360), (0.0, 64.0)),
    ),
    (
        (300, 200),
        [
            {
                "op": "letterbox",
                "size": [160, 160],
                "color": [0, 0, 0],
                "position": "top_left",
                "order": "resize_then_pad",
                "method": "bilinear",
                "library": "pillow",
                "antialias": True,
            }
        ],
        Geometry((300, 200), (160 / 300, 107 / 200), (0.0, 0.0)),
    ),
    (
        (375, 500),
        [
            {
                "op": "letterbox",
                "size": [192, 192],
                "color": [0, 0, 0],
                "position": "center",
                "order": "pad_then_resize",
                "method": "bilinear",
                "library": "pillow",
                "antialias": True,
            }
        ],
        Geometry((375, 500), (0.384, 0.384), (62 * 0.384, 0.0)),
    ),
    (
        (120, 90),
        [
            {**RESIZE, "size": [100, 100], "keep_aspect_ratio": True, "fit": "inside"},
            {"op": "center_crop", "size": 100, "fill": 0},
        ],
        Geometry((120, 90), (100 / 120, 75 / 90), (0.0, 12.0)),
    ),
    (
        (200, 150),
        [{**RESIZE, "size": [96, 128], "keep_aspect_ratio": False, "library": "go_imaging"}],
        Geometry((200, 150), (96 / 200, 128 / 150), (0.0, 0.0)),
    ),
]


@pytest.mark.parametrize(("hw", "pre", "expected"), CASES)
def test_geometry_is_exact_and_the_box_lands_there(
    hw: tuple[int, int], pre: list[dict[str, Any]], expected: Geometry
) -> None:
    h, w = hw
    box = (w // 5, h // 4, w // 5 + w // 3, h // 4 + h // 3)
    out = run(pre, box_image(h, w, box))
    g = out.geometry
    assert g is not None and g.source_hw == expected.source_hw
    np.testing.assert_allclose(g.scale, expected.scale, rtol=0, atol=1e-6)
    np.testing.assert_allclose(g.offset, expected.offset, rtol=0, atol=1e-6)
    x1, y1, x2, y2 = mapped(g, box)
    cx, cy = centroid(out)
    assert abs(cx - (x1 + x2) / 2) < 0.03 and abs(cy - (y1 + y2) / 2) < 0.03  # a half-pixel error would be 0.5
    mask = out.data[..., 0] > 127
    cols, rows = np.flatnonzero(mask.any(axis=0)), np.flatnonzero(mask.any(axis=1))
    assert abs(cols[0] - x1) <= 1 and abs(cols[-1] + 1 - x2) <= 1
    assert abs(rows[0] - y1) <= 1 and abs(rows[-1] + 1 - y2) <= 1
    # and back: the inverse maps the mapped box onto the source box
    np.testing.assert_allclose(g.to_source_xyxy(np.array([[x1, y1, x2, y2]])), [box], atol=1e-4)


def test_decode_starts_the_identity_and_value_ops_keep_it() -> None:
    out = run(
        [
            {"op": "to_float", "dtype": "float32"},
            {"op": "scale", "factor": 0.5},
            {"op": "data_layout", "layout": "NCHW"},
        ],
        box_image(30, 40, (1, 2, 3, 4)),
    )
    assert out.geometry == Geometry((30, 40))


def test_crop_of_a_larger_image_and_chw_resize_compose() -> None:
    out = run(
        [
            {**RESIZE, "size": 64, "keep_aspect_ratio": True},
            {"op": "data_layout", "layout": "NCHW"},
            {"op": "center_crop", "size": [50, 60]},
        ],
        box_image(100, 200, (10, 10, 20, 20)),
    )
    # 100x200 -> 64x128 (scale 0.64); crop 50x60: top round(7.0) = 7, left round(34.0) = 34
    assert out.geometry is not None
    assert out.geometry.scale == (0.64, 0.64) and out.geometry.offset == (-7.0, -34.0)


def test_ops_without_geometry_keep_none() -> None:
    from tests.ops._helpers import hwc_item, pre, smooth_rgb

    item = hwc_item(smooth_rgb(20, 30))
    assert pre(**{**RESIZE, "size": 10, "keep_aspect_ratio": True})(item).geometry is None
    assert pre(op="center_crop", size=8)(item).geometry is None


def test_libjpeg_dct_downscale_keeps_the_file_as_source() -> None:
    """A DCT-domain downscale by M/8 is a scale of the FILE's pixel grid: boxes map back to the file (where
    the annotations live), not to the downscaled image (regression: the geometry's source was the scaled image)."""
    pytest.importorskip("simplejpeg")
    import io

    from repliscope.ops.decode import Decode, DecodeParams

    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (10, 200, 30)).save(buf, format="JPEG", quality=95)
    data = np.frombuffer(buf.getvalue(), dtype=np.uint8)
    op = Decode(
        DecodeParams(
            library="libjpeg_turbo", channels="RGB", dct_scale_to=[24, 32], fancy_upsampling=True, dct_method="islow"
        )
    )
    out = op(Item(data, layout="encoded"))
    assert out.data.shape == (24, 32, 3)
    assert out.geometry is not None
    assert out.geometry.source_hw == (48, 64)
    assert out.geometry.scale == (0.5, 0.5) and out.geometry.offset == (0.0, 0.0)
    np.testing.assert_allclose(
        out.geometry.to_source_xyxy(np.array([[4.0, 2.0, 16.0, 12.0]])), [[8.0, 4.0, 32.0, 24.0]]
    )
    plain = Decode(
        DecodeParams(
            library="libjpeg_turbo", channels="RGB", dct_scale_to=None, fancy_upsampling=True, dct_method="islow"
        )
    )(Item(data, layout="encoded"))
    assert plain.geometry is not None and plain.geometry.source_hw == (48, 64) and plain.geometry.scale == (1.0, 1.0)
