"""The task registry and the classification task on records (the detection task: tests/evaluation)."""

from __future__ import annotations

import numpy as np
import pytest

from repliscope.datasets.base import Dataset, Sample
from repliscope.errors import DatasetError, RepliscopeError, UnknownNameError
from repliscope.evaluation.engine import task_of
from repliscope.evaluation.record import SamplePrediction
from repliscope.ops.base import Predictions
from repliscope.ops.pipeline import Pipeline
from repliscope.tasks import TASKS, get_task
from repliscope.tasks.coco_names import COCO_80, COCO_91
from tests.store.records import TOP1_A, TOP1_B, make_record


def test_registry_names_and_op_lists() -> None:
    assert TASKS.names() == ["image_classification", "object_detection", "semantic_segmentation"]
    cls, det = get_task("image_classification"), get_task("object_detection")
    assert cls.post_ops == ("softmax", "topk", "labels") and cls.claim_metrics == ("top1", "top5")
    assert det.post_ops[:2] == ("detections_from_outputs", "anchor_decode") and "nms" in det.post_ops
    assert det.claim_metrics[0] == "AP" and len(det.claim_metrics) == 12
    assert not set(cls.post_ops) & set(det.post_ops)  # task_of relies on it
    with pytest.raises(UnknownNameError):
        get_task("segmentation")


def test_task_of_a_pipeline() -> None:
    from repliscope.ops.base import BuildContext

    classify = Pipeline.from_specs(
        [{"op": "decode", "library": "pillow", "channels": "RGB"}],
        [{"op": "softmax", "axis": -1}, {"op": "topk", "k": 1}],
        BuildContext(),
    )
    detect = Pipeline.from_specs(
        [{"op": "decode", "library": "pillow", "channels": "RGB"}], [{"op": "max_detections", "k": 3}], BuildContext()
    )
    assert task_of(classify).name == "image_classification" and task_of(detect).name == "object_detection"


def test_coco_label_sets() -> None:
    assert len(COCO_80) == 80 and COCO_80[0] == "person" and COCO_80[-1] == "toothbrush"
    assert len(COCO_91) == 91 and COCO_91[1] == "person" and COCO_91[90] == "toothbrush"
    assert [i for i, n in enumerate(COCO_91) if n == "N/A"] == [12, 26, 29, 30, 45, 66, 68, 69, 71, 83]


def test_classification_records_from_topk() -> None:
    task = get_task("image_classification")
    batch = [Sample("a", 3, lambda: b""), Sample("b", None, lambda: b""), Sample("c", 1, lambda: b"")]
    preds = Predictions(
        scores=np.zeros((2, 4), np.float32),
        topk_indices=np.array([[3, 1], [0, 2]]),
        topk_scores=np.array([[0.75, 0.125], [0.5, 0.25]], np.float32),
    )
    assert task.to_samples(preds, batch, [0, 2]) == [
        SamplePrediction(sample_id="a", label=3, topk_indices=[3, 1], topk_probs=[0.75, 0.125]),
        SamplePrediction(sample_id="c", label=1, topk_indices=[0, 2], topk_probs=[0.5, 0.25]),
    ]
    with pytest.raises(RepliscopeError, match="must contain a 'topk' op"):
        task.to_samples(Predictions(scores=np.zeros((1, 4), np.float32)), batch, [0])
    with pytest.raises(DatasetError, match="1 samples of 'd' have labels outside the model's 3 classes: a"):
        task.check_dataset(Dataset("d", batch, license="x", label_rule="x"), 3)


def test_classification_paired_on_records() -> None:
    a, b = make_record("a" * 32, TOP1_A), make_record("b" * 32, TOP1_B)
    p = get_task("image_classification").paired(a.samples, b.samples)
    assert p is not None
    both = [(x, y) for x, y in zip(a.samples, b.samples, strict=True) if x.error is None and y.error is None]
    flipped = sum(1 for x, y in both if x.top1 != y.top1)
    assert (p["n"], p["flipped"], p["agreement"]) == (len(both), flipped, (len(both) - flipped) / len(both))
    b_only = sum(1 for x, y in both if x.top1 == x.label != y.top1)
    c_only = sum(1 for x, y in both if y.top1 == y.label != x.top1)
    assert (p["b"], p["c"]) == (b_only, c_only)
    assert "mean_kl" not in p and "max_abs_prob_diff" not in p and p["max_abs_top1_prob_diff"] is not None
    failed = [s for s in a.samples if s.error is not None]
    assert failed and get_task("image_classification").paired(failed, failed) is None


def test_builtin_coco_labels_cover_every_coco_val_category() -> None:
    """An 80-class COCO model (builtin:coco-80 by name, builtin:coco-91 by id) is scored on all 80 categories of
    the real instances JSON: nothing left out."""
    import json

    from repliscope.tasks.coco_names import COCO_80, COCO_91
    from repliscope.tasks.detection import coverage
    from tests.runtimes.detection_references import COCO_MINI, need

    data = json.loads(next((need(COCO_MINI) / "annotations").glob("instances_*.json")).read_text())
    categories = {c["id"]: c["name"] for c in data["categories"]}
    for names in (COCO_80, COCO_91):
        got = coverage(categories, names)
        assert (len(got.evaluated), got.left_out) == (80, {})
