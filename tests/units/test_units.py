"""Unit evaluation on the synthetic set with transforms whose statistics are known exactly."""

from collections.abc import Callable

import numpy as np
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import Dataset
from repliscope.evaluation.record import Detection, SamplePrediction
from repliscope.units import collect_pairs, diagnose, match_detections, unit_report
from repliscope.units.matching import ImageBoxes, from_prediction, from_truth, pair_by_rank

Box = list[float]


def _dataset() -> Dataset:
    return resolve_dataset("synthetic_detection", seed=2, num_images=16)


def _run(ds: Dataset, move: Callable[[Box, tuple[int, int]], Box], class_shift: int = 0) -> list[SamplePrediction]:
    """The ground truth as detections (scores 1.0, 0.99, ... in box order), each box moved by ``move``."""
    out = []
    for s in ds.samples:
        dets = [
            Detection(
                box=move(list(o.box), s.size_hw or (0, 0)), score=1.0 - 0.01 * k, class_id=o.class_id + class_shift
            )
            for k, o in enumerate(s.objects or ())
        ]
        out.append(SamplePrediction(sample_id=s.id, label=None, detections=dets))
    return out


def _report(ds: Dataset, preds: list[SamplePrediction], against_reference: list[SamplePrediction] | None = None):
    boxes = [from_prediction(p, s.size_hw) for p, s in zip(preds, ds.samples, strict=True)]
    if against_reference is None:
        return unit_report(boxes, [from_truth(s) for s in ds.samples], against="ground_truth", replicates=200)
    refs = [from_prediction(p, s.size_hw) for p, s in zip(against_reference, ds.samples, strict=True)]
    return unit_report(boxes, refs, against="reference", replicates=200)


def test_shift_by_five_percent_of_the_width() -> None:
    ds = _dataset()
    report = _report(ds, _run(ds, lambda b, _: [b[0] + 0.05 * (b[2] - b[0]), b[1], b[2] + 0.05 * (b[2] - b[0]), b[3]]))
    n_gt = sum(len(s.objects or ()) for s in ds.samples)
    assert (report.n_matched, report.n_reference, report.matched_fraction) == (n_gt, n_gt, 1.0)
    dx = report.stat("dx_w")
    assert dx.median == pytest.approx(0.05, abs=1e-12)
    assert dx.ci_low == pytest.approx(0.05, abs=1e-12) and dx.ci_high == pytest.approx(0.05, abs=1e-12)
    assert dx.significant and [s.name for s in report.significant] == ["dx_w"]
    assert report.stat("dy_h").median == 0 and report.stat("log_w").median == pytest.approx(0, abs=1e-12)
    assert report.stat("iou").median == pytest.approx(0.95 / 1.05)  # overlap 0.95 w h, union 1.05 w h
    assert report.iou_histogram[8] == n_gt  # [0.90, 0.95)
    d = report.diagnosis
    assert d.box is not None and d.box.name == "shift_relative"
    assert d.box.params["tx"] == pytest.approx(0.05, abs=1e-12) and d.box.params["ty"] == 0
    assert d.box.residual == pytest.approx(0, abs=1e-12) and d.box.exact == 1 and d.box_explains == 1
    assert d.classes is None and report.off_diagonal == 0


def test_format_swap_against_a_reference_run() -> None:
    ds = _dataset()
    reference = _run(ds, lambda b, _: b)
    swapped = _run(ds, lambda b, _: [b[0], b[1], b[2] - b[0], b[3] - b[1]])  # xywh read as xyxy
    report = _report(ds, swapped, against_reference=reference)
    d = report.diagnosis
    assert d.pairing == "rank" and d.n_pairs == sum(len(s.objects or ()) for s in ds.samples)
    assert d.box is not None and d.box.name == "xywh_as_xyxy" and d.box.residual == 0 and d.box.exact == 1
    assert d.summary[0].startswith("boxes: xywh_as_xyxy explains 100% of the box error")
    yxyx = _report(ds, _run(ds, lambda b, _: [b[1], b[0], b[3], b[2]]), against_reference=reference)
    assert yxyx.diagnosis.box is not None and yxyx.diagnosis.box.name == "yxyx_as_xyxy"


