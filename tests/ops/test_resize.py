"""resize: output sizes, library-combination checks, and exact agreement with each reference library."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from PIL import Image

from repliscope.errors import OpSpecError
from repliscope.ops.base import Item
from repliscope.ops.resize import Resize
from tests.ops._helpers import check_pre_op, chw_item, hwc_item, pre, smooth_rgb


def resize(size: Any, method: str, library: str, antialias: bool, keep: bool = False) -> Resize:
    op = pre(op="resize", size=size, keep_aspect_ratio=keep, method=method, library=library, antialias=antialias)
    assert isinstance(op, Resize)
    return op


class TestOutputSize:
    @pytest.mark.parametrize(
        ("hw", "expected"),
        [
            ((300, 400), (256, 341)),  # 341.33
            ((400, 300), (341, 256)),
            ((375, 500), (256, 341)),  # 341.33
            ((500, 375), (341, 256)),
            ((256, 256), (256, 256)),
            ((100, 150), (256, 384)),
            ((10, 21), (256, 538)),  # 537.6 rounds up (torchvision would truncate to 537)
        ],
    )
    def test_shorter_side(self, hw: tuple[int, int], expected: tuple[int, int]) -> None:
        assert resize(256, "bilinear", "pillow", True, keep=True).output_size(*hw) == expected

    def test_rounds_not_truncates(self) -> None:
        # 500 * 224 / 375 = 298.67: round -> 299 (torchvision's int() gives 298)
        assert resize(224, "bilinear", "pillow", True, keep=True).output_size(375, 500) == (224, 299)

    @pytest.mark.parametrize(
        ("hw", "expected"),
        [
            ((2, 5), (1, 2)),  # 5 * 1 / 2 = 2.5 -> 2
            ((2, 3), (1, 2)),  # 1.5 -> 2
            ((2, 7), (1, 4)),  # 3.5 -> 4
            ((9, 2), (4, 1)),  # 4.5 -> 4
        ],
    )
    def test_exact_ties_round_half_to_even(self, hw: tuple[int, int], expected: tuple[int, int]) -> None:
        assert resize(1, "bilinear", "pillow", True, keep=True).output_size(*hw) == expected

    def test_square_and_exact(self) -> None:
        assert resize(224, "bilinear", "pillow", True).output_size(300, 400) == (224, 224)
        assert resize([100, 50], "bilinear", "pillow", True).output_size(300, 400) == (100, 50)

    def test_list_with_keep_aspect_ratio_is_rejected(self) -> None:
        with pytest.raises(OpSpecError, match="ambiguous") as exc:
            resize([100, 50], "bilinear", "pillow", True, keep=True)
        assert exc.value.key == "keep_aspect_ratio"


class TestLibraryCombinations:
    @pytest.mark.parametrize(
        ("method", "library", "antialias", "key"),
        [
            ("bicubic", "pillow", False, "antialias"),
            ("bilinear", "opencv", True, "antialias"),
            ("area", "opencv", False, "antialias"),
            ("lanczos", "torch", False, "method"),
            ("nearest", "torch", True, "antialias"),
            ("area", "torch", False, "antialias"),
            ("bicubic", "go_imaging", True, "method"),
            ("nearest", "go_imaging", False, "antialias"),
            ("bilinear", "go_imaging", False, "antialias"),
        ],
    )
    def test_rejected(self, method: str, library: str, antialias: bool, key: str) -> None:
        with pytest.raises(OpSpecError) as exc:
            resize(10, method, library, antialias)
        assert exc.value.key == key
        assert library in exc.value.message

    @pytest.mark.parametrize(
        ("method", "library", "antialias"),
        [
            *[(m, "pillow", True) for m in ("nearest", "bilinear", "bicubic", "area", "lanczos")],
            *[(m, "opencv", False) for m in ("nearest", "bilinear", "bicubic", "lanczos")],
            ("area", "opencv", True),
            ("nearest", "torch", False),
            ("bilinear", "torch", False),
            ("bilinear", "torch", True),
            ("bicubic", "torch", False),
            ("bicubic", "torch", True),
            ("area", "torch", True),
            ("bilinear", "go_imaging", True),
            ("nearest", "go_imaging", True),
        ],
    )
    def test_accepted_and_contract(self, method: str, library: str, antialias: bool) -> None:
        img = smooth_rgb(31, 45)
        op = resize([20, 26], method, library, antialias)
        out = check_pre_op(op, hwc_item(img))
        assert out.data.shape == (20, 26, 3)
        out_chw = check_pre_op(op, chw_item(img))
        np.testing.assert_array_equal(out_chw.data, out.data.transpose(2, 0, 1))
        assert op.describe()["library"] == library


PIL_FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "area": Image.Resampling.BOX,
    "lanczos": Image.Resampling.LANCZOS,
}
SIZES = [[150, 200], [113, 97], [600, 800]]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("method", list(PIL_FILTERS))
def test_pillow_equals_image_resize(method: str, size: list[int]) -> None:
    img = smooth_rgb(301, 403)
    expected = np.asarray(Image.fromarray(img).resize((size[1], size[0]), PIL_FILTERS[method]))
    np.testing.assert_array_equal(resize(size, method, "pillow", True)(hwc_item(img)).data, expected)


@pytest.mark.parametrize("method", ["bilinear", "bicubic"])
def test_pillow_float32_per_channel_mode_f(method: str) -> None:
    img: np.ndarray = smooth_rgb(41, 53).astype(np.float32) / 7
    out = check_pre_op(resize([20, 30], method, "pillow", True), hwc_item(img)).data
    for c in range(3):
        ref = np.asarray(Image.fromarray(img[..., c]).resize((30, 20), PIL_FILTERS[method]))
        np.testing.assert_array_equal(out[..., c], ref)
    # close to the uint8 path, which rounds to 8 bits between its horizontal and vertical passes and
    # clips bicubic overshoot (measured max 0.83 bilinear, 1.28 bicubic)
    u8 = resize([20, 30], method, "pillow", True)(hwc_item(smooth_rgb(41, 53))).data
    assert np.abs(out * 7 - u8).max() <= 1.5


def test_pillow_rejects_other_dtypes() -> None:
    with pytest.raises(OpSpecError, match="pillow resize supports uint8 and float32"):
        resize(10, "bilinear", "pillow", True)(hwc_item(smooth_rgb(20, 20).astype(np.float64)))


CV_FLAGS = {
    "nearest": "INTER_NEAREST",
    "bilinear": "INTER_LINEAR",
    "bicubic": "INTER_CUBIC",
    "area": "INTER_AREA",
    "lanczos": "INTER_LANCZOS4",
}


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("method", list(CV_FLAGS))
def test_opencv_equals_cv2_resize(method: str, size: list[int], dtype: type) -> None:
    import cv2

    img: np.ndarray = smooth_rgb(301, 403).astype(dtype)
    expected = cv2.resize(img, (size[1], size[0]), interpolation=getattr(cv2, CV_FLAGS[method]))
    out = check_pre_op(resize(size, method, "opencv", method == "area"), hwc_item(img)).data
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(
    ("method", "antialias"),
    [
        ("nearest", False),
        ("bilinear", False),
        ("bilinear", True),
        ("bicubic", False),
        ("bicubic", True),
        ("area", True),
    ],
)
def test_torch_equals_interpolate(method: str, antialias: bool, size: list[int]) -> None:
    import torch
    from torch.nn import functional

    img = smooth_rgb(301, 403)
    t = torch.from_numpy(img).permute(2, 0, 1)[None].float()
    smooth = method in ("bilinear", "bicubic")
    kw: dict[str, Any] = {"align_corners": False, "antialias": antialias} if smooth else {}
    ref = functional.interpolate(t, size=tuple(size), mode=method, **kw)[0].permute(1, 2, 0).numpy()
    out_f = check_pre_op(resize(size, method, "torch", antialias), hwc_item(img.astype(np.float32))).data
    np.testing.assert_array_equal(out_f, ref)
    out_u8 = check_pre_op(resize(size, method, "torch", antialias), hwc_item(img)).data
    np.testing.assert_array_equal(out_u8, np.clip(np.round(ref), 0, 255).astype(np.uint8))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("method", ["bilinear", "bicubic"])
def test_torch_antialias_close_to_pillow(method: str, size: list[int]) -> None:
    """Stated tolerance (uint8): bilinear max 1 level; bicubic max 2 when downscaling, 8 when upscaling
    (measured: 1 / 2 / 6); mean absolute difference below 0.3 levels in every case."""
    img = smooth_rgb(301, 403)
    a = resize(size, method, "pillow", True)(hwc_item(img)).data.astype(int)
    b = resize(size, method, "torch", True)(hwc_item(img)).data.astype(int)
    bound = 1 if method == "bilinear" else (2 if size[0] < 301 else 8)
    assert np.abs(a - b).max() <= bound
    assert np.abs(a - b).mean() < 0.3


def test_without_antialias_downscaling_aliases() -> None:
    """A 1-pixel checkerboard downscaled 4x: antialiased methods give flat grey, unfiltered ones don't."""
    board = ((np.indices((64, 64)).sum(axis=0) % 2) * 255).astype(np.uint8)
    img = np.repeat(board[..., None], 3, axis=-1)
    smooth = resize([16, 16], "bilinear", "pillow", True)(hwc_item(img)).data
    assert np.abs(smooth.astype(int) - 128).max() <= 1
    aliased = resize([16, 16], "nearest", "opencv", False)(hwc_item(img)).data
    assert set(np.unique(aliased)) <= {0, 255}


