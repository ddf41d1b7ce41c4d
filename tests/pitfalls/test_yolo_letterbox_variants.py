"""The letterbox variants of the YOLO manifest (``repliscope.pitfalls.yolo_variants``): the border in the Model
Garden's / Ultralytics' grey (114/255) instead of Darknet's 0.5, and padding the source before resizing instead
of ``letterbox_image``'s resize-then-embed. Each is one stated change; the padded-first input is checked against
libdarknet's own ``resize_image`` of the padded canvas, and the effect of each on Darknet's sample images is
pinned (onnxruntime on the Darknet -> ONNX conversion)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from repliscope.errors import OpSpecError
from repliscope.ops.base import Geometry, Item
from repliscope.ops.darknet.letterbox import DarknetLetterbox, DarknetLetterboxParams
from repliscope.ops.pipeline import Pipeline, decode_input
from repliscope.pitfalls import yolo_variants
from repliscope.pitfalls.base import PITFALLS, NotApplicable, PitfallContext, rebuild
from repliscope.pitfalls.sweep import task_pitfalls
from tests.yolo._assets import DARKNET_DATA, MANIFEST, need_darknet, seed_cache

NAMES = ("darknet_letterbox_fill_114", "darknet_letterbox_pad_then_resize")
CTX = PitfallContext(input_shape=(-1, 3, 416, 416), input_layout="NCHW", runtime="onnxruntime", batch_size=1, threads=1)


def _letterbox(
    order: Literal["resize_then_pad", "pad_then_resize"], size: list[int], fill: float = 0.5
) -> DarknetLetterbox:
    return DarknetLetterbox(DarknetLetterboxParams(size=size, fill=fill, keep_aspect_ratio=True, order=order))


def _libdarknet_resize(chw: np.ndarray, width: int, height: int) -> np.ndarray:
    """libdarknet's own ``resize_image(im, w, h)`` on a float32 CHW array."""
    import ctypes

    from repliscope.backends.darknet import lib as dn

    lib = dn.load_library()
    c, h, w = chw.shape
    data = np.ascontiguousarray(chw, dtype=np.float32)
    out = lib.resize_image(dn.IMAGE(w, h, c, data.ctypes.data_as(ctypes.POINTER(ctypes.c_float))), width, height)
    try:
        return np.ctypeslib.as_array(out.data, shape=(out.c, out.h, out.w)).copy()
    finally:
        lib.free_image(out)


@pytest.mark.parametrize(("h", "w", "size"), [(33, 61, [64, 96]), (200, 123, [416, 416]), (50, 50, [32, 48])])
def test_pad_then_resize_is_libdarknets_resize_of_the_padded_canvas(h: int, w: int, size: list[int]) -> None:
    """The source padded (with ``fill``, centred) to the network's aspect ratio, then libdarknet's resize_image:
    bit for bit. Geometry: offset (top, left), then the canvas scale."""
    need_darknet()
    rng = np.random.default_rng(h)
    im = rng.random((3, h, w), dtype=np.float32)
    net_h, net_w = size
    ch, cw = (round(w * net_h / net_w), w) if w * net_h > h * net_w else (h, round(h * net_w / net_h))
    canvas = np.full((3, ch, cw), np.float32(0.25), np.float32)
    top, left = (ch - h) // 2, (cw - w) // 2
    canvas[:, top : top + h, left : left + w] = im
    got = _letterbox("pad_then_resize", size, 0.25)(Item(im, "CHW", "RGB", Geometry((h, w))))
    assert np.array_equal(got.data, _libdarknet_resize(canvas, net_w, net_h))
    hwc = _letterbox("pad_then_resize", size, 0.25)(Item(im.transpose(1, 2, 0).copy(), "HWC", "RGB", Geometry((h, w))))
    assert np.array_equal(hwc.data, got.data.transpose(1, 2, 0))
    assert got.geometry is not None
    sy, sx = net_h / ch, net_w / cw
    assert got.geometry.scale == pytest.approx((sy, sx)) and got.geometry.offset == pytest.approx((top * sy, left * sx))


def test_the_order_needs_a_border() -> None:
    with pytest.raises(OpSpecError, match="pad_then_resize only applies with keep_aspect_ratio: true") as info:
        DarknetLetterbox(
            DarknetLetterboxParams(size=[8, 8], fill=0.5, keep_aspect_ratio=False, order="pad_then_resize")
        )
    assert info.value.key == "order" and info.value.allowed == ["pad_then_resize", "resize_then_pad"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Pipeline, Any]:
    from repliscope.evaluation.run import RunSettings, prepare
    from repliscope.runtimes import create_runner

    seed_cache()
    p = prepare(MANIFEST, RunSettings(runtime="onnxruntime", threads=1, batch_size=1))
    runner = create_runner("onnxruntime", p.artifact, 1, tmp_path_factory.mktemp("onnx"))
    return p.pipeline, runner


def _run(pipeline: Pipeline, runner: Any, image: Path) -> tuple[np.ndarray, int]:
    item = pipeline.preprocess(decode_input(image.read_bytes()))
    preds = pipeline.postprocess(runner.infer_outputs(item.data[None]), geometry=[item.geometry])
    assert preds.detections is not None
    return item.data, len(preds.detections[0].scores)


