"""The loss-diff contract: its types refuse an unknown family, and LOSSES is complete on its first read."""

from __future__ import annotations

import numpy as np
import pytest

from repliscope.diff.loss.contract import FAMILIES, LOSSES, ImageTargets, LossInputs, LossResult, LossSpec


def test_inputs_refuse_an_unknown_family_naming_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match=r"LossInputs.family: unknown family 'ssd' \(allowed: yolo, mask_classific"):
        LossInputs(family="ssd", outputs={}, targets=(), config={})


def test_spec_refuses_a_target_without_attribute() -> None:
    with pytest.raises(ValueError, match="LossSpec 'x': target 'mod' is not 'module:attr'"):
        LossSpec(name="x", family="yolo", origin="o", target="mod")


def test_a_result_carries_numpy_gradients_of_the_outputs_shape() -> None:
    out = np.zeros((1, 18, 13, 13), np.float32)
    t = ImageTargets("a", np.array([[0.5, 0.5, 0.2, 0.3]], np.float32), np.array([0], np.int64))
    inputs = LossInputs("yolo", {"yolo_16": out}, (t,), {"classes": 1})
    r = LossResult(total=1.5, components={"yolo_16/box": 1.5}, gradients={"yolo_16": np.ones_like(out)})
    assert inputs.targets[0].masks is None
    assert r.gradients["yolo_16"].shape == out.shape and r.matching is None and r.notes == ()
    assert FAMILIES == ("yolo", "mask_classification")


def test_losses_lists_the_provided_originals_on_first_read() -> None:
    names = LOSSES.names()
    assert {"tfmg_yolo", "maskformer"} <= set(names)
    assert LOSSES.get("maskformer").family == "mask_classification"
