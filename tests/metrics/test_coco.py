"""COCO metrics: hand-computed AP, agreement with faster-coco-eval / pycocotools, bootstrap replicates."""

import contextlib
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import BoxAnnotation, Dataset, Sample
from repliscope.evaluation.record import Detection, SamplePrediction
from repliscope.metrics.bootstrap import CocoResampler
from repliscope.metrics.coco import coco_dicts, coco_inputs, evaluate_coco, faster_coco_eval, per_class

COCO_MINI = Path(__file__).resolve().parents[3] / "shared" / "data" / "coco-val-mini"


def _one_image() -> Dataset:
    objects = (BoxAnnotation((0, 0, 10, 10), 1, area=100.0), BoxAnnotation((20, 0, 30, 10), 1, area=100.0))
    return Dataset(
        name="one",
        samples=[Sample("a.png", None, bytes, objects=objects, image_id=1, size_hw=(40, 70))],
        license="",
        label_rule="",
        categories={1: "thing", 2: "other"},
    )


def _pred(sample_id: str, dets: list[tuple[list[float], float, int]]) -> SamplePrediction:
    return SamplePrediction(
        sample_id=sample_id, label=None, detections=[Detection(box=b, score=s, class_id=c) for b, s, c in dets]
    )


def test_hand_computed_ap_one_image_two_objects_three_detections() -> None:
    """d1 hits A exactly, d2 is a false positive, d3 overlaps B with IoU 80/120 = 2/3. At IoU .50-.65 (4
    thresholds) the ranked list is TP FP TP: recall .5 .5 1, precision 1 .5 2/3, envelope 1 2/3 2/3, so the 101
    recall points read 1 for r <= .5 (51 points) and 2/3 for the other 50. At .70-.95 (6 thresholds): TP FP FP,
    51 points of 1 and 50 of 0."""
    preds = [_pred("a.png", [([0, 0, 10, 10], 0.9, 1), ([50, 20, 60, 30], 0.8, 1), ([22, 0, 32, 10], 0.7, 1)])]
    ev = evaluate_coco(preds, _one_image(), bootstrap=20)
    got = {m.name: m.value for m in ev.metrics}
    ap_low = (51 + 50 * 2 / 3) / 101
    ap_high = 51 / 101
    assert got["AP50"] == pytest.approx(ap_low, abs=1e-12)
    assert got["AP75"] == pytest.approx(ap_high, abs=1e-12)
    assert got["AP"] == pytest.approx((4 * ap_low + 6 * ap_high) / 10, abs=1e-12)
    assert got["APs"] == got["AP"]
    assert (got["AR1"], got["AR10"], got["AR100"], got["ARs"]) == pytest.approx((0.5, 0.7, 0.7, 0.7), abs=1e-12)
    assert "APm" not in got and "APl" not in got and ev.stats["APm"] == -1  # no medium / large ground truth
    assert all(m.n == 1 and m.successes is None for m in ev.metrics)
    ap = per_class(preds, _one_image())
    assert [(c.class_id, c.n_objects, c.n_detections) for c in ap] == [(1, 2, 3), (2, 0, 0)]
    assert ap[0].ap == pytest.approx(got["AP"], abs=1e-12) and ap[0].ar == pytest.approx(0.7)
    assert ap[1].ap is None


def test_failed_samples_and_unknown_classes_are_counted() -> None:
    ds = _one_image()
    ds.samples = [*ds.samples, Sample("b.png", None, bytes, objects=(), image_id=2, size_hw=(5, 5))]
    preds = [
        _pred("a.png", [([0, 0, 10, 10], 0.9, 1), ([20, 0, 30, 10], 0.8, 91)]),
        SamplePrediction(sample_id="b.png", label=None, error="decode failed"),
    ]
    ev = evaluate_coco(preds, ds, bootstrap=10)
    assert (ev.n_images, ev.n_failed, ev.n_unknown_class) == (1, 1, 1)
    assert ev.stats["AR100"] == pytest.approx(0.5)
    agnostic = evaluate_coco(preds, ds, bootstrap=10, class_aware=False)
    assert agnostic.stats["AP"] == pytest.approx(1.0) and agnostic.n_unknown_class == 0


def test_no_detection_at_all_is_zero() -> None:
    ev = evaluate_coco([_pred("a.png", [])], _one_image(), bootstrap=5)
    assert ev.stats["AP"] == 0 and ev.stats["AR100"] == 0


