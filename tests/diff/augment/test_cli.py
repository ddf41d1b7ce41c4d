"""``repliscope diff MANIFEST --augment CANDIDATE`` end to end: exit codes, JSON, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.yolo._assets import MANIFEST, need_coco, need_darknet, seed_cache


@pytest.fixture
def coco() -> str:
    need_darknet()
    seed_cache()
    return f"coco:{need_coco()}"


def _run(app: typer.Typer, coco: str, candidate: str, *extra: str) -> tuple[int, str, str]:
    args = ["diff", str(MANIFEST), "--augment", candidate, "--dataset", coco, "--limit", "2", "--seeds", "2"]
    res = CliRunner().invoke(app, [*args, "--no-store", *extra])
    return res.exit_code, res.stdout, res.stderr


def test_port_passes_with_json(app: typer.Typer, coco: str) -> None:
    code, out, _ = _run(app, coco, "tests.diff.augment.candidates:good", "--json")
    assert code == 0
    result = json.loads(out)["augmentation_diff"]
    assert result["first_divergent"] is None and result["samples"] == 2 and result["seeds"] == [1, 2]
    assert [op["name"] for op in result["ops"]] == ["place", "distort", "flip", "truth"]
    assert result["pipeline"]["config"]["jitter"] == 0.3


def test_a_mistake_exits_1_naming_the_op(app: typer.Typer, coco: str) -> None:
    code, out, _ = _run(app, coco, "tests.diff.augment.candidates:flip_always")
    assert code == 1
    assert "first divergent op: flip" in out


@pytest.mark.parametrize(
    ("candidate", "extra", "message"),
    [
        ("tests.diff.augment.candidates:nan_output", (), "op 'flip' returned NaN or Inf values"),
        ("tests.diff.augment.candidates:missing_op", (), "no callable for op(s) flip, truth"),
        ("tests.diff.augment.candidates:good", ("--draws", "sometimes"), "--draws 'sometimes' is not one of"),
        ("tests.diff.augment.candidates:good", ("--draws", "own"), "--draws own needs augment(image, boxes, seed)"),
        ("no_colon_here", (), "give FILE.py:NAME or module:NAME"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    app: typer.Typer, coco: str, candidate: str, extra: tuple[str, ...], message: str
) -> None:
    code, _, err = _run(app, coco, candidate, *extra)
    assert code == 2
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_classification_dataset_is_refused(app: typer.Typer, coco: str, tmp_path: Path) -> None:
    code, _, err = _run(app, "foolbox_imagenet", "tests.diff.augment.candidates:good")
    assert code == 2 and "has no boxes: --augment needs a detection dataset" in err


def test_help_names_every_registered_pipeline(app: typer.Typer) -> None:
    from repliscope.diff.augment.contract import AUGMENTATIONS

    out = CliRunner().invoke(app, ["diff", "--help"], env={"COLUMNS": "300"}).stdout
    for name in AUGMENTATIONS.names():
        assert name in out