@pytest.mark.parametrize(("library", "bound"), [("opencv", 0.5), ("torch", 0.5), ("pillow", 1.0)])
def test_integer_factor_area_is_the_block_mean(library: str, bound: float) -> None:
    """2x downscale with area = the 2x2 block mean, rounded once (OpenCV, torch) or after each of
    Pillow's two separable passes (horizontal result is stored as uint8), hence Pillow's bound of 1."""
    img = smooth_rgb(40, 60)
    block = img.astype(np.float64).reshape(20, 2, 30, 2, 3).mean(axis=(1, 3))
    out = resize([20, 30], "area", library, True)(hwc_item(img)).data
    assert np.abs(out - block).max() <= bound


def test_torch_uint8_rounds_half_to_even_and_clips() -> None:
    img = np.zeros((1, 2, 3), dtype=np.uint8)
    img[0, 1] = 1  # bilinear 2 -> ... upscaled values include exact .5 averages
    out = resize([1, 4], "bilinear", "torch", False)(hwc_item(img)).data
    # samples at x = -0.25, 0.25, 0.75, 1.25 -> 0, 0.25, 0.75, 1 -> rounded 0, 0, 1, 1
    np.testing.assert_array_equal(out[0, :, 0], [0, 0, 1, 1])
    bright = np.full((4, 4, 3), 255, dtype=np.uint8)
    bright[0, 0] = 0
    out = resize([9, 9], "bicubic", "torch", False)(hwc_item(bright)).data  # bicubic overshoots above 255
    assert out.dtype == np.uint8 and out.max() == 255


