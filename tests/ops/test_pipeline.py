"""build_op errors, Pipeline behaviour, and the EfficientNet-Lite0 reference pre-processing, exactly."""

from __future__ import annotations

import io
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from PIL import Image

from repliscope.errors import OpSpecError, RepliscopeError
from repliscope.ops import OPS, BuildContext, Pipeline, build_op, decode_input, op_names
from tests.ops._helpers import CTX, check_pre_op, chw_item, encode, hwc_item, pre, smooth_rgb

RESIZE = {
    "op": "resize",
    "size": 256,
    "keep_aspect_ratio": True,
    "method": "bicubic",
    "library": "pillow",
    "antialias": True,
}
LITE0_PRE: list[dict[str, Any]] = [
    {"op": "decode", "library": "pillow", "channels": "RGB"},
    RESIZE,
    {"op": "center_crop", "size": 224},
    {"op": "to_float", "dtype": "float32"},
    {"op": "subtract_mean", "value": 127},
    {"op": "divide_std", "value": 128},
    {"op": "data_layout", "layout": "NCHW"},
]
LITE0_POST: list[dict[str, Any]] = [{"op": "softmax", "axis": -1}, {"op": "topk", "k": 5}, {"op": "labels"}]


def spec_error(spec: dict[str, Any], stage: str = "pre", ctx: BuildContext = CTX) -> OpSpecError:
    with pytest.raises(OpSpecError) as exc:
        build_op(spec, stage, ctx)  # type: ignore[arg-type]
    return exc.value


class TestBuildOpErrors:
    def test_unknown_op_suggests_and_lists(self) -> None:
        err = spec_error({"op": "resise"})
        assert err.key == "op"
        assert "did you mean 'resize'" in err.message
        assert err.allowed == op_names("pre")
        assert "softmax" not in err.allowed

    def test_missing_op(self) -> None:
        err = spec_error({"size": 3})
        assert err.key == "op" and "missing" in err.message and err.allowed == op_names("pre")

    @pytest.mark.parametrize(("name", "stage"), [("softmax", "pre"), ("resize", "post")])
    def test_wrong_stage(self, name: str, stage: str) -> None:
        err = spec_error({"op": name}, stage)
        assert err.key == "op"
        assert err.allowed == op_names(stage)  # type: ignore[arg-type]
        assert name not in err.allowed

    def test_unknown_parameter(self) -> None:
        err = spec_error({"op": "center_crop", "siz": 224})
        assert (err.key, err.allowed) == ("siz", ["fill", "fraction", "offset", "size"])
        assert "unknown parameter" in err.message and "'size'" in err.message

    def test_missing_parameter(self) -> None:
        err = spec_error({k: v for k, v in RESIZE.items() if k != "antialias"})
        assert (err.key, err.message) == ("antialias", "required parameter missing")

    @pytest.mark.parametrize("value", ["bicubic", "127"])
    def test_string_for_a_float(self, value: str) -> None:
        err = spec_error({"op": "subtract_mean", "value": value})
        assert err.key == "value"
        assert "expected float or a list of float" in err.message and repr(value) in err.message

    def test_string_for_a_scalar_float(self) -> None:
        err = spec_error({"op": "scale", "factor": "bicubic"})
        assert err.key == "factor" and "valid number" in err.message

    def test_int_is_accepted_for_a_float(self) -> None:
        op = build_op({"op": "subtract_mean", "value": 127}, "pre", CTX)
        assert op.describe()["value"] == 127.0

    @pytest.mark.parametrize(
        ("key", "value"), [("size", 256.0), ("size", "256"), ("size", True), ("antialias", "yes"), ("antialias", 1)]
    )
    def test_no_silent_coercion(self, key: str, value: Any) -> None:
        assert spec_error({**RESIZE, key: value}).key == key

    def test_bad_literal_lists_allowed(self) -> None:
        err = spec_error({**RESIZE, "method": "cubic"})
        assert err.key == "method"
        assert err.allowed == ["area", "bicubic", "bilinear", "lanczos", "nearest"]
        assert "'cubic'" in err.message

    def test_list_element_error_is_dotted(self) -> None:
        err = spec_error({"op": "subtract_mean", "value": [1, "a", 3]})
        assert err.key == "value.1"
        err = spec_error({**RESIZE, "keep_aspect_ratio": False, "size": [256, -1]})
        assert err.key == "size.1" and "greater than 0" in err.message

    def test_from_specs_prefixes_the_entry(self) -> None:
        with pytest.raises(OpSpecError) as exc:
            Pipeline.from_specs([LITE0_PRE[0], {**RESIZE, "method": "cubic"}], [], CTX)
        assert exc.value.key == "preprocess[1].method"


