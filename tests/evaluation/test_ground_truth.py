"""Detection ground truth in records: Dataset -> GroundTruth -> Dataset keeps every field."""

from __future__ import annotations

import pytest

from repliscope.datasets.base import BoxAnnotation, Dataset, Sample
from repliscope.errors import RepliscopeError, SampleError
from repliscope.evaluation.ground_truth import dataset_of, ground_truth_of
from repliscope.evaluation.record import EvaluationRecord, GroundTruth
from tests.store.records import make_record


def _dataset() -> Dataset:
    objs = (
        BoxAnnotation((1.0, 2.0, 11.0, 22.0), 3, area=150.5, annotation_id=7),
        BoxAnnotation((0.0, 0.0, 5.0, 5.0), 1, iscrowd=True, ignore=True),
    )
    samples = [
        Sample("a.jpg", None, lambda: b"", objects=objs, image_id=42, size_hw=(30, 40)),
        Sample("b.jpg", None, lambda: b"", objects=(), image_id=43, size_hw=(10, 10)),
    ]
    return Dataset("toy", samples, license="x", label_rule="coco", categories={1: "person", 3: "car"})


def test_round_trip_keeps_objects_ids_sizes_and_categories() -> None:
    gt = ground_truth_of(_dataset())
    assert gt.samples[0].boxes == [[1.0, 2.0, 11.0, 22.0], [0.0, 0.0, 5.0, 5.0]]
    assert gt.samples[0].classes == [3, 1] and gt.samples[0].areas == [150.5, None]
    assert gt.samples[0].iscrowd == [False, True] and gt.samples[0].ignore == [False, True]
    again = GroundTruth.model_validate_json(gt.model_dump_json())  # JSON turns the category keys into strings
    assert again == gt and again.categories == {1: "person", 3: "car"}
    record = make_record("r1", [1] * 20).model_copy(update={"ground_truth": again, "task": "object_detection"})
    back = dataset_of(EvaluationRecord.model_validate_json(record.model_dump_json()))
    assert back.categories == {1: "person", 3: "car"}
    assert [s.id for s in back.samples] == ["a.jpg", "b.jpg"]
    assert back.samples[0].objects == (
        BoxAnnotation((1.0, 2.0, 11.0, 22.0), 3, area=150.5),
        BoxAnnotation((0.0, 0.0, 5.0, 5.0), 1, iscrowd=True, ignore=True),
    )
    assert back.samples[1].objects == () and back.samples[0].image_id == 42 and back.samples[0].size_hw == (30, 40)
    with pytest.raises(SampleError, match="not stored"):
        back.samples[0].read()


def test_classification_record_has_no_ground_truth() -> None:
    with pytest.raises(RepliscopeError, match="carries no detection ground truth"):
        dataset_of(make_record("r1", [1] * 20))


def test_xywh_kept_per_row_and_a_malformed_record_names_the_field() -> None:
    """COCO's own ``[x, y, w, h]`` survives the record (None rows for boxes known only by corners); a stored ground
    truth whose columns disagree is refused naming the sample and the column, not a bare ValueError."""
    objs = (
        BoxAnnotation((0.1, 0.1, 0.1 + 0.2, 0.1 + 0.2), 1, xywh=(0.1, 0.1, 0.2, 0.2)),
        BoxAnnotation((0.0, 0.0, 5.0, 5.0), 1),
    )
    sample = Sample("a.jpg", None, lambda: b"", objects=objs, image_id=1)
    ds = Dataset("toy", [sample], license="x", label_rule="coco", categories={1: "person"})
    gt = ground_truth_of(ds)
    assert gt.samples[0].xywh == [[0.1, 0.1, 0.2, 0.2], None]
    assert ground_truth_of(_dataset()).samples[0].xywh is None  # a dataset of corners stores none
    record = make_record("r1", [1] * 20).model_copy(update={"ground_truth": gt, "task": "object_detection"})
    back = dataset_of(EvaluationRecord.model_validate_json(record.model_dump_json()))
    assert back.samples[0].objects == objs
    bad = gt.model_copy(deep=True)
    bad.samples[0].xywh = [[0.1, 0.1, 0.2, 0.2]]
    with pytest.raises(RepliscopeError, match=r"sample 'a.jpg' is malformed: xywh \(1\) rows for 2 boxes"):
        dataset_of(record.model_copy(update={"ground_truth": bad}))
    bad.samples[0].xywh = [[0.1, 0.1, 0.2], None]
    with pytest.raises(RepliscopeError, match=r"xywh\[0\] is not 4 numbers"):
        dataset_of(record.model_copy(update={"ground_truth": bad}))