def test_long_side_truncate_is_torchvisions_int_and_round_is_the_default() -> None:
    from repliscope.errors import OpSpecError
    from repliscope.ops.resize import Resize, ResizeParams

    base = {"size": 224, "keep_aspect_ratio": True, "method": "bicubic", "library": "pillow", "antialias": True}
    rounded = Resize(ResizeParams(**base))  # type: ignore[arg-type]
    truncated = Resize(ResizeParams(**base, long_side="truncate"))  # type: ignore[arg-type]
    # torchvision: int(224 * 500 / 375) = int(298.67) = 298; round gives 299
    assert rounded.output_size(375, 500) == (224, 299) and truncated.output_size(375, 500) == (224, 298)
    assert truncated.output_size(500, 375) == (298, 224)
    assert rounded.describe()["long_side"] == "round" and truncated.describe()["long_side"] == "truncate"
    rgb = np.zeros((375, 500, 3), np.uint8)
    assert truncated(Item(rgb, "HWC", "RGB")).data.shape == (224, 298, 3)
    with pytest.raises(OpSpecError, match="only applies to an int size with keep_aspect_ratio"):
        Resize(ResizeParams(**{**base, "keep_aspect_ratio": False}, long_side="truncate"))  # type: ignore[arg-type]


def go(size: list[int]) -> Resize:
    return resize(size, "bilinear", "go_imaging", True)


