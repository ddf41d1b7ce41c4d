"""Conformance of the segmentation ops, one class per op: exact hand cases, references (OpenCV, torch), no input
modified in place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repliscope.errors import OpSpecError, RepliscopeError
from repliscope.ops.base import BuildContext, Geometry, Item, MaskMap, Predictions
from repliscope.ops.pipeline import build_op

FIXTURES = Path(__file__).parents[1] / "fixtures" / "segmentation"
NAMES = ("background", "a", "b")


def post(spec: dict[str, Any], names: tuple[str, ...] = NAMES) -> Any:
    return build_op(spec, "post", BuildContext(class_names=names))


def preds_of(
    values: np.ndarray, source_hw: tuple[int, int] | None = None, geometry: Geometry | None = None
) -> Predictions:
    geo = geometry or Geometry(source_hw or values.shape[:2])
    return Predictions(
        scores=np.zeros((1, 1), np.float32),
        outputs={},
        geometry=[geo],
        segmentation=[MaskMap(values=values, activated=True, space="output", class_names=NAMES)],
    )


class TestMaskFromOutputs:
    def test_layouts(self) -> None:
        x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
        nchw = post({"op": "mask_from_outputs", "output": "o", "layout": "NCHW", "activated": False})
        p = nchw(Predictions(scores=x[:, 0, 0], outputs={"o": x}))
        assert p.segmentation is not None and len(p.segmentation) == 2
        assert np.array_equal(p.segmentation[1].values, x[1].transpose(1, 2, 0))
        assert p.segmentation[0].class_names == NAMES and not p.segmentation[0].activated
        nhw = post({"op": "mask_from_outputs", "output": "o", "layout": "NHW", "activated": True})
        q = nhw(Predictions(scores=x[:, 0, 0], outputs={"o": x[..., :1]}))
        assert q.segmentation is not None and q.segmentation[0].values.shape == (3, 4, 1)

    def test_unknown_output_and_shape(self) -> None:
        op = post({"op": "mask_from_outputs", "output": "nope", "layout": "NHWC", "activated": False})
        with pytest.raises(RepliscopeError, match=r"no output 'nope' .outputs: o."):
            op(Predictions(scores=np.zeros((1, 1)), outputs={"o": np.zeros((1, 2, 2, 3))}))
        with pytest.raises(OpSpecError):
            post({"op": "mask_from_outputs", "output": "o", "layout": "HW", "activated": False})


class TestMaskActivation:
    def test_softmax_and_sigmoid(self) -> None:
        x = np.array([[[0.0, 1.0, 2.0]]], np.float32)
        soft = post({"op": "mask_activation", "function": "softmax"})(preds_of(x)).segmentation[0].values
        e = np.exp(np.array([0.0, 1.0, 2.0]))
        np.testing.assert_allclose(soft[0, 0], e / e.sum(), rtol=1e-6)
        sig = post({"op": "mask_activation", "function": "sigmoid"})(preds_of(x)).segmentation[0].values
        np.testing.assert_allclose(sig[0, 0], 1 / (1 + np.exp(-np.array([0.0, 1.0, 2.0]))), rtol=1e-6)
        assert x[0, 0, 2] == 2.0  # input untouched


def resize_op(**kw: object) -> Any:
    spec = {
        "op": "mask_resize",
        "method": "bilinear",
        "mapping": "stretch",
        "sampling": "half_pixel",
        "library": "numpy",
        **kw,
    }
    return post(spec)


class TestMaskResize:
    def test_half_pixel_stretch_equals_cv2_resize(self) -> None:
        import cv2

        rng = np.random.default_rng(0)
        x = rng.random((7, 9, 3), dtype=np.float32)
        out = resize_op()(preds_of(x, (20, 13))).segmentation[0].values
        ref = cv2.resize(x, (13, 20), interpolation=cv2.INTER_LINEAR)
        np.testing.assert_allclose(out, ref, atol=2e-6)
        cv = resize_op(library="opencv")(preds_of(x, (20, 13))).segmentation[0].values
        np.testing.assert_array_equal(cv, ref)

    def test_corner_aligned_stretch_equals_torch_align_corners(self) -> None:
        import torch

        rng = np.random.default_rng(1)
        x = rng.random((5, 6, 2), dtype=np.float32)
        out = resize_op(sampling="corner_aligned")(preds_of(x, (11, 17))).segmentation[0].values
        ref = (
            torch.nn.functional.interpolate(
                torch.from_numpy(x.transpose(2, 0, 1))[None], size=(11, 17), mode="bilinear", align_corners=True
            )[0]
            .numpy()
            .transpose(1, 2, 0)
        )
        np.testing.assert_allclose(out, ref, atol=2e-6)

    def test_geometry_undoes_a_crop_and_a_resize_exactly(self) -> None:
        # source 8 x 12; pre-processing: crop rows 2..6, cols 4..12 (offset -2, -4), then resize x 2 -> 8 x 16 input
        geo = Geometry((8, 12)).then((1.0, 1.0), (-2.0, -4.0)).then((2.0, 2.0))
        rng = np.random.default_rng(2)
        labels_src = rng.integers(0, 3, (8, 12)).astype(np.int32)
        input_map = np.repeat(np.repeat(labels_src[2:6, 4:12], 2, axis=0), 2, axis=1)  # what a model would see
        m = MaskMap(values=None, activated=True, space="output", labels=input_map, class_names=NAMES)
        p = Predictions(scores=np.zeros((1, 1)), geometry=[geo], segmentation=[m])
        op = resize_op(method="nearest", mapping="geometry", input_size=[8, 16])
        out = op(p).segmentation[0].labels
        assert out.shape == (8, 12) and out.dtype == np.int32
        assert np.array_equal(out[2:6, 4:12], labels_src[2:6, 4:12])  # the covered part exactly
        assert np.array_equal(out[0], out[2]) and np.array_equal(out[:, 0], out[:, 4])  # outside: clamped edge

    def test_letterbox_padding_is_not_read(self) -> None:
        # 4 x 8 source letterboxed into 8 x 8: scale 1, rows offset 2 (pad 2 on top and bottom)
        geo = Geometry((4, 8)).then((1.0, 1.0), (2.0, 0.0))
        m = np.full((8, 8, 1), 9.0, np.float32)
        m[2:6] = np.arange(8, dtype=np.float32)[None, :, None]
        out = resize_op(mapping="geometry", input_size=[8, 8])(preds_of(m, geometry=geo)).segmentation[0].values
        np.testing.assert_array_equal(out[..., 0], np.tile(np.arange(8, dtype=np.float32), (4, 1)))

    def test_labels_need_nearest_and_params_are_checked(self) -> None:
        m = MaskMap(values=None, activated=True, space="output", labels=np.zeros((2, 2), np.int32), class_names=NAMES)
        with pytest.raises(RepliscopeError, match="class indices are not interpolated"):
            resize_op()(Predictions(scores=np.zeros((1, 1)), geometry=[Geometry((4, 4))], segmentation=[m]))
        with pytest.raises(OpSpecError, match="input_size"):
            resize_op(mapping="geometry")
        with pytest.raises(OpSpecError, match="stretch with sampling: half_pixel only"):
            resize_op(library="opencv", sampling="corner_aligned")


class TestLabels:
    def test_argmax_ties_take_the_lowest_index(self) -> None:
        x = np.array([[[1.0, 1.0, 0.0], [0.0, 2.0, 2.0]]], np.float32)
        out = post({"op": "mask_argmax"})(preds_of(x)).segmentation[0].labels
        assert out.tolist() == [[0, 1]] and out.dtype == np.int32

    def test_threshold_gt_and_ge(self) -> None:
        x = np.array([[[0.5], [0.6], [0.4]]], np.float32)
        gt = post({"op": "mask_threshold", "threshold": 0.5, "keep": "gt", "foreground": 1, "background": 0})
        ge = post({"op": "mask_threshold", "threshold": 0.5, "keep": "ge", "foreground": 2, "background": 0})
        assert gt(preds_of(x)).segmentation[0].labels.tolist() == [[0, 1, 0]]
        assert ge(preds_of(x)).segmentation[0].labels.tolist() == [[2, 2, 0]]
        with pytest.raises(RepliscopeError, match="needs one map, got 3 channels"):
            gt(preds_of(np.zeros((1, 1, 3), np.float32)))

    def test_label_offset(self) -> None:
        x = np.array([[[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]], np.float32)
        labelled = post({"op": "mask_argmax"})(preds_of(x))
        out = post({"op": "mask_label_offset", "offset": -1})(labelled).segmentation[0].labels
        assert out.tolist() == [[0, 1]]


class TestWarpResize:
    def test_opencv4_numpy_is_bit_exact_with_opencv_4(self) -> None:
        import cv2

        from repliscope.ops.segmentation.warp import warp_perspective_opencv4

        golden = np.load(FIXTURES / "opencv4_warp_golden.npz")
        assert str(golden["opencv_version"]).startswith("4.")
        cases = sorted({k.split("_")[0] for k in golden.files if k.startswith("case")})
        assert len(cases) == 7
        for case in cases:
            img, ref, border = golden[f"{case}_image"], golden[f"{case}_warped"], str(golden[f"{case}_border"])
            h, w = img.shape[:2]
            th, tw = ref.shape[:2]
            m = cv2.getPerspectiveTransform(
                np.array([[0, h], [0, 0], [w, 0], [w, h]], np.float32),
                np.array([[0, th], [0, 0], [tw, 0], [tw, th]], np.float32),
            )
            np.testing.assert_array_equal(warp_perspective_opencv4(img, m, (th, tw), border, 0), ref, err_msg=case)

    def test_op_geometry_is_corner_aligned(self) -> None:
        op: Any = build_op(
            {
                "op": "warp_resize",
                "size": [4, 6],
                "method": "bilinear",
                "border": "constant",
                "border_value": 0,
                "library": "opencv4_numpy",
            },
            "pre",
            BuildContext(),
        )
        img = np.zeros((8, 3, 3), np.uint8)
        out = op(Item(img, "HWC", "RGB", Geometry((8, 3))))
        assert out.data.shape == (4, 6, 3) and out.data.dtype == np.uint8
        g = out.geometry
        assert g is not None and g.scale == (0.5, 2.0) and g.offset == (0.25, -0.5)
        # source pixel centre (0.5 edges) -> output centre 0.5: corner-aligned
        assert g.offset[1] + 0.5 * g.scale[1] == 0.5 and g.offset[0] + 0.5 * g.scale[0] == 0.5
        with pytest.raises(OpSpecError, match="INTER_LINEAR only"):
            build_op(
                {
                    "op": "warp_resize",
                    "size": [4, 6],
                    "method": "nearest",
                    "border": "constant",
                    "border_value": 0,
                    "library": "opencv4_numpy",
                },
                "pre",
                BuildContext(),
            )
