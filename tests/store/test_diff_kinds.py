"""The diffs store keeps the training diffs (augmentation, loss, gradient, training step) beside the task, layer and
pipeline diffs: stored, listed by kind, shown by ``repliscope diffs``; a result without its headline is refused
naming the missing field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.errors import StoreError
from repliscope.store.diffs import DIFF_KINDS, get_diff, list_diffs, save_diff, store_diff
from repliscope.store.repository import RunStore

TRAINING_KINDS = ("loss_diff", "gradient_diff", "training_step_diff")


def _training(kind: str, passed: bool = True) -> dict[str, Any]:
    return {
        "kind": kind,
        "manifest": "yolov4-tiny",
        "reference": "darknet",
        "candidate": "mine.py:Loss",
        "dataset": "coco-val-mini",
        "samples": 12,
        "passed": passed,
        "first_divergent": None if passed else "iou_loss",
        "steps": [{"step": 0, "loss": 1.5}],
    }


def _augmentation(first: str | None = "hsv") -> dict[str, Any]:
    return {
        "kind": "augmentation_diff",
        "manifest": "yolov4-tiny",
        "pipeline": {"pipeline": "darknet", "origin": "libdarknet load_data_detection"},
        "candidate": "aug.py:Augment",
        "draws": "shared",
        "dataset": "coco-val-mini",
        "samples": 3,
        "seeds": [1, 2],
        "ops": [],
        "first_divergent": first,
        "distribution": [],
        "alpha": None,
        "failed_samples": [],
        "notes": [],
        "elapsed_s": 0.5,
    }


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as s:
        yield s


def test_the_kinds_are_the_old_three_and_the_four_training_ones() -> None:
    assert DIFF_KINDS == (
        "task_diff",
        "layer_diff",
        "pipeline_diff",
        "augmentation_diff",
        "loss_diff",
        "gradient_diff",
        "training_step_diff",
    )


def test_each_training_kind_is_stored_listed_by_kind_and_read_back(store: RunStore) -> None:
    ids = {kind: store_diff(store, _training(kind, passed=kind != "gradient_diff")) for kind in TRAINING_KINDS}
    ids["augmentation_diff"] = store_diff(store, _augmentation())
    for kind, diff_id in ids.items():
        rows, total = list_diffs(store, kind=kind)
        assert total == 1 and [r.diff_id for r in rows] == [diff_id]
        assert rows[0].manifest_name == "yolov4-tiny"
    grad = get_diff(store, ids["gradient_diff"][:8])
    assert (grad.a, grad.b, grad.samples, grad.verdict) == ("darknet", "mine.py:Loss", 12, "failed")
    assert grad.summary == "first divergent: iou_loss"
    assert grad.result == _training("gradient_diff", passed=False)
    loss = get_diff(store, ids["loss_diff"])
    assert (loss.verdict, loss.summary, loss.dataset) == ("passed", "within tolerance", "coco-val-mini")
    own = store_diff(store, {**_training("training_step_diff"), "summary": "2 steps, the weights agree"})
    assert get_diff(store, own).summary == "2 steps, the weights agree"  # the result's own summary, as it is
    aug = get_diff(store, ids["augmentation_diff"])
    assert (aug.a, aug.b, aug.verdict) == ("darknet (libdarknet load_data_detection)", "aug.py:Augment", "failed")
    assert aug.summary == "shared draws: first divergent op: hsv"
    assert list_diffs(store)[1] == 5


@pytest.mark.parametrize("kind", TRAINING_KINDS)
def test_a_training_result_without_its_verdict_is_refused_naming_the_field(store: RunStore, kind: str) -> None:
    result = _training(kind)
    del result["passed"]
    result["samples"] = "twelve"
    with pytest.raises(StoreError) as err:
        store_diff(store, result)
    assert f"a {kind} result cannot be stored" in str(err.value)
    assert "passed (Field required)" in str(err.value)
    assert "samples (Input should be a valid integer" in str(err.value)
    assert list_diffs(store) == ([], 0)


def test_an_unknown_kind_is_refused_with_the_allowed_list(store: RunStore) -> None:
    allowed = r"unknown diff kind 'weights_diff' \(allowed: task_diff, .*, training_step_diff\)"
    with pytest.raises(StoreError, match=allowed):
        store_diff(store, {**_training("loss_diff"), "kind": "weights_diff"})
    with pytest.raises(StoreError, match="unknown diff kind 'weights_diff'"):
        list_diffs(store, kind="weights_diff")


def test_the_cli_lists_and_shows_the_training_kinds(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    loss_id = save_diff(db, _training("loss_diff"), manifest_name="ignored")
    aug_id = save_diff(db, _augmentation(first=None))
    runner = CliRunner(env={"COLUMNS": "200"})
    res = runner.invoke(app, ["diffs", "list", "--kind", "loss_diff", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    listed = json.loads(res.stdout)
    assert listed["total"] == 1 and listed["diffs"][0]["diff_id"] == loss_id
    res = runner.invoke(app, ["diffs", "show", loss_id[:8], "--db", db, "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout) == {"loss_diff": _training("loss_diff")}
    res = runner.invoke(app, ["diffs", "show", aug_id[:8], "--db", db])
    assert res.exit_code == 0, res.output
    assert "every op matches the original" in res.stdout
    res = runner.invoke(app, ["diffs", "list", "--help"])
    assert "augmentation_diff" in res.stdout and "training_step_diff" in res.stdout
