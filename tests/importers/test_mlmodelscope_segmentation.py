"""MLModelScope ``semanticsegment`` manifests -> ``semantic_segmentation``: the exact translations (golden op lists)
of real DeepLab (TensorFlow) and TorchVision (PyTorch) manifests of the corpus, the agents' rules (TensorFlow's
int64 class map, PyTorch's argmax of output 0, Caffe's missing mask), and a translated pipeline run end to end on
a synthetic image."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from repliscope.datasets.label_sets import label_set
from repliscope.importers.base import ConfigImportError
from repliscope.importers.batch import import_one
from repliscope.importers.mlmodelscope import MLModelScopeImporter
from repliscope.ops.base import BuildContext, Item
from repliscope.ops.pipeline import Pipeline

CORPUS = Path(__file__).parents[1] / "fixtures" / "mlmodelscope-corpus"
DEEPLAB_TF = CORPUS / "rai-project-tensorflow" / "DeepLabv3_MobileNet_v2_PASCAL_VOC_Train_Aug.yml"
DEEPLAB_PT = CORPUS / "c3sr-pytorch" / "TorchVision_DeepLabv3_Resnet101.yml"
FCN_CAFFE = CORPUS / "rai-project-caffe" / "FCN_8s.yml"

DECODE = {
    "op": "decode",
    "library": "libjpeg_turbo",
    "channels": "RGB",
    "dct_scale_to": None,
    "fancy_upsampling": False,
    "dct_method": "islow",
}
NEAREST_STRETCH = {
    "op": "mask_resize",
    "method": "nearest",
    "sampling": "half_pixel",
    "library": "numpy",
    "mapping": "stretch",
}


def test_tensorflow_deeplab_is_an_int64_class_map_resized_back_by_nearest() -> None:
    result = import_one("mlmodelscope", DEEPLAB_TF)
    m = result.manifest
    assert m["task"] == "semantic_segmentation"
    assert m["framework"] == {"name": "tensorflow", "version": ">=1.12.0,<1.13.0"}
    assert m["source"]["format"] == "tf_frozen_graph"
    assert m["inputs"] == [{"name": "ImageTensor:0", "shape": [-1, -1, -1, 3], "dtype": "uint8", "layout": "NHWC"}]
    # uint8 pixels, the longer side to 513 with go_imaging's Linear filter, no mean/scale, no crop
    assert m["preprocess"] == [
        DECODE,
        {
            "op": "resize",
            "size": [513, 513],
            "keep_aspect_ratio": True,
            "fit": "inside",
            "method": "bilinear",
            "library": "go_imaging",
            "antialias": True,
        },
        {"op": "data_layout", "layout": "NHWC"},
    ]
    assert m["outputs"] == [
        {
            "name": "SemanticPredictions:0",
            "shape": [-1, -1, -1],
            "dtype": "int64",
            "layout": "NHW",
            "kind": "mask_labels",
        }
    ]
    assert m["postprocess"] == [
        {
            "op": "mask_from_outputs",
            "output": "SemanticPredictions:0",
            "layout": "NHW",
            "activated": False,
            "labels": True,
        },
        NEAREST_STRETCH,
    ]
    assert m["labels"] == {"source": "builtin:voc-21", "num_classes": 21}
    codes = {w.code for w in result.warnings}
    assert {"mlmodelscope.segmentation_resize", "mlmodelscope.resize_rounding"} <= codes
    assert "mlmodelscope.segmentation_output" not in codes


def test_pytorch_deeplab_argmaxes_output_0_at_the_images_own_size() -> None:
    result = import_one("mlmodelscope", DEEPLAB_PT)
    m = result.manifest
    assert m["framework"] == {"name": "onnx", "version": ">=0"}  # TorchScript: placeholders, as for classifiers
    assert m["inputs"] == [{"name": "0", "shape": [-1, 3, -1, -1], "dtype": "float32", "layout": "NCHW"}]
    assert m["preprocess"] == [  # no dimensions: fed at its own size, (x - 255 mean) / (255 std)
        DECODE,
        {"op": "to_float", "dtype": "float32"},
        {"op": "subtract_mean", "value": [123.675, 116.28, 103.53]},
        {"op": "divide_std", "value": [58.395, 57.12, 57.375]},
        {"op": "data_layout", "layout": "NCHW"},
    ]
    assert m["outputs"] == [
        {"name": "0", "shape": [-1, 21, -1, -1], "dtype": "float32", "layout": "NCHW", "kind": "mask_logits"}
    ]
    assert m["postprocess"] == [
        {"op": "mask_from_outputs", "output": "0", "layout": "NCHW", "activated": False},
        {"op": "mask_argmax"},
        NEAREST_STRETCH,
    ]
    warned = {w.code: w for w in result.warnings}
    assert "'SemanticPredictions'" in warned["mlmodelscope.segmentation_output"].message
    assert "mlmodelscope.framework_not_runnable" in warned


def _manifest(tmp_path: Path, base: Path, **changes: Any) -> Path:
    data = yaml.safe_load(base.read_text(encoding="utf-8"))
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[leaf] = value
    path = tmp_path / "m.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_fixed_input_size_maps_back_through_the_geometry(tmp_path: Path) -> None:
    params: dict[str, Any] = {"element_type": "uint8", "input_layer": "ImageTensor", "layout": "HWC"}
    params |= {"color_mode": "RGB", "dimensions": [3, 257, 257]}
    m = import_one("mlmodelscope", _manifest(tmp_path, DEEPLAB_TF, **{"inputs.0.parameters": params})).manifest
    assert m["preprocess"][0]["dct_scale_to"] == [257, 257]
    assert m["inputs"][0]["shape"] == [-1, 257, 257, 3]
    assert m["postprocess"][-1] == {
        "op": "mask_resize",
        "method": "nearest",
        "sampling": "half_pixel",
        "library": "numpy",
        "mapping": "geometry",
        "input_size": [257, 257],
    }


@pytest.mark.parametrize(
    ("base", "changes", "reason", "text"),
    [
        (FCN_CAFFE, {}, "segmentation_no_output", "returns NO features"),
        (DEEPLAB_TF, {"framework.name": "MXNet"}, "semantic_segmentation", "has no semantic segmentation predictor"),
        (
            DEEPLAB_TF,
            {"output.parameters.features_checksum": "5ae5d62183cfb6f6d3ac109359d06a1b"},  # VOC without background
            "unknown_label_file",
            "whose first class is 'background'",
        ),
        (DEEPLAB_TF, {"output.parameters.element_type": "float32"}, "invalid", "[][][]int64"),
        (DEEPLAB_TF, {"output.parameters.masks_layer": ""}, "invalid", "fetches the class map by this operation"),
    ],
)
def test_refusals_name_their_reason(
    tmp_path: Path, base: Path, changes: dict[str, Any], reason: str, text: str
) -> None:
    path = _manifest(tmp_path, base, **changes)
    with pytest.raises(ConfigImportError) as err:
        MLModelScopeImporter().translate(path)
    assert err.value.reason == reason
    assert str(err.value).startswith(f"{path}: ") and text in str(err.value) and "allowed:" in str(err.value)


def _png(width: int, height: int) -> np.ndarray:
    from PIL import Image

    rng = np.random.default_rng(7)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(buf, format="PNG")
    return np.frombuffer(buf.getvalue(), dtype=np.uint8)


def _run(manifest: dict[str, Any], width: int, height: int, model: Any) -> tuple[np.ndarray, np.ndarray]:
    pipe = Pipeline.from_specs(
        manifest["preprocess"], manifest["postprocess"], BuildContext(class_names=label_set("builtin:voc-21"))
    )
    item = pipe.preprocess(Item(_png(width, height), "encoded"))
    batch = pipe.batch([item])
    preds = pipe.postprocess({manifest["outputs"][0]["name"]: model(batch)}, geometry=[item.geometry])
    assert preds.segmentation is not None
    labels = preds.segmentation[0].labels
    assert labels is not None
    return batch, labels


def test_translated_deeplab_pipeline_puts_the_map_back_on_the_image() -> None:
    """The TF DeepLab translation on a 640x480 image: the tensor is 513x385 (c3sr's rounding), the graph's class
    map (person = 15 right of input column 256, else background) lands on the image's own 640x480 pixels."""
    m = import_one("mlmodelscope", DEEPLAB_TF).manifest

    def deeplab(batch: np.ndarray) -> np.ndarray:
        _, h, w, _ = batch.shape
        return np.where(np.arange(w)[None, None, :] > 256, 15, 0).repeat(h, axis=1).astype(np.int64)

    batch, labels = _run(m, 640, 480, deeplab)
    assert batch.shape == (1, 385, 513, 3) and batch.dtype == np.uint8
    assert labels.shape == (480, 640)
    # image column c samples map column floor((c + 0.5) * 513 / 640): 256 for c = 320, 257 for c = 321
    assert (labels[:, :321] == 0).all() and (labels[:, 321:] == 15).all()


def test_translated_torchvision_pipeline_argmaxes_like_the_go_loop() -> None:
    """The PyTorch translation: output 0 is [N, 21, H, W]; a tie between classes 3 and 7 goes to 3 (Go's
    ``if v > cur`` keeps the first maximum), elsewhere the larger score wins; the map is at the image size."""
    m = import_one("mlmodelscope", DEEPLAB_PT).manifest

    def fcn(batch: np.ndarray) -> np.ndarray:
        n, _, h, w = batch.shape
        out = np.zeros((n, 21, h, w), np.float32)
        out[:, 3, :, : w // 2] = 2.0
        out[:, 7, :, : w // 2] = 2.0  # tie with class 3 on the left half
        out[:, 7, :, w // 2 :] = 1.0
        return out

    batch, labels = _run(m, 50, 30, fcn)
    assert batch.shape == (1, 3, 30, 50) and batch.dtype == np.float32
    assert labels.shape == (30, 50)
    assert (labels[:, :25] == 3).all() and (labels[:, 25:] == 7).all()


# --- round trip: an ONNX Runtime semanticsegment manifest translated, then evaluated -----------------------------

SEGMENTER = Path(__file__).parents[1] / "fixtures" / "segmentation"
ORT_MANIFEST = """name: Colour_Segmenter
framework:
  name: onnxruntime
  version: '>=1.0'
version: 1.0
description: the exact colour segmenter of tests/fixtures/segmentation, NCHW in and out (MLModelScope's layout)
license: Apache-2.0
inputs:
  - type: image
    parameters:
      element_type: float32
      input_layer: image
      layout: CHW
      color_mode: RGB
      {size}
      scale: 255
output:
  type: semanticsegment
  parameters:
    element_type: int64
    masks_layer: SemanticPredictions
    features_url: https://example.org/colour-labels.txt
    features_checksum: {md5}
model:
  graph_path: colour_segmenter_nchw.onnx
  is_archive: false
attributes:
  training_dataset: colour-squares
"""


def _nchw_segmenter() -> bytes:
    """The colour segmenter (logits = rgb @ W + b per pixel) wrapped NCHW -> NCHW for any H x W, output named '0'
    as MLModelScope's ONNX Runtime / PyTorch agents read output 0."""
    import onnx
    from onnx import TensorProto, helper

    inner = onnx.load(str(SEGMENTER / "colour_segmenter.onnx")).graph
    nodes = [
        helper.make_node("Transpose", ["image"], ["nhwc"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["nhwc", "W"], ["scores"]),
        helper.make_node("Add", ["scores", "B"], ["logits"]),
        helper.make_node("Transpose", ["logits"], ["0"], perm=[0, 3, 1, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "colour_segmenter_nchw",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("0", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        list(inner.initializer),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="repliscope-tests")
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        ("", {"mIoU": 1.0, "pixel_accuracy": 1.0}),  # fed at its own 64x64 size: the segmenter is exact
        # 32x32 with go_imaging's Linear filter: it mixes the 2x2 blocks at region edges by 1/4, not enough to
        # change a pixel's class, and the nearest mapping back is exact at a factor 2
        ("dimensions: [3, 32, 32]", {"mIoU": 1.0, "pixel_accuracy": 1.0}),
        # 24 x 40 (factors 8/3 and 8/5): region edges fall inside map pixels, so the edges move on the way back
        ("dimensions: [3, 24, 40]", {"mIoU": 0.9587, "pixel_accuracy": 0.9855}),
    ],
)
def test_translated_onnxruntime_manifest_evaluates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: str, expected: dict[str, float]
) -> None:
    import hashlib

    from repliscope.datasets.resolve import resolve_dataset
    from repliscope.evaluation.run import RunSettings, evaluate, prepare
    from tests.segmentation._data import write_voc

    labels = tmp_path / "colour-labels.txt"
    labels.write_bytes((SEGMENTER / "colour-labels.txt").read_bytes())
    (tmp_path / "colour_segmenter_nchw.onnx").write_bytes(_nchw_segmenter())
    md5 = hashlib.md5(labels.read_bytes()).hexdigest()
    (tmp_path / "m.yml").write_text(ORT_MANIFEST.format(size=size, md5=md5), encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # --labels FILE as a user gives it, beside the manifest written next
    result = MLModelScopeImporter(labels=Path("colour-labels.txt")).translate(tmp_path / "m.yml")
    m = result.manifest
    assert m["framework"] == {"name": "onnx", "version": ">=0"} and m["source"]["format"] == "onnx"
    assert m["labels"]["source"] == "colour-labels.txt" and m["labels"]["num_classes"] == 3
    assert [op["op"] for op in m["postprocess"]] == ["mask_from_outputs", "mask_argmax", "mask_resize"]
    out = tmp_path / "translated.yaml"
    out.write_text(result.to_yaml(), encoding="utf-8")
    prepared = prepare(out, RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path / "c"))
    record = evaluate(prepared, resolve_dataset(f"voc_seg:{write_voc(tmp_path / 'voc')}"))
    assert record.counts["evaluated"] == 4 and record.counts["failed"] == 0
    values = {mv.name: round(mv.value, 4) for mv in record.metrics}
    assert {k: values[k] for k in expected} == expected


def test_labels_file_without_background_is_refused_for_segmentation(tmp_path: Path) -> None:
    import hashlib

    labels = tmp_path / "classes.txt"
    labels.write_text("red\ngreen\n", encoding="utf-8")
    md5 = hashlib.md5(labels.read_bytes()).hexdigest()
    path = _manifest(tmp_path, DEEPLAB_TF, **{"output.parameters.features_checksum": md5})
    with pytest.raises(ConfigImportError) as err:
        MLModelScopeImporter(labels=labels).translate(path)
    assert err.value.reason == "unknown_label_file" and "has no 'background' line" in str(err.value)
