"""The units section of a detection run's report (exact rectangle detector, boxes shifted by 5 % of their width)."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from repliscope.datasets import resolve_dataset
from repliscope.evaluation.record import Detection, EvaluationRecord
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from repliscope.report.build import build_run_view
from repliscope.report.figures import decode_png_b64
from repliscope.report.html import render_view_html
from repliscope.report.markdown import render_view_markdown
from repliscope.report.sections import embed_sink
from repliscope.report.units_sections import DetectionRunView, source_dataset, with_units

MANIFEST = Path(__file__).parents[1] / "fixtures" / "detection" / "rect-detector.yaml"


@pytest.fixture(scope="module")
def shifted(tmp_path_factory: pytest.TempPathFactory) -> EvaluationRecord:
    prepared = prepare(
        MANIFEST,
        RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path_factory.mktemp("cache")),
    )
    record = evaluate(prepared, resolve_dataset("synthetic_detection"))
    samples = [
        s.model_copy(
            update={
                "detections": [
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
            }
        )
        for s in record.samples
    ]
    return record.model_copy(update={"run_id": uuid.uuid4().hex, "samples": samples})


def test_section_and_overlays_on_the_real_images(shifted: EvaluationRecord) -> None:
    assert source_dataset(shifted) is not None  # synthetic_detection seed 0 re-generated, same identity
    view = build_run_view(shifted)  # detection runs get the section
    assert isinstance(view, DetectionRunView) and view.units is not None
    ids = [s.id for s in view.sections]
    assert ids.index("units") == ids.index("provenance") - 1
    units = view.units
    assert units.summary[0] == (
        "Against the ground truth: 33 of 33 boxes matched (100.00 %) by 33 predictions on 16 images."
    )
    assert "Significant bias against the ground truth: dx/w median +0.0500." in units.summary
    assert any(
        line.startswith("Diagnosis against the ground truth: boxes: shift_relative (tx=0.05, ty=0) explains 100%")
        for line in units.summary
    )
    assert [what for what, _ in units.tables] == ["against the ground truth"]
    dx = next(r for r in units.tables[0][1] if r.name == "dx/w")
    assert (dx.median, dx.interval, dx.n, dx.significant) == ("+0.0500", "[+0.0500, +0.0500]", "33", True)
    assert [f.title.split(":")[0] for f in units.figures] == [
        "Bias scatter against the ground truth",
        "Largest bias 1",
        "Largest bias 2",
        "Largest bias 3",
    ]
    assert "Overlays: 3 of 3 on the real image." in units.note
    overlay = Image.open(io.BytesIO(decode_png_b64(units.figures[1].image.src))).convert("RGB")
    first = units.figures[1].title.split(": ")[1]
    sample = next(s for s in resolve_dataset("synthetic_detection").samples if s.id == first)
    assert overlay.size == ((sample.size_hw or (0, 0))[1], (sample.size_hw or (0, 0))[0])
    pixels = np.asarray(overlay)
    assert ((pixels == (192, 57, 43)).all(axis=2)).any() and ((pixels == (39, 174, 96)).all(axis=2)).any()
    html = render_view_html(view)
    assert '<section id="units">' in html and "significant" in html
    md = render_view_markdown(view)
    assert "| dx/w | +0.0500 | [+0.0500, +0.0500] | 33 | significant |" in md
    again = with_units(view, shifted, embed_sink)  # replaces the units, no second section
    assert [s.id for s in again.sections] == ids


def test_classification_or_no_ground_truth_leaves_the_view(shifted: EvaluationRecord) -> None:
    bare = shifted.model_copy(update={"ground_truth": None})
    view = build_run_view(bare)
    assert not isinstance(view, DetectionRunView) and "units" not in [s.id for s in view.sections]
    assert with_units(view, bare, embed_sink) is view


def test_no_match_still_shows_images(shifted: EvaluationRecord) -> None:
    wrong = shifted.model_copy(
        update={
            "samples": [
                s.model_copy(
                    update={
                        "detections": [
                            d.model_copy(update={"class_id": d.class_id % 3 + 1}) for d in s.detections or []
                        ]
                    }
                )
                for s in shifted.samples
            ]
        }
    )
    view = build_run_view(wrong)
    assert isinstance(view, DetectionRunView) and view.units is not None
    assert [f.title.split(":")[0] for f in view.units.figures[1:]] == ["Image 1", "Image 2", "Image 3"]
    assert view.units.figures[1].caption.endswith("red: predicted; no detection matched the ground truth")
    assert "Diagnosis against the ground truth: classes: predicted = reference +1" in " ".join(view.units.summary)


def test_a_voc_run_reloads_its_images(tmp_path: Path, shifted: EvaluationRecord) -> None:
    """A run on a VOC folder re-loads it from the record's origin (real pixels in the overlays, not a canvas)."""
    from repliscope.datasets.voc_xml import load_voc_xml
    from tests.datasets.test_voc_xml import write_synthetic_voc

    write_synthetic_voc(tmp_path / "VOC")
    voc = load_voc_xml(tmp_path / "VOC")
    record = shifted.model_copy(update={"dataset": {**shifted.dataset, **voc.describe()}})
    again = source_dataset(record)
    assert again is not None and again.identity == voc.identity and len(again.samples) == 16
    edited = record.model_copy(update={"dataset": {**record.dataset, "identity": "0" * 64}})
    assert source_dataset(edited) is None  # another identity: never drawn on other images
