"""``darknet_yolo`` pinned to libdarknet itself: its gradient is -l.delta of forward_yolo_layer and equals an
independent numpy re-derivation (tests/diff/loss/candidates.py) to float32 rounding; its cost is |delta|^2."""

from __future__ import annotations

import numpy as np
import pytest

from repliscope.diff.loss.contract import LOSSES, ImageTargets, LossInputs
from tests.diff.loss.candidates import yolov3_numpy
from tests.yolo._assets import need_darknet

TINY = {
    "anchors": [(8, 10), (20, 16), (40, 44), (60, 30)],
    "mask": {"yolo_1": [1, 2, 3]},
    "classes": 2,
    "ignore_thresh": 0.5,
    "truth_thresh": 1.0,
    "net_w": 64,
    "net_h": 64,
}


def _tiny(seed: int = 3) -> LossInputs:
    rng = np.random.default_rng(seed)
    out = rng.normal(0.0, 1.5, (2, 3 * 7, 4, 4)).astype(np.float32)
    targets = (
        # two truths in one cell and anchor (the second replaces the box target and adds its class), one box
        # whose best anchor is not in this layer's mask (0: 8x10 px), one elsewhere
        ImageTargets(
            "a",
            np.array([[0.30, 0.40, 0.50, 0.45], [0.31, 0.41, 0.55, 0.5], [0.8, 0.2, 0.12, 0.16]], np.float32),
            np.array([0, 1, 1]),
        ),
        ImageTargets("b", np.array([[0.6, 0.7, 0.9, 0.5]], np.float32), np.array([1])),
    )
    return LossInputs("yolo", {"yolo_1": out}, targets, TINY)


def test_libdarknet_delta_equals_an_independent_numpy_derivation() -> None:
    need_darknet()
    inputs = _tiny()
    mine = LOSSES.get("darknet_yolo")
    from repliscope.backends.darknet.loss import darknet_yolo_loss

    assert mine.target == "repliscope.backends.darknet.loss:darknet_yolo_loss"
    dn = darknet_yolo_loss(inputs)
    ref = yolov3_numpy(inputs)
    g_dn, g_np = dn.gradients["yolo_1"], ref.gradients["yolo_1"]
    # float32 rounding of Darknet's own arithmetic (tx = x*W - i in float): a few ulps of the grid's magnitude
    assert np.abs(g_dn - g_np).max() <= 4 * np.finfo(np.float32).eps * 4
    assert np.abs(g_dn).max() > 0.5  # real signal, not two zero arrays
    # the two truths sharing a cell: libdarknet keeps the last box (truth 1) and BOTH classes as targets
    a, j, i = 1, int(0.41 * 4), int(0.31 * 4)  # anchor 2 (40x44) is slot 1 of mask [1, 2, 3]
    cls = g_dn[0].reshape(3, 7, 4, 4)[a, 5:, j, i]
    assert (cls < 0).all()  # sigmoid - 1 < 0 for both classes: both are targets
    assert dn.total == pytest.approx(ref.total, rel=1e-9)
    assert dn.components == pytest.approx(ref.components, rel=1e-9)
    assert dn.matching is not None and [len(m) for m in dn.matching] == [2, 1]  # truth 2's anchor is not in the mask


def test_cost_is_the_squared_norm_of_delta_and_nothing_reaches_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    need_darknet()
    from repliscope.backends.darknet.loss import darknet_yolo_loss

    inputs = _tiny(5)
    result = darknet_yolo_loss(inputs)
    out = capfd.readouterr()
    assert "Region" not in out.out and out.err == ""
    cost = float(next(n for n in result.notes if n.startswith("yolo_1:")).rsplit("=", 1)[1])
    assert cost == pytest.approx(float((result.gradients["yolo_1"].astype(np.float64) ** 2).sum()), rel=1e-5)


def test_a_box_darknet_would_read_as_the_end_of_its_list_is_refused() -> None:
    need_darknet()
    from repliscope.backends.darknet.loss import darknet_yolo_loss

    inputs = _tiny()
    bad = LossInputs(
        "yolo",
        inputs.outputs,
        (inputs.targets[0], ImageTargets("zero-x", np.array([[0.0, 0.5, 0.2, 0.2]], np.float32), np.array([0]))),
        TINY,
    )
    with pytest.raises(ValueError, match=r"image zero-x: box 0 \(cx, cy, w, h\) = \(0, 0.5, 0.2, 0.2\) is outside"):
        darknet_yolo_loss(bad)


def test_an_output_of_the_wrong_channel_count_names_the_layer() -> None:
    from repliscope.backends.darknet.loss import darknet_yolo_loss

    inputs = _tiny()
    bad = LossInputs("yolo", {"yolo_1": inputs.outputs["yolo_1"][:, :20]}, inputs.targets, TINY)
    with pytest.raises(ValueError, match=r"output 'yolo_1': shape \(2, 20, 4, 4\), expected \(N, 21, H, W\)"):
        darknet_yolo_loss(bad)


def test_options_of_later_darknets_are_refused() -> None:
    from repliscope.backends.darknet.loss import darknet_yolo_loss

    inputs = _tiny()
    bad = LossInputs("yolo", inputs.outputs, inputs.targets, {**TINY, "scale_x_y": 1.05})
    with pytest.raises(ValueError, match=r"libdarknet 0\.0\.0\+git20180914 has no scale_x_y"):
        darknet_yolo_loss(bad)


def test_a_class_outside_the_layers_classes_is_refused_before_libdarknet_writes_past_its_buffer() -> None:
    need_darknet()
    from repliscope.backends.darknet.loss import darknet_yolo_loss

    inputs = _tiny()
    bad = LossInputs(
        "yolo",
        inputs.outputs,
        (inputs.targets[0], ImageTargets("cls-2", np.array([[0.5, 0.5, 0.2, 0.2]], np.float32), np.array([2]))),
        TINY,
    )
    with pytest.raises(ValueError, match=r"^image cls-2: box 0 has class 2; the yolo layers have classes 0\.\.1$"):
        darknet_yolo_loss(bad)


def test_a_saturated_objectness_at_an_assigned_cell_is_still_a_positive() -> None:
    """raw objectness 20: sigmoid is exactly 1.0 in float32, so libdarknet's delta there is 0 (as if ignored)."""
    need_darknet()
    from repliscope.backends.darknet.loss import darknet_yolo_loss

    inputs = _tiny()
    out = inputs.outputs["yolo_1"].copy()
    out[0].reshape(3, 7, 4, 4)[1, 4, 1, 1] = 20.0  # the cell and anchor truth 1 of image "a" is assigned to
    saturated = LossInputs("yolo", {"yolo_1": out}, inputs.targets, TINY)
    result = darknet_yolo_loss(saturated)
    reference = yolov3_numpy(saturated)
    assert result.gradients["yolo_1"][0].reshape(3, 7, 4, 4)[1, 4, 1, 1] == 0.0
    assert result.components == pytest.approx(reference.components, rel=1e-9)
