"""Detection ground truth inside a record: from a :class:`Dataset` into :class:`GroundTruth` and back.

A detection record carries the ground truth it was scored against, so a stored run can be re-scored and unit
evaluated (``repliscope units RUN``) without the dataset's files: :func:`dataset_of` rebuilds a
:class:`Dataset` whose samples hold ``objects``, ``image_id``, ``size_hw`` and the categories, but no pixels
(reading one raises :class:`SampleError`).
"""

from __future__ import annotations

from collections.abc import Sequence, Sized
from functools import partial

from repliscope.datasets.base import BoxAnnotation, Dataset, Sample
from repliscope.errors import RepliscopeError, SampleError
from repliscope.evaluation.record import EvaluationRecord, GroundTruth, SampleTruth


def truth_of(sample: Sample) -> SampleTruth:
    """One sample's objects, columnar (an unannotated sample: no rows)."""
    objects = sample.objects or ()
    return SampleTruth(
        sample_id=sample.id,
        image_id=sample.image_id,
        size_hw=sample.size_hw,
        boxes=[[float(v) for v in o.box] for o in objects],
        classes=[int(o.class_id) for o in objects],
        areas=[o.area for o in objects],
        iscrowd=[bool(o.iscrowd) for o in objects],
        ignore=[bool(o.ignore) for o in objects],
        xywh=[None if o.xywh is None else [float(v) for v in o.xywh] for o in objects]
        if any(o.xywh is not None for o in objects)
        else None,
    )


def ground_truth_of(dataset: Dataset, samples: Sequence[Sample] | None = None) -> GroundTruth:
    """``samples`` (default: every sample of ``dataset``, in order) with ``dataset.categories`` (empty when
    the dataset names none)."""
    return GroundTruth(
        categories=dict(dataset.categories or {}),
        samples=[truth_of(s) for s in (dataset.samples if samples is None else samples)],
    )


def _no_pixels(sample_id: str) -> bytes:
    raise SampleError(f"sample '{sample_id}' comes from a stored record's ground truth: its image is not stored")


def _objects(t: SampleTruth, run_id: str) -> tuple[BoxAnnotation, ...]:
    """The sample's objects; each box's ``xywh`` as stored (the annotation file's numbers), or None (derived from
    the corners) when the record kept none (records stored before ``xywh`` was kept still load and score)."""
    xywh = t.xywh if t.xywh is not None else [None] * len(t.boxes)
    columns: dict[str, Sized] = {
        "classes": t.classes,
        "areas": t.areas,
        "iscrowd": t.iscrowd,
        "ignore": t.ignore,
        "xywh": xywh,
    }
    uneven = [f"{k} ({len(v)})" for k, v in columns.items() if len(v) != len(t.boxes)]
    bad = [i for i, w in enumerate(xywh) if w is not None and len(w) != 4]
    if uneven or bad:
        raise RepliscopeError(
            f"run {run_id[:12]}: ground_truth of sample '{t.sample_id}' is malformed: "
            + (f"{', '.join(uneven)} rows for {len(t.boxes)} boxes" if uneven else f"xywh[{bad[0]}] is not 4 numbers")
        )
    return tuple(
        BoxAnnotation(
            box=(b[0], b[1], b[2], b[3]),
            class_id=c,
            area=a,
            iscrowd=crowd,
            ignore=ign,
            xywh=None if w is None else (w[0], w[1], w[2], w[3]),
        )
        for b, c, a, crowd, ign, w in zip(t.boxes, t.classes, t.areas, t.iscrowd, t.ignore, xywh, strict=True)
    )


def dataset_of(record: EvaluationRecord) -> Dataset:
    """The ground truth of a detection ``record`` as a :class:`Dataset` (same sample order as
    ``record.samples``; images not readable). RepliscopeError for a record without ground truth."""
    gt = record.ground_truth
    if gt is None:
        raise RepliscopeError(f"run {record.run_id[:12]} ({record.task}) carries no detection ground truth")
    samples = [
        Sample(
            id=t.sample_id,
            label=None,
            read=partial(_no_pixels, t.sample_id),
            location="stored record",
            objects=_objects(t, record.run_id),
            image_id=t.image_id,
            size_hw=t.size_hw,
        )
        for t in gt.samples
    ]
    return Dataset(
        name=str(record.dataset.get("name", "")),
        samples=samples,
        license=str(record.dataset.get("license", "")),
        label_rule=str(record.dataset.get("label_rule", "")),
        origin=f"ground truth stored in run {record.run_id}",
        description=str(record.dataset.get("description", "")),
        categories=dict(gt.categories),
    )
