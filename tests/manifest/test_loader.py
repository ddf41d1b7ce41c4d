"""Manifest loading: the examples validate; every kind of bad input names file:line, field and allowed values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from repliscope.errors import ManifestError
from repliscope.manifest.loader import load_manifest
from tests.conftest import EXAMPLES, LITE0


def write_variant(tmp_path: Path, old: str, new: str, count: int = 1) -> Path:
    text = LITE0.read_text()
    assert text.count(old) >= 1, old
    out = tmp_path / "variant.yaml"
    out.write_text(text.replace(old, new, count))
    return out


def line_of(path: Path, needle: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln)


@pytest.mark.parametrize("name", ["efficientnet-lite0", "efficientnet-lite1", "efficientnet-lite2"])
def test_examples_validate(name: str) -> None:
    loaded = load_manifest(EXAMPLES / f"{name}.yaml")
    m = loaded.manifest
    assert m.name == name
    assert [op["op"] for op in m.preprocess] == [
        "decode",
        "resize",
        "center_crop",
        "to_float",
        "subtract_mean",
        "divide_std",
        "data_layout",
    ]
    assert [op["op"] for op in m.postprocess] == ["softmax", "topk", "labels"]
    assert len(loaded.sha256) == 64


def test_lite0_claim_and_sizes() -> None:
    m = load_manifest(LITE0).manifest
    assert m.claims[0].value == 75.1 and m.claims[0].dataset.name == "imagenet-1k"
    assert m.inputs[0].shape == [-1, 3, 224, 224]
    assert m.preprocess[1]["size"] == 256 and m.preprocess[2]["size"] == 224


def test_unknown_top_level_key(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "task: image_classification", "task: image_classification\ntaks: oops")
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    e = ei.value
    assert e.line == line_of(p, "taks:") and e.field == "taks"
    assert e.allowed is not None and "claims" in e.allowed and "preprocess" in e.allowed
    assert str(p) in str(e) and f":{e.line}:" in str(e)


def test_unknown_nested_key(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "  format: pytorch_state_dict", "  format: pytorch_state_dict\n  sha: abc")
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    assert ei.value.field == "source.sha" and ei.value.line == line_of(p, "  sha: abc")
    assert ei.value.allowed == ["config", "format", "sha256", "uri"]


def test_unknown_op_suggests_and_lists(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "op: center_crop", "op: centre_crop")
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    e = ei.value
    assert e.field == "preprocess[2].op" and e.line == line_of(p, "op: centre_crop")
    assert e.allowed is not None and "center_crop" in e.allowed and "resize" in e.allowed
    assert "softmax" not in e.allowed  # a post-processing op is not allowed in preprocess


def test_bad_literal_parameter_lists_allowed(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "method: bicubic", "method: bicubicc")
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    e = ei.value
    assert e.field == "preprocess[1].method" and e.line == line_of(p, "method: bicubicc")
    assert e.allowed == ["area", "bicubic", "bilinear", "lanczos", "nearest"]


def test_unknown_op_parameter(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "    antialias: true", "    antialias: true\n    antialiasing: true")
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    assert ei.value.field == "preprocess[1].antialiasing"
    assert ei.value.line == line_of(p, "antialiasing")
    assert ei.value.allowed is not None and "antialias" in ei.value.allowed


def test_wrong_parameter_type(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "value: 127.0", 'value: "127"')
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    assert ei.value.field is not None and ei.value.field.startswith("preprocess[4].value")
    assert ei.value.line == line_of(p, 'value: "127"')


def test_missing_op_parameter(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "    library: pillow\n    antialias: true", "    antialias: true")
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    assert ei.value.field == "preprocess[1].library"
    assert "missing" in str(ei.value)


def test_malformed_yaml_has_line(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "task: image_classification", "task: [image_classification")
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    assert "malformed YAML" in str(ei.value) and ei.value.line is not None


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "task: image_classification", "task: image_classification\ntask: detection")
    with pytest.raises(ManifestError, match="duplicate key 'task'") as ei:
        load_manifest(p)
    assert ei.value.line == line_of(p, "task: detection")


def test_wrong_top_level_literal(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "task: image_classification", "task: segmentation")
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    assert ei.value.field == "task" and ei.value.allowed == [
        "image_classification",
        "object_detection",
        "semantic_segmentation",
    ]


def test_bad_sha256_format(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "sha256: 5793", "sha256: XYZ5793")
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    assert ei.value.field == "source.sha256"


def test_non_semver_version(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "version: 1.0.0", 'version: "1.0"')
    with pytest.raises(ManifestError, match=r"MAJOR\.MINOR\.PATCH"):
        load_manifest(p)
    p = write_variant(tmp_path, "version: 1.0.0", "version: 1.0")
    with pytest.raises(ManifestError, match=r"expected a string, got float 1\.0 \(quote it in YAML\)"):
        load_manifest(p)


def test_weights_only_needs_architecture(tmp_path: Path) -> None:
    text = LITE0.read_text()
    start = text.index("architecture:")
    end = text.index("inputs:")
    p = tmp_path / "noarch.yaml"
    p.write_text(text[:start] + text[end:])
    with pytest.raises(ManifestError, match="'architecture' is required"):
        load_manifest(p)


def test_missing_file() -> None:
    with pytest.raises(ManifestError, match=re.escape("cannot read manifest")):
        load_manifest("no/such/manifest.yaml")


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.yaml"
    p.write_text("")
    with pytest.raises(ManifestError, match="empty"):
        load_manifest(p)


def test_logits_without_softmax_is_an_error(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "  - op: softmax\n    axis: -1\n", "")
    with pytest.raises(ManifestError, match="needs a 'softmax'") as ei:
        load_manifest(p)
    assert ei.value.field == "postprocess"


def test_postprocess_without_topk_is_an_error(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "  - op: topk\n    k: 5\n", "")
    with pytest.raises(ManifestError, match="needs a 'topk'"):
        load_manifest(p)


def test_layout_op_must_agree_with_input_layout(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "    layout: NCHW\n\noutputs", "    layout: NHWC\n\noutputs")
    with pytest.raises(ManifestError, match=r"produces NHWC, but inputs\[0\]\.layout is NCHW") as ei:
        load_manifest(p)
    assert ei.value.field == "preprocess[6].layout" and ei.value.allowed == ["NCHW"]


def test_class_count_must_agree(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "shape: [-1, 1000]", "shape: [-1, 1001]")
    with pytest.raises(ManifestError, match="1001 classes"):
        load_manifest(p)


def test_typo_in_nested_key_names_the_typo(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "dataset: {name: imagenet-1k, split: val}", "dataset: {name: imagenet-1k, splt: val}")
    with pytest.raises(ManifestError, match="unknown key 'splt'") as ei:
        load_manifest(p)
    assert ei.value.allowed == ["name", "split"]


def test_non_utf8_manifest(tmp_path: Path) -> None:
    p = tmp_path / "latin1.yaml"
    p.write_bytes(LITE0.read_text().replace("Lite0 (ReLU6", "Lite0 \u00e9 (ReLU6").encode("latin-1"))
    with pytest.raises(ManifestError, match="not UTF-8"):
        load_manifest(p)
