"""The vectorised COCO matching (every image and category at once) gives exactly the numbers of before.

Golden values: produced by the per-image matching loop this code replaced (``CocoResampler`` before issue 26),
on the fixtures of ``test_coco.py``; the point values are now equal to pycocotools' COCOeval bit for bit.
"""

import contextlib
import io
import math
from pathlib import Path

import numpy as np
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import BoxAnnotation, Dataset, Sample
from repliscope.evaluation.record import Detection, SamplePrediction
from repliscope.metrics.bootstrap import (
    AREA_RANGES,
    IOU_THRS,
    MAX_DETS,
    CocoResampler,
    ImageDetections,
    ImageTruth,
    box_iou,
)
from repliscope.metrics.coco import coco_dicts, coco_inputs, evaluate_coco, per_class
from tests.metrics.test_coco import jittered

COCO_MINI = Path(__file__).resolve().parents[3] / "shared" / "data" / "coco-val-mini"
NAN = math.nan

# synthetic_detection seed 1, 24 images, jittered(ds, 0): the old loop's resampler.stats() and stats(counts)
GOLDEN_STATS = [
    0.24677634325269812,
    0.6190018257175631,
    0.12601760176017598,
    0.21861472620340672,
    0.3755775577557756,
    NAN,
    0.2834375794558861,
    0.4368065090261886,
    0.4368065090261886,
    0.43398268398268397,
    0.375,
    NAN,
]
GOLDEN_STATS_COUNTS = [
    0.2567906341305682,
    0.6123393658047125,
    0.13478747874787475,
    0.21514896229798677,
    0.3772277227722773,
    NAN,
    0.29373931623931626,
    0.3935897435897435,
    0.3935897435897435,
    0.3768115942028986,
    0.37666666666666665,
    NAN,
]
# evaluate_coco(..., bootstrap=50) before: (name, value, ci_low, ci_high) of the first three numbers (the intervals
# from the same pinned deltas by corrected_interval since issue 35: bias-corrected, below the percentile ones)
GOLDEN_METRICS = [
    ("AP", 0.2467763432526981, 0.13665972406581547, 0.27839041661174546),
    ("AP50", 0.619001825717563, 0.44806344998888703, 0.6905575551994517),
    ("AP75", 0.126017601760176, 0.014806183824890337, 0.1807294008984871),
]
# coco-val-mini, jittered(ds, 0), class-agnostic, bootstrap=20
GOLDEN_MINI_AGNOSTIC = [
    ("AP", 0.2936302929788383, 0.2633374422507453, 0.2986345466756375),
    ("AP50", 0.7386572263343442, 0.6945590784000476, 0.7501182703179902),
]


def _same(got: list[float], want: list[float]) -> bool:
    return all((math.isnan(g) and math.isnan(w)) or g == w for g, w in zip(got, want, strict=True))


