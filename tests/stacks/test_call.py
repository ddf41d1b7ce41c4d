"""repliscope.stacks.call: a registered loss run in another interpreter, its inputs and result through .npz files.

The child is this venv's interpreter or a small script standing in for a stack's (a stack is only the interpreter
the command runs with); the real stacks are in tests/diff/loss/originals/.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from repliscope.diff.loss.contract import LOSSES, ImageTargets, LossInputs, LossResult
from repliscope.stacks.call import (
    LossCallError,
    call_in_stack,
    check_result,
    in_stack,
    load_inputs,
    load_result,
    save_inputs,
    save_result,
)


def _yolo_inputs() -> LossInputs:
    rng = np.random.default_rng(3)
    return LossInputs(
        family="yolo",
        outputs={
            "yolo_16": rng.normal(size=(2, 24, 13, 13)).astype(np.float32),
            "yolo_23": rng.normal(size=(2, 24, 26, 26)).astype(np.float32),
        },
        targets=(
            ImageTargets("a", np.array([[0.5, 0.5, 0.2, 0.3]], np.float32), np.array([2], np.int64), None),
            ImageTargets("b", np.zeros((0, 4), np.float32), np.zeros((0,), np.int64), None),
        ),
        config={
            "anchors": [(10, 14), (23, 27), (37, 58), (81, 82), (135, 169), (344, 319)],
            "mask": {"yolo_16": [3, 4, 5], "yolo_23": [0, 1, 2]},
            "classes": 3,
            "ignore_thresh": 0.7,
            "truth_thresh": 1.0,
            "net_w": 416,
            "net_h": 416,
        },
    )


def _mask_inputs() -> LossInputs:
    rng = np.random.default_rng(4)
    masks = np.zeros((2, 8, 8), bool)
    masks[0, :4] = True
    masks[1, 4:, 4:] = True
    return LossInputs(
        family="mask_classification",
        outputs={
            "class_logits": rng.normal(size=(1, 5, 4)).astype(np.float32),
            "mask_logits": rng.normal(size=(1, 5, 8, 8)).astype(np.float32),
        },
        targets=(ImageTargets("m", np.zeros((2, 4), np.float32), np.array([0, 2], np.int64), masks),),
        config={"num_classes": 3, "eos_coef": 0.1, "weights": {"loss_ce": 1.0, "loss_mask": 20.0, "loss_dice": 1.0}},
    )


@pytest.mark.parametrize("make", [_yolo_inputs, _mask_inputs])
def test_inputs_cross_as_arrays_and_json(make, tmp_path: Path) -> None:
    inputs = make()
    save_inputs(inputs, tmp_path / "in.npz")
    back = load_inputs(tmp_path / "in.npz")
    assert back.family == inputs.family
    assert list(back.outputs) == list(inputs.outputs)
    for name, value in inputs.outputs.items():
        assert back.outputs[name].dtype == np.float32
        np.testing.assert_array_equal(back.outputs[name], value)
    for got, want in zip(back.targets, inputs.targets, strict=True):
        assert got.image_id == want.image_id
        np.testing.assert_array_equal(got.boxes, want.boxes)
        assert got.classes.dtype == np.int64
        np.testing.assert_array_equal(got.classes, want.classes)
        assert (got.masks is None) == (want.masks is None)
        if want.masks is not None:
            np.testing.assert_array_equal(got.masks, want.masks)
    if inputs.family == "yolo":  # tuples become lists in JSON, the values stay
        assert back.config["anchors"] == [[10, 14], [23, 27], [37, 58], [81, 82], [135, 169], [344, 319]]
        assert back.config["mask"] == {"yolo_16": [3, 4, 5], "yolo_23": [0, 1, 2]}
    else:
        assert back.config == inputs.config


def test_result_crosses_with_its_matching_and_notes(tmp_path: Path) -> None:
    result = LossResult(
        total=1.25,
        components={"loss_ce": 0.5, "loss_mask": 0.25, "loss_dice": 0.5},
        gradients={"class_logits": np.full((1, 5, 4), 0.125, np.float32)},
        matching=(((3, 0, 0.75), (4, 1, 1.5)),),
        per_image=(1.25,),
        notes=("a note",),
    )
    save_result(result, tmp_path / "out.npz")
    back = load_result(tmp_path / "out.npz")
    assert (back.total, back.components, back.matching, back.per_image, back.notes) == (
        1.25,
        result.components,
        result.matching,
        (1.25,),
        ("a note",),
    )
    np.testing.assert_array_equal(back.gradients["class_logits"], result.gradients["class_logits"])


class _Sentinel:
    """Unpickling this creates a file: a loaded pickle would run code."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[Path]]:
        return (Path.touch, (self.path,))


