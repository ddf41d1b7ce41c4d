"""``object_detection``: boxes per image, COCO metrics (AP with bootstrap intervals over images) and paired
statistics of two runs from unit evaluation (matched detections, IoU, offsets).

The postprocess (ops of :data:`DETECTION_POST_OPS`) must leave ``Predictions.detections`` in
:data:`FINAL_BOX_FORMAT` (xyxy, 0-based pixels of the decoded source image) with classes in the dataset's
category ids; :meth:`ObjectDetection.to_samples` refuses anything else, naming the op to add.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from repliscope.datasets.base import Dataset, Sample
from repliscope.errors import DatasetError, RepliscopeError
from repliscope.ops.base import FINAL_BOX_FORMAT, BoxFormat, Predictions
from repliscope.records.evaluation import Detection, MetricValue, SamplePrediction
from repliscope.tasks.base import MetricSpec, PostCheck, ReportSpec, Task

if TYPE_CHECKING:
    from repliscope.manifest.schema import Manifest
    from repliscope.ops.base import PostOp

DETECTION_OUTPUT_KINDS = ("boxes", "scores", "classes", "count", "anchor_regression", "anchor_scores")
"""``boxes``/``scores``/``classes``/``count``: decoded detections (e.g. a graph with NMS inside);
``anchor_regression``/``anchor_scores``: raw per-anchor outputs that ``anchor_decode`` turns into boxes."""
COCO_METRICS = ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")
"""Detection claims: COCOeval's 12 numbers, as fractions (0.222) the way COCOeval prints them."""

DETECTION_POST_OPS = (
    "detections_from_outputs",
    "anchor_decode",
    "score_activation",
    "box_format",
    "to_source",
    "class_map",
    "score_threshold",
    "max_detections",
    "nms",
    "yolo_decode",
    "darknet_correct_boxes",
    "darknet_nms",
    "darknet_boxes",
    "yolo_anchor_free_decode",
)
"""The post-processing ops a detection manifest may use (registered by :mod:`repliscope.ops.detection`)."""
CREATING_OPS = ("detections_from_outputs", "anchor_decode", "yolo_decode", "yolo_anchor_free_decode")
"""The ops that create ``Predictions.detections`` from the model outputs."""
DATASET_HINT = "evaluate a detection manifest on coco:PATH / dlib_xml:PATH/FILE.xml / synthetic_detection"


def missing_conversion(fmt: BoxFormat) -> str | None:
    """What keeps boxes in ``fmt`` from :data:`FINAL_BOX_FORMAT`, naming the op to add; None when they are."""
    if fmt == FINAL_BOX_FORMAT:
        return None
    if fmt.kind != "xyxy" or fmt.normalized or fmt.one_based:
        return (
            f"the postprocess leaves boxes as {fmt.describe()}: add a 'box_format' op (to xyxy 0-based pixels)"
            f"{' and then to_source' if fmt.space != 'source' else ''}"
        )
    return (
        f"the postprocess leaves boxes as {fmt.describe()}: add a 'to_source' op (undo the pre-processing's "
        "resize / crop / letterbox)"
    )


@dataclasses.dataclass(frozen=True)
class Coverage:
    """The dataset's categories split by whether the model detects them (id -> name, in id order)."""

    evaluated: dict[int, str]
    left_out: dict[int, str]


def coverage(categories: dict[int, str], class_names: Sequence[str]) -> Coverage:
    """Which dataset ``categories`` the model's ``class_names`` (the manifest's labels) cover: by name, except
    ``builtin:coco-91`` (91 names from ``background``), indexed by COCO category id, where the name at the id
    must be the category's."""
    by_id = len(class_names) == 91 and class_names[0] == "background"
    names = set(class_names)
    evaluated: dict[int, str] = {}
    left_out: dict[int, str] = {}
    for c, name in sorted(categories.items()):
        covered = (0 <= c < 91 and class_names[c] == name) if by_id else name in names
        (evaluated if covered else left_out)[c] = name
    return Coverage(evaluated, left_out)


def keep_categories(dataset: Dataset, categories: dict[int, str]) -> Dataset:
    """``dataset`` with only ``categories`` and the ground-truth objects of those (samples, order kept)."""
    samples = [
        s
        if s.objects is None
        else dataclasses.replace(s, objects=tuple(o for o in s.objects if o.class_id in categories))
        for s in dataset.samples
    ]
    return dataclasses.replace(dataset, samples=samples, categories=dict(categories), _identity=None)