def _pycocotools(gt: dict, dets: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """pycocotools' 12 stats and precision [T, R, K, A, M]."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        ev = COCOeval(coco_gt, coco_gt.loadRes(dets) if dets else COCO(), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return np.asarray(ev.stats), np.asarray(ev.eval["precision"])


def _hard_dataset() -> tuple[Dataset, list[SamplePrediction]]:
    """Images with many boxes of one class (every padding bucket), crowd and ``ignore`` regions, boxes in all
    three area ranges, detections with identical boxes and scores (IoU and score ties), more than 100
    detections of one class in one image, and a detection class that is not a category."""
    rng = np.random.default_rng(7)
    samples, preds = [], []
    for i in range(12):
        objects: list[BoxAnnotation] = []
        n = [1, 2, 3, 5, 9, 17, 0, 4, 2, 6, 1, 30][i]
        for j in range(n):
            size = [12.0, 50.0, 140.0][j % 3]
            x, y = rng.random(2) * 400
            objects.append(BoxAnnotation((x, y, x + size, y + size * 0.8), 1 + j % 2, iscrowd=j == 4, ignore=j == 7))
        dets: list[Detection] = []
        for o in objects:
            x1, y1, x2, y2 = o.box
            for _ in range(3):
                dx, dy = rng.normal(0, 0.08 * (x2 - x1), 2)
                dets.append(
                    Detection(
                        box=[x1 + dx, y1 + dy, x2 + dx, y2 + dy], score=round(rng.random(), 2), class_id=o.class_id
                    )
                )
            dets.append(Detection(box=list(o.box), score=0.5, class_id=o.class_id))  # exact box, tied score
            dets.append(Detection(box=list(o.box), score=0.5, class_id=o.class_id))
        if i == 11:  # more than 100 detections of one class: only the best 100 count
            for _ in range(130):
                x, y = rng.random(2) * 400
                dets.append(Detection(box=[x, y, x + 30, y + 30], score=round(rng.random(), 3), class_id=1))
        dets.append(Detection(box=[0, 0, 5, 5], score=0.9, class_id=9))  # not a category
        samples.append(Sample(f"{i}.png", None, bytes, objects=tuple(objects), image_id=i + 1, size_hw=(600, 600)))
        preds.append(SamplePrediction(sample_id=f"{i}.png", label=None, detections=dets))
    dataset = Dataset(name="hard", samples=samples, license="", label_rule="", categories={1: "a", 2: "b", 3: "c"})
    return dataset, preds


def test_resampler_matches_the_old_loop_bit_for_bit() -> None:
    ds = resolve_dataset("synthetic_detection", seed=1, num_images=24)
    inputs = coco_inputs(jittered(ds, 0), ds)
    resampler = CocoResampler(inputs.truths, inputs.detections, sorted(inputs.categories))
    counts = np.random.default_rng(3).multinomial(24, np.full(24, 1 / 24))
    assert _same(resampler.stats().tolist(), GOLDEN_STATS)
    assert _same(resampler.stats(counts).tolist(), GOLDEN_STATS_COUNTS)
    ev = evaluate_coco(jittered(ds, 0), ds, bootstrap=50)
    assert [(m.name, m.value, m.ci_low, m.ci_high) for m in ev.metrics[:3]] == GOLDEN_METRICS


@pytest.mark.parametrize("class_aware", [True, False])
def test_point_values_equal_pycocotools_bit_for_bit(class_aware: bool) -> None:
    dataset, preds = _hard_dataset()
    inputs = coco_inputs(preds, dataset, class_aware)
    ref_stats, ref_precision = _pycocotools(*coco_dicts(inputs))
    ev = evaluate_coco(preds, dataset, bootstrap=10, class_aware=class_aware)
    assert [ev.stats[m.name] for m in ev.metrics] == [m.value for m in ev.metrics]
    assert list(ev.stats.values()) == ref_stats.tolist()
    precision = ref_precision[:, :, :, 0, -1]
    expected = [
        float(precision[:, :, k][precision[:, :, k] > -1].mean()) if (precision[:, :, k] > -1).any() else None
        for k in range(precision.shape[2])
    ]
    assert [c.ap for c in ev.per_class] == expected
    assert [c.ap for c in per_class(preds, dataset, class_aware=class_aware)] == expected
    if class_aware:
        assert ev.n_unknown_class == 12
        assert [(c.n_objects, c.n_detections) for c in ev.per_class] == [
            (38, 345),
            (34, 185),
            (0, 0),
        ]  # 43 - 5 crowd, 37 - 3 ignore; 5 a box (+130)


def _old_match(ious: np.ndarray, gt_ignore: np.ndarray, crowd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The replaced per-detection loop (pycocotools ``evaluateImg``), verbatim."""
    n_t, (n_d, n_g) = len(IOU_THRS), ious.shape
    matched = np.zeros((n_t, n_d), bool)
    ignored = np.zeros((n_t, n_d), bool)
    for ti, t in enumerate(IOU_THRS):
        taken = np.zeros(n_g, bool)
        for d in range(n_d):
            best, m = min(t, 1 - 1e-10), -1
            for g in range(n_g):
                if taken[g] and not crowd[g]:
                    continue
                if m > -1 and not gt_ignore[m] and gt_ignore[g]:
                    break
                if ious[d, g] < best:
                    continue
                best, m = ious[d, g], g
            if m == -1:
                continue
            matched[ti, d], ignored[ti, d], taken[m] = True, gt_ignore[m], True
    return matched, ignored


class _OldResampler(CocoResampler):
    """The resampler as it was built before: per image, per category, per area range (the replaced loop)."""

    def __init__(self, truths: list[ImageTruth], detections: list[ImageDetections], cat_ids: list[int]) -> None:
        self.n_images = len(truths)
        self.cat_ids = list(cat_ids)
        k_of = {c: k for k, c in enumerate(self.cat_ids)}
        rows: list[list[tuple]] = [[] for _ in AREA_RANGES]
        npig = np.zeros((len(AREA_RANGES), self.n_images, len(self.cat_ids)))
        for i, (gt, dt) in enumerate(zip(truths, detections, strict=True)):
            for c in np.union1d(gt.classes, dt.classes):
                k = k_of.get(int(c))
                if k is None:
                    continue
                gsel = np.flatnonzero(gt.classes == c)
                dsel = np.flatnonzero(dt.classes == c)
                dsel = dsel[np.argsort(-dt.scores[dsel], kind="mergesort")][: MAX_DETS[-1]]
                d_boxes = dt.boxes[dsel]
                d_area = d_boxes[:, 2] * d_boxes[:, 3]  # [x, y, w, h]: COCO's loadRes area
                for a, (lo, hi) in enumerate(AREA_RANGES):
                    area = gt.areas[gsel]
                    g_ignore = gt.crowd[gsel] | (area < lo) | (area > hi)
                    order = np.argsort(g_ignore, kind="mergesort")
                    g_ignore, g_crowd = g_ignore[order], gt.crowd[gsel][order]
                    npig[a, i, k] = np.count_nonzero(~g_ignore)
                    if len(dsel) == 0:
                        continue
                    ious = box_iou(d_boxes, gt.boxes[gsel][order], g_crowd)
                    matched, ignored = _old_match(ious, g_ignore, g_crowd)
                    outside = (d_area < lo) | (d_area > hi)
                    ignored |= ~matched & outside[None, :]
                    rows[a].append((i, k, dt.scores[dsel], matched, ignored, np.arange(len(dsel))))
        self._areas = []
        for a, r in enumerate(rows):
            image = np.concatenate([np.full(len(x[2]), x[0]) for x in r])
            segment = np.concatenate([np.full(len(x[2]), x[1]) for x in r])
            scores = np.concatenate([x[2] for x in r])
            rank = np.concatenate([x[5] for x in r])
            order = np.lexsort((rank, image, -scores, segment))
            matched = np.concatenate([x[3] for x in r], axis=1)[:, order]
            ignored = np.concatenate([x[4] for x in r], axis=1)[:, order]
            self._areas.append(self._pack(image[order], segment[order], rank[order], matched, ignored, npig[a]))


@pytest.mark.parametrize("class_aware", [True, False])
def test_vectorised_matching_equals_the_old_loop_on_hard_cases(class_aware: bool) -> None:
    dataset, preds = _hard_dataset()
    inputs = coco_inputs(preds, dataset, class_aware)
    cats = sorted(inputs.categories)
    new = CocoResampler(inputs.truths, inputs.detections, cats)
    old = _OldResampler(inputs.truths, inputs.detections, cats)
    for a_new, a_old in zip(new._areas, old._areas, strict=True):
        assert np.array_equal(a_new.tps, a_old.tps) and np.array_equal(a_new.fps, a_old.fps)
        assert np.array_equal(a_new.image, a_old.image) and np.array_equal(a_new.rank, a_old.rank)
        assert np.array_equal(a_new.npig, a_old.npig)
    counts = np.array([2, 0, 1, 3, 1, 0, 1, 2, 0, 1, 1, 0])
    assert _same(new.stats(counts).tolist(), old.stats(counts).tolist())
    assert _same(new.stats().tolist(), old.stats().tolist())


@pytest.mark.skipif(not COCO_MINI.is_dir(), reason="needs ../shared/data/coco-val-mini")
def test_coco_val_mini_agnostic_golden_and_pycocotools() -> None:
    ds = resolve_dataset(f"coco:{COCO_MINI}")
    preds = jittered(ds, 0)
    ev = evaluate_coco(preds, ds, bootstrap=20, class_aware=False)
    assert [(m.name, m.value, m.ci_low, m.ci_high) for m in ev.metrics[:2]] == GOLDEN_MINI_AGNOSTIC
    aware = evaluate_coco(preds, ds, bootstrap=10)
    ref_stats, _ = _pycocotools(*coco_dicts(coco_inputs(preds, ds)))
    assert list(aware.stats.values()) == ref_stats.tolist()