def test_every_registered_op_has_a_strict_params_model_and_docstring() -> None:
    assert set(op_names("pre")) == {
        "decode",
        "color_layout",
        "resize",
        "center_crop",
        "to_float",
        "cast",
        "subtract_mean",
        "divide_std",
        "scale",
        "data_layout",
        "reshape_layout",
        "letterbox",
        "darknet_letterbox",
        "warp_resize",
        "divide_by_max",
    }
    assert set(op_names("post")) == {
        "softmax",
        "topk",
        "labels",
        "detections_from_outputs",
        "anchor_decode",
        "score_activation",
        "box_format",
        "to_source",
        "class_map",
        "score_threshold",
        "max_detections",
        "nms",
        "yolo_decode",
        "darknet_correct_boxes",
        "darknet_nms",
        "darknet_boxes",
        "yolo_anchor_free_decode",
        "mask_from_outputs",
        "mask_activation",
        "mask_minmax",
        "mask_resize",
        "mask_argmax",
        "mask_threshold",
        "mask_label_offset",
        "mask_void",
    }
    for name in OPS.names():
        cls = OPS.get(name)
        assert cls.name == name
        assert cls.Params.model_config.get("extra") == "forbid" and cls.Params.model_config.get("strict")
        assert cls.__doc__ and len(cls.__doc__) > 40


# one representative spec per pre op, applied to decoded HWC uint8 / CHW float32 images
CONTRACT_SPECS: list[dict[str, Any]] = [
    {"op": "color_layout", "order": "BGR"},
    {
        **RESIZE,
        "library": "opencv",
        "method": "bilinear",
        "antialias": False,
        "keep_aspect_ratio": False,
        "size": [9, 11],
    },
    {**RESIZE, "library": "torch", "method": "bilinear", "size": 9},
    {"op": "center_crop", "size": 5},
    {"op": "to_float", "dtype": "float64"},
    {"op": "cast", "dtype": "int32", "saturate": True},
    {"op": "subtract_mean", "value": [1, 2, 3]},
    {"op": "divide_std", "value": 3},
    {"op": "scale", "factor": 0.5},
    {"op": "data_layout", "layout": "NCHW"},
]


@pytest.mark.parametrize("spec", CONTRACT_SPECS, ids=lambda s: s["op"])
@pytest.mark.parametrize("make", [hwc_item, lambda a: chw_item(a.astype(np.float32))], ids=["hwc-u8", "chw-f32"])
def test_pre_op_contract(spec: dict[str, Any], make: Any) -> None:
    """No in-place mutation, contiguous 3-channel output, metadata changed only where promised."""
    op = pre(**spec)
    item = make(smooth_rgb(13, 17))
    out = check_pre_op(
        op,
        item,
        keep_dtype=spec["op"] not in ("to_float", "cast"),
        keep_layout=spec["op"] != "data_layout",
        keep_channels=spec["op"] != "color_layout",
    )
    assert out is not item or spec["op"] == "data_layout"