def categories_left_out_line(dataset: dict[str, Any]) -> str | None:
    """Detection: which dataset categories the run was scored on when the model detects only some of them
    (the record's ``categories_evaluated`` / ``categories_left_out``); None when none was left out."""
    left = dataset.get("categories_left_out") or []
    if not left:
        return None
    kept = dataset.get("categories_evaluated") or []
    names = ", ".join(str(n) for _, n in left[:8]) + (" ..." if len(left) > 8 else "")
    return (
        f"scored on {len(kept)} of {len(kept) + len(left)} dataset categories, the ones the model's labels name "
        f"({', '.join(f'{c} {n}' for c, n in kept)}); {len(left)} left out with their "
        f"{dataset.get('objects_left_out', 0)} ground-truth boxes: {names}"
    )


class ObjectDetection(Task):
    """Boxes per image, recorded best score first as :class:`Detection` (source-image pixels, category ids)."""

    name = "object_detection"
    truth = "boxes"
    post_ops: ClassVar[tuple[str, ...]] = DETECTION_POST_OPS
    metric_specs: ClassVar[tuple[MetricSpec, ...]] = tuple(
        MetricSpec(name, unit="fraction", interval="bootstrap", hint=", as COCOeval prints it (0.222 for 22.2 %)")
        for name in COCO_METRICS
    )
    output_kinds: ClassVar[tuple[str, ...]] = DETECTION_OUTPUT_KINDS
    pitfall_modules = ("repliscope.pitfalls.detection_variants", "repliscope.pitfalls.yolo_variants")
    report = ReportSpec(
        interval_note="COCOeval's numbers as fractions, 95 % bias-corrected bootstrap intervals over images.",
        metrics_title="Measured metrics (COCO)",
        per_class_title="Per-class AP",
    )

    def check_postprocess(self, manifest: Manifest, post: Sequence[PostOp]) -> list[PostCheck]:
        """:func:`check_postprocess`."""
        return check_postprocess(manifest, post)

    def check_dataset(self, dataset: Dataset, num_classes: int, class_names: Sequence[str] | None = None) -> None:
        """Every sample needs ground truth boxes (``objects``) in categories the dataset lists; when both the
        dataset's categories and the manifest's class names are known, at least one dataset category must be one
        the model detects (:func:`coverage`: the others are left out of the evaluation, and said so)."""
        missing = [s.id for s in dataset.samples if s.objects is None]
        if missing:
            raise DatasetError(
                f"dataset '{dataset.name}' has no box annotations ({len(missing)} of "
                f"{len(dataset.samples)} samples, e.g. {missing[0]}): {DATASET_HINT}"
            )
        if not dataset.categories or class_names is None:
            return
        used = sorted({o.class_id for s in dataset.samples for o in s.objects or ()})
        unknown = [c for c in used if c not in dataset.categories]
        if unknown:
            raise DatasetError(
                f"dataset '{dataset.name}' annotates category ids {unknown} it does not list in its categories"
            )
        if not coverage(dataset.categories, class_names).evaluated:
            shown = [f"{c} '{n}'" for c, n in sorted(dataset.categories.items())]
            raise DatasetError(
                f"the model detects none of the categories of dataset '{dataset.name}' "
                f"({', '.join(shown[:10])}{' ...' if len(shown) > 10 else ''}; the manifest's labels: "
                f"{', '.join(class_names[:5])}{', ...' if len(class_names) > 5 else ''}): the labels "
                "must name the dataset categories the model detects"
            )

    def restrict(self, dataset: Dataset, class_names: Sequence[str] | None) -> tuple[Dataset, dict[str, Any]]:
        """``dataset`` scored on the categories the model detects (COCOeval's ``params.catIds``): categories
        and ground truth objects of the others removed, and the record's note ``{"categories_evaluated":
        [[id, name], ...], "categories_left_out": [[id, name], ...], "objects_left_out": N}`` (N only when some
        are left out; the dataset unchanged when none is). No note when either side is unknown."""
        if not dataset.categories or class_names is None:
            return dataset, {}
        cov = coverage(dataset.categories, class_names)
        note: dict[str, Any] = {
            "categories_evaluated": [[c, n] for c, n in cov.evaluated.items()],
            "categories_left_out": [[c, n] for c, n in cov.left_out.items()],
        }
        if not cov.left_out:
            return dataset, note
        note["objects_left_out"] = sum(
            1 for s in dataset.samples for o in s.objects or () if o.class_id not in cov.evaluated
        )
        return keep_categories(dataset, cov.evaluated), note

    def to_samples(self, preds: Predictions, batch: Sequence[Sample], rows: Sequence[int]) -> list[SamplePrediction]:
        """Row ``j``'s boxes for ``batch[rows[j]]``, best score first (stable: ties keep the model's order)."""
        if preds.detections is None:
            raise RepliscopeError(
                f"the postprocess made no detections: start it with one of {', '.join(CREATING_OPS)}"
                " (boxes from the model outputs)"
            )
        if len(preds.detections) != len(rows):
            raise RepliscopeError(
                f"the postprocess made detections for {len(preds.detections)} images, the batch has {len(rows)}"
            )
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
            found = [
                Detection(box=b, score=s, class_id=int(c))
                for b, s, c in zip(xyxy, scores[order].tolist(), classes, strict=True)
            ]
            out.append(SamplePrediction(sample_id=batch[i].id, label=batch[i].label, detections=found))
        return out

    def metrics(self, samples: Sequence[SamplePrediction], dataset: Dataset) -> list[MetricValue]:
        """COCOeval's 12 numbers (AP, AP50, ..., ARl) as fractions, each with a bias-corrected bootstrap
        interval over images (:func:`repliscope.metrics.coco.coco_metrics`); failed samples are left out."""
        return self.evaluate(samples, dataset)[0]

    def evaluate(
        self, samples: Sequence[SamplePrediction], dataset: Dataset
    ) -> tuple[list[MetricValue], list[dict[str, Any]] | None]:
        """The metrics and, per category, ``class_id``, ``name``, ``ap``, ``ar`` (AR@100), ``n_objects``,
        ``n_detections`` (:class:`repliscope.metrics.coco.ClassScore`), from one COCO evaluation."""
        from repliscope.metrics.coco import evaluate_coco

        ev = evaluate_coco(list(samples), dataset)
        return ev.metrics, [dataclasses.asdict(c) for c in ev.per_class]

    def paired(
        self, reference: Sequence[SamplePrediction], variant: Sequence[SamplePrediction], dataset: Dataset | None
    ) -> dict[str, Any] | None:
        """Unit evaluation of ``variant`` against ``reference``'s detections
        (:func:`repliscope.metrics.detection_paired.detection_paired`: matched fraction, IoU, offsets); None when
        no sample was evaluated by both."""
        from repliscope.metrics.detection_paired import detection_paired

        if not any(a.error is None and b.error is None for a, b in zip(reference, variant, strict=True)):
            return None
        return detection_paired(list(reference), list(variant), dataset)


