"""COCO IoU is pycocotools' own double: boxes kept as the annotation file's ``[x, y, w, h]``, ``bbIou``'s arithmetic.

Before: boxes were stored as corners (x + w) and widths recomputed, so an IoU that lands on a threshold could
come out 1 ulp below it (0.4999999999999999 instead of pycocotools' 0.5) and the match was lost.
"""

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import BoxAnnotation, Dataset, Sample
from repliscope.evaluation.record import Detection, SamplePrediction
from repliscope.metrics.bootstrap import IOU_THRS, box_iou
from repliscope.metrics.box_matching import from_prediction, from_truth, iou_matrix, match_detections
from repliscope.metrics.coco import coco_dicts, coco_inputs, evaluate_coco, faster_coco_eval

COCO_MINI = Path(__file__).resolve().parents[3] / "shared" / "data" / "coco-val-mini"


def _pycocotools(gt: dict, dets: list[dict]) -> np.ndarray:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = json.loads(json.dumps(gt))
        coco_gt.createIndex()
        ev = COCOeval(coco_gt, coco_gt.loadRes(json.loads(json.dumps(dets))), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return np.asarray(ev.stats, float)


def _one_box_dataset(tmp_path: Path) -> Dataset:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.jpg").write_bytes(b"")
    instances = {
        "images": [{"id": 7, "file_name": "a.jpg", "height": 10, "width": 10}],
        "annotations": [
            {"id": 1, "image_id": 7, "category_id": 1, "bbox": [0.1, 0.1, 0.2, 0.2], "area": 0.04, "iscrowd": 0}
        ],
        "categories": [{"id": 1, "name": "thing"}],
    }
    (tmp_path / "instances.json").write_text(json.dumps(instances))
    return resolve_dataset(f"coco:{tmp_path / 'instances.json'}", images=str(tmp_path / "images"))


def test_iou_on_the_threshold_is_pycocotools_05_and_matches(tmp_path: Path) -> None:
    """GT [0.1, 0.1, 0.2, 0.2] xywh, detection [0.1, 0.1, 0.2, 0.1] xywh (its corners 0.1 + 0.2, 0.1 + 0.1 in the
    record). By hand: w = fmin(0.1 + 0.2, 0.1 + 0.2) - 0.1 = 0.20000000000000004, h = 0.2 - 0.1 = 0.1,
    i = 0.020000000000000004, da = 0.20000000000000004 * 0.1, ga = 0.2 * 0.2 = 0.04000000000000001,
    i / (da + ga - i) = 0.5 exactly: a match at IoU .50, nothing at .55 and above."""
    import pycocotools.mask as mask_utils

    ds = _one_box_dataset(tmp_path)
    assert ds.samples[0].objects is not None and ds.samples[0].objects[0].xywh == (0.1, 0.1, 0.2, 0.2)
    pred = SamplePrediction(
        sample_id="a.jpg",
        label=None,
        detections=[Detection(box=[0.1, 0.1, 0.1 + 0.2, 0.1 + 0.1], score=0.9, class_id=1)],
    )
    inputs = coco_inputs([pred], ds)
    gt, dets = coco_dicts(inputs)
    assert gt["annotations"][0]["bbox"] == [0.1, 0.1, 0.2, 0.2]  # the file's numbers, not (0.1 + 0.2) - 0.1
    assert dets[0]["bbox"] == [0.1, 0.1, 0.20000000000000004, 0.1]
    ours = box_iou(inputs.detections[0].boxes, inputs.truths[0].boxes, inputs.truths[0].crowd)
    ref = mask_utils.iou([dets[0]["bbox"]], [gt["annotations"][0]["bbox"]], [0])
    assert ours[0, 0] == ref[0, 0] == 0.5
    # the corner arithmetic of before lands 1 ulp under the threshold
    x1, y1, x2, y2 = 0.1, 0.1, 0.1 + 0.2, 0.1 + 0.1
    gx2, gy2 = 0.1 + 0.2, 0.1 + 0.2
    inter = (min(x2, gx2) - 0.1) * (min(y2, gy2) - 0.1)
    assert inter / ((x2 - x1) * (y2 - y1) + (gx2 - 0.1) * (gy2 - 0.1) - inter) == 0.4999999999999999

    ev = evaluate_coco([pred], ds, bootstrap=5)
    ref_stats = _pycocotools(gt, dets)
    fast_stats, _ = faster_coco_eval(gt, dets)
    # AP50 1.0 (pycocotools: the mean of 101 precisions tp / (tp + fp + eps) = 0.9999999999999998, 1 ulp under
    # 1; ours is that same double; faster-coco-eval's C++ rounds it to 1.0)
    assert ev.stats["AP50"] == ref_stats[1] == pytest.approx(1.0, abs=1e-15)
    assert fast_stats[1] == pytest.approx(ref_stats[1], abs=1e-15)
    assert ev.stats["AP75"] == ref_stats[2] == 0.0
    assert ev.stats["AP"] == ref_stats[0] == pytest.approx(0.1)
    assert list(ev.stats.values()) == ref_stats.tolist()


@pytest.mark.skipif(not COCO_MINI.is_dir(), reason="needs ../shared/data/coco-val-mini")
def test_scaled_heights_sweep_on_coco_val_mini_flips_no_threshold_decision() -> None:
    """Every non-crowd COCO box, detected with its height scaled by t for each IoU threshold t (IoU t in exact
    arithmetic: every decision sits on its threshold). Our IoU is pycocotools' double for every pair, so no
    decision ``IoU >= t`` flips (the corner arithmetic of before flipped thousands), and the 12 numbers at
    t = 0.5 are pycocotools' and faster-coco-eval's."""
    import pycocotools.mask as mask_utils

    ds = resolve_dataset(f"coco:{COCO_MINI}")
    decisions = flips = old_flips = 0
    for t in IOU_THRS:
        preds = []
        for s in ds.samples:
            dets = [
                Detection(
                    box=[o.xywh[0], o.xywh[1], o.xywh[0] + o.xywh[2], o.xywh[1] + o.xywh[3] * t],
                    score=1.0,
                    class_id=o.class_id,
                )
                for o in s.objects or ()
                if o.xywh is not None and not o.iscrowd
            ]
            preds.append(SamplePrediction(sample_id=s.id, label=None, detections=dets))
        inputs = coco_inputs(preds, ds)
        gt, dets_json = coco_dicts(inputs)
        thr = min(t, 1 - 1e-10)
        for truth, det, sample in zip(inputs.truths, inputs.detections, inputs.samples, strict=True):
            keep = ~truth.crowd
            if not keep.any():
                continue
            g = truth.boxes[keep]
            ours = np.diag(box_iou(det.boxes, g, truth.crowd[keep]))
            ref = np.diag(mask_utils.iou(det.boxes.tolist(), g.tolist(), [0] * len(g)))
            assert np.array_equal(ours, ref), sample.id
            decisions += len(ours)
            flips += int(np.count_nonzero((ours >= thr) != (ref >= thr)))
            corners = np.array([o.box for o in sample.objects or () if not o.iscrowd])
            dcorners = np.array([d.box for p in preds if p.sample_id == sample.id for d in p.detections or []])
            old_flips += int(np.count_nonzero((_corner_iou(dcorners, corners) >= thr) != (ref >= thr)))
        if t == 0.5:
            raw = json.loads(next((COCO_MINI / "annotations").glob("*.json")).read_text())
            assert sorted(tuple(a["bbox"]) for a in gt["annotations"]) == sorted(
                tuple(float(v) for v in a["bbox"]) for a in raw["annotations"]
            )  # the file's own numbers, every one
            ev = evaluate_coco(preds, ds, bootstrap=5)
            # many IoUs land an ulp either side of .5 (y + h * t stored, (y + h * t) - y read back): pycocotools'
            # decisions on those numbers, one by one
            assert ev.stats["AP50"] == pytest.approx(0.41665911168594444, abs=1e-15)
            assert list(ev.stats.values()) == _pycocotools(gt, dets_json).tolist()
            assert np.abs(np.asarray(list(ev.stats.values())) - faster_coco_eval(gt, dets_json)[0]).max() < 1e-12
    assert decisions == 10 * sum(1 for s in ds.samples for o in s.objects or () if not o.iscrowd)
    assert flips == 0
    assert decisions == 14080 and old_flips == 3681  # the hostile input: the arithmetic of before flips here


def _corner_iou(d: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The pre-fix arithmetic: IoU of (x1, y1, x2, y2) pairs d[i], g[i] with widths recomputed from corners."""
    iw = np.minimum(d[:, 2], g[:, 2]) - np.maximum(d[:, 0], g[:, 0])
    ih = np.minimum(d[:, 3], g[:, 3]) - np.maximum(d[:, 1], g[:, 1])
    inter = np.where((iw > 0) & (ih > 0), iw * ih, 0.0)
    union = (d[:, 2] - d[:, 0]) * (d[:, 3] - d[:, 1]) + (g[:, 2] - g[:, 0]) * (g[:, 3] - g[:, 1]) - inter
    return inter / union


def test_unit_matching_uses_the_same_iou(tmp_path: Path) -> None:
    """``repliscope units``' greedy matching at IoU 0.5 pairs the 1-ulp case as COCOeval does (before: IoU
    0.4999999999999999, no pair), and a ground truth known only by its corners is matched on the numbers its
    COCO dicts hold (pycocotools' decision on them)."""
    import pycocotools.mask as mask_utils

    ds = _one_box_dataset(tmp_path)
    pred = SamplePrediction(
        sample_id="a.jpg",
        label=None,
        detections=[Detection(box=[0.1, 0.1, 0.1 + 0.2, 0.1 + 0.1], score=0.9, class_id=1)],
    )
    assert match_detections(from_prediction(pred), from_truth(ds.samples[0])) == [(0, 0, 0.5)]
    stored = Sample("a.jpg", None, bytes, objects=(BoxAnnotation((0.1, 0.1, 0.1 + 0.2, 0.1 + 0.2), 1),), image_id=7)
    w = (0.1 + 0.2) - 0.1  # 0.20000000000000004: what coco_dicts of the stored corners hold
    ref = mask_utils.iou([[0.1, 0.1, w, 0.1]], [[0.1, 0.1, w, w]], [0])[0, 0]
    assert ref == 0.4999999999999999  # the corners lost the file's 0.2: pycocotools on those numbers says no
    assert (
        iou_matrix(np.array([[0.1, 0.1, 0.1 + 0.2, 0.1 + 0.1]]), np.array([[0.1, 0.1, 0.1 + 0.2, 0.1 + 0.2]]))[0, 0]
        == ref
    )
    assert match_detections(from_prediction(pred), from_truth(stored)) == []
    a = np.array([[0.0, 0.0, 10.0, 10.0]])
    b = np.array([[5.0, 0.0, 15.0, 10.0], [np.nan, 0.0, 1.0, 1.0], [3.0, 3.0, 2.0, 2.0]])  # NaN, inverted
    assert iou_matrix(a, b).tolist() == [[50 / 150, 0.0, 0.0]]


def test_one_ulp_case_through_the_store_round_trip(tmp_path: Path) -> None:
    """A detection record keeps each ground-truth box's ``xywh`` as the file gives it, so a run re-scored from the
    store (``dataset_of`` of the stored record) makes pycocotools' IoU 0.5 and AP50 1.0 again; before, the store
    kept corners only and the re-score recomputed w = (0.1 + 0.2) - 0.1: IoU 0.4999999999999999, AP50 0."""
    from repliscope.evaluation.ground_truth import dataset_of, ground_truth_of
    from repliscope.store import RunStore
    from tests.store.records import make_record

    ds = _one_box_dataset(tmp_path)
    pred = SamplePrediction(
        sample_id="a.jpg",
        label=None,
        detections=[Detection(box=[0.1, 0.1, 0.1 + 0.2, 0.1 + 0.1], score=0.9, class_id=1)],
    )
    live = evaluate_coco([pred], ds, bootstrap=5)
    record = make_record("ulp1", [1] * 20).model_copy(
        update={"task": "object_detection", "samples": [pred], "ground_truth": ground_truth_of(ds)}
    )
    assert record.ground_truth is not None and record.ground_truth.samples[0].xywh == [[0.1, 0.1, 0.2, 0.2]]
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        store.save(record)
        back = store.get("ulp1")
    rebuilt = dataset_of(back)
    objects = rebuilt.samples[0].objects
    assert objects is not None and objects[0].xywh == (0.1, 0.1, 0.2, 0.2)
    assert objects[0].box == (0.1, 0.1, 0.1 + 0.2, 0.1 + 0.2)
    stored = evaluate_coco(back.samples, rebuilt, bootstrap=5)
    assert stored.stats == live.stats
    assert stored.stats["AP50"] == pytest.approx(1.0, abs=1e-15) and stored.stats["AP75"] == 0.0
    assert match_detections(from_prediction(back.samples[0]), from_truth(rebuilt.samples[0])) == [(0, 0, 0.5)]
    # a record stored before xywh was kept (no such field in its JSON) still loads and scores, on its corners
    old = back.model_dump(mode="json")
    del old["ground_truth"]["samples"][0]["xywh"]
    from repliscope.evaluation.record import EvaluationRecord

    legacy = dataset_of(EvaluationRecord.model_validate(old))
    legacy_objects = legacy.samples[0].objects
    assert legacy_objects is not None and legacy_objects[0].xywh is None
    assert evaluate_coco(back.samples, legacy, bootstrap=5).stats["AP50"] == 0.0  # IoU 0.4999999999999999
