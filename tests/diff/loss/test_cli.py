"""``repliscope diff MANIFEST --loss CANDIDATE`` end to end: exit codes, JSON, the store, one-line errors with
nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from repliscope.store.diffs import get_diff, list_diffs
from repliscope.store.repository import RunStore
from tests.yolo._assets import MANIFEST, need_coco, need_darknet, seed_cache


@pytest.fixture
def db(tmp_path: Path) -> str:
    need_darknet()
    seed_cache()
    return f"sqlite:///{tmp_path / 'runs.db'}"


def _run(app: typer.Typer, candidate: str, *extra: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, ["diff", str(MANIFEST), "--loss", candidate, *extra])
    return res.exit_code, res.stdout, res.stderr


def test_random_outputs_faithful_candidate_passes_and_is_stored(app: typer.Typer, db: str) -> None:
    code, out, err = _run(app, "tests.diff.loss.candidates:yolov3_numpy", "--random", "3", "--db", db, "--json")
    assert code == 0, err
    result = json.loads(out)["loss_diff"]
    assert result["passed"] and result["source"] == "random seed 3" and result["samples"] == 2
    assert [g["output"] for g in result["gradients"]] == ["yolo_16", "yolo_23"]
    assert result["gradients"][0]["shape"] == [2, 255, 13, 13]
    with RunStore(db) as store:
        rows, total = list_diffs(store, kind="loss_diff")
        assert total == 1 and rows[0].verdict == "passed" and rows[0].a == "darknet_yolo"
        stored = get_diff(store, rows[0].diff_id)
    assert stored.result["total"]["original"] == result["total"]["original"]


def test_real_outputs_a_mistake_exits_1_naming_the_pitfall(app: typer.Typer, db: str) -> None:
    coco = f"coco:{need_coco()}"
    code, out, _ = _run(app, "tests.diff.loss.candidates:mean_reduction", "--dataset", coco, "--limit", "2", "--db", db)
    assert code == 1
    assert "first divergent: yolo_16/box" in out
    assert "sum_vs_mean" in out
    with RunStore(db) as store:
        rows, total = list_diffs(store, kind="loss_diff")
    assert total == 1 and rows[0].verdict == "failed" and rows[0].samples == 2 and rows[0].dataset == coco


@pytest.mark.parametrize(
    ("candidate", "message"),
    [
        ("tests.diff.loss.candidates:raises", "raised RuntimeError: CUDA out of memory"),
        ("tests.diff.loss.candidates:returns_nan", "total is nan (not finite)"),
        ("tests.diff.loss.candidates:non_scalar_total", "total is not a scalar (shape (2,))"),
        ("tests.diff.loss.candidates:wrong_gradient_shape", "the gradient of 'yolo_16' has shape (2, 254, 13, 13)"),
        ("tests.diff.loss.candidates:not_callable", "int is not callable"),
        ("tests.diff.loss.candidates:_assignment", "is a private or special attribute"),
        ("tests/diff/loss/no_such_file.py:loss", "no such file"),
    ],
)
def test_a_broken_candidate_is_one_line_exit_2_and_nothing_stored(
    app: typer.Typer, db: str, candidate: str, message: str
) -> None:
    code, _out, err = _run(app, candidate, "--random", "1", "--db", db)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --loss ") and message in lines[0], err
    with RunStore(db) as store:
        assert list_diffs(store)[1] == 0


def test_an_unknown_original_lists_the_registered_ones(app: typer.Typer, db: str) -> None:
    code, _, err = _run(app, "tests.diff.loss.candidates:yolov3_numpy", "--original", "darknet", "--random", "1")
    assert code == 2
    assert "darknet_yolo" in err and "loss 'darknet'" in err


def test_diffs_show_prints_the_stored_loss_diff_as_tables(app: typer.Typer, db: str) -> None:
    from repliscope.cli.diffs_cmd import register as register_diffs

    code, _, err = _run(app, "tests.diff.loss.candidates:yolov3_numpy", "--random", "2", "--db", db)
    assert code == 0, err
    with RunStore(db) as store:
        diff_id = list_diffs(store, kind="loss_diff")[0][0].diff_id
    shows = typer.Typer()
    register_diffs(shows)
    res = CliRunner().invoke(shows, ["diffs", "show", diff_id[:12], "--db", db])
    assert res.exit_code == 0, res.stderr
    assert "loss diff: tests.diff.loss.candidates:yolov3_numpy vs darknet_yolo" in res.stdout
    assert "yolo_23/no_object" in res.stdout and "the candidate reproduces the original" in res.stdout


def test_random_and_a_dataset_contradict_and_a_mask_loss_needs_other_inputs(app: typer.Typer, db: str) -> None:
    code, _, err = _run(app, "tests.diff.loss.candidates:yolov3_numpy", "--random", "1", "--dataset", "coco:x")
    assert code == 2 and err.strip() == (
        "error: --random 1 draws the outputs and the boxes; --dataset coco:x would give real ones: give one of them"
    )
    code, _, err = _run(app, "tests.diff.loss.candidates:yolov3_numpy", "--original", "maskformer", "--random", "1")
    assert code == 2
    assert "--original maskformer: a mask_classification loss" in err and "darknet_yolo, tfmg_yolo" in err
