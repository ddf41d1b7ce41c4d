"""Each pitfall is exactly one change to the Lite0 pipeline, or 'not applicable' with a reason."""

from __future__ import annotations

from pathlib import Path

import pytest

import repliscope.pitfalls.variants  # noqa: F401
from repliscope.manifest.loader import build_ops, load_manifest
from repliscope.ops.base import BuildContext
from repliscope.ops.pipeline import Pipeline
from repliscope.pitfalls.base import PITFALLS, Derived, NotApplicable, Pitfall, PitfallContext
from tests.conftest import LITE0

CTX = PitfallContext(input_shape=(-1, 3, 224, 224), input_layout="NCHW", runtime="onnxruntime", batch_size=8, threads=2)


def pipeline_of(path: Path) -> Pipeline:
    loaded = load_manifest(path)
    return Pipeline(*build_ops(loaded, BuildContext(class_names=tuple(str(i) for i in range(1000)))))


@pytest.fixture(scope="module")
def lite0() -> Pipeline:
    return pipeline_of(LITE0)


def ops(p: Pipeline) -> list[tuple[str, dict[str, object]]]:
    return [(op.name, op.params.model_dump()) for op in p.pre_ops]


def derive(name: str, base: Pipeline, ctx: PitfallContext = CTX) -> Derived:
    return PITFALLS.get(name)().derive(base, ctx)


def test_registry_has_every_builtin() -> None:
    # the task-independent built-ins (task-specific variants, e.g. detection ones, register with their tasks)
    assert [n for n in PITFALLS.names() if PITFALLS.get(n).tasks is None] == sorted(
        [
            "batch_size_1",
            "bfloat16_inference",
            "bfloat16_normalization",
            "center_crop_offset",
            "color_layout_swapped",
            "crop_fraction_1.0",
            "data_layout_reshape",
            "decoder_swapped",
            "float16_inference",
            "float16_normalization",
            "no_center_crop",
            "no_normalization",
            "normalize_before_cast",
            "resize_antialias_toggled",
            "resize_bilinear",
            "resize_library_swapped",
            "resize_nearest",
            "threads_changed",
            "torchvision_mean_std",
        ]
    )


def test_each_pipeline_variant_changes_exactly_what_it_says(lite0: Pipeline) -> None:
    base = ops(lite0)
    d = derive("color_layout_swapped", lite0)
    assert ops(d.pipeline)[0] == ("decode", {"library": "pillow", "channels": "BGR", "max_pixels": 89_478_485})
    assert ops(d.pipeline)[1:] == base[1:]
    d = derive("data_layout_reshape", lite0)
    assert ops(d.pipeline)[:-1] == base[:-1] and ops(d.pipeline)[-1] == ("reshape_layout", {"layout": "NCHW"})
    d = derive("no_center_crop", lite0)
    assert [n for n, _ in ops(d.pipeline)] == [
        "decode",
        "resize",
        "to_float",
        "subtract_mean",
        "divide_std",
        "data_layout",
    ]
    assert ops(d.pipeline)[1][1]["size"] == [224, 224] and ops(d.pipeline)[1][1]["keep_aspect_ratio"] is False
    d = derive("crop_fraction_1.0", lite0)
    assert ops(d.pipeline)[1][1]["size"] == 224 and ops(d.pipeline)[2] == base[2]
    assert ops(derive("resize_bilinear", lite0).pipeline)[1][1]["method"] == "bilinear"
    assert ops(derive("resize_nearest", lite0).pipeline)[1][1]["method"] == "nearest"
    lib = ops(derive("resize_library_swapped", lite0).pipeline)[1][1]
    assert (lib["library"], lib["antialias"], lib["method"]) == ("opencv", False, "bicubic")
    aa = ops(derive("resize_antialias_toggled", lite0).pipeline)[1][1]
    assert (aa["library"], aa["antialias"]) == ("torch", False)
    assert ops(derive("decoder_swapped", lite0).pipeline)[0][1]["library"] == "opencv"
    d = derive("normalize_before_cast", lite0)
    assert [n for n, _ in ops(d.pipeline)] == [
        "decode",
        "resize",
        "center_crop",
        "subtract_mean",
        "divide_std",
        "to_float",
        "data_layout",
    ]
    d = derive("torchvision_mean_std", lite0)
    assert ops(d.pipeline)[4][1]["value"] == [123.675, 116.28, 103.53]
    assert ops(d.pipeline)[5][1]["value"] == [58.395, 57.12, 57.375]
    d = derive("no_normalization", lite0)
    assert [n for n, _ in ops(d.pipeline)] == ["decode", "resize", "center_crop", "to_float", "data_layout"]


