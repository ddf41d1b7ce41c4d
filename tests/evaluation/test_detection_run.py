"""Object detection end to end without TensorFlow: the exact rectangle detector (tests/fixtures/detection) on
``synthetic_detection`` through evaluate -> record -> store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repliscope.datasets.base import Dataset, Sample
from repliscope.datasets.resolve import resolve_dataset
from repliscope.errors import DatasetError, RepliscopeError
from repliscope.evaluation.ground_truth import dataset_of
from repliscope.evaluation.record import EvaluationRecord
from repliscope.evaluation.run import PreparedRun, RunSettings, evaluate, prepare
from repliscope.manifest.loader import load_manifest
from repliscope.manifest.schema import DatasetRef
from repliscope.ops.base import Boxes, BoxFormat, Predictions
from repliscope.store import RunStore
from repliscope.tasks import get_task

FIXTURES = Path(__file__).parents[1] / "fixtures" / "detection"
MANIFEST = FIXTURES / "rect-detector.yaml"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> PreparedRun:
    return prepare(
        MANIFEST,
        RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path_factory.mktemp("cache")),
    )


@pytest.fixture(scope="module")
def synthetic() -> Dataset:
    return resolve_dataset("synthetic_detection")


@pytest.fixture(scope="module")
def record(prepared: PreparedRun, synthetic: Dataset) -> EvaluationRecord:
    return evaluate(prepared, synthetic)


def test_every_box_is_found_exactly(record: EvaluationRecord, synthetic: Dataset) -> None:
    assert record.task == "object_detection" and record.counts["evaluated"] == 16 and record.counts["failed"] == 0
    for pred, sample in zip(record.samples, synthetic.samples, strict=True):
        assert pred.detections is not None and all(d.score == 1.0 for d in pred.detections)
        found = sorted((tuple(d.box), d.class_id) for d in pred.detections)
        assert found == sorted((o.box, o.class_id) for o in sample.objects or ())


def test_coco_metrics_are_exact(record: EvaluationRecord, synthetic: Dataset) -> None:
    m = {x.name: x for x in record.metrics}
    for name in ("AP", "AP50", "AP75", "APs", "APm", "AR10", "AR100", "ARs", "ARm"):
        assert (m[name].value, m[name].ci_low, m[name].ci_high, m[name].n, m[name].successes) == (
            1.0,
            1.0,
            1.0,
            16,
            None,
        )
    assert "APl" not in m and "ARl" not in m  # no object above 96^2 px: COCOeval leaves them undefined
    # AR1: one detection per image and class finds one object of each class present, so the recall of class c
    # is (images holding c) / (objects of c); COCO averages it over the classes (identical at every IoU)
    per_class = []
    for c in (1, 2, 3):
        images = sum(1 for s in synthetic.samples if any(o.class_id == c for o in s.objects or ()))
        objects = sum(1 for s in synthetic.samples for o in s.objects or () if o.class_id == c)
        per_class.append(images / objects)
    assert m["AR1"].value == pytest.approx(sum(per_class) / 3, abs=1e-12)
    assert record.per_class == [
        {"class_id": 1, "name": "red", "ap": 1.0, "ar": 1.0, "n_objects": 10, "n_detections": 10},
        {"class_id": 2, "name": "green", "ap": 1.0, "ar": 1.0, "n_objects": 12, "n_detections": 12},
        {"class_id": 3, "name": "blue", "ap": 1.0, "ar": 1.0, "n_objects": 11, "n_detections": 11},
    ]


def test_record_carries_ground_truth_and_store_round_trips(
    record: EvaluationRecord, synthetic: Dataset, tmp_path: Path
) -> None:
    assert record.ground_truth is not None and record.ground_truth.categories == {1: "red", 2: "green", 3: "blue"}
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        store.save(record)
        back = store.get(record.run_id)
    assert back == record and back.result_hash == record.result_hash
    rebuilt = dataset_of(back)
    assert [s.objects for s in rebuilt.samples] == [s.objects for s in synthetic.samples]
    assert get_task("object_detection").metrics(back.samples, rebuilt) == record.metrics


def test_claim_judged_on_the_bootstrap_interval(prepared: PreparedRun, synthetic: Dataset, tmp_path: Path) -> None:
    text = MANIFEST.read_text().replace(
        "claims: []",
        "claims:\n  - {metric: AP, value: 0.9, source: README, "
        "dataset: {name: synthetic, split: seed0}}\n  - {metric: AP50, value: 1.0, "
        "source: README, dataset: {name: synthetic, split: seed0}}",
    )
    (tmp_path / "claimed.yaml").write_text(text)
    for name in ("rect_detector.onnx", "rect-labels.txt"):
        (tmp_path / name).write_bytes((FIXTURES / name).read_bytes())
    run = prepare(
        tmp_path / "claimed.yaml",
        RunSettings(
            runtime="onnxruntime",
            threads=1,
            batch_size=1,
            evaluated_as=DatasetRef(name="synthetic", split="seed0"),
            cache_dir=prepared.settings.cache_dir,
        ),
    )
    claimed = evaluate(run, synthetic)
    ap, ap50 = claimed.claims
    # 16 images: below MIN_BOOTSTRAP_SAMPLES an AP interval under-covers, so no verdict (issue 35)
    assert (ap.verdict, ap.claimed, ap.ci_low, ap.ci_high) == ("not comparable", 0.9, 1.0, 1.0)
    assert (ap50.verdict, ap50.claimed) == ("not comparable", 1.0)
    assert "claimed 0.9000, measured 1.0000" in ap.reason and "90.00 %" not in ap.reason  # a fraction, as claimed
    assert ap.reason.startswith("too few samples for an interval of AP: 16 images, and a bootstrap interval over")
    from repliscope.report.markdown import render_run_markdown

    md = render_run_markdown(claimed)
    assert "- **NOT COMPARABLE** — AP 0.9000 claimed on synthetic/seed0; measured 1.0000 [1.0000, 1.0000]" in md
    from repliscope.report.sections import claim_figure, embed_sink

    figure = claim_figure(claimed.claims, claimed.metrics, embed_sink)
    assert figure is not None and "its 95 % bootstrap interval over images" in figure.caption


def test_classification_data_is_refused(prepared: PreparedRun) -> None:
    images = Dataset("folder", [Sample("a.jpg", 3, lambda: b"")], license="x", label_rule="x")
    with pytest.raises(DatasetError, match=r"dataset 'folder' has no box annotations .*coco:PATH"):
        evaluate(prepared, images)


def test_only_the_categories_the_model_detects_are_scored(prepared: PreparedRun, synthetic: Dataset) -> None:
    """COCOeval's params.catIds: a dataset category the manifest's labels do not name ('lime') is left out of the
    scores with its ground truth, and said so in the record, the CLI line and the report (was: refused)."""
    renamed = Dataset(
        "renamed", synthetic.samples, license="x", label_rule="x", categories={1: "red", 2: "lime", 3: "blue"}
    )
    got = evaluate(prepared, renamed)
    assert got.dataset["categories_evaluated"] == [[1, "red"], [3, "blue"]]
    assert (got.dataset["categories_left_out"], got.dataset["objects_left_out"]) == ([[2, "lime"]], 12)
    assert [c["class_id"] for c in got.per_class or []] == [1, 3]
    assert got.ground_truth is not None and got.ground_truth.categories == {1: "red", 3: "blue"}
    assert sum(len(t.boxes) for t in got.ground_truth.samples) == 33 - 12
    # the detector finds every red and blue box; its green (class 2) detections are not scored
    assert {m.name: m.value for m in got.metrics}["AP"] == 1.0
    assert got.dataset["identity"] == renamed.identity  # the identity is the whole dataset's
    from repliscope.tasks.detection import categories_left_out_line

    assert categories_left_out_line(got.dataset) == (
        "scored on 2 of 3 dataset categories, the ones the model's "
        "labels name (1 red, 3 blue); 1 left out with their 12 "
        "ground-truth boxes: lime"
    )
    from repliscope.report.markdown import render_run_markdown

    assert "Scored on 2 of 3 dataset categories" in render_run_markdown(got)
    stored = dataset_of(got)  # re-scoring the stored record sees the scored categories only
    assert stored.categories == {1: "red", 3: "blue"}


def test_a_dataset_the_model_detects_nothing_of_is_refused(prepared: PreparedRun, synthetic: Dataset) -> None:
    other = Dataset("other", synthetic.samples, license="x", label_rule="x", categories={1: "cat", 2: "dog", 3: "lime"})
    with pytest.raises(
        DatasetError,
        match=r"the model detects none of the categories of dataset 'other' \(1 'cat', "
        r"2 'dog', 3 'lime'; the manifest's labels: red, green, blue\)",
    ):
        evaluate(prepared, other)


def test_full_coverage_notes_every_category_and_leaves_nothing_out(record: EvaluationRecord) -> None:
    assert record.dataset["categories_evaluated"] == [[1, "red"], [2, "green"], [3, "blue"]]
    assert record.dataset["categories_left_out"] == [] and "objects_left_out" not in record.dataset


def test_coverage_by_name_and_by_coco_91_id() -> None:
    from repliscope.tasks.coco_names import COCO_80, COCO_91
    from repliscope.tasks.detection import coverage

    cats = {1: "person", 2: "bicycle", 90: "toothbrush"}
    assert coverage(cats, ["person"]) == coverage(cats, ["face", "person"])
    assert (coverage(cats, ["person"]).evaluated, coverage(cats, ["person"]).left_out) == (
        {1: "person"},
        {2: "bicycle", 90: "toothbrush"},
    )
    assert coverage(cats, COCO_91).evaluated == cats == coverage(cats, COCO_80).evaluated
    assert coverage({2: "person"}, COCO_91).evaluated == {}  # coco-91 is indexed by id: 2 is bicycle


def test_boxes_not_in_the_final_format_name_the_missing_op() -> None:
    task = get_task("object_detection")
    batch = [Sample("a", None, lambda: b"")]

    def preds(fmt: BoxFormat) -> Predictions:
        import numpy as np

        boxes = Boxes(np.zeros((1, 4), np.float32), np.ones(1, np.float32), np.zeros(1, np.int64), fmt)
        return Predictions(scores=np.zeros((1, 1), np.float32), detections=[boxes])

    with pytest.raises(RepliscopeError, match="add a 'to_source' op"):
        task.to_samples(preds(BoxFormat("xyxy", normalized=False)), batch, [0])
    with pytest.raises(RepliscopeError, match=r"add a 'box_format' op .* and then to_source"):
        task.to_samples(preds(BoxFormat("yxyx", normalized=True)), batch, [0])
    with pytest.raises(RepliscopeError, match="made no detections: start it with one of detections_from_outputs"):
        task.to_samples(Predictions(scores=np.zeros((1, 1), np.float32)), batch, [0])


def _manifest_errors(tmp_path: Path, old: str, new: str) -> list[str]:
    from repliscope.manifest.loader import inspect_manifest

    (tmp_path / "m.yaml").write_text(MANIFEST.read_text().replace(old, new))
    return [str(e) for e in inspect_manifest(tmp_path / "m.yaml").errors]


def test_loader_checks_of_a_detection_manifest(tmp_path: Path) -> None:
    assert load_manifest(MANIFEST).manifest.task == "object_detection"
    (err,) = _manifest_errors(tmp_path, "  - op: to_source\n    undo: geometry\n    clip: false\n", "")
    assert "boxes as xyxy pixels (input image): add a 'to_source' op" in err
    (err,) = _manifest_errors(tmp_path, "    scores: scores\n", "    scores: confidences\n")
    assert "postprocess[0].scores" in err and "reads model output 'confidences', which is not in outputs" in err
    (err,) = _manifest_errors(tmp_path, "  - op: score_threshold", "  - op: topk\n    k: 5\n  - op: score_threshold")
    assert "postprocess[1].op" in err and "'topk' is not a post-processing op of object_detection" in err
    (err,) = _manifest_errors(
        tmp_path, "  - op: detections_from_outputs", "  - op: max_detections\n    k: 5\n  - op: detections_from_outputs"
    )
    assert (
        "postprocess[0].op" in err
        and "'max_detections' works on detections, which 'detections_from_outputs' "
        "(postprocess[1]) makes: put it after that op"
        in err
    )
    start = MANIFEST.read_text().index("  - op: detections_from_outputs")
    end = MANIFEST.read_text().index("  - op: score_threshold")
    (err,) = _manifest_errors(tmp_path, MANIFEST.read_text()[start:end], "")
    assert (
        "postprocess needs one of detections_from_outputs, anchor_decode, yolo_decode, yolo_anchor_free_decode "
        "to make boxes"
    ) in err


def test_report_shows_coco_metrics_per_class_and_claims(record: EvaluationRecord) -> None:
    from repliscope.report.html import render_run_html
    from repliscope.report.markdown import render_run_markdown

    md = render_run_markdown(record)
    assert "| metric | value | 95 % interval | n |" in md and "| AP | 1.0000 | [1.0000, 1.0000] | 16 images |" in md
    # the bias-corrected bootstrap interval (issue 35; the percentile one was [0.7963, 0.9722])
    assert "| AR1 | 0.8783 | [0.7622, 0.9654] | 16 images |" in md and "None/" not in md
    assert "## Per-class AP" in md and "| 2 green | 1.0000 | 1.0000 | 12 | 12 |" in md
    assert "## Failed samples\n\n0 of 16 samples failed." in md
    html = render_run_html(record)
    assert '<table id="per-class-table">' in html and "<td>3 blue</td>" in html
    assert (
        '<td>AP</td><td class="num">1.0000</td><td class="num">[1.0000, 1.0000]</td><td class="num">16 images' in html
    )
