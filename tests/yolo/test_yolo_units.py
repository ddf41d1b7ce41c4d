"""Unit evaluation of the re-implementation against Darknet's own run: ``repliscope units RUN --against REF`` with
REF the ``darknet`` runtime's stored run (libdarknet) and RUN the ``onnxruntime`` run of the Darknet -> ONNX
conversion, same manifest, the first 4 coco-val-mini images."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from tests.yolo._assets import COCO_MINI, MANIFEST, need_coco, need_darknet, seed_cache


def _evaluate(runner: CliRunner, runtime: str, db: str) -> str:
    res = runner.invoke(
        app,
        [
            "evaluate",
            str(MANIFEST),
            "--runtime",
            runtime,
            "--dataset",
            f"coco:{COCO_MINI}",
            "--limit",
            "4",
            "--threads",
            "1",
            "--batch-size",
            "1",
            "--db",
            db,
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    return str(json.loads(res.output)["run_id"])


@pytest.mark.slow
def test_units_of_the_conversion_against_darknets_run(tmp_path: Path) -> None:
    need_darknet()
    need_coco()
    seed_cache()
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    cli = CliRunner()
    darknet, onnx = _evaluate(cli, "darknet", db), _evaluate(cli, "onnxruntime", db)

    res = cli.invoke(app, ["units", onnx[:12], "--against", darknet[:12], "--replicates", "200", "--db", db, "--json"])
    assert res.exit_code == 0, res.output  # nothing flagged against Darknet's run
    out = json.loads(res.output)
    assert (out["run_id"], out["reference_id"], out["flagged"]) == (onnx, darknet, False)
    ref = out["against_reference"]
    # every one of libdarknet's 540 detections found again, no bias: medians 0 (IoU 1 to 1e-6)
    assert (ref["n_images"], ref["n_reference"], ref["n_predictions"], ref["n_matched"]) == (4, 540, 540, 540)
    stats = {s["name"]: s for s in ref["stats"]}
    assert stats["iou"]["median"] == pytest.approx(1.0, abs=1e-6)
    assert all(stats[k]["median"] == pytest.approx(0.0, abs=1e-7) for k in ("dx_w", "dy_h", "log_w", "log_h"))
    assert not any(s["significant"] for s in ref["stats"])
    assert ref["off_diagonal"] == 0.0
    assert ref["diagnosis"]["box"] is None and ref["diagnosis"]["classes"] is None
    paired = out["paired"]
    assert (paired["matched_fraction"], paired["flipped_images"], paired["delta_ap"]) == (1.0, 0, 0.0)
    assert (paired["delta_ap_ci_low"], paired["delta_ap_ci_high"]) == (0.0, 0.0)
    assert paired["ap_reference"] == paired["ap_variant"] == pytest.approx(0.139586, abs=1e-6)
    # against the ground truth both are the same detector: 18 of the 41 COCO boxes, the same two biases
    truth = out["against_ground_truth"]
    assert (truth["n_reference"], truth["n_matched"], truth["n_predictions"]) == (41, 18, 540)
    assert [s["name"] for s in truth["stats"] if s["significant"]] == ["dy_h", "log_h"]

    # the reference alone, against the ground truth: Darknet's own biases flag it (exit 1)
    alone = cli.invoke(app, ["units", darknet[:12], "--replicates", "200", "--db", db, "--json"])
    assert alone.exit_code == 1, alone.output
    own = json.loads(alone.output)["against_ground_truth"]
    assert (own["n_reference"], own["n_matched"], own["n_predictions"]) == (41, 18, 540)
    assert own["ap_class_aware"] == pytest.approx(0.139586, abs=1e-6)