def jittered(dataset: Dataset, seed: int, fp_per_image: int = 3) -> list[SamplePrediction]:
    """A deterministic detection set: every ground-truth box with seeded centre / size noise (10 % dropped, 5 %
    with another class) plus up to ``fp_per_image`` random false positives; scores rounded to 3 decimals so
    equal scores (ties) occur."""
    rng = np.random.default_rng(seed)
    cats = sorted(dataset.categories or {})
    out = []
    for s in dataset.samples:
        dets = []
        for o in s.objects or ():
            x1, y1, x2, y2 = o.box
            w, h = x2 - x1, y2 - y1
            if rng.random() < 0.1:
                continue
            dx, dy = rng.normal(0, 0.1, 2)
            sw, sh = np.exp(rng.normal(0, 0.1, 2))
            cx, cy = (x1 + x2) / 2 + dx * w, (y1 + y2) / 2 + dy * h
            cls = o.class_id if rng.random() > 0.05 else int(rng.choice(cats))
            dets.append(
                (
                    [cx - w * sw / 2, cy - h * sh / 2, cx + w * sw / 2, cy + h * sh / 2],
                    round(float(rng.random()), 3),
                    cls,
                )
            )
        hh, ww = s.size_hw or (100, 100)
        for _ in range(int(rng.integers(0, fp_per_image + 1))):
            x, y = rng.random() * ww * 0.8, rng.random() * hh * 0.8
            dets.append(
                (
                    [x, y, x + rng.random() * ww * 0.2 + 2, y + rng.random() * hh * 0.2 + 2],
                    round(float(rng.random()), 3),
                    int(rng.choice(cats)),
                )
            )
        out.append(_pred(s.id, dets))
    return out


def test_resampler_reproduces_faster_coco_eval_and_duplicated_images() -> None:
    ds = resolve_dataset("synthetic_detection", seed=1, num_images=24)
    inputs = coco_inputs(jittered(ds, 0), ds)
    gt, dets = coco_dicts(inputs)
    stats, _ = faster_coco_eval(gt, dets)
    resampler = CocoResampler(inputs.truths, inputs.detections, sorted(inputs.categories))
    assert np.nan_to_num(resampler.stats(), nan=-1) == pytest.approx(stats, abs=1e-12)
    # a bootstrap replicate (weights = draw counts) equals COCOeval on the images actually duplicated
    counts = np.random.default_rng(3).multinomial(24, np.full(24, 1 / 24))
    images: list[dict[str, Any]] = []
    anns: list[dict[str, Any]] = []
    dup: list[dict[str, Any]] = []
    for image, count in zip(gt["images"], counts, strict=True):
        for _ in range(count):
            new_id = len(images) + 1
            images.append({**image, "id": new_id})
            anns += [{**a, "image_id": new_id} for a in gt["annotations"] if a["image_id"] == image["id"]]
            dup += [{**d, "image_id": new_id} for d in dets if d["image_id"] == image["id"]]
    anns = [{**a, "id": i + 1} for i, a in enumerate(anns)]
    expected, _ = faster_coco_eval({**gt, "images": images, "annotations": anns}, dup)
    assert np.nan_to_num(resampler.stats(counts), nan=-1) == pytest.approx(expected, abs=1e-12)


@pytest.mark.skipif(not COCO_MINI.is_dir(), reason="needs ../shared/data/coco-val-mini")
def test_faster_coco_eval_agrees_with_pycocotools_on_coco_val_mini() -> None:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    ds = resolve_dataset(f"coco:{COCO_MINI}")
    preds = jittered(ds, 0)
    gt, dets = coco_dicts(coco_inputs(preds, ds))
    ours, _ = faster_coco_eval(gt, dets)
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        ref = COCOeval(coco_gt, coco_gt.loadRes(dets), "bbox")
        ref.evaluate()
        ref.accumulate()
        ref.summarize()
    assert np.abs(ours - ref.stats).max() < 1e-6
    ev = evaluate_coco(preds, ds)  # default 500 replicates (its time: benchmarks/bench_detection.py)
    got = {m.name: m for m in ev.metrics}
    assert len(got) == 12 and all(m.n == 158 for m in ev.metrics)
    assert got["AP"].value == pytest.approx(ref.stats[0], abs=1e-12)
    assert got["AP"].value == pytest.approx(0.2948, abs=5e-5)
    # the bias-corrected interval (issue 35) lies mostly below the sample's AP, widened to hold it
    assert got["AP"].ci_low < got["AP"].value <= got["AP"].ci_high


def test_large_runs_get_fewer_replicates_fixed_by_their_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from repliscope.metrics import bootstrap

    ds = resolve_dataset("synthetic_detection", seed=1, num_images=24)
    preds = jittered(ds, 0)
    assert evaluate_coco(preds, ds, bootstrap=150).replicates == 150
    monkeypatch.setattr(bootstrap, "WORK_BUDGET", 1000)
    small = evaluate_coco(preds, ds, bootstrap=150)
    assert small.replicates == bootstrap.MIN_REPLICATES == 100
