"""Segmentation averaging, as docs/guides/segmentation.md ("How the numbers average") states it, by hand.

Two images, classes 0 background, 1 cat, 2 dog (predicted, never in the ground truth), 3 bird (neither);
column 4: a prediction outside the classes. Summed matrix M, rows truth, columns predicted:
background [11, 1, 2, 0, 0] (14 px), cat [1, 4, 0, 0, 1] (6 px); 20 scored pixels.
"""

import numpy as np
import pytest

from repliscope.metrics.segmentation import evaluate_confusions, iou_per_class, summary

NAMES = ["background", "cat", "dog", "bird"]


def _per_image() -> np.ndarray:
    m = np.zeros((2, 4, 5), np.int64)
    m[0, 0] = [5, 1, 0, 0, 0]
    m[0, 1] = [1, 3, 0, 0, 0]
    m[1, 0] = [6, 0, 2, 0, 0]
    m[1, 1] = [0, 1, 0, 0, 1]  # one cat pixel predicted as a label outside the classes: a miss
    return m


def test_one_dataset_level_matrix_absent_left_out_prediction_only_zero_fwiou_by_truth_pixels() -> None:
    per_image = _per_image()
    full = per_image.sum(axis=0)
    iou = iou_per_class(full)
    assert iou[0] == 11 / (14 + 12 - 11)  # background: 11 / 15
    assert iou[1] == 4 / (6 + 5 - 4)  # cat: the outside-class pixel is in its row, in no class's column
    assert iou[2] == 0.0  # dog: predicted (2 px), never in the ground truth -> IoU 0, counted
    assert np.isnan(iou[3])  # bird: neither in the ground truth nor predicted -> left out
    miou, fwiou, accuracy = summary(full)
    assert miou == pytest.approx((11 / 15 + 4 / 7 + 0.0) / 3, abs=1e-15)  # mean over the 3 defined classes
    assert fwiou == pytest.approx((14 * 11 / 15 + 6 * 4 / 7) / 20, abs=1e-15)  # weights: ground-truth pixels
    assert accuracy == 15 / 20
    # the dataset-level matrix, not the mean of the images' own mIoUs (0.5369 here)
    per_image_mean = float(np.mean([summary(m)[0] for m in per_image]))
    assert per_image_mean == pytest.approx(((5 / 7 + 3 / 5) / 2 + (6 / 8 + 1 / 2 + 0.0) / 3) / 2, abs=1e-15)
    assert abs(miou - per_image_mean) > 0.1

    ev = evaluate_confusions(per_image, NAMES, replicates=50, seed=0)
    assert {m.name: m.value for m in ev.metrics} == {"mIoU": miou, "fwIoU": fwiou, "pixel_accuracy": 0.75}
    rows = {r["name"]: r for r in ev.per_class}
    assert rows["dog"]["iou"] == 0.0 and rows["dog"]["gt_pixels"] == 0 and rows["dog"]["predicted_pixels"] == 2
    assert rows["bird"]["iou"] is None and rows["bird"]["iou_ci_low"] is None
    assert (rows["cat"]["gt_pixels"], rows["cat"]["predicted_pixels"], rows["cat"]["images"]) == (6, 5, 2)
