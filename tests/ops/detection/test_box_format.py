"""box_format: each kind by hand, normalised <-> pixels by the named image, 1-based, exact round trips, errors."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from repliscope.errors import OpSpecError, RepliscopeError
from repliscope.ops.base import BoxFormat, Geometry, Predictions
from tests.ops.detection._helpers import XYXY_PX, boxes, detection_preds, post

BOX = [[10.0, 20.0, 50.0, 100.0]]  # xyxy pixels: x1 10, y1 20, x2 50, y2 100


def fmt(kind: str, normalized: bool = False, one_based: bool = False, space: str = "input") -> dict[str, Any]:
    return {"kind": kind, "normalized": normalized, "one_based": one_based, "space": space}


def convert(
    src: dict[str, Any],
    dst: dict[str, Any],
    rows: list[list[float]],
    image_size: list[int] | None = None,
    geometry: Geometry | None = None,
) -> np.ndarray:
    op = post(**{"op": "box_format", "from": src, "to": dst, "image_size": image_size})
    b = boxes(rows, fmt=BoxFormat(src["kind"], src["normalized"], src["one_based"], src["space"]))
    out = op(detection_preds(b, geometry=[geometry]))
    assert out.detections is not None
    assert out.detections[0].format == BoxFormat(dst["kind"], dst["normalized"], dst["one_based"], dst["space"])
    return out.detections[0].boxes


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("xyxy", [10, 20, 50, 100]),
        ("xywh", [10, 20, 40, 80]),
        ("cxcywh", [30, 60, 40, 80]),
        ("yxyx", [20, 10, 100, 50]),
    ],
)
def test_each_kind_by_hand(kind: str, expected: list[float]) -> None:
    np.testing.assert_array_equal(convert(fmt("xyxy"), fmt(kind), BOX), [expected])
    np.testing.assert_array_equal(convert(fmt(kind), fmt("xyxy"), [expected]), BOX)


def test_normalised_input_uses_image_size_height_for_y_and_width_for_x() -> None:
    out = convert(fmt("yxyx", normalized=True), fmt("xyxy"), [[0.25, 0.1, 0.5, 0.5]], image_size=[200, 100])
    np.testing.assert_array_equal(out, [[10, 50, 50, 100]])


def test_normalised_source_uses_each_samples_decoded_size() -> None:
    op = post(
        **{
            "op": "box_format",
            "from": fmt("xyxy", True, space="source"),
            "to": fmt("xyxy", space="source"),
            "image_size": None,
        }
    )
    b = boxes([[0.5, 0.5, 1.0, 1.0]], fmt=BoxFormat("xyxy", True, space="source"))
    out = op(detection_preds(b, b, geometry=[Geometry((100, 40)), Geometry((10, 20))]))
    assert out.detections is not None
    np.testing.assert_array_equal(out.detections[0].boxes, [[20, 50, 40, 100]])
    np.testing.assert_array_equal(out.detections[1].boxes, [[10, 5, 20, 10]])
    with pytest.raises(RepliscopeError, match="no geometry"):
        op(detection_preds(b))


def test_one_based_shifts_positions_not_sizes() -> None:
    np.testing.assert_array_equal(convert(fmt("xyxy", one_based=True), fmt("xyxy"), BOX), [[9, 19, 49, 99]])
    np.testing.assert_array_equal(
        convert(fmt("xywh"), fmt("xywh", one_based=True), [[10, 20, 40, 80]]), [[11, 21, 40, 80]]
    )
    np.testing.assert_array_equal(
        convert(fmt("cxcywh", one_based=True), fmt("xyxy"), [[30, 60, 40, 80]]), [[9, 19, 49, 99]]
    )


FORMATS = [
    fmt(k, n, o)
    for k, n, o in itertools.product(["xyxy", "xywh", "cxcywh", "yxyx"], [False, True], [False, True])
    if not (n and o)
]


@pytest.mark.parametrize(("a", "b"), list(itertools.product(FORMATS, FORMATS)))
@pytest.mark.parametrize(("size", "tol"), [([128, 256], 0.0), ([300, 500], 1e-6)])
def test_round_trip_a_b_a(a: dict[str, Any], b: dict[str, Any], size: list[int], tol: float) -> None:
    """Exact for dyadic coordinates and power-of-two sides; otherwise within float32 rounding: 1e-6 of the
    image side (normalised units, or 5e-4 px on a 500 px side)."""
    rng = np.random.default_rng(0)
    xy = rng.integers(0, 256, (20, 2)) / 4
    wh = rng.integers(1, 256, (20, 2)) / 4
    xyxy = np.concatenate([xy, xy + wh], axis=1)
    start = convert(fmt("xyxy"), a, xyxy.tolist(), image_size=size if a["normalized"] else None)
    mid = convert(a, b, start.tolist(), image_size=size if a["normalized"] != b["normalized"] else None)
    back = convert(b, a, mid.tolist(), image_size=size if a["normalized"] != b["normalized"] else None)
    np.testing.assert_allclose(back, start, rtol=0, atol=tol * (1 if a["normalized"] else max(size)))


@pytest.mark.parametrize(
    ("spec", "key", "allowed"),
    [
        ({"from": fmt("xyxy") | {"units": 1}}, "from.units", ["kind", "normalized", "one_based", "space"]),
        (
            {"from": {"kind": "xyxy", "normalized": False, "one_based": False}},
            "from.space",
            ["kind", "normalized", "one_based", "space"],
        ),
        ({"to": fmt("xyxyx")}, "to.kind", ["cxcywh", "xywh", "xyxy", "yxyx"]),
        ({"to": fmt("xyxy", space="model")}, "to.space", ["input", "source"]),
        ({"to": fmt("xyxy", normalized=True, one_based=True)}, "to.one_based", ["false"]),
        ({"to": fmt("xyxy", space="source")}, "to.space", ["input"]),
        ({"to": fmt("xyxy", normalized=True)}, "image_size", None),
        ({"image_size": [10, 10]}, "image_size", None),
        ({"from": {**fmt("xyxy"), "normalized": "yes"}}, "from.normalized", ["false", "true"]),
    ],
)
def test_bad_params_name_the_field(spec: dict[str, Any], key: str, allowed: list[str] | None) -> None:
    full = {"op": "box_format", "from": fmt("xyxy"), "to": fmt("xywh"), "image_size": None, **spec}
    with pytest.raises(OpSpecError) as exc:
        post(**full)
    assert exc.value.key == key and exc.value.allowed == allowed


def test_boxes_in_another_format_than_from_are_refused() -> None:
    op = post(**{"op": "box_format", "from": fmt("yxyx"), "to": XYXY_PX, "image_size": None})
    with pytest.raises(RepliscopeError, match=r"expects boxes in yxyx pixels .* but they are xyxy pixels"):
        op(detection_preds(boxes(BOX)))


def test_classification_predictions_are_refused_and_topk_refuses_detections() -> None:
    op = post(**{"op": "box_format", "from": fmt("xyxy"), "to": fmt("xywh"), "image_size": None})
    cls = Predictions(scores=np.zeros((1, 3), np.float32), topk_indices=np.zeros((1, 1), np.int64))
    with pytest.raises(RepliscopeError, match="classification predictions"):
        op(cls)
    with pytest.raises(RepliscopeError, match="put 'detections_from_outputs' or 'anchor_decode' before it"):
        op(Predictions(scores=np.zeros((1, 3), np.float32)))
    with pytest.raises(RepliscopeError, match="detection predictions"):
        post(op="topk", k=1)(detection_preds(boxes(BOX)))


def test_describe_records_both_formats() -> None:
    op = post(**{"op": "box_format", "from": fmt("yxyx", True), "to": XYXY_PX, "image_size": [300, 300]})
    assert op.describe() == {
        "op": "box_format",
        "from": fmt("yxyx", True),
        "to": XYXY_PX,
        "image_size": [300, 300],
        "library": "numpy",
        "library_version": np.__version__,
    }
