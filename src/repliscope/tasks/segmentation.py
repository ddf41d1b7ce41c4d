"""``semantic_segmentation``: a class per pixel, scored with per-class IoU, mIoU, frequency-weighted IoU and
pixel accuracy (bootstrap intervals over images); paired statistics of two runs: mask agreement and ΔmIoU.

Class spaces. The model's classes are the manifest's labels (index = class index); one of them must be
``background``. A dataset's ground truth (``Sample.mask``) is in its own category ids: 0 = no category,
:data:`repliscope.datasets.base.VOID` = not scored. A dataset category is scored as the model class of the same
name; the others (and 0) as ``background`` (a person-vs-background model on COCO: person pixels vs everything
else); void pixels are left out. The postprocess (ops of :data:`SEGMENTATION_POST_OPS`) must end with labels
in the decoded image's pixels (``mask_resize``); each sample's record keeps its confusion counts and, when
small, both label maps as run-length encodings (:class:`repliscope.records.evaluation.SegmentationSample`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from repliscope.datasets.base import VOID, Dataset, Sample
from repliscope.errors import DatasetError, RepliscopeError, SampleError
from repliscope.metrics.intervals import MIN_SEGMENTATION_IMAGES
from repliscope.ops.base import MaskMap, Predictions
from repliscope.records.evaluation import MetricValue, SamplePrediction, SegmentationSample
from repliscope.tasks.base import MetricSpec, PostCheck, ReportSpec, Task

if TYPE_CHECKING:
    from repliscope.manifest.schema import Manifest
    from repliscope.ops.base import PostOp

SEGMENTATION_OUTPUT_KINDS = ("mask_logits", "mask_probabilities", "mask_labels")
"""Semantic segmentation: per-pixel scores (one per class, or one sigmoid map), before or after activation, or a
label map (one integer class index per pixel, e.g. TensorFlow DeepLab's ``SemanticPredictions``)."""
SEGMENTATION_METRICS = ("mIoU", "fwIoU", "pixel_accuracy")
"""Semantic segmentation claims, as fractions (0.723)."""
SEGMENTATION_POST_OPS = (
    "mask_from_outputs",
    "mask_activation",
    "mask_minmax",
    "mask_resize",
    "mask_argmax",
    "mask_threshold",
    "mask_label_offset",
    "mask_void",
)
"""The post-processing ops a segmentation manifest may use (registered by :mod:`repliscope.ops.segmentation`)."""
BACKGROUND = "background"
MAX_RLE_CHARS = 60_000
"""A sample keeps its two label maps as RLE text up to this many characters (else only the counts)."""
DATASET_HINT = (
    "evaluate a segmentation manifest on coco:PATH (masks from the instance segmentations) or "
    "voc_seg:PATH (SegmentationClass/ PNGs and a class map)"
)
LISTED = 20


def background_index(class_names: Sequence[str]) -> int:
    """The index of the ``background`` label; DatasetError when the labels have none."""
    if BACKGROUND not in class_names:
        raise DatasetError(
            f"the manifest's labels have no '{BACKGROUND}' class ({', '.join(class_names[:5])}"
            f"{', ...' if len(class_names) > 5 else ''}): a segmentation model's labels must name the "
            "class of the pixels no dataset category covers 'background'"
        )
    return list(class_names).index(BACKGROUND)


@dataclasses.dataclass(frozen=True)
class ClassMapping:
    """Dataset category ids -> model class indices: ``keep`` (the categories scored as a model class) and a
    lookup of every listed id; any other id (not 0, not void) is unknown."""

    keep: frozenset[int]
    lookup: dict[int, int]
    background: int

    @classmethod
    def of(cls, categories: dict[int, str], class_names: Sequence[str]) -> ClassMapping:
        bg = background_index(class_names)
        index = {name: i for i, name in enumerate(class_names)}
        lookup = {0: bg}
        keep = set()
        for c, name in categories.items():
            if name in index and name != BACKGROUND:
                lookup[c] = index[name]
                keep.add(c)
            else:
                lookup[c] = bg
        return cls(frozenset(keep), lookup, bg)

    def to_model(self, truth: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """int32 (H, W) dataset ids -> (model class indices with -1 for void, the unknown ids found)."""
        ids = np.unique(truth)
        unknown = [int(v) for v in ids if int(v) not in self.lookup and int(v) != VOID]
        table = {int(v): self.lookup.get(int(v), -1) for v in ids}
        out = np.full(truth.shape, -1, np.int32)
        for v, m in table.items():
            if v != VOID and m >= 0:
                out[truth == v] = m
        return out, unknown


def rle_of(labels: np.ndarray, values: Sequence[int], extra: dict[str, np.ndarray] | None = None) -> dict[str, str]:
    """COCO RLE (compressed counts, column-major) of ``labels == v`` for each present ``v``, keyed by ``str(v)``."""
    from pycocotools import mask as mask_utils

    out = {}
    masks = {str(v): labels == v for v in values}
    masks.update(extra or {})
    for key, m in masks.items():
        if m.any():
            enc = mask_utils.encode(np.asfortranarray(m.astype(np.uint8)))
            out[key] = enc["counts"].decode("ascii")
    return out


def labels_of_rle(rle: dict[str, str], size_hw: tuple[int, int], fill: int = 0) -> np.ndarray:
    """The label map (int32 (H, W)) of :func:`rle_of`'s output: ``fill`` where no class is set; ``void`` -> VOID."""
    from pycocotools import mask as mask_utils

    h, w = size_hw
    out = np.full((h, w), fill, np.int32)
    for key, counts in rle.items():
        with warnings.catch_warnings():  # pycocotools' numpy-2 copy=False notice
            warnings.simplefilter("ignore", DeprecationWarning)
            m = mask_utils.decode({"size": [h, w], "counts": counts.encode("ascii")}).astype(bool)
        out[m] = VOID if key == "void" else int(key)
    return out


def confusion_of(truth: np.ndarray, predicted: np.ndarray, k: int) -> np.ndarray:
    """(K, K + 1) int64 counts of (truth, predicted) pixels; truth -1 (void) left out, predictions outside
    [0, K) in column K."""
    valid = truth >= 0
    pred = np.where((predicted >= 0) & (predicted < k), predicted, k)
    flat = truth[valid].astype(np.int64) * (k + 1) + pred[valid]
    return np.bincount(flat, minlength=k * (k + 1)).reshape(k, k + 1)


def dense(seg: SegmentationSample) -> np.ndarray:
    """The (K, K + 1) confusion matrix of a stored sample."""
    out = np.zeros((seg.num_classes, seg.num_classes + 1), np.int64)
    for t, p, n in seg.confusion:
        out[t, p] = n
    return out


def _ok(s: SamplePrediction) -> bool:
    return s.error is None and s.segmentation is not None


class SemanticSegmentation(Task):
    """A label map per image, recorded as confusion counts (and small masks) per sample."""

    name = "semantic_segmentation"
    truth = "masks"
    post_ops: ClassVar[tuple[str, ...]] = SEGMENTATION_POST_OPS
    metric_specs: ClassVar[tuple[MetricSpec, ...]] = tuple(
        MetricSpec(
            name, unit="fraction", interval="bootstrap", hint=" (0.723 for 72.3 %)", min_images=MIN_SEGMENTATION_IMAGES
        )
        for name in SEGMENTATION_METRICS
    )
    output_kinds: ClassVar[tuple[str, ...]] = SEGMENTATION_OUTPUT_KINDS
    pitfall_modules = ("repliscope.pitfalls.segmentation_variants",)
    report = ReportSpec(interval_note="fractions, 95 % bias-corrected bootstrap intervals over images.")

    def check_postprocess(self, manifest: Manifest, post: Sequence[PostOp]) -> list[PostCheck]:
        """:func:`check_postprocess`."""
        return [(msg, at, None) for msg, at in check_postprocess(manifest, post)]

    def check_dataset(self, dataset: Dataset, num_classes: int, class_names: Sequence[str] | None = None) -> None:
        """Every sample needs a ground-truth mask; the labels need ``background`` and, when the dataset's
        categories are known, at least one of them must be a model class."""
        missing = [s.id for s in dataset.samples if s.mask is None]
        if missing:
            raise DatasetError(
                f"dataset '{dataset.name}' has no segmentation masks ({len(missing)} of "
                f"{len(dataset.samples)} samples, e.g. {missing[0]}): {DATASET_HINT}"
            )
        if class_names is None:
            return
        background_index(class_names)
        categories = dataset.samples[0].mask.categories if dataset.samples else {}  # type: ignore[union-attr]
        if categories and not ClassMapping.of(categories, class_names).keep:
            shown = [f"{c} '{n}'" for c, n in sorted(categories.items())]
            raise DatasetError(
                f"no category of dataset '{dataset.name}' ({', '.join(shown[:10])}"
                f"{' ...' if len(shown) > 10 else ''}) is a class of the model (labels: "
                f"{', '.join(class_names[:6])}{', ...' if len(class_names) > 6 else ''}): the labels "
                "must name the dataset categories the model segments"
            )

    def restrict(self, dataset: Dataset, class_names: Sequence[str] | None) -> tuple[Dataset, dict[str, Any]]:
        """``dataset`` with ``categories`` = the model's classes (index -> name: what the metrics are per), and
        the record's note ``{"categories_evaluated": [[id, name], ...], "categories_as_background": [[id, name],
        ...]}`` (dataset categories scored as their model class, and those scored as background)."""
        if class_names is None:
            return dataset, {}
        categories = dataset.samples[0].mask.categories if dataset.samples and dataset.samples[0].mask else {}
        mapping = ClassMapping.of(categories, class_names)
        note = {
            "categories_evaluated": [[c, n] for c, n in sorted(categories.items()) if c in mapping.keep],
            "categories_as_background": [[c, n] for c, n in sorted(categories.items()) if c not in mapping.keep],
            "segmentation_classes": list(class_names),
        }
        scored = dataclasses.replace(dataset, categories=dict(enumerate(class_names)), _identity=None)
        return scored, note

    def to_samples(self, preds: Predictions, batch: Sequence[Sample], rows: Sequence[int]) -> list[SamplePrediction]:
        """Row ``j``'s label map scored against ``batch[rows[j]]``'s mask; a mask that cannot be read, has
        another size than the image or holds ids outside the dataset's class map makes that sample failed."""
        if preds.segmentation is None:
            raise RepliscopeError("the postprocess made no segmentation: start it with mask_from_outputs")
        if len(preds.segmentation) != len(rows):
            raise RepliscopeError(f"the postprocess made {len(preds.segmentation)} masks, the batch has {len(rows)}")
        return [self._one(m, batch[i]) for m, i in zip(preds.segmentation, rows, strict=True)]

    def _one(self, m: MaskMap, sample: Sample) -> SamplePrediction:
        if m.labels is None or m.space != "source":
            what = (
                "scores, not labels: add mask_argmax or mask_threshold"
                if m.labels is None
                else "labels in the model output's grid: add mask_resize (onto the decoded image)"
            )
            raise RepliscopeError(f"the postprocess leaves {what}")
        if m.class_names is None:
            raise RepliscopeError("mask_from_outputs was built without the manifest's labels")
        k = len(m.class_names)
        try:
            if sample.mask is None:
                raise SampleError(f"no ground-truth mask: {DATASET_HINT}")
            mapping = ClassMapping.of(sample.mask.categories, m.class_names)
            raw = sample.mask.read(mapping.keep)
            if raw.shape != m.labels.shape:
                raise SampleError(
                    f"the ground-truth mask is {raw.shape[1]}x{raw.shape[0]} (width x height), the "
                    f"image {m.labels.shape[1]}x{m.labels.shape[0]}"
                )
            objects = sample.mask.instances(mapping.keep)
            truth, unknown = mapping.to_model(raw)
            if m.void_as_background:
                truth = np.where(truth < 0, mapping.background, truth).astype(np.int32)
            if unknown:
                raise SampleError(
                    f"the ground-truth mask holds class ids {unknown} that the dataset's class map "
                    f"does not list (listed: {sorted(sample.mask.categories)[:30]}, {VOID} = void)"
                )
        except SampleError as exc:
            return SamplePrediction(sample_id=sample.id, label=sample.label, error=str(exc))
        counts = confusion_of(truth, m.labels, k)
        nz = np.argwhere(counts > 0)
        void = truth < 0
        predicted = rle_of(
            m.labels,
            range(k + 1) if (m.labels >= k).any() or (m.labels < 0).any() else range(k),
            {str(k): (m.labels >= k) | (m.labels < 0)} if ((m.labels >= k) | (m.labels < 0)).any() else None,
        )
        truth_rle = rle_of(truth, range(k), {"void": void} if void.any() else None)
        small = sum(len(v) for v in predicted.values()) + sum(len(v) for v in truth_rle.values()) <= MAX_RLE_CHARS
        instances = (
            None
            if objects is None
            else [
                [mapping.lookup[c], int(obj.sum()), int((m.labels[obj] == mapping.lookup[c]).sum())]
                for c, obj in objects
                if obj.shape == m.labels.shape
            ]
        )
        seg = SegmentationSample(
            size_hw=(int(m.labels.shape[0]), int(m.labels.shape[1])),
            num_classes=k,
            confusion=[[int(t), int(p), int(counts[t, p])] for t, p in nz],
            void_pixels=int(void.sum()),
            predicted=predicted if small else None,
            truth=truth_rle if small else None,
            instances=instances,
        )
        return SamplePrediction(sample_id=sample.id, label=sample.label, segmentation=seg)

    def metrics(self, samples: Sequence[SamplePrediction], dataset: Dataset) -> list[MetricValue]:
        return self.evaluate(samples, dataset)[0]

    def evaluate(
        self, samples: Sequence[SamplePrediction], dataset: Dataset
    ) -> tuple[list[MetricValue], list[dict[str, Any]] | None]:
        """mIoU, fwIoU, pixel accuracy with 95 % bootstrap intervals over the evaluated images, and per class
        IoU (:func:`repliscope.metrics.segmentation.evaluate_confusions`); failed samples are left out."""
        from repliscope.metrics.segmentation import evaluate_confusions

        ok = [s.segmentation for s in samples if _ok(s)]
        if not ok:
            return [], None
        k = ok[0].num_classes  # type: ignore[union-attr]
        known = dataset.categories if dataset is not None and dataset.categories else {}  # None: a stored run
        names = [known.get(i, f"class_{i}") for i in range(k)]
        ev = evaluate_confusions(np.stack([dense(s) for s in ok if s is not None]), names)
        return ev.metrics, ev.per_class

    def paired(
        self, reference: Sequence[SamplePrediction], variant: Sequence[SamplePrediction], dataset: Dataset | None
    ) -> dict[str, Any] | None:
        """On the samples both evaluated: ``n_samples``; ``miou_reference`` / ``miou_variant``, ``delta_miou`` and
        its paired bootstrap interval ``delta_miou_ci_low`` / ``_high`` (``replicates``, ``seed``); with both
        runs' masks kept: ``pixel_agreement`` (fraction of scored pixels with the same label), ``flipped_images``
        (images whose label maps differ) and the first ids in ``flipped_ids``; without masks the images whose
        confusion counts differ."""
        from repliscope.metrics.segmentation import paired_delta

        if len(reference) != len(variant):
            raise ValueError(f"{len(reference)} reference samples for {len(variant)} variant samples")
        both = [(r, v) for r, v in zip(reference, variant, strict=True) if _ok(r) and _ok(v)]
        if not both:
            return None
        ref = np.stack([dense(r.segmentation) for r, _ in both])  # type: ignore[arg-type]
        var = np.stack([dense(v.segmentation) for _, v in both])  # type: ignore[arg-type]
        if ref.shape != var.shape:
            return None
        out: dict[str, Any] = {"n_samples": len(both), **paired_delta(ref, var)}
        same = agree = total = 0
        flipped = []
        masks = all(
            r.segmentation.predicted is not None and v.segmentation.predicted is not None  # type: ignore[union-attr]
            for r, v in both
        )
        for r, v in both:
            rs, vs = r.segmentation, v.segmentation
            assert rs is not None and vs is not None
            if masks:
                a = labels_of_rle(rs.predicted or {}, rs.size_hw)
                b = labels_of_rle(vs.predicted or {}, vs.size_hw)
                agree += int((a == b).sum())
                total += a.size
                differs = bool((a != b).any())
            else:
                differs = rs.confusion != vs.confusion
            same += not differs
            if differs:
                flipped.append(r.sample_id)
        out.update(
            {
                "pixel_agreement": agree / total if masks and total else None,
                "flipped_images": len(flipped),
                "flipped_ids": flipped[:LISTED],
                "masks_compared": masks,
            }
        )
        return out


def check_postprocess(m: Manifest, post: Sequence[PostOp]) -> list[tuple[str, tuple[str | int, ...]]]:
    """Static checks of a segmentation postprocess: (message, manifest path) per problem. It must start with
    ``mask_from_outputs`` on a declared output whose kind matches ``activated``, make labels once (argmax or
    threshold, with class indices inside the labels) and resize once onto the image (nearest on labels, the
    model input's size for ``mapping: geometry``)."""
    errors: list[tuple[str, tuple[str | int, ...]]] = []
    names = [op.name for op in post]
    if not names or names[0] != "mask_from_outputs":
        return [
            ("a segmentation postprocess starts with mask_from_outputs (the model output to read)", ("postprocess",))
        ]
    first = post[0].params
    outputs = {o.name: o for o in m.outputs}
    out = outputs.get(first.output)  # type: ignore[attr-defined]
    if out is None:
        errors.append(
            (
                f"output '{first.output}' is not one of the manifest's outputs "  # type: ignore[attr-defined]
                f"({', '.join(outputs)})",
                ("postprocess", 0, "output"),
            )
        )
    elif first.activated != (out.kind == "mask_probabilities"):  # type: ignore[attr-defined]
        errors.append(
            (
                f"output '{out.name}' is of kind {out.kind}: activated must be "
                f"{str(out.kind == 'mask_probabilities').lower()}",
                ("postprocess", 0, "activated"),
            )
        )
    elif first.labels != (out.kind == "mask_labels"):  # type: ignore[attr-defined]
        errors.append(
            (
                f"output '{out.name}' is of kind {out.kind}: labels must be {str(out.kind == 'mask_labels').lower()}",
                ("postprocess", 0, "labels"),
            )
        )
    labelers = [i for i, n in enumerate(names) if n in ("mask_argmax", "mask_threshold")]
    resizes = [i for i, n in enumerate(names) if n == "mask_resize"]
    if first.labels:  # type: ignore[attr-defined]
        errors.extend(
            (f"the output is a label map already (labels: true): {names[i]} takes scores", ("postprocess", i))
            for i, n in enumerate(names)
            if n in ("mask_argmax", "mask_threshold", "mask_activation", "mask_minmax")
        )
        labelers = [0]
    if len(labelers) != 1:
        errors.append(
            (
                "the postprocess needs exactly one mask_argmax or mask_threshold (labels per pixel), has "
                f"{len(labelers)}",
                ("postprocess",),
            )
        )
    if len(resizes) != 1:
        errors.append(
            (
                "the postprocess needs exactly one mask_resize (the labels onto the decoded image), has "
                f"{len(resizes)}",
                ("postprocess",),
            )
        )
    k = m.labels.num_classes
    for i, op in enumerate(post):
        p = op.params
        if op.name == "mask_threshold":
            for key in ("foreground", "background"):
                if getattr(p, key) >= k:
                    errors.append(
                        (
                            f"{key} {getattr(p, key)} is not a class index (labels.num_classes is {k})",
                            ("postprocess", i, key),
                        )
                    )
        if op.name == "mask_activation" and first.activated:  # type: ignore[attr-defined]
            errors.append(
                (
                    "the maps are probabilities already (activated: true): the activation would be applied twice",
                    ("postprocess", i),
                )
            )
        if op.name == "mask_resize":
            if labelers and labelers[0] < i and p.method != "nearest":  # type: ignore[attr-defined]
                errors.append(
                    (
                        "mask_resize after the labels are made must use method nearest (class indices are "
                        "not interpolated)",
                        ("postprocess", i, "method"),
                    )
                )
            size = getattr(p, "input_size", None)
            spec = m.inputs[0]
            hw = spec.shape[1:3] if spec.layout == "NHWC" else spec.shape[2:4]
            if size is not None and all(d > 0 for d in hw) and list(size) != list(hw):
                errors.append(
                    (
                        f"input_size {size} is not the model input's [height, width] {list(hw)}",
                        ("postprocess", i, "input_size"),
                    )
                )
    if out is not None and "mask_argmax" in names and out.shape and out.layout in ("NHWC", "NCHW"):
        c = out.shape[-1] if out.layout == "NHWC" else out.shape[1]
        if c not in (-1, k):
            errors.append(
                (
                    f"output '{out.name}' has {c} class channels, labels.num_classes is {k}",
                    ("outputs", list(outputs).index(out.name), "shape"),
                )
            )
    return errors
