"""Detection pitfall variants: each changes exactly the op it says on small detection pipelines, or is not
applicable with a reason; the derived pipelines still run."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest

from repliscope.manifest.loader import build_ops, load_manifest
from repliscope.ops.base import FINAL_BOX_FORMAT, BuildContext, Geometry, Predictions
from repliscope.ops.pipeline import Pipeline
from repliscope.pitfalls.base import PITFALLS, Derived, NotApplicable, PitfallContext
from tests.conftest import LITE0

CTX = PitfallContext(input_shape=(-1, 300, 300, 3), input_layout="NHWC", runtime="tensorflow", batch_size=4, threads=2)
DECODE = {"op": "decode", "library": "pillow", "channels": "RGB"}
STRETCH = {
    "op": "resize",
    "size": [300, 300],
    "keep_aspect_ratio": False,
    "method": "bilinear",
    "library": "pillow",
    "antialias": True,
}
YXYX_NORM = {"kind": "yxyx", "normalized": True, "one_based": False, "space": "input"}
XYWH_PX = {"kind": "xywh", "normalized": False, "one_based": False, "space": "input"}
XYXY_NORM = {"kind": "xyxy", "normalized": True, "one_based": False, "space": "input"}
XYXY_PX = {"kind": "xyxy", "normalized": False, "one_based": False, "space": "input"}
TO_SOURCE = {"op": "to_source", "undo": "geometry", "clip": True}
NMS = {
    "op": "nms",
    "method": "hard",
    "iou_threshold": 0.5,
    "class_aware": True,
    "max_output": 100,
    "soft_function": None,
    "sigma": None,
    "min_score": None,
}

# TF OD API style: NMS in the graph, yxyx normalised boxes, 1-based COCO ids, uint8 input
SSD = Pipeline.from_specs(
    [DECODE, STRETCH],
    [
        {
            "op": "detections_from_outputs",
            "boxes": "detection_boxes",
            "scores": "detection_scores",
            "classes": "detection_classes",
            "count": "num_detections",
            "format": YXYX_NORM,
        },
        {"op": "box_format", "from": YXYX_NORM, "to": XYXY_PX, "image_size": [300, 300]},
        TO_SOURCE,
        {"op": "class_map", "background": None, "offset": 0, "table": "none"},
    ],
)
# YOLO-like: letterbox 256x320, [0, 1] input, xywh pixel boxes, 0-based classes, NMS outside the graph
YOLO = Pipeline.from_specs(
    [
        DECODE,
        {
            "op": "letterbox",
            "size": [256, 320],
            "color": [114, 114, 114],
            "position": "center",
            "order": "resize_then_pad",
            "method": "bilinear",
            "library": "opencv",
            "antialias": False,
        },
        {"op": "to_float", "dtype": "float32"},
        {"op": "scale", "factor": 1 / 255},
    ],
    [
        {
            "op": "detections_from_outputs",
            "boxes": "boxes",
            "scores": "scores",
            "classes": "classes",
            "count": None,
            "format": XYWH_PX,
        },
        {"op": "score_threshold", "threshold": 0.25, "keep": "gt"},
        NMS,
        {"op": "box_format", "from": XYWH_PX, "to": XYXY_PX, "image_size": None},
        TO_SOURCE,
        {"op": "class_map", "background": None, "offset": 1, "table": "none"},
    ],
)
# BlazeFace-like: letterbox 128x128, [-1, 1] input, anchors, weighted NMS, one class (id 1)
FACE = Pipeline.from_specs(
    [
        DECODE,
        {
            "op": "letterbox",
            "size": [128, 128],
            "color": [0, 0, 0],
            "position": "center",
            "order": "resize_then_pad",
            "method": "bilinear",
            "library": "pillow",
            "antialias": True,
        },
        {"op": "to_float", "dtype": "float32"},
        {"op": "scale", "factor": 1 / 127.5},
        {"op": "subtract_mean", "value": 1.0},
    ],
    [
        {"op": "score_activation", "function": "sigmoid", "clip": 100.0, "output": "classificators"},
        {
            "op": "anchor_decode",
            "boxes": "regressors",
            "scores": "classificators",
            "class_selection": "max",
            "num_layers": 1,
            "strides": [32],
            "input_size": [128, 128],
            "min_scale": 0.2,
            "max_scale": 0.8,
            "aspect_ratios": [1.0],
            "anchor_offset_x": 0.5,
            "anchor_offset_y": 0.5,
            "fixed_anchor_size": True,
            "interpolated_scale_aspect_ratio": 0.0,
            "reduce_boxes_in_lowest_layer": False,
            "box_order": "xywh",
            "x_scale": 128.0,
            "y_scale": 128.0,
            "w_scale": 128.0,
            "h_scale": 128.0,
            "apply_exp_scaling": False,
        },
        {"op": "score_threshold", "threshold": 0.5, "keep": "ge"},
        {**NMS, "method": "weighted", "iou_threshold": 0.3, "class_aware": False},
        {"op": "box_format", "from": XYXY_NORM, "to": XYXY_PX, "image_size": [128, 128]},
        TO_SOURCE,
        {"op": "class_map", "background": None, "offset": 1, "table": "none"},
    ],
)


DETECTION_PITFALLS = (
    "letterbox_stretch_swapped",
    "input_range_swapped",
    "letterbox_not_undone",
    "input_pixels_as_source",
    "box_xyxy_xywh_swapped",
    "box_yxyx_xyxy_swapped",
    "normalized_sides_swapped",
    "box_off_by_one",
    "class_id_plus_1",
    "class_id_minus_1",
    "nms_iou_0.3",
    "nms_iou_0.7",
)


@pytest.fixture(autouse=True, scope="module")
def _registered() -> None:
    """Importing the module registers the variants (with their task: classification sweeps do not see them)."""
    importlib.import_module("repliscope.pitfalls.detection_variants")


def derive(name: str, base: Pipeline) -> Derived:
    return PITFALLS.get(name)().derive(base, CTX)


def changed(base: Pipeline, derived: Pipeline) -> dict[str, list[tuple[int, dict[str, Any], dict[str, Any]]]]:
    """Per section, the (index, old, new) op descriptions that differ (same op count assumed)."""
    a, b = base.describe(), derived.describe()
    out: dict[str, list[tuple[int, dict[str, Any], dict[str, Any]]]] = {}
    for section in ("preprocess", "postprocess"):
        assert len(a[section]) == len(b[section])
        diffs = [(i, x, y) for i, (x, y) in enumerate(zip(a[section], b[section], strict=True)) if x != y]
        if diffs:
            out[section] = diffs
    return out


def only_change(base: Pipeline, derived: Pipeline, section: str, index: int, **params: Any) -> None:
    diff = changed(base, derived)
    assert list(diff) == [section] and [i for i, _, _ in diff[section]] == [index]
    _, old, new = diff[section][0]
    assert {k: v for k, v in new.items() if old.get(k) != v} == params


def test_every_detection_variant_is_registered_for_the_detection_task() -> None:
    from repliscope.pitfalls import detection_variants

    assert detection_variants.DETECTION_PITFALLS == DETECTION_PITFALLS
    assert all(PITFALLS.get(name).tasks == ("object_detection",) for name in DETECTION_PITFALLS)


def test_letterbox_stretch_both_ways() -> None:
    d = derive("letterbox_stretch_swapped", YOLO)
    assert d.change == "letterbox [256, 320] -> resize (stretch) to [256, 320]"
    assert d.pipeline.pre_ops[1].params.model_dump() == {
        "size": [256, 320],
        "keep_aspect_ratio": False,
        "method": "bilinear",
        "library": "opencv",
        "antialias": False,
        "long_side": "round",
        "fit": None,
    }
    assert changed(YOLO, d.pipeline).keys() == {"preprocess"}
    back = derive("letterbox_stretch_swapped", SSD)
    new = back.pipeline.describe()["preprocess"][1]
    assert (new["op"], new["size"], new["color"], new["position"]) == ("letterbox", [300, 300], [0, 0, 0], "center")


def test_input_range_both_ways_and_not_for_uint8_models() -> None:
    d = derive("input_range_swapped", YOLO)
    assert [op.name for op in d.pipeline.pre_ops] == ["decode", "letterbox", "to_float", "scale", "subtract_mean"]
    assert d.pipeline.pre_ops[3].params.factor == pytest.approx(1 / 127.5)  # type: ignore[attr-defined]
    assert d.pipeline.pre_ops[4].params.value == 1.0  # type: ignore[attr-defined]
    f = derive("input_range_swapped", FACE)
    assert [op.name for op in f.pipeline.pre_ops] == ["decode", "letterbox", "to_float", "scale"]
    assert f.pipeline.pre_ops[3].params.factor == pytest.approx(1 / 255)  # type: ignore[attr-defined]
    with pytest.raises(NotApplicable, match="no scale / subtract_mean / divide_std"):
        derive("input_range_swapped", SSD)


def test_to_source_variants() -> None:
    only_change(YOLO, derive("letterbox_not_undone", YOLO).pipeline, "postprocess", 4, undo="scale_only")
    only_change(FACE, derive("input_pixels_as_source", FACE).pipeline, "postprocess", 5, undo="nothing")
    with pytest.raises(NotApplicable, match="no 'letterbox' op"):
        derive("letterbox_not_undone", SSD)


def test_format_misreads_change_the_reading_and_the_conversion_written_for_it() -> None:
    d = derive("box_yxyx_xyxy_swapped", SSD)
    diff = changed(SSD, d.pipeline)
    assert list(diff) == ["postprocess"] and [i for i, _, _ in diff["postprocess"]] == [0, 1]
    assert d.pipeline.describe()["postprocess"][0]["format"] == {**YXYX_NORM, "kind": "xyxy"}
    assert d.pipeline.describe()["postprocess"][1]["from"] == {**YXYX_NORM, "kind": "xyxy"}
    assert (
        d.change == "detections_from_outputs.format yxyx normalised -> xyxy normalised, box_format.from xyxy normalised"
    )
    only_change(FACE, derive("box_yxyx_xyxy_swapped", FACE).pipeline, "postprocess", 1, box_order="yxhw")
    y = derive("box_xyxy_xywh_swapped", YOLO)
    assert [i for i, _, _ in changed(YOLO, y.pipeline)["postprocess"]] == [0, 3]
    assert y.pipeline.describe()["postprocess"][3]["from"]["kind"] == "xyxy"
    with pytest.raises(NotApplicable, match="yxyx normalised: no xyxy / xywh to confuse"):
        derive("box_xyxy_xywh_swapped", SSD)
    with pytest.raises(NotApplicable, match="anchor_decode"):
        derive("box_xyxy_xywh_swapped", FACE)
    off = derive("box_off_by_one", YOLO)
    assert off.pipeline.describe()["postprocess"][0]["format"] == {**XYWH_PX, "one_based": True}
    assert off.change == "detections_from_outputs.format xywh px -> xywh 1-based px, box_format.from xywh 1-based px"
    with pytest.raises(NotApplicable, match="normalised: no pixel index base"):
        derive("box_off_by_one", SSD)


def test_sides_class_ids_and_nms() -> None:
    stretched = Pipeline(
        SSD.pre_ops,
        [
            SSD.post_ops[0],
            *Pipeline.from_specs(
                [], [{"op": "box_format", "from": YXYX_NORM, "to": XYXY_PX, "image_size": [240, 320]}]
            ).post_ops,
            *SSD.post_ops[2:],
        ],
    )
    only_change(
        stretched, derive("normalized_sides_swapped", stretched).pipeline, "postprocess", 1, image_size=[320, 240]
    )
    with pytest.raises(NotApplicable, match=r"square \(300x300\)"):
        derive("normalized_sides_swapped", SSD)
    only_change(YOLO, derive("class_id_plus_1", YOLO).pipeline, "postprocess", 5, offset=2)
    only_change(SSD, derive("class_id_minus_1", SSD).pipeline, "postprocess", 3, offset=-1)
    only_change(YOLO, derive("nms_iou_0.3", YOLO).pipeline, "postprocess", 2, iou_threshold=0.3)
    only_change(FACE, derive("nms_iou_0.7", FACE).pipeline, "postprocess", 3, iou_threshold=0.7)
    with pytest.raises(NotApplicable, match=r"already 0\.3"):
        derive("nms_iou_0.3", FACE)
    with pytest.raises(NotApplicable, match="no 'nms' post-processing op"):
        derive("nms_iou_0.7", SSD)


def test_every_detection_variant_is_not_applicable_to_a_classification_pipeline() -> None:
    loaded = load_manifest(LITE0)
    lite0 = Pipeline(*build_ops(loaded, BuildContext(class_names=tuple(str(i) for i in range(1000)))))
    for name in DETECTION_PITFALLS:
        with pytest.raises(NotApplicable):
            derive(name, lite0)


def ssd_outputs() -> Predictions:
    boxes = np.array([[[0.1, 0.2, 0.5, 0.6], [0.0, 0.0, 1.0, 1.0]]], np.float32)  # yxyx normalised
    return Predictions(
        scores=np.zeros((1, 1), np.float32),
        geometry=[Geometry((150, 600), (2.0, 0.5))],
        outputs={
            "detection_boxes": boxes,
            "detection_scores": np.array([[0.9, 0.8]], np.float32),
            "detection_classes": np.array([[1.0, 18.0]], np.float32),
            "num_detections": np.array([1.0], np.float32),
        },
    )


def test_derived_pipelines_run_and_end_in_the_final_format() -> None:
    preds = ssd_outputs()
    for op in SSD.post_ops:
        preds = op(preds)
    assert preds.detections is not None and preds.detections[0].format == FINAL_BOX_FORMAT
    np.testing.assert_allclose(preds.detections[0].boxes, [[120, 15, 360, 75]], rtol=1e-6)
    misread = ssd_outputs()
    for op in derive("box_yxyx_xyxy_swapped", SSD).pipeline.post_ops:
        misread = op(misread)
    assert misread.detections is not None and misread.detections[0].format == FINAL_BOX_FORMAT
    np.testing.assert_allclose(misread.detections[0].boxes, [[60, 30, 300, 90]], rtol=1e-6)  # x and y swapped


def test_resize_variants_change_a_letterboxs_resampling() -> None:
    """A letterbox resamples with resize's parameters, so the resize pitfalls apply to it (BlazeFace's
    pillow letterbox done by OpenCV is the classic PIL vs cv2 gap; were 'not applicable: no resize op')."""
    lib = derive("resize_library_swapped", FACE)
    [(index, old, new)] = changed(FACE, lib.pipeline)["preprocess"]
    assert index == 1 and {k for k in new if old.get(k) != new[k]} == {"library", "library_version", "antialias"}
    assert (new["op"], new["library"], new["antialias"], new["order"]) == (
        "letterbox",
        "opencv",
        False,
        "resize_then_pad",
    )
    assert lib.change == "letterbox.library pillow -> opencv (antialias True -> False)"
    nearest = derive("resize_nearest", FACE)
    only_change(FACE, nearest.pipeline, "preprocess", 1, method="nearest")
    assert nearest.change == "letterbox.method bilinear -> nearest"
    toggled = derive("resize_antialias_toggled", FACE)
    [(_, old, new)] = changed(FACE, toggled.pipeline)["preprocess"]
    assert (new["library"], new["antialias"]) == ("torch", False)
    with pytest.raises(NotApplicable, match="already resizes with bilinear"):
        derive("resize_bilinear", FACE)