class TestGoImagingLinear:
    """Hand-computed ``imaging.Resize(img, w, h, imaging.Linear)`` (disintegration/imaging resize.go).

    ``precomputeWeights``: ``du = src/dst``, ``scale = max(du, 1)``, ``ru = ceil(scale)``; output ``v`` is
    centred at ``fu = (v + 0.5) * du - 0.5``, taps ``u`` in ``[max(ceil(fu - ru), 0), min(floor(fu + ru),
    src - 1)]`` weigh ``1 - |u - fu| / scale`` (dropped when 0), normalised to sum 1. Each pass (width first)
    rounds half up and clamps to uint8.
    """

    def test_downscale_4_to_2(self) -> None:
        # du = 2: v=0, fu=0.5, u=0,1,2 weigh .75,.75,.25 -> 3/7,3/7,1/7; v=1, fu=2.5, u=1,2,3 -> 1/7,3/7,3/7.
        # [10,20,30,40]: (30+60+30)/7 = 17.14 -> 17, (20+90+120)/7 = 32.86 -> 33
        out = go([1, 2])(hwc_item(np.array([[[10], [20], [30], [40]]], np.uint8), "L")).data
        np.testing.assert_array_equal(out[..., 0], [[17, 33]])

    def test_upscale_3_to_5(self) -> None:
        # du = 0.6, scale 1: fu = -0.2, 0.4, 1.0, 1.6, 2.2 -> taps {0:1}, {0:.6,1:.4}, {1:1}, {1:.4,2:.6},
        # {2:1} (edge taps renormalised): [0,100,200] -> [0, 40, 100, 160, 200]
        out = go([1, 5])(hwc_item(np.array([[[0], [100], [200]]], np.uint8), "L")).data
        np.testing.assert_array_equal(out[..., 0], [[0, 40, 100, 160, 200]])

    def test_4x4_to_2x2_rounds_between_passes(self) -> None:
        # rows -> [17.14, 32.86], [0, 3], [57.14, 72.86], [1.71, 3.29] rounded to [17,33], [0,3], [57,73], [2,3];
        # columns (same weights): (3*17+3*0+57)/7 = 15.43 -> 15 (without the intermediate rounding 15.51
        # -> 16), (3*33+3*3+73)/7 = 25.86 -> 26, (0+3*57+3*2)/7 = 25.29 -> 25, (3+3*73+3*3)/7 = 33
        img = np.array([[10, 20, 30, 40], [0, 0, 0, 7], [50, 60, 70, 80], [1, 2, 3, 4]], np.uint8)[..., None]
        out = go([2, 2])(hwc_item(img, "L")).data
        np.testing.assert_array_equal(out[..., 0], [[15, 26], [25, 33]])

    def test_half_rounds_up(self) -> None:
        # 2 -> 1: du = 2, fu = 0.5, taps u=0,1 weigh .75 each -> 1/2 each: (0+1)/2 = 0.5 -> 1 (half up),
        # (2+3)/2 = 2.5 -> 3 (half to even would give 2)
        out = go([1, 1])(hwc_item(np.array([[[0, 2, 7], [1, 3, 7]]], np.uint8))).data
        np.testing.assert_array_equal(out, [[[1, 3, 7]]])

    @pytest.mark.parametrize("size", [[7, 5], [40, 50], [17, 3]])
    def test_constant_image_stays_constant(self, size: list[int]) -> None:
        img = np.full((13, 11, 3), (0, 128, 255), np.uint8)
        out = check_pre_op(go(size), hwc_item(img)).data
        assert out.shape == (size[0], size[1], 3)
        np.testing.assert_array_equal(out, np.broadcast_to(np.array([0, 128, 255], np.uint8), out.shape))

    def test_same_size_is_a_copy_and_one_axis_is_one_pass(self) -> None:
        img = smooth_rgb(9, 12)
        np.testing.assert_array_equal(check_pre_op(go([9, 12]), hwc_item(img)).data, img)
        # only the width changes: every row is resized on its own (no vertical mixing)
        out = go([9, 5])(hwc_item(img)).data
        np.testing.assert_array_equal(out[3], go([1, 5])(hwc_item(img[3:4])).data[0])

    def test_close_to_pillow_bilinear(self) -> None:
        # the same triangle filter; Pillow's fixed-point coefficients and rounding differ by at most 1
        img = smooth_rgb(301, 403)
        ours = go([224, 224])(hwc_item(img)).data.astype(int)
        ref = np.asarray(Image.fromarray(img).resize((224, 224), Image.Resampling.BILINEAR)).astype(int)
        assert np.abs(ours - ref).max() <= 1

    def test_nearest_neighbor(self) -> None:
        # resizeNearest: source index int((i + 0.5) * src / dst): 5 -> 3 columns: 0.83, 2.5, 4.17 -> 0, 2, 4;
        # 2 -> 5 rows: 0.2, 0.6, 1.0, 1.4, 1.8 -> 0, 0, 1, 1, 1
        img = np.arange(10, dtype=np.uint8).reshape(2, 5)[..., None]
        op = resize([5, 3], "nearest", "go_imaging", True)
        out = op(hwc_item(img, "L")).data[..., 0]
        np.testing.assert_array_equal(out, [[0, 2, 4], [0, 2, 4], [5, 7, 9], [5, 7, 9], [5, 7, 9]])

    def test_rejects_float(self) -> None:
        with pytest.raises(OpSpecError, match="go_imaging resize works on 8-bit images"):
            go([4, 4])(hwc_item(smooth_rgb(8, 8).astype(np.float32)))