def test_settings_variants(lite0: Pipeline) -> None:
    assert derive("batch_size_1", lite0).settings == {"batch_size": 1}
    assert derive("threads_changed", lite0).settings == {"threads": 1}
    assert derive("float16_inference", lite0).settings == {"precision": "float16"}
    assert ops(derive("float16_inference", lite0).pipeline) == ops(lite0)


def test_not_applicable_cases(lite0: Pipeline, tmp_path: Path) -> None:
    one = PitfallContext(
        input_shape=(-1, 3, 224, 224), input_layout="NCHW", runtime="opencv_dnn", batch_size=1, threads=1
    )
    with pytest.raises(NotApplicable, match="batch size 1"):
        derive("batch_size_1", lite0, one)
    with pytest.raises(NotApplicable, match="opencv_dnn"):
        derive("float16_inference", lite0, one)
    assert derive("threads_changed", lite0, one).settings == {"threads": 2}
    nhwc = LITE0.read_text().replace("    layout: NCHW\n\n# The reference", "    layout: NHWC\n\n# The reference")
    nhwc = nhwc.replace("shape: [-1, 3, 224, 224]", "shape: [-1, 224, 224, 3]")
    nhwc = nhwc.replace("  - op: center_crop\n    size: 224\n", "").replace("size: 256", "size: [224, 224]")
    nhwc = nhwc.replace("keep_aspect_ratio: true", "keep_aspect_ratio: false")
    nhwc = nhwc.replace("  - op: data_layout\n    layout: NCHW", "  - op: data_layout\n    layout: NHWC")
    nhwc = nhwc.replace("value: 127.0", "value: [123.675, 116.28, 103.53]").replace(
        "value: 128.0", "value: [58.395, 57.12, 57.375]"
    )
    path = tmp_path / "nhwc.yaml"
    path.write_text(nhwc)
    p = pipeline_of(path)
    for name, reason in [
        ("data_layout_reshape", "no transpose"),
        ("no_center_crop", "center_crop"),
        ("crop_fraction_1.0", "center_crop"),
        ("torchvision_mean_std", "already uses"),
    ]:
        with pytest.raises(NotApplicable, match=reason):
            derive(name, p)


def test_user_registered_pitfall(lite0: Pipeline) -> None:
    from repliscope.pitfalls.base import Derived, find, rebuild

    class CropTooSmall(Pitfall):
        name = "test_crop_200"
        description = "crop 200 then nothing else"

        def derive(self, base: Pipeline, ctx: PitfallContext) -> Derived:
            i = find(base, "center_crop")
            return Derived(base.replace_pre(i, rebuild(base.pre_ops[i], size=200)), "center_crop.size 224 -> 200")

    PITFALLS.add("test_crop_200", CropTooSmall)
    try:
        assert ops(derive("test_crop_200", lite0).pipeline)[2][1]["size"] == 200
    finally:
        PITFALLS._items.pop("test_crop_200")


def test_decode_variants_of_a_libjpeg_turbo_decode(lite0: Pipeline) -> None:
    """MLModelScope translations decode with libjpeg_turbo: swapping gives Pillow's default decode."""
    from repliscope.pitfalls.base import make_op

    lj = {
        "library": "libjpeg_turbo",
        "channels": "RGB",
        "max_pixels": 89_478_485,
        "dct_scale_to": [224, 224],
        "fancy_upsampling": False,
        "dct_method": "islow",
    }
    base = lite0.replace_pre(0, make_op("decode", **lj))
    d = derive("decoder_swapped", base)
    assert ops(d.pipeline)[0] == ("decode", {"library": "pillow", "channels": "RGB", "max_pixels": 89_478_485})
    assert d.change == "decode.library libjpeg_turbo -> pillow"
    assert ops(derive("color_layout_swapped", base).pipeline)[0] == ("decode", {**lj, "channels": "BGR"})
