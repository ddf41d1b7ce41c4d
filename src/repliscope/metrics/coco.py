"""COCO bbox metrics of a detection run: the 12 standard numbers, per-class AP / AR and 95 % bias-corrected
bootstrap intervals over images.

The point values are computed here (:meth:`repliscope.metrics.bootstrap.CocoResampler.cocoeval_values`: COCOeval's
matching and accumulation, vectorised), NOT by faster-coco-eval; they equal pycocotools' COCOeval bit for bit
(tests/metrics/test_coco_vectorised.py). :func:`faster_coco_eval` runs ``faster_coco_eval.COCOeval_faster`` on
:func:`coco_dicts` for the callers that want a library's numbers (``repliscope units``; tests). Boxes enter as
COCO has them: ground truth as the annotation file's ``bbox`` ``[x, y, w, h]``
(:attr:`repliscope.datasets.base.BoxAnnotation.xywh`, never recomputed from corners), detections as ``[x1, y1, x2
- x1, y2 - y1]`` (:func:`xywh_of`, what a COCO results file of them holds); the IoU is pycocotools' ``bbIou`` on
those very numbers, so a decision on a threshold is pycocotools' decision. Names and meaning, as COCOeval prints
them: ``AP`` (IoU .50:.95, all areas, 100 detections), ``AP50``, ``AP75``, ``APs``/``APm``/``APl`` (area < 32²,
32²..96², > 96²), ``AR1``/``AR10``/``AR100`` (recall with at most 1/10/100 detections per image and class),
``ARs``/``ARm``/``ARl``; all fractions in 0..1. A number COCOeval cannot define (prints -1: no ground truth in
that area range) is left out. ``n`` is the number of images evaluated; ``successes`` is None.

Intervals: ``bootstrap`` replicates (default 500, numpy ``default_rng(seed)``) draw the evaluated images with
replacement; each replicate is re-accumulated from the per-image matching (:mod:`repliscope.metrics.bootstrap`),
never re-matched. The deltas are each replicate's number minus the full set's on the categories the replicate
holds (:func:`bootstrap_deltas`: a replicate missing a rare category would otherwise shift the category mean);
the interval is :func:`repliscope.metrics.bootstrap.corrected_interval` of them: centred on the value minus twice
their mean (a COCO number of a sample is biased upward and the bootstrap sees about half of it), Student-t
half-width from their spread. Its coverage of a population's AP is measured in docs/benchmarks.md ("Interval
coverage"; the percentile interval it replaced covered 80 %). Large runs get fewer replicates, fixed by their
size and never fewer than 100 (:meth:`CocoResampler.bounded`); :attr:`CocoEvaluation.replicates` says how many
were drawn.

Samples that failed (``error`` set or ``detections`` None) are excluded from both ground truth and detections
and counted (:attr:`CocoEvaluation.n_failed`). Ground truth ``ignore`` boxes are scored as COCO crowd regions.
Detections whose class is not a dataset category are not scored (COCOeval evaluates the ground truth's
categories only) and counted (:attr:`CocoEvaluation.n_unknown_class`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from repliscope.datasets.base import Dataset, Sample
from repliscope.errors import RepliscopeError
from repliscope.metrics.bootstrap import (
    STAT_NAMES,
    CocoResampler,
    ImageDetections,
    ImageTruth,
    bootstrap_deltas,
    corrected_interval,
)
from repliscope.records.evaluation import MetricValue, SamplePrediction

DEFAULT_REPLICATES = 500
AGNOSTIC_CLASS = 1
"""The single category every box is mapped to for class-agnostic evaluation."""


@dataclass(frozen=True)
class ClassScore:
    """One category's AP (IoU .50:.95) and AR@100 over all areas (None when it has no ground truth)."""

    class_id: int
    name: str
    ap: float | None
    ar: float | None
    n_objects: int
    n_detections: int


@dataclass
class CocoInputs:
    """What COCOeval gets: the evaluated images' ground truth and detections, in image-id order."""

    samples: list[Sample]
    truths: list[ImageTruth]
    detections: list[ImageDetections]
    image_ids: list[int]
    categories: dict[int, str]
    n_failed: int
    n_unknown_class: int


@dataclass
class CocoEvaluation:
    metrics: list[MetricValue]
    per_class: list[ClassScore]
    n_images: int
    n_failed: int
    n_unknown_class: int
    replicates: int
    seed: int
    class_aware: bool
    seconds: float
    stats: dict[str, float] = field(default_factory=dict)
    """All 12 numbers as COCOeval gives them (-1 where undefined)."""


def xywh_of(box: Sequence[float]) -> tuple[float, float, float, float]:
    """COCO's ``[x, y, w, h]`` of an ``[x1, y1, x2, y2]`` box: ``w = x2 - x1``, ``h = y2 - y1`` (what a COCO
    results file of the box holds)."""
    x1, y1, x2, y2 = (float(v) for v in box)
    return x1, y1, x2 - x1, y2 - y1