class TestFit:
    """size [height, width] + keep_aspect_ratio + fit, as timm ResizeKeepRatio: ratio = max (inside, longest=1)
    or min (cover, longest=0) of H / height and W / width; sides round(side / ratio)."""

    @staticmethod
    def fit(size: list[int], fit: str) -> Resize:
        op = pre(
            op="resize", size=size, keep_aspect_ratio=True, fit=fit, method="bilinear", library="pillow", antialias=True
        )
        assert isinstance(op, Resize)
        return op

    @pytest.mark.parametrize(
        ("hw", "box", "inside", "cover"),
        [
            ((375, 500), [256, 256], (192, 256), (256, 341)),  # ratio 500/256 = 1.953: 375/1.953 = 192.0
            ((500, 375), [256, 256], (256, 192), (341, 256)),  # cover ratio 1.465: 500/1.465 = 341.33
            ((375, 500), [256, 300], (225, 300), (256, 341)),  # inside ratio 500/300: 375*300/500 = 225
            ((100, 100), [256, 300], (256, 256), (300, 300)),  # upscaling
            ((3, 1000), [256, 256], (1, 256), (256, 85333)),  # 0.768 -> 1
        ],
    )
    def test_output_size(
        self, hw: tuple[int, int], box: list[int], inside: tuple[int, int], cover: tuple[int, int]
    ) -> None:
        assert self.fit(box, "inside").output_size(*hw) == inside
        assert self.fit(box, "cover").output_size(*hw) == cover

    def test_half_to_even(self) -> None:
        # 10x3 into [4, 4]: ratio 10/4 = 2.5, width 3/2.5 = 1.2 -> 1; 8xW: ratio 2, W/2 rounded half to even
        assert self.fit([4, 4], "inside").output_size(10, 3) == (4, 1)
        assert self.fit([4, 4], "inside").output_size(8, 5) == (4, 2)  # 5 / 2 = 2.5 -> 2 (half to even)
        assert self.fit([4, 4], "inside").output_size(8, 7) == (4, 4)  # 3.5 -> 4

    def test_resizes_with_pillow_to_that_size(self) -> None:
        img = smooth_rgb(75, 100)
        out = check_pre_op(self.fit([64, 64], "inside"), hwc_item(img)).data
        expected = np.asarray(Image.fromarray(img).resize((64, 48), Image.Resampling.BILINEAR, reducing_gap=None))
        np.testing.assert_array_equal(out, expected)

    def test_fit_needs_a_box_and_keep_aspect_ratio(self) -> None:
        with pytest.raises(OpSpecError, match="only applies") as exc:
            pre(
                op="resize",
                size=256,
                keep_aspect_ratio=True,
                fit="inside",
                method="bilinear",
                library="pillow",
                antialias=True,
            )
        assert exc.value.key == "fit"
        with pytest.raises(OpSpecError, match="without fit") as exc:
            pre(op="resize", size=[2, 3], keep_aspect_ratio=True, method="bilinear", library="pillow", antialias=True)
        assert exc.value.allowed == ["cover", "inside"]

    def test_static_shape_depends_on_the_image(self) -> None:
        from repliscope.ops.base import StaticShape

        got = self.fit([256, 256], "inside").static_shape(StaticShape("HWC", channels=3))
        assert got == StaticShape("HWC", channels=3)
        assert self.fit([256, 256], "inside").static_shape(StaticShape("HWC", 375, 500, 375, 3)) == StaticShape(
            "HWC", 192, 256, 192, 3
        )
