"""``object_detection``: boxes per image, COCO metrics (AP with bootstrap intervals over images) and paired
statistics of two runs from unit evaluation (matched detections, IoU, offsets).

The postprocess (ops of :data:`DETECTION_POST_OPS`) must leave ``Predictions.detections`` in
:data:`FINAL_BOX_FORMAT` (xyxy, 0-based pixels of the decoded source image) with classes in the dataset's
category ids; :meth:`ObjectDetection.to_samples` refuses anything else, naming the op to add.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from repliscope.datasets.base import Dataset, Sample
from repliscope.errors import DatasetError, RepliscopeError
from repliscope.evaluation.record import Detection, MetricValue, SamplePrediction
from repliscope.manifest.schema import COCO_METRICS, DETECTION_OUTPUT_KINDS
from repliscope.ops.base import FINAL_BOX_FORMAT, BoxFormat, Predictions
from repliscope.tasks.base import Task

DETECTION_POST_OPS = ("detections_from_outputs", "anchor_decode", "score_activation", "box_format", "to_source",
                      "class_map", "score_threshold", "max_detections", "nms")
"""The post-processing ops a detection manifest may use (registered by :mod:`repliscope.ops.detection`)."""
CREATING_OPS = ("detections_from_outputs", "anchor_decode")
"""The ops that create ``Predictions.detections`` from the model outputs."""
DATASET_HINT = "evaluate a detection manifest on coco:PATH / dlib_xml:PATH/FILE.xml / synthetic_detection"


def missing_conversion(fmt: BoxFormat) -> str | None:
    """What keeps boxes in ``fmt`` from :data:`FINAL_BOX_FORMAT`, naming the op to add; None when they are."""
    if fmt == FINAL_BOX_FORMAT:
        return None
    if fmt.kind != "xyxy" or fmt.normalized or fmt.one_based:
        return (f"the postprocess leaves boxes as {fmt.describe()}: add a 'box_format' op (to xyxy 0-based pixels)"
                f"{' and then to_source' if fmt.space != 'source' else ''}")
    return (f"the postprocess leaves boxes as {fmt.describe()}: add a 'to_source' op (undo the pre-processing's "
            "resize / crop / letterbox)")


class ObjectDetection(Task):
    """Boxes per image, recorded best score first as :class:`Detection` (source-image pixels, category ids)."""

    name = "object_detection"
    post_ops: ClassVar[tuple[str, ...]] = DETECTION_POST_OPS
    claim_metrics: ClassVar[tuple[str, ...]] = COCO_METRICS
    output_kinds: ClassVar[tuple[str, ...]] = DETECTION_OUTPUT_KINDS

    def check_dataset(self, dataset: Dataset, num_classes: int, class_names: Sequence[str] | None = None) -> None:
        """Every sample needs ground truth boxes (``objects``); when both the dataset's categories and the
        manifest's class names are known, every annotated category's name must be one of the class names
        (``builtin:coco-91`` is indexed by category id: there the name at that id must match)."""
        missing = [s.id for s in dataset.samples if s.objects is None]
        if missing:
            raise DatasetError(f"dataset '{dataset.name}' has no box annotations ({len(missing)} of "
                               f"{len(dataset.samples)} samples, e.g. {missing[0]}): {DATASET_HINT}")
        if not dataset.categories or class_names is None:
            return
        used = sorted({o.class_id for s in dataset.samples for o in s.objects or ()})
        unknown = [c for c in used if c not in dataset.categories]
        if unknown:
            raise DatasetError(f"dataset '{dataset.name}' annotates category ids {unknown} it does not list in its "
                               f"categories")
        names = set(class_names)
        by_id = len(class_names) == 91 and class_names[0] == "background"  # builtin:coco-91 (index = COCO id)
        bad = [f"{c} '{dataset.categories[c]}'" for c in used
               if (class_names[c] != dataset.categories[c] if by_id and c < 91 else dataset.categories[c] not in names)]
        if bad:
            raise DatasetError(f"dataset '{dataset.name}' has categories the manifest's labels do not name: "
                               f"{', '.join(bad[:10])}{' ...' if len(bad) > 10 else ''} (labels: "
                               f"{', '.join(class_names[:5])}, ...); the labels must be the dataset's classes")

    def to_samples(self, preds: Predictions, batch: Sequence[Sample], rows: Sequence[int]) -> list[SamplePrediction]:
        """Row ``j``'s boxes for ``batch[rows[j]]``, best score first (stable: ties keep the model's order)."""
        if preds.detections is None:
            raise RepliscopeError(f"the postprocess made no detections: start it with one of {', '.join(CREATING_OPS)}"
                                  " (boxes from the model outputs)")
        if len(preds.detections) != len(rows):
            raise RepliscopeError(f"the postprocess made detections for {len(preds.detections)} images, the batch "
                                  f"has {len(rows)}")
        out = []
        for row, i in enumerate(rows):
            boxes = preds.detections[row]
            problem = missing_conversion(boxes.format)
            if problem is not None:
                raise RepliscopeError(problem)
            scores = np.asarray(boxes.scores, dtype=np.float32).reshape(-1)
            order = np.argsort(-scores, kind="stable")
            xyxy = np.asarray(boxes.boxes, dtype=np.float32).reshape(-1, 4)[order].tolist()
            classes = np.asarray(boxes.classes).reshape(-1)[order].tolist()
            found = [Detection(box=b, score=s, class_id=int(c))
                     for b, s, c in zip(xyxy, scores[order].tolist(), classes, strict=True)]
            out.append(SamplePrediction(sample_id=batch[i].id, label=batch[i].label, detections=found))
        return out

    def metrics(self, samples: Sequence[SamplePrediction], dataset: Dataset) -> list[MetricValue]:
        """COCOeval's 12 numbers (AP, AP50, ..., ARl) as fractions, each with a percentile bootstrap interval
        over images (:func:`repliscope.metrics.coco.coco_metrics`); failed samples are left out."""
        return self.evaluate(samples, dataset)[0]

    def evaluate(self, samples: Sequence[SamplePrediction], dataset: Dataset
                 ) -> tuple[list[MetricValue], list[dict[str, Any]] | None]:
        """The metrics and, per category, ``class_id``, ``name``, ``ap``, ``ar`` (AR@100), ``n_objects``,
        ``n_detections`` (:class:`repliscope.metrics.coco.ClassScore`), from one COCO evaluation."""
        from repliscope.metrics.coco import evaluate_coco

        ev = evaluate_coco(list(samples), dataset)
        return ev.metrics, [dataclasses.asdict(c) for c in ev.per_class]

    def paired(self, reference: Sequence[SamplePrediction], variant: Sequence[SamplePrediction],
               dataset: Dataset | None) -> dict[str, Any] | None:
        """Unit evaluation of ``variant`` against ``reference``'s detections
        (:func:`repliscope.units.detection_paired`: matched fraction, IoU, offsets); None when no sample was
        evaluated by both."""
        from repliscope.units import detection_paired

        if not any(a.error is None and b.error is None for a, b in zip(reference, variant, strict=True)):
            return None
        return detection_paired(list(reference), list(variant), dataset)