def _truth(sample: Sample, agnostic: bool) -> ImageTruth:
    """The ground truth as COCO's annotations state it: each box's ``xywh`` as the annotation file gives it (a
    COCO ``bbox``; :func:`xywh_of` of the box for a dataset that gives corners), the annotation's area or
    ``w * h``."""
    objects = sample.objects or ()
    xywh = [o.xywh if o.xywh is not None else xywh_of(o.box) for o in objects]
    boxes = np.array(xywh, float).reshape(-1, 4)
    areas = np.array([o.area if o.area is not None else b[2] * b[3] for o, b in zip(objects, xywh, strict=True)], float)
    classes = np.array([AGNOSTIC_CLASS if agnostic else o.class_id for o in objects], int)
    return ImageTruth(boxes, classes, areas, np.array([o.iscrowd or o.ignore for o in objects], bool))


def _detections(pred: SamplePrediction, agnostic: bool) -> ImageDetections:
    """The detections as a COCO results file holds them: :func:`xywh_of` of each ``[x1, y1, x2, y2]`` box."""
    dets = pred.detections or []
    return ImageDetections(
        np.array([xywh_of(d.box) for d in dets], float).reshape(-1, 4),
        np.array([d.score for d in dets], float),
        np.array([AGNOSTIC_CLASS if agnostic else d.class_id for d in dets], int),
    )


def coco_inputs(samples: Sequence[SamplePrediction], dataset: Dataset, class_aware: bool = True) -> CocoInputs:
    """Pair every successful prediction with its dataset sample (by id); RepliscopeError for a prediction whose
    sample is not in ``dataset`` or has no ground truth (``objects`` None)."""
    by_id = {s.id: s for s in dataset.samples}
    kept: list[tuple[Sample, SamplePrediction]] = []
    failed = 0
    for pred in samples:
        if pred.error is not None or pred.detections is None:
            failed += 1
            continue
        sample = by_id.get(pred.sample_id)
        if sample is None:
            raise RepliscopeError(f"sample '{pred.sample_id}' is not in dataset '{dataset.name}'")
        if sample.objects is None:
            raise RepliscopeError(
                f"sample '{pred.sample_id}' of dataset '{dataset.name}' has no detection ground truth (objects)"
            )
        kept.append((sample, pred))
    ids = [s.image_id for s, _ in kept]
    if any(i is None for i in ids) or len(set(ids)) != len(ids):
        ids = list(range(1, len(kept) + 1))
    order = sorted(range(len(kept)), key=lambda j: ids[j] or 0)
    categories = {AGNOSTIC_CLASS: "object"} if not class_aware else dict(dataset.categories or {})
    if not categories:
        raise RepliscopeError(f"dataset '{dataset.name}' names no categories: it is not a detection dataset")
    unknown = sum(1 for _, p in kept for d in p.detections or [] if d.class_id not in categories) if class_aware else 0
    return CocoInputs(
        samples=[kept[j][0] for j in order],
        truths=[_truth(kept[j][0], not class_aware) for j in order],
        detections=[_detections(kept[j][1], not class_aware) for j in order],
        image_ids=[int(ids[j] or 0) for j in order],
        categories=categories,
        n_failed=failed,
        n_unknown_class=unknown,
    )