class TestPipeline:
    def pipeline(self) -> Pipeline:
        return Pipeline.from_specs(LITE0_PRE, LITE0_POST, BuildContext(class_names=tuple("abcdefghij")))

    def test_preprocess_batch_postprocess(self) -> None:
        p = self.pipeline()
        images = [smooth_rgb(300 + 7 * i, 400 - 9 * i, seed=i) for i in range(3)]
        data = [encode(Image.fromarray(img), "JPEG") for img in images]
        items = [p.preprocess(decode_input(d)) for d in data]
        assert all(it.layout == "CHW" and it.data.shape == (3, 224, 224) for it in items)
        batch = p.batch(items)
        assert batch.shape == (3, 3, 224, 224) and batch.dtype == np.float32 and batch.flags.c_contiguous
        preds = p.postprocess(np.arange(30, dtype=np.float64).reshape(3, 10))
        assert preds.is_probability and preds.scores.dtype == np.float32
        assert preds.topk_labels == [["j", "i", "h", "g", "f"]] * 3

    def test_batch_rejects_mixed_shapes(self) -> None:
        p = Pipeline.from_specs(LITE0_PRE[:2], [], CTX)
        items = [p.preprocess(decode_input(encode(Image.fromarray(smooth_rgb(h, 300)), "PNG"))) for h in (300, 200)]
        with pytest.raises(RepliscopeError, match="cannot batch"):
            p.batch(items)

    def test_describe_and_repr(self) -> None:
        p = self.pipeline()
        d = p.describe()
        assert [o["op"] for o in d["preprocess"]] == [s["op"] for s in LITE0_PRE]
        assert d["preprocess"][1] == {
            **RESIZE,
            "long_side": "round",
            "fit": None,
            "library": "pillow",
            "library_version": Image.__version__,
        }
        assert d["postprocess"][1] == {"op": "topk", "k": 5, "library": "numpy", "library_version": np.__version__}
        text = repr(p)
        assert text.startswith(
            "Pipeline(\n  preprocess=[\n    Decode(library='pillow', channels='RGB', max_pixels=89478485),"
        )
        assert (
            "Resize(size=256, keep_aspect_ratio=True, method='bicubic', library='pillow', antialias=True, "
            "long_side='round', fit=None)" in text
        )
        assert "TopK(k=5)" in text

    def test_one_change_variants(self) -> None:
        p = self.pipeline()
        i = p.index_of("resize")
        bgr = p.insert_pre(1, pre(op="color_layout", order="BGR"))
        assert [o.name for o in bgr.pre_ops][:3] == ["decode", "color_layout", "resize"]
        cv = p.replace_pre(i, pre(**{**RESIZE, "library": "opencv", "antialias": False}))
        assert cv.pre_ops[i].describe()["library"] == "opencv"
        no_crop = p.remove_pre(p.index_of("center_crop"))
        assert "center_crop" not in [o.name for o in no_crop.pre_ops]
        top1 = p.replace_post(1, build_op({"op": "topk", "k": 1}, "post", CTX))  # type: ignore[arg-type]
        assert top1.post_ops[1].describe()["k"] == 1
        assert [o.name for o in p.pre_ops] == [s["op"] for s in LITE0_PRE]  # the original is unchanged
        with pytest.raises(KeyError):
            p.index_of("cast")

    def test_order_errors_are_spec_errors(self) -> None:
        p = Pipeline.from_specs([{"op": "center_crop", "size": 4}], [], CTX)
        with pytest.raises(OpSpecError, match="put 'decode' first"):
            p.preprocess(decode_input(b"abc"))


def test_decode_input() -> None:
    item = decode_input(b"\x01\x02")
    assert item.layout == "encoded" and item.channels is None
    assert item.data.dtype == np.uint8 and item.data.tolist() == [1, 2]
    assert not item.data.flags.writeable


def test_import_needs_no_cv2_or_torch() -> None:
    code = "import sys, repliscope.ops; assert not {'cv2', 'torch'} & set(sys.modules), sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("size", [(400, 300), (300, 400), (333, 500), (343, 256)])
def test_efficientnet_lite0_reference_exactly(size: tuple[int, int]) -> None:
    """The manifest pipeline equals the hand-written PIL reference bit for bit (np.array_equal).

    ``size`` is (width, height). The reference rounds the longer side with ``round(w * s)`` and crops at
    torchvision's ``int(round((w - 224) / 2.0))`` (which is what center_crop implements). For 343 x 256
    that is 60, where ``(w - 224) // 2`` would give 59.
    """
    data = encode(Image.fromarray(smooth_rgb(size[1], size[0], seed=3)), "JPEG", quality=90)

    im = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = im.size
    s = 256 / min(w, h)
    im = im.resize((round(w * s), round(h * s)), Image.Resampling.BICUBIC)
    w, h = im.size
    left, top = int(round((w - 224) / 2.0)), int(round((h - 224) / 2.0))  # noqa: RUF046
    im = im.crop((left, top, left + 224, top + 224))
    x = (np.asarray(im, dtype=np.float32) - 127) / 128
    reference = x.transpose(2, 0, 1)[None]

    pipeline = Pipeline.from_specs(LITE0_PRE, [], CTX)
    batch = pipeline.batch([pipeline.preprocess(decode_input(data))])
    assert batch.dtype == np.float32 and batch.shape == (1, 3, 224, 224)
    assert np.array_equal(batch, reference)
