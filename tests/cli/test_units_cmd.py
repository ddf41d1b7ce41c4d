"""``repliscope units``: the exact rectangle detector on synthetic_detection, and the same run with every box moved
5 % of its width to the right."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.datasets import resolve_dataset
from repliscope.evaluation.record import Detection, EvaluationRecord
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from repliscope.store.repository import RunStore

MANIFEST = Path(__file__).parents[1] / "fixtures" / "detection" / "rect-detector.yaml"


def _shifted(record: EvaluationRecord) -> EvaluationRecord:
    samples = []
    for s in record.samples:
        dets = [
            Detection(
                box=[
                    d.box[0] + 0.05 * (d.box[2] - d.box[0]),
                    d.box[1],
                    d.box[2] + 0.05 * (d.box[2] - d.box[0]),
                    d.box[3],
                ],
                score=d.score,
                class_id=d.class_id,
            )
            for d in s.detections or []
        ]
        samples.append(s.model_copy(update={"detections": dets}))
    return record.model_copy(update={"run_id": uuid.uuid4().hex, "samples": samples})


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str, str]:
    tmp = tmp_path_factory.mktemp("units")
    prepared = prepare(MANIFEST, RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp / "cache"))
    record = evaluate(prepared, resolve_dataset("synthetic_detection"))
    shifted = _shifted(record)
    bare = record.model_copy(update={"run_id": uuid.uuid4().hex, "ground_truth": None})
    url = f"sqlite:///{tmp / 'runs.db'}"
    with RunStore(url) as store:
        store.save(record)
        store.save(shifted)
        store.save(bare)
    return url, record.run_id, shifted.run_id, bare.run_id


def invoke(*args: str) -> tuple[int, str, str]:
    res = CliRunner(env={"COLUMNS": "120"}).invoke(app, ["units", *args])
    return res.exit_code, res.stdout, res.stderr


def test_exact_run_has_no_bias(db: tuple[str, str, str, str]) -> None:
    url, exact, _, _ = db
    code, out, _ = invoke(exact[:12], "--db", url, "--replicates", "100")
    assert code == 0
    assert (
        "units against the ground truth: 33 of 33 ground-truth boxes matched (100.00 %), 33 predictions, 16 images"
        in out
    )
    assert "no significant bias (every interval contains 0)" in out
    assert "AP class-aware 1.0000, class-agnostic 1.0000" in out
    assert "boxes: nothing to explain (all 33 pairs agree within 1 % of the box size)" in out


def test_shifted_run_is_flagged_and_diagnosed(db: tuple[str, str, str, str]) -> None:
    url, _, shifted, _ = db
    code, out, _ = invoke(shifted, "--db", url, "--replicates", "100")
    assert code == 1
    assert "significant bias: dx/w median +0.0500 (95 % interval +0.0500 .. +0.0500, 33 matches)" in out
    assert "boxes: shift_relative (tx=0.05, ty=0) explains 100% of the box error" in out
    assert "AP class-aware 0.9000, class-agnostic 0.9000" in out  # IoU 0.95/1.05 = 0.905: all thresholds but .95


def test_against_reference_json(db: tuple[str, str, str, str]) -> None:
    url, exact, shifted, _ = db
    code, out, _ = invoke(shifted, "--against", exact, "--db", url, "--replicates", "100", "--json")
    assert code == 1
    data = json.loads(out)
    assert data["flagged"] is True and data["reference_id"] == exact
    ref = data["against_reference"]
    assert ref["against"] == "reference" and ref["diagnosis"]["pairing"] == "rank"
    assert ref["diagnosis"]["box"]["name"] == "shift_relative"
    dx = next(s for s in ref["stats"] if s["name"] == "dx_w")
    assert dx["median"] == pytest.approx(0.05, abs=1e-12) and dx["significant"] is True
    paired = data["paired"]
    assert paired["matched_fraction"] == 1.0 and paired["delta_ap"] == pytest.approx(-0.1, abs=1e-12)
    assert paired["flipped_images"] == 0


def test_errors_exit_2(db: tuple[str, str, str, str], tmp_path: Path) -> None:
    url = db[0]
    code, _, err = invoke("nosuchrun", "--db", url)
    assert code == 2 and "error:" in err
    code, _, err = invoke(db[1], "--db", url, "--report", str(tmp_path / "r.pdf"))
    assert code == 2 and "the file name must end in .html or .md" in err


def test_report_against_the_reference(db: tuple[str, str, str, str], tmp_path: Path) -> None:
    url, exact, shifted, _ = db
    out = tmp_path / "units.md"
    code, text, _ = invoke(shifted, "--against", exact, "--db", url, "--replicates", "50", "--report", str(out))
    assert code == 1 and f"report written to {out}" in text
    md = out.read_text()
    assert "Medians against the reference run:" in md and "Medians against the ground truth:" in md
    assert "| dx/w | +0.0500 | [+0.0500, +0.0500] | 33 | significant |" in md
    assert "green: ground truth, blue: reference, red: predicted" in md
    assert "AP 0.9000 vs the reference's 1.0000: ΔAP -0.1000" in md


def test_record_without_ground_truth_takes_a_dataset(db: tuple[str, str, str, str]) -> None:
    url, bare = db[0], db[3]
    code, _, err = invoke(bare, "--db", url)
    assert code == 2 and "stores no ground truth: give --dataset" in err
    code, out, _ = invoke(bare, "--db", url, "--dataset", "synthetic_detection", "--replicates", "20")
    assert code == 0 and "33 of 33 ground-truth boxes matched" in out
    code, _, err = invoke(bare, "--db", url, "--dataset", "synthetic_detection:x")
    assert code == 2 and "takes no path" in err