def coco_dicts(inputs: CocoInputs) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(ground-truth dict, detection list) in COCO's JSON form: boxes ``[x, y, w, h]``, the very numbers the
    per-image matching uses (:class:`ImageTruth` / :class:`ImageDetections`), so pycocotools or faster-coco-eval
    given these dicts computes the same IoUs bit for bit."""
    images: list[dict[str, Any]] = []
    anns: list[dict[str, Any]] = []
    dets: list[dict[str, Any]] = []
    for sample, image_id, gt, dt in zip(
        inputs.samples, inputs.image_ids, inputs.truths, inputs.detections, strict=True
    ):
        h, w = sample.size_hw or (0, 0)
        images.append({"id": image_id, "file_name": sample.id, "height": h, "width": w})
        for box, cls, area, crowd in zip(gt.boxes, gt.classes, gt.areas, gt.crowd, strict=True):
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": image_id,
                    "category_id": int(cls),
                    "bbox": [float(v) for v in box],
                    "area": float(area),
                    "iscrowd": int(crowd),
                }
            )
        # tolist(): the same Python floats and ints as float() / int() of each element, without a loop over them
        for box, score, cls in zip(dt.boxes.tolist(), dt.scores.tolist(), dt.classes.tolist(), strict=True):
            dets.append({"image_id": image_id, "category_id": cls, "score": score, "bbox": box})
    cats = [{"id": k, "name": v} for k, v in sorted(inputs.categories.items())]
    return {"images": images, "annotations": anns, "categories": cats}, dets


def faster_coco_eval(gt: dict[str, Any], dets: list[dict[str, Any]]) -> tuple[np.ndarray, dict[str, Any]]:
    """(the 12 stats, COCOeval's ``eval`` dict with ``precision`` [T,R,K,A,M] and ``recall`` [T,K,A,M]).

    The dicts are copied first: faster-coco-eval writes ``id``/``area`` into them, and a detection that already
    has an ``id`` keeps it (a second evaluation of the same dicts would see duplicate ids)."""
    from faster_coco_eval import COCO, COCOeval_faster

    gt = {**gt, "images": [dict(i) for i in gt["images"]], "annotations": [dict(a) for a in gt["annotations"]]}
    dets = [dict(d) for d in dets]
    coco_gt = COCO()
    coco_gt.dataset = gt
    coco_gt.createIndex()
    if dets:
        coco_dt = coco_gt.loadRes(dets)
    else:
        coco_dt = COCO()
        coco_dt.dataset = {"images": gt["images"], "annotations": [], "categories": gt["categories"]}
        coco_dt.createIndex()
    ev = COCOeval_faster(coco_gt, coco_dt, "bbox", print_function=lambda *a, **k: None)
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    return np.asarray(ev.stats, float), ev.eval


def evaluate_coco(
    samples: Sequence[SamplePrediction],
    dataset: Dataset,
    *,
    bootstrap: int = DEFAULT_REPLICATES,
    seed: int = 0,
    class_aware: bool = True,
) -> CocoEvaluation:
    """The 12 numbers with bootstrap intervals and the per-class scores of ``samples`` against ``dataset``."""
    if bootstrap < 1:
        raise RepliscopeError(f"bootstrap must be a positive number of replicates, got {bootstrap}")
    start = time.perf_counter()
    inputs = coco_inputs(samples, dataset, class_aware)
    if not inputs.samples:
        return CocoEvaluation([], [], 0, inputs.n_failed, 0, bootstrap, seed, class_aware, time.perf_counter() - start)
    resampler = CocoResampler(inputs.truths, inputs.detections, sorted(inputs.categories))
    stats, class_ap, class_ar = resampler.cocoeval_values()
    deltas = bootstrap_deltas(resampler, bootstrap, seed)
    metrics = []
    for j, name in enumerate(STAT_NAMES):
        if stats[j] < 0:
            continue
        low, high = corrected_interval(float(stats[j]), deltas[:, j], len(inputs.samples))
        metrics.append(
            MetricValue(name=name, value=float(stats[j]), ci_low=float(low), ci_high=float(high), n=len(inputs.samples))
        )
    return CocoEvaluation(
        metrics=metrics,
        per_class=_per_class(inputs, class_ap, class_ar),
        n_images=len(inputs.samples),
        n_failed=inputs.n_failed,
        n_unknown_class=inputs.n_unknown_class,
        replicates=int(deltas.shape[0]),
        seed=seed,
        class_aware=class_aware,
        seconds=time.perf_counter() - start,
        stats={n: float(v) for n, v in zip(STAT_NAMES, stats, strict=True)},
    )


def _per_class(inputs: CocoInputs, class_ap: np.ndarray, class_ar: np.ndarray) -> list[ClassScore]:
    """One :class:`ClassScore` per category from :meth:`CocoResampler.cocoeval_values`' per-category AP / AR."""
    cats = sorted(inputs.categories)
    k_of = {c: k for k, c in enumerate(cats)}
    n_obj = np.zeros(len(cats), np.int64)
    n_det = np.zeros(len(cats), np.int64)
    for t in inputs.truths:
        for c in t.classes[~t.crowd]:
            if int(c) in k_of:
                n_obj[k_of[int(c)]] += 1
    for d in inputs.detections:
        for c in d.classes:
            if int(c) in k_of:
                n_det[k_of[int(c)]] += 1
    return [
        ClassScore(
            class_id=cat,
            name=inputs.categories[cat],
            ap=None if np.isnan(class_ap[k]) else float(class_ap[k]),
            ar=None if np.isnan(class_ar[k]) else float(class_ar[k]),
            n_objects=int(n_obj[k]),
            n_detections=int(n_det[k]),
        )
        for k, cat in enumerate(cats)
    ]


def coco_metrics(
    samples: Sequence[SamplePrediction],
    dataset: Dataset,
    *,
    bootstrap: int = DEFAULT_REPLICATES,
    seed: int = 0,
    class_aware: bool = True,
) -> list[MetricValue]:
    """The defined ones of the 12 COCO numbers, each with its 95 % bootstrap interval over images."""
    return evaluate_coco(samples, dataset, bootstrap=bootstrap, seed=seed, class_aware=class_aware).metrics


def per_class(samples: Sequence[SamplePrediction], dataset: Dataset, *, class_aware: bool = True) -> list[ClassScore]:
    """AP and AR@100 per category (no intervals)."""
    inputs = coco_inputs(samples, dataset, class_aware)
    if not inputs.samples:
        return []
    resampler = CocoResampler(inputs.truths, inputs.detections, sorted(inputs.categories))
    _, class_ap, class_ar = resampler.cocoeval_values()
    return _per_class(inputs, class_ap, class_ar)
