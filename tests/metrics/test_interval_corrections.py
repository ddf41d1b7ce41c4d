"""The segmentation intervals (mIoU, fwIoU, pixel accuracy, each class's IoU, the paired ΔmIoU) are
``corrected_interval`` of their bootstrap deltas with the bias subtracted once (``segmentation.BIAS_FACTOR``), no
longer the percentile interval; a paired ΔAP keeps its percentile interval (``delta_ap_interval``). Pinned on a
small deterministic case; the coverage behind each choice is measured by ``benchmarks/bench_interval_coverage.py``
(docs/benchmarks.md, "Interval coverage")."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import stdtrit

from repliscope.metrics import segmentation
from repliscope.metrics.bootstrap import corrected_interval
from repliscope.metrics.detection_paired import delta_ap_interval
from repliscope.metrics.segmentation import (
    draw_counts,
    evaluate_confusions,
    paired_delta,
    paired_miou_deltas,
    replicate_deltas,
)

EXACT = 1e-12


def _six_images() -> np.ndarray:
    """Six images, classes bg, a (in four images), b (in two); column 3: predicted outside the classes."""
    m = np.zeros((6, 3, 4), np.int64)
    m[:, 0] = [[50, 3, 1, 0], [40, 6, 0, 2], [60, 2, 2, 0], [30, 0, 5, 1], [45, 4, 0, 0], [55, 1, 1, 3]]
    m[:, 1] = [[2, 20, 0, 0], [0, 0, 0, 0], [5, 15, 1, 0], [1, 8, 0, 1], [0, 0, 0, 0], [3, 25, 0, 0]]
    m[:, 2] = [[0, 0, 0, 0], [1, 0, 9, 0], [0, 0, 0, 0], [2, 1, 12, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    return m


def test_corrected_interval_of_a_difference_keeps_its_sign() -> None:
    """Centre value - 2 x mean delta, half-width t(n - 1) x sd x sqrt(n / (n - 1)), within ``bounds``."""
    deltas = np.array([-0.02, 0.01, 0.03, -0.01])
    half = float(stdtrit(3, 0.975)) * float(np.std(deltas, ddof=1)) * math.sqrt(4 / 3)
    low, high = corrected_interval(-0.05, deltas, 4, bounds=(-1.0, 1.0))
    assert (low, high) == pytest.approx((-0.055 - half, -0.055 + half), abs=EXACT)
    assert (low, high) == pytest.approx((-0.13648277968550038, 0.02648277968550037), abs=EXACT)
    # a fraction's bounds would cut a negative ΔAP's interval at 0 (and drop the value itself)
    assert corrected_interval(-0.05, deltas, 4)[0] == 0.0
    low1, high1 = corrected_interval(-0.05, deltas, 4, bounds=(-1.0, 1.0), bias_factor=1.0)
    assert (low1 + high1) / 2 == pytest.approx(-0.05 - 0.0025, abs=EXACT)


def test_segmentation_intervals_are_pinned_and_are_the_corrected_interval_with_factor_one() -> None:
    per_image = _six_images()
    ev = evaluate_confusions(per_image, ["bg", "a", "b"], replicates=200, seed=0)
    got = {m.name: (m.value, m.ci_low, m.ci_high) for m in ev.metrics}
    assert list(got) == ["mIoU", "fwIoU", "pixel_accuracy"]
    np.testing.assert_allclose(
        [got["mIoU"], got["fwIoU"], got["pixel_accuracy"]],
        [
            (0.7184720041862899, 0.5875854711049354, 0.891596624339437),
            (0.8132914704343277, 0.7524214264138065, 0.8697930317360598),
            (0.8848920863309353, 0.8461963984257119, 0.9235243002971929),
        ],
        rtol=0,
        atol=EXACT,
    )
    rows = np.array([[r["iou"], r["iou_ci_low"], r["iou_ci_high"]] for r in ev.per_class], float)
    np.testing.assert_allclose(
        rows,
        [
            (0.8615384615384616, 0.8147005292421958, 0.9085692522049864),
            (0.6938775510204082, 0.46807506465159643, 0.9482050425837664),
            (0.6, 0.1348663223069292, 1.0),  # b: in two of six images, clipped at 1
        ],
        rtol=0,
        atol=EXACT,
    )
    # the same function as a COCO AP's interval (reused, not copied), the bias subtracted once
    assert segmentation.BIAS_FACTOR == 1.0
    deltas = replicate_deltas(per_image, draw_counts(6, 200, 0))
    assert corrected_interval(got["mIoU"][0], deltas[:, 0], 6, bias_factor=1.0) == got["mIoU"][1:]
    # mIoU's bias is downward: the interval sits above the percentile one (the value + the deltas' percentiles)
    d = deltas[:, 0][~np.isnan(deltas[:, 0])]
    percentile = got["mIoU"][0] + np.percentile(d, [2.5, 97.5])
    assert np.mean(d) < 0 and got["mIoU"][2] > percentile[1]


def test_paired_delta_miou_is_pinned_and_corrected_within_minus_one_and_one() -> None:
    per_image = _six_images()
    worse = per_image.copy()
    worse[:, 1, 1] = (per_image[:, 1, 1] * 0.8).astype(int)
    worse[:, 1, 0] += per_image[:, 1, 1] - worse[:, 1, 1]
    p = paired_delta(per_image, worse, replicates=200, seed=0)
    assert (p["delta_miou"], p["delta_miou_ci_low"], p["delta_miou_ci_high"]) == pytest.approx(
        (-0.059478967443569175, -0.0855119071908425, -0.03517116351804686), abs=EXACT
    )
    d = paired_miou_deltas(per_image, worse, draw_counts(6, 200, 0))
    expected = corrected_interval(p["delta_miou"], d - p["delta_miou"], 6, bounds=(-1.0, 1.0), bias_factor=1.0)
    assert (p["delta_miou_ci_low"], p["delta_miou_ci_high"]) == expected
    same = paired_delta(per_image, per_image, replicates=50, seed=0)
    assert (same["delta_miou"], same["delta_miou_ci_low"], same["delta_miou_ci_high"]) == (0.0, 0.0, 0.0)


def test_delta_ap_keeps_the_percentile_interval() -> None:
    low, high = delta_ap_interval(-0.03, np.array([-0.05, -0.04, -0.03, -0.02, -0.01]))
    assert (low, high) == pytest.approx((-0.049, -0.011), abs=EXACT)
    assert all(math.isnan(x) for x in delta_ap_interval(0.0, np.array([])))
