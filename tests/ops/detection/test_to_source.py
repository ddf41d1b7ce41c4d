"""to_source: the inverse of the pre-processing geometry (letterbox, resize, crop), its bug modes, refusals."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from repliscope.errors import OpSpecError, RepliscopeError
from repliscope.ops.base import FINAL_BOX_FORMAT, BoxFormat, Geometry, Item
from repliscope.ops.detection._common import from_xyxy
from tests.ops._helpers import pre, smooth_rgb
from tests.ops.detection._helpers import boxes, detection_preds, post

TO_SOURCE = {"op": "to_source", "undo": "geometry", "clip": False}
SOURCE_BOXES = np.array([[12.5, 30.25, 200.0, 140.75], [0.0, 0.0, 37.0, 11.0], [150.0, 60.0, 299.5, 199.0]])


@pytest.mark.parametrize(
    ("hw", "pre_specs"),
    [
        (
            (200, 300),
            [
                {
                    "op": "letterbox",
                    "size": [320, 320],
                    "color": [114, 114, 114],
                    "position": "center",
                    "order": "resize_then_pad",
                    "method": "bilinear",
                    "library": "pillow",
                    "antialias": True,
                }
            ],
        ),
        (
            (200, 300),
            [
                {
                    "op": "letterbox",
                    "size": [192, 256],
                    "color": [0, 0, 0],
                    "position": "top_left",
                    "order": "resize_then_pad",
                    "method": "bilinear",
                    "library": "opencv",
                    "antialias": False,
                }
            ],
        ),
        (
            (200, 300),
            [
                {
                    "op": "resize",
                    "size": 160,
                    "keep_aspect_ratio": True,
                    "method": "bilinear",
                    "library": "pillow",
                    "antialias": True,
                },
                {"op": "center_crop", "size": 150},
            ],
        ),
        (
            (200, 300),
            [
                {
                    "op": "resize",
                    "size": [300, 300],
                    "keep_aspect_ratio": False,
                    "method": "bilinear",
                    "library": "pillow",
                    "antialias": True,
                }
            ],
        ),
    ],
)
@pytest.mark.parametrize("kind", ["xyxy", "cxcywh"])
def test_preprocess_then_to_source_returns_the_source_boxes(
    hw: tuple[int, int], pre_specs: list[dict[str, Any]], kind: str
) -> None:
    item = Item(smooth_rgb(*hw), "HWC", "RGB", Geometry(hw))
    for spec in pre_specs:
        item = pre(**spec)(item)
    g = item.geometry
    assert g is not None
    (sy, sx), (oy, ox) = g.scale, g.offset
    input_xyxy = SOURCE_BOXES * [sx, sy, sx, sy] + [ox, oy, ox, oy]
    b = boxes(from_xyxy(input_xyxy, kind).tolist(), fmt=BoxFormat(kind, normalized=False))  # type: ignore[arg-type]
    out = post(**TO_SOURCE)(detection_preds(b, geometry=[g]))
    assert out.detections is not None
    assert out.detections[0].format == FINAL_BOX_FORMAT
    np.testing.assert_allclose(out.detections[0].boxes, SOURCE_BOXES, rtol=0, atol=1e-4)


def test_bug_modes_and_clip_by_hand() -> None:
    g = Geometry((100, 200), (0.5, 0.5), (25.0, 0.0))  # letterbox 100x200 -> 50x100 in a 100x100 canvas
    b = boxes([[10.0, 30.0, 50.0, 70.0]])
    run = {
        undo: post(**{**TO_SOURCE, "undo": undo})(detection_preds(b, geometry=[g]))
        for undo in ("geometry", "scale_only", "nothing")
    }
    got = {undo: p.detections[0].boxes.tolist() for undo, p in run.items() if p.detections is not None}
    assert got == {"geometry": [[20, 10, 100, 90]], "scale_only": [[20, 60, 100, 140]], "nothing": [[10, 30, 50, 70]]}
    clipped = post(**{**TO_SOURCE, "clip": True})(detection_preds(boxes([[-10.0, 0.0, 150.0, 90.0]]), geometry=[g]))
    assert clipped.detections is not None
    assert clipped.detections[0].boxes.tolist() == [[0, 0, 200, 100]]


def test_one_based_input_pixels_are_read_as_such() -> None:
    b = boxes([[11.0, 31.0, 51.0, 71.0]], fmt=BoxFormat("xyxy", normalized=False, one_based=True))
    out = post(**TO_SOURCE)(detection_preds(b, geometry=[Geometry((50, 50))]))
    assert out.detections is not None and out.detections[0].boxes.tolist() == [[10, 30, 50, 70]]


def test_refuses_normalised_or_source_boxes_and_missing_geometry() -> None:
    op = post(**TO_SOURCE)
    with pytest.raises(RepliscopeError, match=r"input-image pixels, got xyxy normalised .*put 'box_format'"):
        op(detection_preds(boxes([[0.1, 0.1, 0.2, 0.2]], fmt=BoxFormat("xyxy", True)), geometry=[Geometry((9, 9))]))
    with pytest.raises(RepliscopeError, match=r"got xyxy pixels \(source image\)"):
        op(detection_preds(boxes([[1, 1, 2, 2]], fmt=FINAL_BOX_FORMAT), geometry=[Geometry((9, 9))]))
    with pytest.raises(RepliscopeError, match="needs each sample's geometry"):
        op(detection_preds(boxes([[1, 1, 2, 2]])))
    with pytest.raises(OpSpecError) as exc:
        post(**{**TO_SOURCE, "undo": "offset"})
    assert exc.value.key == "undo" and exc.value.allowed == ["geometry", "nothing", "scale_only"]
    with pytest.raises(OpSpecError) as exc:
        post(op="to_source", undo="geometry")
    assert exc.value.key == "clip" and "required" in exc.value.message
