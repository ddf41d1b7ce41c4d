"""Variants with degrees (issue 35): a mistake that has a degree is ONE registered variant with parameters, its
default is what the sweep runs (unchanged), its degrees are what the pipeline diff tries; the resize family
(resize, letterbox, darknet_letterbox, warp_resize) is one family for every resize variant; the op parameters
the degrees need (center_crop ``offset``, darknet_letterbox ``resize``) leave existing manifests unchanged."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from repliscope.diff.pipeline.driver import preprocess_pipeline
from repliscope.errors import OpSpecError, RepliscopeError
from repliscope.manifest.loader import load_manifest
from repliscope.ops.base import Geometry, Item
from repliscope.ops.darknet.letterbox import DarknetLetterbox, DarknetLetterboxParams
from repliscope.ops.pipeline import Pipeline
from repliscope.pitfalls.base import PITFALLS, NotApplicable, PitfallContext, label, make_op
from repliscope.pitfalls.sweep import task_pitfalls
from tests.conftest import EXAMPLES, LITE0

CTX = PitfallContext(input_shape=(-1, 3, 224, 224), input_layout="NCHW", runtime="onnxruntime", batch_size=8, threads=2)
YOLO_CTX = PitfallContext((-1, 3, 416, 416), "NCHW", "onnxruntime", 1, 1)


@pytest.fixture(scope="module")
def lite0() -> Pipeline:
    return preprocess_pipeline(load_manifest(LITE0))


@pytest.fixture(scope="module")
def yolo() -> Pipeline:
    task_pitfalls("object_detection")  # registers the detection and YOLO variants
    return preprocess_pipeline(load_manifest(EXAMPLES / "yolov3-tiny.yaml"))


@pytest.fixture(scope="module")
def face() -> Pipeline:
    task_pitfalls("object_detection")
    return preprocess_pipeline(load_manifest(EXAMPLES / "blazeface-full-range.yaml"))


def change(name: str, base: Pipeline, ctx: PitfallContext = CTX, **params: object) -> str:
    return PITFALLS.get(name)(**params).derive(base, ctx).change


def test_a_parameter_that_does_not_exist_is_refused_with_the_ones_that_do() -> None:
    with pytest.raises(
        RepliscopeError, match=r"pitfall 'center_crop_offset' has no parameter shift \(its parameters: "
    ):
        PITFALLS.get("center_crop_offset")(shift=1)
    with pytest.raises(RepliscopeError, match=r"'color_layout_swapped' has no parameter x \(its parameters: none\)"):
        PITFALLS.get("color_layout_swapped")(x=1)
    assert label("letterbox_fill", {"fill": 114 / 255}) == "letterbox_fill[fill=0.447059]"
    assert label("center_crop_offset", {"offset": [1, -2]}) == "center_crop_offset[offset=[1, -2]]"
    assert label("resize_bilinear", {}) == "resize_bilinear"


def test_the_sweep_defaults_are_the_old_variants(lite0: Pipeline) -> None:
    """``Pitfall()`` derives what the sweep always ran; the degrees are extra, for the diagnosis."""
    assert (
        change("normalize_before_cast", lite0)
        == "to_float moved after subtract_mean, divide_std (uint8 arithmetic, wrapping)"
    )
    assert change("resize_library_swapped", lite0) == "resize.library pillow -> opencv (antialias True -> False)"
    assert change("center_crop_offset", lite0) == "center_crop window moved +1 rows, +1 columns"
    degrees = {n: PITFALLS.get(n)().degrees(lite0, CTX) for n in ("center_crop_offset", "normalize_before_cast")}
    assert len(degrees["center_crop_offset"]) == 24 and {"offset": [0, 0]} not in degrees["center_crop_offset"]
    assert degrees["normalize_before_cast"] == [{"steps": 1}, {"steps": 2}]
    assert PITFALLS.get("resize_library_swapped")().degrees(lite0, CTX) == [
        {"library": "opencv"},
        {"library": "torch"},
        {"library": "go_imaging"},
    ]
    assert change("normalize_before_cast", lite0, steps=1) == (
        "to_float moved after subtract_mean (uint8 arithmetic, wrapping); divide_std stays in float"
    )
    with pytest.raises(NotApplicable, match="steps 3: the pipeline has 2 normalisation op"):
        change("normalize_before_cast", lite0, steps=3)
    # go_imaging has no bicubic: that degree is refused with the op's own reason
    with pytest.raises(NotApplicable, match="library go_imaging has no method bicubic"):
        change("resize_library_swapped", lite0, library="go_imaging")


def test_the_crop_offset_moves_the_window_and_refuses_to_leave_the_image(lite0: Pipeline) -> None:
    img = np.arange(3 * 10 * 12, dtype=np.uint8).reshape(10, 12, 3)
    item = Item(img, "HWC", "RGB", Geometry((10, 12)))
    centred = make_op("center_crop", size=6)(item)
    moved = make_op("center_crop", size=6, offset=[1, -2])(item)
    assert np.array_equal(moved.data, img[3:9, 1:7]) and np.array_equal(centred.data, img[2:8, 3:9])
    assert moved.geometry is not None and moved.geometry.offset == (-3.0, -1.0)
    with pytest.raises(OpSpecError, match=r"offset: \[3, 0\] moves the 6x6 window of a 10x12 image outside it") as e:
        make_op("center_crop", size=6, offset=[3, 0])(item)
    assert e.value.key == "offset"
    derived = PITFALLS.get("center_crop_offset")(offset=[-1, 2]).derive(lite0, CTX).pipeline
    assert derived.pre_ops[2].params.model_dump()["offset"] == [-1, 2]


def test_every_resize_variant_applies_to_darknets_letterbox(yolo: Pipeline) -> None:
    """Were "not applicable: the pipeline has no 'resize' or 'letterbox' op"."""
    darknet = "darknet_letterbox resampling Darknet's resize_image (bilinear, corners aligned)"
    assert change("resize_library_swapped", yolo, YOLO_CTX) == f"{darknet} -> opencv bilinear (antialias False)"
    assert change("resize_library_swapped", yolo, YOLO_CTX, library="pillow") == (
        f"{darknet} -> pillow bilinear (antialias True)"
    )
    assert change("resize_nearest", yolo, YOLO_CTX) == f"{darknet} -> opencv nearest"
    assert change("resize_antialias_toggled", yolo, YOLO_CTX) == f"{darknet} -> torch bilinear with antialias"
    with pytest.raises(NotApplicable, match=r"already bilinear \(corners aligned\); another library.s bilinear is"):
        change("resize_bilinear", yolo, YOLO_CTX)
    assert [d["library"] for d in PITFALLS.get("resize_library_swapped")().degrees(yolo, YOLO_CTX)] == [
        "pillow",
        "opencv",
        "torch",
        "go_imaging",
    ]
    # and back: a port's cv2 letterbox returns to Darknet's own resize_image
    cv2_pipe = PITFALLS.get("resize_library_swapped")().derive(yolo, YOLO_CTX).pipeline
    back = PITFALLS.get("resize_library_swapped")(library="darknet").derive(cv2_pipe, YOLO_CTX)
    assert (
        back.change
        == "darknet_letterbox resampling opencv bilinear -> Darknet's resize_image (bilinear, corners aligned)"
    )
    assert back.pipeline.pre_ops[-1].params.model_dump()["resize_library"] == "darknet"


def test_darknet_letterbox_resampled_by_opencv_is_cv2_resize_in_the_border() -> None:
    im = np.random.default_rng(0).random((3, 30, 50), dtype=np.float32)
    params: dict[str, object] = {"size": [64, 64], "fill": 0.5, "keep_aspect_ratio": True}
    cv2_linear = {"resize_method": "bilinear", "resize_library": "opencv", "resize_antialias": False}
    op = DarknetLetterbox(DarknetLetterboxParams.model_validate({**params, **cv2_linear}))
    got = op(Item(im, "CHW", "RGB", Geometry((30, 50)))).data
    want = np.full((3, 64, 64), np.float32(0.5), np.float32)
    want[:, 13:51, :] = cv2.resize(np.ascontiguousarray(im.transpose(1, 2, 0)), (64, 38)).transpose(2, 0, 1)
    assert np.array_equal(got, want)
    own = DarknetLetterbox(DarknetLetterboxParams.model_validate(params))
    assert own.params.model_dump()["resize_library"] == "darknet"  # left out: Darknet's own resize_image
    with pytest.raises(OpSpecError, match="antialias: library opencv with method bilinear needs antialias: false"):
        DarknetLetterbox(DarknetLetterboxParams.model_validate({**params, **cv2_linear, "resize_antialias": True}))
    with pytest.raises(OpSpecError, match="resize_method: Darknet's resize_image is bilinear without antialiasing"):
        DarknetLetterbox(DarknetLetterboxParams.model_validate({**params, "resize_method": "nearest"}))


def test_the_letterbox_fill_is_a_variant_of_both_letterboxes(yolo: Pipeline, face: Pipeline) -> None:
    assert change("letterbox_fill", yolo, YOLO_CTX) == "darknet_letterbox fill 0.5 -> 0"
    assert [d["fill"] for d in PITFALLS.get("letterbox_fill")().degrees(yolo, YOLO_CTX)] == pytest.approx(
        [0, 114 / 255, 127 / 255, 128 / 255, 1.0]
    )
    face_ctx = PitfallContext((-1, 192, 192, 3), "NHWC", "onnxruntime", 1, 1)
    assert change("letterbox_fill", face, face_ctx) == "letterbox color [0.0, 0.0, 0.0] -> [114, 114, 114]"
    assert [d["fill"] for d in PITFALLS.get("letterbox_fill")().degrees(face, face_ctx)] == [114, 127, 128, 255]
    stretched = PITFALLS.get("darknet_letterbox_stretch")().derive(yolo, YOLO_CTX).pipeline
    with pytest.raises(NotApplicable, match=r"stretches \(keep_aspect_ratio false\): there is no border"):
        change("letterbox_fill", stretched, YOLO_CTX)


def test_warp_resize_is_in_the_family_with_its_own_reasons() -> None:
    from repliscope.ops.pipeline import Pipeline as P

    warp = P(
        [
            make_op("decode", library="pillow", channels="RGB"),
            make_op("warp_resize", size=[8, 8], method="bilinear", border="constant", border_value=0, library="opencv"),
        ],
        [],
    )
    assert change("resize_nearest", warp) == "warp_resize.method bilinear -> nearest"
    with pytest.raises(NotApplicable, match="segmentation_half_pixel_corner_aligned_swapped"):
        change("resize_library_swapped", warp)
    with pytest.raises(NotApplicable, match="antialiasing is no switch of it"):
        change("resize_antialias_toggled", warp)


def test_a_tensorflow_resize_keeps_its_library_where_it_has_the_switch() -> None:
    """TF-library ops are in the family too: tf.image.resize has its own antialias switch, and nearest samples."""
    tf_resize = Pipeline(
        [
            make_op("decode", library="pillow", channels="RGB"),
            make_op("to_float", dtype="float32"),
            make_op(
                "resize", size=[8, 8], keep_aspect_ratio=False, method="bilinear", library="tensorflow", antialias=True
            ),
        ],
        [],
    )
    assert change("resize_antialias_toggled", tf_resize) == (
        "resize.antialias True -> False (library tensorflow, which has the switch)"
    )
    nearest = PITFALLS.get("resize_nearest")().derive(tf_resize, CTX).pipeline.pre_ops[-1].params.model_dump()
    assert (nearest["library"], nearest["method"], nearest["antialias"]) == ("tensorflow", "nearest", False)
    assert change("resize_library_swapped", tf_resize) == "resize.library tensorflow -> pillow (antialias True -> True)"