def test_registered_for_detection_with_one_stated_change(prepared: tuple[Pipeline, Any]) -> None:
    assert set(NAMES) <= set(task_pitfalls("object_detection"))
    pipeline, _ = prepared
    fill = PITFALLS.get("darknet_letterbox_fill_114")().derive(pipeline, CTX)
    order = PITFALLS.get("darknet_letterbox_pad_then_resize")().derive(pipeline, CTX)
    assert fill.change == "darknet_letterbox fill 0.5 -> 0.447059 (114/255)"
    assert order.change == "darknet_letterbox order resize_then_pad -> pad_then_resize"
    assert yolo_variants.GREY_FILL == 114 / 255
    # each the other way round too, and the stretch variant of a padded-first manifest stretches
    back = PITFALLS.get("darknet_letterbox_fill_114")().derive(fill.pipeline, CTX)
    assert back.change == "darknet_letterbox fill 0.447059 -> 0.5"
    again = PITFALLS.get("darknet_letterbox_pad_then_resize")().derive(order.pipeline, CTX)
    assert again.change == "darknet_letterbox order pad_then_resize -> resize_then_pad"
    stretch = PITFALLS.get("darknet_letterbox_stretch")().derive(order.pipeline, CTX)
    assert stretch.pipeline.pre_ops[-1].params.model_dump()["keep_aspect_ratio"] is False
    for name in NAMES:
        with pytest.raises(NotApplicable, match="stretches"):
            PITFALLS.get(name)().derive(stretch.pipeline, CTX)
        with pytest.raises(NotApplicable):
            PITFALLS.get(name)().derive(Pipeline((), ()), CTX)


def test_decoder_tensorflow_swaps_the_decode_library(prepared: tuple[Pipeline, Any]) -> None:
    pipeline, runner = prepared
    assert "decoder_tensorflow" in task_pitfalls("object_detection")
    derived = PITFALLS.get("decoder_tensorflow")().derive(pipeline, CTX)
    assert derived.change == "decode.library opencv -> tensorflow"
    back = PITFALLS.get("decoder_tensorflow")().derive(derived.pipeline, CTX)
    assert back.change == "decode.library tensorflow -> opencv"
    turbo = pipeline.replace_pre(
        0,
        rebuild(
            pipeline.pre_ops[0], library="libjpeg_turbo", dct_scale_to=None, fancy_upsampling=True, dct_method="ifast"
        ),
    )
    assert (
        PITFALLS.get("decoder_tensorflow")().derive(turbo, CTX).change == "decode.library libjpeg_turbo -> tensorflow"
    )
    # dog.jpg: TensorFlow's JDCT_IFAST decode moves the letterboxed network input by up to 6.6 grey levels and
    # 70 detections become 69
    base, n_base = _run(pipeline, runner, DARKNET_DATA / "dog.jpg")
    tf_input, n_tf = _run(derived.pipeline, runner, DARKNET_DATA / "dog.jpg")
    assert (n_base, n_tf) == (70, 69)
    assert float(np.abs(tf_input - base).max()) == pytest.approx(6.624 / 255, abs=1e-5)


def test_measured_effect_on_darknets_sample_images(prepared: tuple[Pipeline, Any]) -> None:
    """dog.jpg (768 x 576) and kite.jpg (640 x 424): the grey border changes only the border pixels (by
    0.5 - 114/255) and yet the detections; padding first resamples the whole canvas, so content pixels move too
    (up to 0.70 at kite.jpg's sharp edges)."""
    pipeline, runner = prepared
    fill = PITFALLS.get("darknet_letterbox_fill_114")().derive(pipeline, CTX).pipeline
    order = PITFALLS.get("darknet_letterbox_pad_then_resize")().derive(pipeline, CTX).pipeline
    seen = {}
    for name in ("dog.jpg", "kite.jpg"):
        base, n_base = _run(pipeline, runner, DARKNET_DATA / name)
        grey, n_grey = _run(fill, runner, DARKNET_DATA / name)
        padded, n_padded = _run(order, runner, DARKNET_DATA / name)
        border = np.all(base == np.float32(0.5), axis=0)  # rows above and below the image
        assert border[0].all() and border[-1].all()
        assert np.array_equal(np.any(grey != base, axis=0), border)
        assert np.all(grey[:, border] == np.float32(114 / 255))
        seen[name] = (n_base, n_grey, n_padded, round(float(np.abs(padded - base).max()), 3))
    assert seen == {"dog.jpg": (70, 70, 69, 0.059), "kite.jpg": (34, 33, 35, 0.701)}


def test_a_padded_canvas_over_the_pixel_limit_is_refused_before_it_is_made() -> None:
    """A 1 x 20000 strip padded to a square would be a 20000 x 20000 canvas (400 M pixels): a SampleError
    naming the op and the limit, before any allocation."""
    from repliscope.errors import SampleError

    strip = np.zeros((3, 1, 20000), np.float32)
    with pytest.raises(SampleError, match=r"'darknet_letterbox' would make a 20000x20000 image .*-pixel limit"):
        _letterbox("pad_then_resize", [416, 416])(Item(strip, "CHW", "RGB", Geometry((1, 20000))))
