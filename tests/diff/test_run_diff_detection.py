"""``repliscope diff RUN_A RUN_B`` of two detection runs: the detections are compared image by image (count,
matched by IoU, only in A / B, class changes, box and score errors of the matched pairs) and the command exits 1
when they differ beyond the documented tolerance. Real runs: yolov3-tiny (the Darknet -> ONNX conversion on
onnxruntime) on the first 6 coco-val-mini images, once with the manifest's letterbox (fill 0.5) and once with
the Model Garden's / Ultralytics' grey (114/255)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.diff.task_level import BOX_TOLERANCE_PX, SCORE_TOLERANCE, compare_detections
from repliscope.evaluation.record import Detection, SamplePrediction
from tests.yolo._assets import COCO_MINI, MANIFEST, need_coco, seed_cache


def _pred(sid: str, dets: list[tuple[list[float], float, int]]) -> SamplePrediction:
    return SamplePrediction(
        sample_id=sid,
        label=None,
        detections=[Detection(box=box, score=score, class_id=cls) for box, score, cls in dets],
    )


def test_each_image_is_compared_against_the_stated_tolerance() -> None:
    box = [10.0, 10.0, 50.0, 60.0]
    a = [
        _pred("same", [(box, 0.9, 1), ([100.0, 100.0, 120.0, 130.0], 0.5, 2)]),
        _pred("moved", [(box, 0.9, 1)]),
        _pred("within", [(box, 0.9, 1)]),
        _pred("class", [(box, 0.9, 1)]),
        _pred("lost", [(box, 0.9, 1), ([100.0, 100.0, 120.0, 130.0], 0.5, 2)]),
        _pred("empty", []),
    ]
    b = [
        _pred("same", [([100.0, 100.0, 120.0, 130.0], 0.5, 2), (box, 0.9, 1)]),  # another order: the same
        _pred("moved", [([10.0, 10.0, 52.0, 60.0], 0.9, 1)]),  # x2 + 2 px
        _pred("within", [([10.005, 10.0, 50.0, 60.0], 0.90005, 1)]),  # under both tolerances
        _pred("class", [(box, 0.9, 3)]),
        _pred("lost", [(box, 0.9, 1)]),
        _pred("empty", []),
    ]
    cmp, outputs = compare_detections(list(zip(a, b, strict=True)))
    rows = {r.sample_id: r for r in cmp.per_image}
    assert (cmp.images, cmp.images_within_tolerance, cmp.passed) == (6, 3, False)
    assert cmp.differing_ids == ["class", "lost", "moved"]  # unmatched / class changes first, then box error
    assert (cmp.box_tolerance_px, cmp.score_tolerance) == (BOX_TOLERANCE_PX, SCORE_TOLERANCE) == (0.01, 1e-4)
    assert rows["same"].within_tolerance and rows["same"].matched == 2 and rows["same"].max_box_error == 0.0
    assert rows["moved"].max_box_error == 2.0 and rows["moved"].matched == 1 and not rows["moved"].within_tolerance
    assert rows["within"].within_tolerance and rows["within"].max_box_error == pytest.approx(0.005)
    assert (rows["class"].matched, rows["class"].class_changes, rows["class"].only_in_a) == (1, 1, 0)
    assert (rows["lost"].count_a, rows["lost"].count_b, rows["lost"].only_in_a, rows["lost"].only_in_b) == (2, 1, 1, 0)
    assert rows["empty"].within_tolerance and rows["empty"].max_box_error is None
    assert [o.quantity for o in outputs] == [
        "box coordinates of matched detections (source px: x1, y1, x2, y2)",
        "scores of matched detections",
    ]
    assert (outputs[0].max_abs, outputs[0].max_abs_sample, outputs[0].values) == (2.0, "moved", 4 * 6)


def _evaluate(cli: CliRunner, manifest: Path, db: str, batch: int) -> str:
    res = cli.invoke(
        app,
        [
            "evaluate",
            str(manifest),
            "--runtime",
            "onnxruntime",
            "--dataset",
            f"coco:{COCO_MINI}",
            "--limit",
            "6",
            "--threads",
            str(batch),
            "--batch-size",
            str(batch),
            "--db",
            db,
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    return str(json.loads(res.output)["run_id"])


def test_two_yolo_runs_with_another_letterbox_fill_differ_and_exit_1(tmp_path: Path) -> None:
    need_coco()
    seed_cache()
    grey = tmp_path / "yolov3-tiny-fill114.yaml"
    text = MANIFEST.read_text()
    assert text.count("    fill: 0.5\n") == 1
    grey.write_text(text.replace("    fill: 0.5\n", f"    fill: {114 / 255!r}\n"))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    cli = CliRunner()
    ref, other, again = _evaluate(cli, MANIFEST, db, 1), _evaluate(cli, grey, db, 1), _evaluate(cli, MANIFEST, db, 2)

    res = cli.invoke(app, ["diff", ref[:12], other[:12], "--db", db, "--no-store", "--json"])
    assert res.exit_code == 1, res.output
    out = json.loads(res.output)
    d = out["detections"]
    assert (d["images"], d["images_within_tolerance"], d["passed"]) == (6, 0, False)
    rows = {r["sample_id"]: r for r in d["per_image"]}
    # count, matched, only in A, only in B, class changes: the grey border adds and removes detections
    counts = {k: (r["count_a"], r["count_b"], r["matched"], r["only_in_a"], r["only_in_b"]) for k, r in rows.items()}
    assert counts == {
        "000000000139.jpg": (184, 185, 183, 1, 2),
        "000000000802.jpg": (10, 10, 10, 0, 0),
        "000000005001.jpg": (334, 333, 331, 3, 2),
        "000000010764.jpg": (12, 12, 12, 0, 0),
        "000000011813.jpg": (31, 33, 31, 0, 2),
        "000000018575.jpg": (115, 115, 115, 0, 0),
    }
    assert all(r["class_changes"] == 0 for r in rows.values())
    # where every detection is found again, boxes moved (0.065 to 6.0 px) and scores by up to 0.10
    assert rows["000000010764.jpg"]["max_box_error"] == pytest.approx(0.0650, abs=2e-3)
    assert rows["000000018575.jpg"]["max_box_error"] == pytest.approx(6.036, abs=2e-2)
    assert rows["000000018575.jpg"]["max_score_error"] == pytest.approx(0.1029, abs=1e-3)
    boxes, scores = out["outputs"]
    assert (boxes["max_abs"], boxes["max_abs_sample"]) == (pytest.approx(34.78, abs=0.05), "000000011813.jpg")
    assert boxes["values"] == 4 * 682 and scores["values"] == 682
    # the task's own paired figure only sees 3 images with another matched set: the boxes moved on all 6
    assert out["paired"]["flipped_images"] == 3

    human = cli.invoke(app, ["diff", ref[:12], other[:12], "--db", db, "--no-store"])
    assert human.exit_code == 1
    text = " ".join(human.output.split())
    assert "verdict detections differ beyond tolerance on 6 of 6 images (tolerance: box coordinates 0.01 px" in text
    assert "compared per image: A's detections matched to B's by IoU >= 0.5" in text
    assert "000000005001.jpg │ 334 │ 333 │ 331 │ 3 │ 2 │ 0 │ 1.26 │ 0.0077 000000000139.jpg" in text  # worst first

    # looser tolerances (--box-tolerance px, --score-tolerance): the moved boxes pass, the unmatched do not
    tolerances = ["--box-tolerance", "40", "--score-tolerance", "0.2"]
    loose = cli.invoke(app, ["diff", ref[:12], other[:12], "--db", db, "--no-store", "--json", *tolerances])
    assert loose.exit_code == 1, loose.output
    looser = json.loads(loose.output)["detections"]
    assert (looser["box_tolerance_px"], looser["score_tolerance"]) == (40.0, 0.2)
    assert looser["differing_ids"] == ["000000005001.jpg", "000000000139.jpg", "000000011813.jpg"]

    # the same manifest at another batch size and thread count: equal, exit 0
    same = cli.invoke(app, ["diff", ref[:12], again[:12], "--db", db, "--no-store"])
    assert same.exit_code == 0, same.output
    assert "detections equal within tolerance on all 6 images" in " ".join(same.output.split())


def test_the_command_line_defaults_are_the_documented_tolerances() -> None:
    import inspect

    from repliscope.cli.diff_cmd import diff

    params = inspect.signature(diff).parameters
    assert params["box_tolerance"].default == BOX_TOLERANCE_PX
    assert params["score_tolerance"].default == SCORE_TOLERANCE
