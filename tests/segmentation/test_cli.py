"""The CLI on segmentation runs: evaluate prints per-class IoU, runs compare the paired ΔmIoU, units the mask
statistics (exit 1 on a diagnosed displacement)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.evaluation.record import EvaluationRecord
from repliscope.store import RunStore
from repliscope.tasks.segmentation import labels_of_rle, rle_of
from tests.segmentation._data import write_voc

MANIFEST = Path(__file__).parents[1] / "fixtures" / "segmentation" / "colour-segmenter.yaml"


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("cli")
    db = f"sqlite:///{root / 'r.db'}"
    voc = write_voc(root / "voc")
    res = CliRunner().invoke(
        app,
        [
            "evaluate",
            str(MANIFEST),
            "--runtime",
            "onnxruntime",
            "--dataset",
            f"voc_seg:{voc}",
            "--threads",
            "1",
            "--batch-size",
            "1",
            "--db",
            db,
        ],
    )
    assert res.exit_code == 0, res.output
    assert "per class (IoU, 95 % bootstrap interval over images)" in res.output and "1 red" in res.output
    with RunStore(db) as store:
        (run,) = store.list()
    return db, run.run_id


def _shifted(record: EvaluationRecord) -> EvaluationRecord:
    """The record with every predicted mask moved 2 px down (the truth kept)."""
    samples = []
    for s in record.samples:
        seg = s.segmentation
        assert seg is not None and seg.predicted is not None
        pred = labels_of_rle(seg.predicted, seg.size_hw)
        moved = np.zeros_like(pred)
        moved[2:] = pred[:-2]
        samples.append(
            s.model_copy(
                update={"segmentation": seg.model_copy(update={"predicted": rle_of(moved, range(seg.num_classes))})}
            )
        )
    return record.model_copy(update={"run_id": uuid.uuid4().hex, "samples": samples})


def test_units_and_compare(stored: tuple[str, str]) -> None:
    db, run_id = stored
    ok = CliRunner().invoke(app, ["units", run_id, "--db", db, "--replicates", "100"])
    assert ok.exit_code == 0, ok.output
    assert "no systematic displacement of the masks" in ok.output and "foreground IoU per image" in ok.output
    with RunStore(db) as store:
        shifted = _shifted(store.get(run_id))
        store.save(shifted)
    flagged = CliRunner().invoke(app, ["units", shifted.run_id, "--db", db, "--replicates", "100", "--json"])
    assert flagged.exit_code == 1, flagged.output
    out = json.loads(flagged.output)
    assert out["flagged"] and out["diagnosis"][0].startswith("masks displaced by dy +2 px, dx +0 px")
    compared = CliRunner().invoke(app, ["runs", "compare", run_id, shifted.run_id, "--db", db])
    assert compared.exit_code == 0, compared.output
    assert "paired    B against A on 4 images: mIoU 1.0000 -> " in compared.output
    assert "3 images differ" in compared.output  # image d has no foreground: moving it changes nothing


def test_diff_runtimes_and_records(stored: tuple[str, str], tmp_path: Path) -> None:
    db, run_id = stored
    voc = write_voc(tmp_path / "voc")
    res = CliRunner().invoke(
        app,
        ["diff", str(MANIFEST), "--runtimes", "onnxruntime", "opencv_dnn", "--dataset", f"voc_seg:{voc}", "--db", db],
    )
    assert res.exit_code == 0, res.output
    assert "masks identical on 100.00 % (4/4)" in res.output
    assert "pixels    with the same label: 100.00 %" in res.output
    with RunStore(db) as store:
        shifted = _shifted(store.get(run_id))
        store.save(shifted)
    from repliscope.diff.task_level import diff_records

    with RunStore(db) as store:
        r = diff_records(store.get(run_id), store.get(shifted.run_id))
    assert r.task == "semantic_segmentation" and r.compared == 4 and r.agreements == 1
    assert r.paired is not None and r.paired["flipped_images"] == 3 and r.paired["pixel_agreement"] < 1
