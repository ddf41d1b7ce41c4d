"""Everything wrong in a manifest is reported at once; shapes, crop sizes, topk, versions and claims are checked
statically from the manifest alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from repliscope.errors import ManifestError, ManifestErrors, OpSpecError
from repliscope.manifest.loader import inspect_manifest, load_manifest
from repliscope.manifest.schema import SourceSpec
from repliscope.ops.base import BuildContext, PreOp, StaticShape
from repliscope.ops.pipeline import build_op
from tests.conftest import LITE0
from tests.manifest.test_loader import line_of, write_variant

CONTEXT = BuildContext(class_names=tuple(str(i) for i in range(1000)))


def variant(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    text = LITE0.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    p = tmp_path / "variant.yaml"
    p.write_text(text)
    return p


def test_all_schema_and_op_errors_at_once(tmp_path: Path) -> None:
    p = variant(
        tmp_path,
        ("version: 1.0.0", "version: 01.0.0"),
        ("license: Apache-2.0", "licence: MIT"),
        ("  format: pytorch_state_dict", "  format: pickle"),
        ("method: bicubic", "method: bicubicc"),
        ("    value: 127.0", "    value: 127.0\n    per_channel: true"),
        ("k: 5", "k: 0"),
    )
    with pytest.raises(ManifestErrors) as ei:
        load_manifest(p)
    got = [(e.line, e.field) for e in ei.value.errors]
    assert got == [
        (line_of(p, "version: 01.0.0"), "version"),
        (line_of(p, "licence: MIT"), "licence"),
        (line_of(p, "format: pickle"), "source.format"),
        (line_of(p, "bicubicc"), "preprocess[1].method"),
        (line_of(p, "per_channel"), "preprocess[4].per_channel"),
        (line_of(p, "k: 0"), "postprocess[1].k"),
    ]
    text = str(ei.value)
    assert text.startswith("6 problems in the manifest:\n  ") and text.count("\n") == 6
    assert "unknown key 'licence' (required 'license' is missing: a typo?)" in text
    assert "leading zeros are not allowed in a semantic version ('01'); write 1.0.0" in text
    # the first problem's location is the error's own
    assert ei.value.line == line_of(p, "version: 01.0.0") and ei.value.field == "version"


def test_inspect_returns_the_manifest_with_op_errors(tmp_path: Path) -> None:
    p = variant(tmp_path, ("method: bicubic", "method: bicubicc"))
    found = inspect_manifest(p)
    assert found.loaded is not None and found.loaded.manifest.name == "efficientnet-lite0"
    assert [e.field for e in found.errors] == ["preprocess[1].method"]
    found = inspect_manifest(p.parent / "missing.yaml")
    assert found.loaded is None and found.data is None and "cannot read manifest" in str(found.errors[0])
    found = inspect_manifest(variant(tmp_path, ("version: 1.0.0", "version: v1")))
    assert found.loaded is None and [e.field for e in found.errors] == ["version"]
    source = found.section("source", SourceSpec)
    assert source is not None and source.format == "pytorch_state_dict"
    assert found.section("inputs", SourceSpec) is None


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("v1.0.0", "drop the 'v', write 1.0.0"),
        ("01.0.0", "leading zeros are not allowed"),
        ("1.0.0-01", "numeric ones without leading zeros"),
        ('"1.0"', "needs MAJOR.MINOR.PATCH"),
    ],
)
def test_strict_semver(tmp_path: Path, version: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message) as ei:
        load_manifest(variant(tmp_path, ("version: 1.0.0", f"version: {version}")))
    assert ei.value.field == "version"


@pytest.mark.parametrize("version", ["1.0.0-rc.1", "2.10.3+build.5", "0.0.1-alpha-2.0+sha.abc"])
def test_semver_prerelease_and_build_are_fine(tmp_path: Path, version: str) -> None:
    assert load_manifest(variant(tmp_path, ("version: 1.0.0", f"version: {version}"))).manifest.version == version


def test_crop_larger_than_resize(tmp_path: Path) -> None:
    p = variant(tmp_path, ("size: 224", "size: 300"))
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    assert ei.value.field == "preprocess[2].size" and ei.value.line == line_of(p, "size: 300")
    assert "crop 300x300 is larger than the image it gets (one with shorter side 256" in str(ei.value)


def test_pipeline_output_shape_must_match_the_input(tmp_path: Path) -> None:
    p = variant(tmp_path, ("size: 256", "size: 320"), ("size: 224", "size: 300"))
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    assert ei.value.field == "inputs[0].shape" and ei.value.line == line_of(p, "shape: [-1, 3, 224, 224]")
    assert (
        "the pre-processing produces samples of CHW 3x300x300 (size set by preprocess[2] center_crop), "
        "but inputs[0].shape is [-1, 3, 224, 224]"
    ) in str(ei.value)


def test_image_dependent_output_against_a_fixed_input(tmp_path: Path) -> None:
    p = variant(tmp_path, ("  - op: center_crop\n    size: 224\n", ""))
    with pytest.raises(
        ManifestError,
        match=r"axis 2 of the input is fixed at 224, but the pre-processing "
        r"output \(CHW 3x\?x\?\) depends on the image",
    ):
        load_manifest(p)


def test_missing_layout_op_is_a_shape_error(tmp_path: Path) -> None:
    p = variant(tmp_path, ("  - op: data_layout\n    layout: NCHW\n", ""))
    with pytest.raises(
        ManifestError,
        match=r"produces samples of HWC 224x224x3 .* but inputs\[0\]\.shape is "
        r"\[-1, 3, 224, 224\]",
    ):
        load_manifest(p)


def test_dynamic_input_axes_accept_any_size(tmp_path: Path) -> None:
    p = variant(
        tmp_path, ("shape: [-1, 3, 224, 224]", "shape: [-1, 3, -1, -1]"), ("  - op: center_crop\n    size: 224\n", "")
    )
    assert load_manifest(p).manifest.inputs[0].shape == [-1, 3, -1, -1]


def test_no_decode_is_refused(tmp_path: Path) -> None:
    p = variant(tmp_path, ("  - op: decode\n    library: pillow\n    channels: RGB\n", ""))
    with pytest.raises(ManifestError, match="'resize' needs a decoded image: put 'decode' first") as ei:
        load_manifest(p)
    assert ei.value.field == "preprocess[0].op"


def test_topk_larger_than_the_classes(tmp_path: Path) -> None:
    p = variant(tmp_path, ("k: 5", "k: 1001"))
    with pytest.raises(ManifestError, match=r"k=1001 is larger than the 1000 classes") as ei:
        load_manifest(p)
    assert ei.value.field == "postprocess[1].k" and ei.value.line == line_of(p, "k: 1001")


def test_fraction_crop_is_inferred_from_the_resize() -> None:
    shape = StaticShape("encoded")
    for spec in (
        {"op": "decode", "library": "pillow", "channels": "RGB"},
        {
            "op": "resize",
            "size": 256,
            "keep_aspect_ratio": True,
            "method": "bilinear",
            "library": "pillow",
            "antialias": True,
        },
        {"op": "center_crop", "fraction": 0.875},
        {"op": "data_layout", "layout": "NCHW"},
    ):
        op = build_op(spec, "pre", CONTEXT)
        assert isinstance(op, PreOp)
        shape = op.static_shape(shape)
    assert shape.dims() == (3, 224, 224)


def test_fixed_resize_then_crop() -> None:
    shape = StaticShape("HWC", channels=3)
    resize = build_op(
        {
            "op": "resize",
            "size": [300, 400],
            "keep_aspect_ratio": False,
            "method": "bilinear",
            "library": "opencv",
            "antialias": False,
        },
        "pre",
        CONTEXT,
    )
    assert isinstance(resize, PreOp)
    shape = resize.static_shape(shape)
    assert shape.dims() == (300, 400, 3) and shape.min_side == 300
    crop = build_op({"op": "center_crop", "size": [310, 200]}, "pre", CONTEXT)
    assert isinstance(crop, PreOp)
    with pytest.raises(OpSpecError, match="crop 310x200 is larger than the image it gets \\(300x400"):
        crop.static_shape(shape)


def test_fractional_claim_warns_with_line(tmp_path: Path) -> None:
    p = variant(tmp_path, ("value: 75.1", "value: 0.751"))
    loaded = load_manifest(p)
    assert loaded.warnings == [
        f"{p}:{line_of(p, 'value: 0.751')}: field 'claims[0].value': top1 0.751 is in "
        "percent, i.e. 0.751 %: did you mean 75.1 %?"
    ]
    assert load_manifest(LITE0).warnings == []


def test_placeholder_is_an_error_per_line(tmp_path: Path) -> None:
    p = variant(tmp_path, ("license: Apache-2.0", 'license: "CHANGE-ME: the license"'))
    with pytest.raises(ManifestError, match="still the placeholder of `repliscope manifest new`") as ei:
        load_manifest(p)
    assert ei.value.field == "license" and ei.value.line == line_of(p, "CHANGE-ME")


def test_non_mapping_op_entry(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "  - op: labels", "  - labels")
    with pytest.raises(ManifestError, match=re.escape("an op entry is a mapping like {op: NAME, ...}, got str")) as ei:
        load_manifest(p)
    assert ei.value.field == "postprocess[2]"


def test_shape_checks_run_beside_schema_errors_elsewhere(tmp_path: Path) -> None:
    """A bad version or license does not hide a crop problem until the next round (one round, every problem)."""
    p = variant(
        tmp_path,
        ("version: 1.0.0", "version: 01.0.0"),
        ("license: Apache-2.0", "licence: MIT"),
        ("  - op: center_crop\n    size: 224", "  - op: center_crop\n    size: 300"),
    )
    found = inspect_manifest(p)
    assert found.loaded is None
    assert [e.field for e in found.errors] == ["version", "licence", "preprocess[2].size"]
    assert "crop 300x300 is larger than the image it gets" in str(found.errors[-1])