def test_a_file_holding_a_pickle_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    sentinel = tmp_path / "pwned"
    hostile = tmp_path / "in.npz"
    np.savez(hostile, __meta__=np.frombuffer(b"{}", np.uint8), output_0=np.array([_Sentinel(sentinel)], dtype=object))
    assert pickle.dumps(_Sentinel(sentinel))  # the object array really holds a pickle
    with pytest.raises(LossCallError, match="without pickled objects"):
        load_inputs(hostile)
    assert not sentinel.exists()


def test_a_file_without_the_document_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", output_0=np.zeros(3, np.float32))
    with pytest.raises(LossCallError, match="no '__meta__' document"):
        load_inputs(tmp_path / "in.npz")


def _child(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "repliscope.stacks.call", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("name", ["os:system", "subprocess:run", "builtins:eval", "repliscope.stacks.call:main"])
def test_the_child_runs_only_registered_names(name: str, tmp_path: Path) -> None:
    sentinel = tmp_path / "pwned"
    save_inputs(_yolo_inputs(), tmp_path / "in.npz")
    proc = _child("loss", name, str(tmp_path / "in.npz"), str(sentinel))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "loss" in lines[0] and name in lines[0]
    assert not sentinel.exists()


@pytest.mark.parametrize("args", [[], ["run", "tfmg_yolo", "a", "b"], ["loss", "tfmg_yolo", "a"]])
def test_the_child_refuses_another_command_line(args: list[str]) -> None:
    proc = _child(*args)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: usage: python -m repliscope.stacks.call loss NAME IN.npz OUT.npz " + (
        "(NAME: a registered loss)"
    )


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)
    return path


def test_a_child_that_outlives_its_time_is_stopped(tmp_path: Path) -> None:
    python = _script(tmp_path, "echo starting >&2\nsleep 60\n")
    with pytest.raises(LossCallError) as err:
        call_in_stack(LOSSES.get("maskformer"), _mask_inputs(), python, "0123456789ab", timeout=1.0)
    message = str(err.value)
    assert (
        message.splitlines()[0]
        == "loss 'maskformer' in stack 0123456789ab: no result after 1 s (the child was stopped)"
    )


def test_a_failing_child_is_one_line_then_its_stderr_tail(tmp_path: Path) -> None:
    lines = "".join(f"echo line{i} >&2\n" for i in range(1, 21))
    python = _script(tmp_path, lines + "echo 'ValueError: maskformer: config has no weights' >&2\nexit 3\n")
    with pytest.raises(LossCallError) as err:
        call_in_stack(LOSSES.get("maskformer"), _mask_inputs(), python, "0123456789ab")
    first, *rest = str(err.value).splitlines()
    assert first.startswith("loss 'maskformer' in stack 0123456789ab failed (exit 3 after ")
    assert first.endswith("s): ValueError: maskformer: config has no weights")
    assert rest[0] == "last lines of its stderr:"
    assert rest[1:] == [f"line{i}" for i in range(7, 21)] + ["ValueError: maskformer: config has no weights"]


