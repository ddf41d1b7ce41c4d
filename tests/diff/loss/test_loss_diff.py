"""The loss diff against libdarknet: a faithful candidate passes (values, every component, the gradients, the
matching), each one-mistake candidate fails and the diagnosis names its pitfall; broken candidates are refused in
one line naming what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from repliscope.diff.loss.contract import LOSSES, ImageTargets, LossInputs, LossResult
from repliscope.diff.loss.driver import run_loss_diff
from repliscope.diff.loss.pitfalls import LOSS_PITFALLS
from repliscope.errors import RepliscopeError
from tests.diff.loss import candidates
from tests.diff.loss.candidates import YoloV3Torch
from tests.yolo._assets import need_darknet

CONFIG = {
    "anchors": [(10, 14), (23, 27), (37, 58), (81, 82), (135, 169), (344, 319)],
    "mask": {"yolo_16": [3, 4, 5], "yolo_23": [0, 1, 2]},
    "classes": 3,
    "ignore_thresh": 0.7,
    "truth_thresh": 1.0,
    "net_w": 256,
    "net_h": 256,
}


@pytest.fixture(scope="module")
def inputs() -> LossInputs:
    """Seeded random outputs of two yolo layers (8x8 and 16x16) and boxes of several sizes, two images."""
    rng = np.random.default_rng(7)
    outputs = {
        "yolo_16": rng.normal(0, 1, (2, 24, 8, 8)).astype(np.float32),
        "yolo_23": rng.normal(0, 1, (2, 24, 16, 16)).astype(np.float32),
    }
    # image 0, layer yolo_16: anchor slot 0 (81x82) of truth 2's cell predicts that truth's box (IoU > 0.7, its
    # own anchor is slot 1): Darknet ignores it (no no-object loss), a confident objectness makes that visible
    outputs["yolo_16"][0, 0:5, 4, 5] = [0.754, 1.99, 0.458, 0.628, 2.0]
    targets = (
        ImageTargets(
            "img-0",
            np.array([[0.3, 0.4, 0.2, 0.3], [0.7, 0.6, 0.05, 0.08], [0.71, 0.61, 0.5, 0.6]], np.float32),
            np.array([1, 0, 2]),
        ),
        ImageTargets("img-1", np.array([[0.52, 0.33, 0.1, 0.12], [0.2, 0.8, 0.9, 0.35]], np.float32), np.array([2, 2])),
    )
    return LossInputs("yolo", outputs, targets, CONFIG)


def _diff(inputs: LossInputs, name: str, fn: object) -> object:
    need_darknet()
    spec = LOSSES.get("darknet_yolo")
    from repliscope.backends.darknet.loss import darknet_yolo_loss

    return run_loss_diff(inputs, spec, darknet_yolo_loss, name, fn, source="random seed 7")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["numpy", "torch", "torch-float32"])
def test_a_faithful_candidate_passes_everything(inputs: LossInputs, name: str) -> None:
    fn = {
        "numpy": candidates.yolov3_numpy,
        "torch": YoloV3Torch(),
        "torch-float32": YoloV3Torch(dtype="float32"),  # float32 autograd: within the float32 tolerances
    }[name]
    result = _diff(inputs, name, fn)
    assert result.passed and result.first_divergent is None  # type: ignore[attr-defined]
    assert [c.name for c in result.components] == [  # type: ignore[attr-defined]
        f"{layer}/{part}" for layer in ("yolo_16", "yolo_23") for part in ("box", "objectness", "no_object", "class")
    ]
    assert all(g.passed and g.max_abs <= g.tolerance for g in result.gradients)  # type: ignore[attr-defined]
    rel = 1e-9 if name != "torch-float32" else 1e-5
    assert result.total.abs_error < rel * result.total.original  # type: ignore[attr-defined]
    assert result.diagnosis.verdict == "match"  # type: ignore[attr-defined]
    if name == "numpy":  # the same (prediction, target) pairs as libdarknet's assignment, with the same costs
        assert result.matching is not None and all(m.passed for m in result.matching)  # type: ignore[attr-defined]
        assert [m.pairs for m in result.matching] == [3, 2]  # type: ignore[attr-defined]
    if name.startswith("torch"):  # torch reports no matching: said, not guessed
        assert result.matching is None and "the candidate reports none" in result.matching_note  # type: ignore[attr-defined]


MISTAKES = [
    ("sum_vs_mean", {"reduction": "mean"}, "reduction: 'sum' -> 'mean'", "yolo_16/box"),
    ("normaliser", {"normaliser": "image"}, "normaliser: 'none' -> 'image'", "yolo_16/box"),
    ("normaliser", {"normaliser": "box"}, "normaliser: 'none' -> 'box'", "yolo_16/box"),
    ("normaliser", {"normaliser": "anchor"}, "normaliser: 'none' -> 'anchor'", "yolo_16/box"),
    ("scaled_sigmoid", {"scale_x_y": 1.05}, "scale_x_y: 1.0 -> 1.05", "yolo_16/box"),
    ("iou_box_loss", {"box": "iou"}, "box: 'mse' -> 'iou'", "yolo_16/box"),
    ("iou_box_loss", {"box": "giou"}, "box: 'mse' -> 'giou'", "yolo_16/box"),
    ("iou_box_loss", {"box": "ciou"}, "box: 'mse' -> 'ciou'", "yolo_16/box"),
    ("ignore_thresh_not_applied", {"ignore": False}, "ignore: True -> False", None),
    ("objectness_target_iou", {"objectness_target": "iou"}, "objectness_target: 'one' -> 'iou'", "yolo_16/objectness"),
    ("class_softmax_ce", {"class_loss": "softmax_ce"}, "class_loss: 'bce' -> 'softmax_ce'", "yolo_16/class"),
    ("focal_class_loss", {"focal": (0.25, 2.0)}, "focal: None -> (0.25, 2.0)", "yolo_16/class"),
    ("noobj_weight", {"noobj_weight": 0.5}, "noobj_weight: 1.0 -> 0.5", "yolo_16/no_object"),
]


@pytest.mark.parametrize(("pitfall", "mistake", "change", "first"), MISTAKES, ids=[m[2] for m in MISTAKES])
def test_each_one_mistake_candidate_is_named(
    inputs: LossInputs, pitfall: str, mistake: dict[str, object], change: str, first: str | None
) -> None:
    result = _diff(inputs, pitfall, YoloV3Torch(**mistake))  # type: ignore[arg-type]
    assert not result.passed  # type: ignore[attr-defined]
    if first is not None:
        assert result.first_divergent == first  # type: ignore[attr-defined]
    else:
        assert result.first_divergent is not None  # type: ignore[attr-defined]
    diag = result.diagnosis  # type: ignore[attr-defined]
    assert (diag.verdict, diag.pitfall, diag.change) == ("explained", pitfall, change)
    assert diag.residual < 1e-5


def test_every_registered_yolo_pitfall_has_a_test() -> None:
    assert {m[0] for m in MISTAKES} == {
        n for n in LOSS_PITFALLS.names() if LOSS_PITFALLS.get(n).original == "darknet_yolo"
    }


def _scaled_gradient(inputs: LossInputs) -> LossResult:
    result = candidates.yolov3_numpy(inputs)
    result.gradients = {k: 1.5 * v for k, v in result.gradients.items()}
    return result


def test_a_gradient_error_alone_is_caught_and_located(inputs: LossInputs) -> None:
    result = _diff(inputs, "scaled-gradient", _scaled_gradient)
    assert result.first_divergent == "gradient of yolo_16 (x, y, w, h, objectness, class)"  # type: ignore[attr-defined]
    row = result.gradients[0]  # type: ignore[attr-defined]
    assert not row.passed and row.worst_entry.startswith("image ")
    assert row.candidate_value == pytest.approx(1.5 * row.original_value, rel=1e-6)
    assert result.diagnosis.verdict == "unexplained"  # type: ignore[attr-defined]


def test_a_gradient_mistake_the_values_cannot_show_is_located_by_entry(inputs: LossInputs) -> None:
    result = _diff(inputs, "chain-rule", candidates.xy_gradient_through_the_logistic)
    assert result.first_divergent == "gradient of yolo_16 (x, y)"  # type: ignore[attr-defined]
    assert all(c.passed for c in result.components)  # type: ignore[attr-defined]
    row = result.gradients[0]  # type: ignore[attr-defined]
    assert row.entries_over == ["x", "y"] and row.by_entry["w"] <= row.tolerance and row.by_entry["x"] > 0.01
    diag = result.diagnosis  # type: ignore[attr-defined]
    assert diag.verdict == "unexplained" and "the candidate's values are the original's" in diag.message


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (candidates.raises, r"^--loss broken raised RuntimeError: CUDA out of memory \(this candidate always fails\)$"),
        (candidates.returns_nan, r"^--loss broken: total is nan \(not finite\)$"),
        (candidates.non_scalar_total, r"^--loss broken: total is not a scalar \(shape \(2,\)\)$"),
        (
            candidates.wrong_gradient_shape,
            r"^--loss broken: the gradient of 'yolo_16' has shape \(2, 23, 8, 8\), the output \(2, 24, 8, 8\)$",
        ),
    ],
)
def test_a_broken_candidate_is_one_clear_error(inputs: LossInputs, fn: object, message: str) -> None:
    with pytest.raises(RepliscopeError, match=message):
        _diff(inputs, "broken", fn)


def test_the_pitfall_registry_is_complete_on_its_first_read() -> None:
    """A fresh process: the originals' ``<name>_pitfalls`` modules are found without importing them first."""
    import subprocess
    import sys

    code = (
        "from repliscope.diff.loss.pitfalls import LOSS_PITFALLS as P; "
        "print(sorted(n for n in P.names() if P.get(n).original == 'maskformer'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(
        sorted(["dice_smoothing", "no_object_weight", "padded_pixels_not_masked", "square_matcher_zero_padding"])
    )
