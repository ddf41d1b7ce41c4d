"""Segmentation metrics on hand-made confusion matrices, bootstrap intervals, and the COCO semantic masks (union
per category, crowd included, the three overlap rules)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from repliscope.datasets.base import VOID
from repliscope.datasets.coco import load_coco
from repliscope.errors import DatasetError
from repliscope.metrics.segmentation import evaluate_confusions, iou_per_class, paired_delta, summary
from repliscope.tasks.segmentation import confusion_of


def test_confusion_counts_void_and_out_of_range() -> None:
    truth = np.array([[0, 0, 1], [1, -1, 2]])
    pred = np.array([[0, 1, 1], [5, 0, 2]])
    m = confusion_of(truth, pred, 3)
    assert m.tolist() == [[1, 1, 0, 0], [0, 1, 0, 1], [0, 0, 1, 0]]


def test_iou_miou_fwiou_accuracy_by_hand() -> None:
    m = np.array([[50, 10, 0, 0], [5, 30, 0, 5], [0, 0, 0, 0]])  # class 2: absent in truth and prediction
    iou = iou_per_class(m)
    assert iou[0] == 50 / (60 + 55 - 50) and iou[1] == 30 / (40 + 40 - 30) and np.isnan(iou[2])
    miou, fw, acc = summary(m)
    assert miou == pytest.approx((50 / 65 + 30 / 50) / 2, abs=1e-15)
    assert fw == pytest.approx((60 * 50 / 65 + 40 * 30 / 50) / 100, abs=1e-15)
    assert acc == 0.8


def test_bootstrap_is_seeded_and_brackets_the_value() -> None:
    rng = np.random.default_rng(3)
    per_image = np.zeros((40, 2, 3), np.int64)
    per_image[:, 0, 0] = rng.integers(50, 100, 40)
    per_image[:, 1, 1] = rng.integers(10, 60, 40)
    per_image[:, 1, 0] = rng.integers(0, 20, 40)
    a = evaluate_confusions(per_image, ["background", "x"], replicates=300, seed=1)
    b = evaluate_confusions(per_image, ["background", "x"], replicates=300, seed=1)
    assert a.metrics == b.metrics and [m.name for m in a.metrics] == ["mIoU", "fwIoU", "pixel_accuracy"]
    for m in a.metrics:
        assert m.ci_low < m.value < m.ci_high and m.n == 40
    row: Any = a.per_class[1]
    assert row["images"] == 40 and row["iou_ci_low"] < row["iou"]
    same = paired_delta(per_image, per_image, replicates=100)
    assert same["delta_miou"] == 0.0 and same["delta_miou_ci_low"] == same["delta_miou_ci_high"] == 0.0
    worse = per_image.copy()
    worse[:, 1, 0] += 30
    worse[:, 1, 1] -= 5
    d = paired_delta(per_image, worse, replicates=200)
    assert d["delta_miou"] < 0 and d["delta_miou_ci_high"] < 0


def _coco(tmp_path: Path) -> Path:
    (tmp_path / "images").mkdir()
    (tmp_path / "annotations").mkdir()
    Image.new("RGB", (10, 8)).save(tmp_path / "images" / "x.jpg")
    square = lambda x1, y1, x2, y2: [[x1, y1, x2, y1, x2, y2, x1, y2]]  # noqa: E731
    crowd = {"size": [8, 10], "counts": [70, 4, 6]}  # column-major: pixels 70..73 -> column 8, rows 6..7 + col 9 ...
    anns = [
        {
            "id": 1,
            "image_id": 1,
            "category_id": 1,
            "bbox": [0, 0, 6, 6],
            "area": 36,
            "iscrowd": 0,
            "segmentation": square(0, 0, 6, 6),
        },
        {
            "id": 2,
            "image_id": 1,
            "category_id": 2,
            "bbox": [4, 4, 4, 4],
            "area": 16,
            "iscrowd": 0,
            "segmentation": square(4, 4, 8, 8),
        },
        {
            "id": 3,
            "image_id": 1,
            "category_id": 1,
            "bbox": [8, 6, 2, 2],
            "area": 4,
            "iscrowd": 1,
            "segmentation": crowd,
        },
    ]
    data = {
        "images": [{"id": 1, "file_name": "x.jpg", "width": 10, "height": 8}],
        "annotations": anns,
        "categories": [{"id": 1, "name": "person"}, {"id": 2, "name": "dog"}],
    }
    (tmp_path / "annotations" / "instances_x.json").write_text(json.dumps(data))
    return tmp_path


def test_coco_semantic_masks_and_overlap_rules(tmp_path: Path) -> None:
    root = _coco(tmp_path)
    sample = load_coco(root).samples[0]
    assert sample.mask is not None and sample.mask.categories == {1: "person", 2: "dog"}
    later = sample.mask.read(None)
    assert later.shape == (8, 10) and later.dtype == np.int32
    assert (later[4:6, 4:6] == 2).all()  # annotation_order: the dog (id 2) over the person (id 1)
    assert later[7, 8] == 1 and later[6, 8] == 1  # the crowd RLE counts as person
    only_person = sample.mask.read(frozenset({1}))
    assert (only_person[0:6, 0:6] == 1).all() and not (only_person == 2).any()
    smaller = load_coco(root, mask_overlap="smaller_on_top").samples[0].mask.read(None)  # type: ignore[union-attr]
    assert (smaller[4:6, 4:6] == 2).all()  # the dog (16 px) is smaller than the person (36 px)
    void = load_coco(root, mask_overlap="void").samples[0].mask.read(None)  # type: ignore[union-attr]
    assert (void[4:6, 4:6] == VOID).all() and (void[0:4, 0:4] == 1).all() and (void[6:8, 4:8] == 2).all()
    with pytest.raises(DatasetError, match="allowed: annotation_order, smaller_on_top, void"):
        load_coco(root, mask_overlap="first")


def test_coco_instances_and_size_buckets(tmp_path: Path) -> None:
    from repliscope.units.segmentation import size_buckets

    sample = load_coco(_coco(tmp_path)).samples[0]
    assert sample.mask is not None
    found = sample.mask.instances(None)
    assert found is not None and [(c, int(m.sum())) for c, m in found] == [(1, 36), (2, 16)]  # the crowd left out
    assert [c for c, _ in sample.mask.instances(frozenset({2})) or []] == [2]
    buckets = size_buckets([[[1, 100, 50], [1, 2000, 2000]], [[1, 10000, 0]]], replicates=50, seed=0)
    assert [(b.name, b.n_objects, b.recall) for b in buckets] == [
        ("small", 1, 0.5),
        ("medium", 1, 1.0),
        ("large", 1, 0.0),
    ]