def test_a_child_that_writes_nothing_is_an_error(tmp_path: Path) -> None:
    python = _script(tmp_path, "exit 0\n")
    with pytest.raises(LossCallError, match="exited 0 without writing its result"):
        call_in_stack(LOSSES.get("maskformer"), _mask_inputs(), python, "0123456789ab")


def test_a_result_that_is_not_finite_or_misshapen_is_refused() -> None:
    inputs = _mask_inputs()
    good = {"class_logits": np.zeros((1, 5, 4), np.float32)}
    with pytest.raises(LossCallError, match="the total is nan"):
        check_result(LossResult(float("nan"), {}, good, None, None, ()), inputs, "here")
    with pytest.raises(LossCallError, match="component 'loss_dice' is inf"):
        check_result(LossResult(1.0, {"loss_dice": float("inf")}, good, None, None, ()), inputs, "here")
    with pytest.raises(LossCallError, match=r"gradient of 'class_logits' has shape \(1, 5, 3\)"):
        check_result(
            LossResult(1.0, {}, {"class_logits": np.zeros((1, 5, 3), np.float32)}, None, None, ()), inputs, "x"
        )
    with pytest.raises(LossCallError, match="a gradient for 'logits', which is not an output"):
        check_result(LossResult(1.0, {}, {"logits": np.zeros(1, np.float32)}, None, None, ()), inputs, "here")


def test_the_originals_run_in_their_stacks_not_here() -> None:
    assert not in_stack(LOSSES.get("tfmg_yolo"))
    assert not in_stack(LOSSES.get("maskformer"))
    assert LOSSES.get("tfmg_yolo").stack == (
        "tensorflow==2.20.0 tf-keras==2.20.1 gin-config==0.5.0 immutabledict==4.3.1 opencv-python-headless==4.12.0.88 "
        "pycocotools==2.0.11 tensorflow-datasets==4.9.10"
    )
    assert LOSSES.get("maskformer").stack == "torch==2.13.0 transformers==5.24.0"


def test_an_existing_stack_of_the_spec_is_used_without_resolving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_loss looks the stack up by its spec (a pip resolution takes ~10 s per call); the child here is a
    stand-in interpreter that fails, naming the stack it was found in."""
    import json

    from repliscope.stacks import store
    from repliscope.stacks.call import run_loss

    folder = tmp_path / "stacks" / "abcdef123456"
    (folder / "venv" / "bin").mkdir(parents=True)
    python = _script(tmp_path, "echo 'in the stand-in stack' >&2\nexit 3\n")
    (folder / "venv" / "bin" / "python").symlink_to(python)
    (folder / "stack.json").write_text(
        json.dumps(
            {
                "key": "abcdef123456",
                "spec": "torch==2.13.0 transformers==5.24.0",
                "lock_sha256": "0" * 64,
                "python": "3.11.7",
                "created_at": "2026-11-29T00:00:00Z",
            }
        ),
        encoding="utf-8",
    )

    def no_resolution(*args: object, **kwargs: object) -> None:
        raise AssertionError("create_stack was called: the existing stack was not found")

    monkeypatch.setattr(store, "create_stack", no_resolution)
    with pytest.raises(LossCallError) as err:
        run_loss("maskformer", _mask_inputs(), cache_dir=tmp_path)
    assert str(err.value).startswith("loss 'maskformer' in stack abcdef123456 failed (exit 3 after ")
    assert str(err.value).splitlines()[-1] == "in the stand-in stack"


def test_a_config_value_that_is_not_data_cannot_cross(tmp_path: Path) -> None:
    inputs = _mask_inputs()
    hostile = LossInputs(inputs.family, inputs.outputs, inputs.targets, {**inputs.config, "weights": {"hook": print}})
    with pytest.raises(LossCallError, match=r"config\.weights\.hook: a builtin_function_or_method cannot cross"):
        save_inputs(hostile, tmp_path / "in.npz")
    assert not (tmp_path / "in.npz").exists()