_OUTPUT_PARAMS = ("boxes", "scores", "classes", "count", "output")
"""Parameters of detection post ops that name a model output."""


def check_postprocess(m: Manifest, post: Sequence[PostOp]) -> list[PostCheck]:
    """Every output a post op reads is a manifest output; an op creating the detections comes first; and when
    every op's box format is known from the manifest, the chain ends in ``FINAL_BOX_FORMAT`` (else
    :meth:`ObjectDetection.to_samples` checks it at run time)."""
    from repliscope.ops.detection.anchors import ANCHOR_OUTPUT_FORMAT

    names = [o.name for o in m.outputs]
    errors: list[PostCheck] = []
    for i, op in enumerate(post):
        for key in _OUTPUT_PARAMS:
            value = getattr(op.params, key, None)
            if isinstance(value, str) and value not in names:
                errors.append(
                    (
                        f"'{op.name}' reads model output '{value}', which is not in outputs",
                        ("postprocess", i, key),
                        names,
                    )
                )
    creating = [i for i, op in enumerate(post) if op.name in CREATING_OPS]
    if not creating:
        return [
            *errors,
            (
                f"postprocess needs one of {', '.join(CREATING_OPS)} to make boxes from the model outputs",
                ("postprocess",),
                list(CREATING_OPS),
            ),
        ]
    for i, op in enumerate(post[: creating[0]]):
        if not (op.name == "score_activation" and getattr(op.params, "output", None) is not None):
            errors.append(
                (
                    f"'{op.name}' works on detections, which '{post[creating[0]].name}' "
                    f"(postprocess[{creating[0]}]) makes: put it after that op",
                    ("postprocess", i, "op"),
                    None,
                )
            )
    fmt: BoxFormat | None = None
    for op in post[creating[0] :]:
        if op.name == "detections_from_outputs":
            fmt = getattr(op, "box_format", None)
        elif op.name == "anchor_decode":
            fmt = ANCHOR_OUTPUT_FORMAT
        elif op.name == "box_format":
            fmt = getattr(op, "dst", None)
        elif op.name == "to_source":
            fmt = FINAL_BOX_FORMAT
    problem = missing_conversion(fmt) if fmt is not None else None
    if problem is not None:
        errors.append((problem, ("postprocess",), None))
    return errors