def test_class_offset() -> None:
    ds = _dataset()
    report = _report(ds, _run(ds, lambda b, _: b, class_shift=1))
    n_gt = sum(len(s.objects or ()) for s in ds.samples)
    assert report.n_matched == 0 and report.off_diagonal == 1  # class-aware: no match; agnostic: all confused
    assert sorted(report.confusion) == sorted(
        (c, c + 1, sum(1 for s in ds.samples for o in s.objects or () if o.class_id == c))
        for c in {o.class_id for s in ds.samples for o in s.objects or ()}
    )
    d = report.diagnosis
    assert d.classes is not None and d.classes.params["k"] == 1 and d.classes.exact == 1
    assert d.box is None  # the boxes are right
    assert d.summary[1] == f"classes: predicted = reference +1 for {n_gt} of {n_gt} pairs (100%; 0 equal)"


def test_letterbox_not_undone_and_swapped_sides() -> None:
    ds = _dataset()

    def letterbox(b: Box, hw: tuple[int, int]) -> Box:
        s = min(96 / hw[0], 96 / hw[1])
        px, py = (96 - hw[1] * s) / 2, (96 - hw[0] * s) / 2
        return [b[0] * s + px, b[1] * s + py, b[2] * s + px, b[3] * s + py]

    reference = _run(ds, lambda b, _: b)
    d = _report(ds, _run(ds, letterbox), against_reference=reference).diagnosis
    assert d.box is not None and d.box.name == "letterbox_not_undone"
    assert d.box.params["position"] == "centre" and d.box.params["input_h"] == pytest.approx(96)
    kept = _report(
        ds,
        _run(
            ds,
            lambda b, hw: [
                b[0] + (max(hw) - hw[1]) / 2,
                b[1] + (max(hw) - hw[0]) / 2,
                b[2] + (max(hw) - hw[1]) / 2,
                b[3] + (max(hw) - hw[0]) / 2,
            ],
        ),
        against_reference=reference,
    ).diagnosis
    assert kept.box is not None and kept.box.name == "letterbox_padding_kept" and kept.box.exact == 1
    sides = _report(
        ds,
        _run(
            ds, lambda b, hw: [b[0] * hw[0] / hw[1], b[1] * hw[1] / hw[0], b[2] * hw[0] / hw[1], b[3] * hw[1] / hw[0]]
        ),
        against_reference=reference,
    ).diagnosis
    assert sides.box is not None and sides.box.name == "swapped_sides"


def test_no_transform_on_noise() -> None:
    ds = _dataset()
    rng = np.random.default_rng(0)
    noisy = _run(ds, lambda b, _: [v + float(rng.normal(0, 0.3)) for v in b])
    d = _report(ds, noisy).diagnosis
    assert d.box is None and d.summary[0].startswith("boxes: no simple transform explains")


def test_greedy_matching_by_score() -> None:
    ref = ImageBoxes("a", np.array([[0, 0, 10, 10], [5, 0, 15, 10]], float), np.array([1, 1]), np.ones(2))
    pred = ImageBoxes(
        "a",
        np.array([[5, 0, 15, 10], [0, 0, 10, 10], [40, 40, 50, 50]], float),
        np.array([1, 1, 1]),
        np.array([0.5, 0.9, 0.7]),
    )
    assert match_detections(pred, ref) == [(1, 0, 1.0), (0, 1, 1.0)]
    other = ImageBoxes("a", pred.boxes, np.array([2, 1, 1]), pred.scores)
    assert match_detections(other, ref) == [(1, 0, 1.0)]
    assert match_detections(other, ref, class_aware=False) == [(1, 0, 1.0), (0, 1, 1.0)]
    assert [(d, r) for d, r, _ in pair_by_rank(pred, ref)] == [(1, 0), (2, 1)]
    pairs = collect_pairs([pred], [ref])
    assert [(p.box, p.ref_box) for p in pairs] == [((0, 0, 10, 10), (0, 0, 10, 10)), ((5, 0, 15, 10), (5, 0, 15, 10))]
    assert diagnose([]).summary == ["no paired detections: nothing to diagnose"]
