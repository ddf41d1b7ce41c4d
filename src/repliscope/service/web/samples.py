"""The run page's samples, page by page: every failed and misclassified sample is reachable (classification), every
image with its predicted and ground-truth boxes (detection). Thumbnails are separate PNG responses
(``/runs/{id}/samples/{position}/thumbnail.png``, loaded lazily by the browser) so the page itself stays fast.
No HTTP here."""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from repliscope.evaluation.record import EvaluationRecord, SamplePrediction, SegmentationSample
from repliscope.service.web.metric_format import count_of, value_text

PAGE_SIZE = 50
THUMB_PX = 160
LARGE_PX = 640
"""The side of a sample's larger view (``thumbnail.png?size=large``): its boxes carry their class and score."""
SIZES = {"thumb": THUMB_PX, "large": LARGE_PX}
"""The sizes a sample image is served at (the thumbnail URL's ``size``)."""
DRAW_MIN_SCORE = 0.3
"""Detections drawn on a thumbnail: score at least this (the record keeps up to 100 per image for COCO AP)."""
PRED_COLOUR, TRUTH_COLOUR = (192, 57, 43), (39, 174, 96)
"""Red predicted boxes, green ground truth (the units report's colours)."""


@dataclass(frozen=True)
class SampleLine:
    position: int
    """The sample's index in the record (the thumbnail URL's key)."""
    sample_id: str
    label: str
    predicted: str
    probability: str
    error: str | None
    predicted_boxes: int | None = None
    """Detection: boxes drawn on the thumbnail (score >= :data:`DRAW_MIN_SCORE`); None for other tasks."""
    truth_boxes: int | None = None
    thumbnail: bool = False
    """Whether the run's dataset has this sample's image here (its thumbnail URL answers)."""
    masks: bool = False
    """Segmentation: the record kept this sample's masks (drawn on its thumbnail)."""


@dataclass(frozen=True)
class SamplesPanel:
    show: str
    shows: tuple[str, ...]
    page: int
    pages: int
    total: int
    lines: list[SampleLine]
    thumbnails: bool
    """Whether any listed sample has a thumbnail (else the table has no thumbnail column)."""
    note: str
    headers: tuple[str, str, str] = ("Label", "Predicted", "Probability")
    """The headers of the label, prediction and value columns: classification's, detection's ``Ground truth``
    / ``Predicted`` / ``Best score``, segmentation's ``Truth classes`` / ``Predicted classes`` / ``IoU``."""
    min_score: float | None = None
    """Detection: the score from which the thumbnails draw detections (the page's threshold control starts
    there); None for other tasks."""


def shows_of(task: str) -> tuple[str, ...]:
    """The samples a run page lists for ``task`` (its ``ReportSpec.sample_filters``; the first is the default):
    ``wrong`` failed samples then top-1 misses, ``failed`` failed samples, ``all`` every sample in the record's
    order. A task not registered here: ``all``, ``failed``."""
    from repliscope.tasks.base import TASKS

    return TASKS.get(task).report.sample_filters if task in TASKS else ("all", "failed")


def _boxes(task: str) -> bool:
    """Do the records of ``task`` hold detections (drawn as boxes)?"""
    from repliscope.tasks.base import truth_of

    return truth_of(task) == "boxes"


def _truth_boxes(record: EvaluationRecord, position: int) -> list[list[float]]:
    gt = record.ground_truth
    if gt is None or position >= len(gt.samples):
        return []
    t = gt.samples[position]
    flags = list(zip(t.iscrowd or [False] * len(t.boxes), t.ignore or [False] * len(t.boxes), strict=False))
    return [b for b, (crowd, ignore) in zip(t.boxes, flags, strict=False) if not (crowd or ignore)]


def _masks(task: str) -> bool:
    """Do the records of ``task`` hold label maps (confusion counts, kept masks)?"""
    from repliscope.tasks.base import truth_of

    return truth_of(task) == "masks"


@dataclass(frozen=True)
class MaskFigures:
    """One segmentation sample's own figures, from its confusion counts: the classes its truth and its
    prediction hold (scored pixels), its IoU (the mean over the classes either holds: the image's mIoU) and its
    pixel accuracy; None when no pixel was scored."""

    truth_classes: list[int]
    predicted_classes: list[int]
    iou: float | None
    pixel_accuracy: float | None


def mask_figures(seg: SegmentationSample) -> MaskFigures:
    """:class:`MaskFigures` of a stored segmentation sample (its ``confusion``: ``[truth, predicted, pixels]``
    triples; a prediction outside the model's classes is column ``num_classes``)."""
    from repliscope.tasks.segmentation import dense

    counts = dense(seg)
    k = seg.num_classes
    truth = counts.sum(axis=1)
    predicted = counts[:, :k].sum(axis=0)
    tp = counts[np.arange(k), np.arange(k)]
    union = truth + predicted - tp
    present = union > 0
    total = int(counts.sum())
    return MaskFigures(
        truth_classes=[int(c) for c in np.flatnonzero(truth)],
        predicted_classes=[int(c) for c in np.flatnonzero(predicted)],
        iou=float((tp[present] / union[present]).mean()) if present.any() else None,
        pixel_accuracy=float(tp.sum() / total) if total else None,
    )


def class_names_of(record: EvaluationRecord) -> list[str]:
    """The segmentation classes a record was scored on (its dataset note), else ``class_<i>``."""
    return list(record.dataset.get("segmentation_classes") or [])


def _named(classes: list[int], names: list[str]) -> str:
    return ", ".join(names[c] if c < len(names) else f"class_{c}" for c in classes) or "—"


def _drawn(sample: SamplePrediction, min_score: float = DRAW_MIN_SCORE) -> list[list[float]]:
    return [d.box for d in _kept(sample, min_score)]


def _kept(sample: SamplePrediction, min_score: float) -> list[Any]:
    """The sample's detections with score >= ``min_score``."""
    return [d for d in sample.detections or [] if d.score >= min_score]


def samples_panel(record: EvaluationRecord, show: str, page: int, images: Container[str] | None) -> SamplesPanel:
    """One page of the run's samples filtered by ``show`` (one of :func:`shows_of`); a page past the end is empty.
    ``images``: the sample ids whose image re-loads here (None: none does)."""
    from repliscope.report.sections import class_namer

    namer = class_namer(record.manifest)
    indexed = list(enumerate(record.samples))
    failed = [(i, s) for i, s in indexed if s.error is not None]
    if show == "wrong":
        chosen = failed + [(i, s) for i, s in indexed if s.error is None and s.label is not None and s.top1 != s.label]
    elif show == "failed":
        chosen = failed
    else:
        chosen = indexed
    pages = max(1, -(-len(chosen) // PAGE_SIZE))
    detection, masks = _boxes(record.task), _masks(record.task)
    names = class_names_of(record) if masks else []
    lines = []
    for i, s in chosen[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]:
        if masks:
            fig = mask_figures(s.segmentation) if s.segmentation is not None else None
            lines.append(
                SampleLine(
                    i,
                    s.sample_id,
                    "—" if fig is None else _named(fig.truth_classes, names),
                    "—" if fig is None else _named(fig.predicted_classes, names),
                    value_text("mIoU", None if fig is None else fig.iou),
                    s.error,
                    thumbnail=images is not None and s.sample_id in images,
                    masks=s.segmentation is not None and s.segmentation.predicted is not None,
                )
            )
        elif detection:
            n = len(s.detections or [])
            lines.append(
                SampleLine(
                    i,
                    s.sample_id,
                    count_of(len(_truth_boxes(record, i)), "object"),
                    count_of(n, "detection"),
                    "—" if not s.detections else f"{max(d.score for d in s.detections):.3f}",
                    s.error,
                    predicted_boxes=len(_drawn(s)) if s.error is None else 0,
                    truth_boxes=len(_truth_boxes(record, i)),
                    thumbnail=images is not None and s.sample_id in images,
                )
            )
        else:
            lines.append(
                SampleLine(
                    i,
                    s.sample_id,
                    namer(s.label),
                    namer(s.top1),
                    f"{100 * s.topk_probs[0]:.1f} %" if s.topk_probs else "—",
                    s.error,
                    thumbnail=images is not None and s.sample_id in images,
                )
            )
    what = {"wrong": "failed or misclassified", "failed": "failed", "all": "in the record's order"}[show]
    note = f"{len(chosen)} samples {what}" + (f"; page {page} of {pages}, {PAGE_SIZE} a page." if pages > 1 else ".")
    if detection:
        note += (
            f" Thumbnails: ground truth green (crowd and ignored regions left out), detections with score >= "
            f"{DRAW_MIN_SCORE} red."
        )
    if masks:
        note += (
            " IoU: the image's own mean IoU over the classes its truth or prediction holds. Thumbnails (masks kept "
            "by the record): predicted foreground red, missed truth blue."
        )
    thumbnails = any(x.thumbnail for x in lines)
    if lines and images is None:
        note += " The run's dataset does not re-load with the record's identity here: no thumbnails."
    headers = (
        ("Truth classes", "Predicted classes", "IoU")
        if masks
        else ("Ground truth", "Predicted", "Best score")
        if detection
        else ("Label", "Predicted", "Probability")
    )
    min_score = DRAW_MIN_SCORE if detection else None
    return SamplesPanel(
        show, shows_of(record.task), page, pages, len(chosen), lines, thumbnails, note, headers, min_score
    )


def thumbnail_png(
    record: EvaluationRecord, position: int, data: bytes, px: int = THUMB_PX, min_score: float = DRAW_MIN_SCORE
) -> bytes:
    """A ``px`` (default :data:`THUMB_PX`) thumbnail of the sample's image (at :data:`LARGE_PX`, scaled up when
    smaller); detection: its ground-truth boxes
    (green, 2 px just outside the box) and detections with score >= ``min_score`` (red, 2 px just inside) drawn
    after scaling (crisp colours); at :data:`LARGE_PX` each detection carries its class name and score
    (:func:`box_label`)."""
    from PIL import Image, ImageDraw

    with Image.open(io.BytesIO(data)) as opened:
        im = opened.convert("RGB")
    w0, h0 = im.size
    if px >= LARGE_PX:  # the larger view: a small image is scaled up too
        scale = px / max(w0, h0)
        im = im.resize((max(1, round(w0 * scale)), max(1, round(h0 * scale))), Image.Resampling.LANCZOS)
    else:
        im.thumbnail((px, px))
    sx, sy = im.size[0] / w0, im.size[1] / h0
    if _boxes(record.task):
        sample = record.samples[position]
        draw = ImageDraw.Draw(im)
        kept = _kept(sample, min_score)
        # the truth just outside its box, a detection just inside: a perfect detection shows both lines
        for boxes, colour, grow in (
            (_truth_boxes(record, position), TRUTH_COLOUR, 2),
            ([d.box for d in kept], PRED_COLOUR, 0),
        ):
            for x1, y1, x2, y2 in boxes:
                xa, xb = sorted((x1 * sx, x2 * sx))
                ya, yb = sorted((y1 * sy, y2 * sy))
                rect = [xa - grow, ya - grow, max(xa, xb - 1) + grow, max(ya, yb - 1) + grow]
                draw.rectangle(rect, outline=colour, width=2)
        if px >= LARGE_PX:
            names = detection_names(record)
            for d in kept:
                _label(draw, box_label(d, names), min(d.box[0], d.box[2]) * sx, min(d.box[1], d.box[3]) * sy)
    seg = record.samples[position].segmentation
    if _masks(record.task) and seg is not None and seg.predicted is not None and seg.truth is not None:
        im = _tinted(im, seg, (w0, h0), class_names_of(record))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


MISSED_COLOUR = (40, 90, 220)


def detection_names(record: EvaluationRecord) -> dict[int, str]:
    """Dataset category id -> class name of a detection record: its ground truth's categories (the dataset's),
    else the names of its per-class table; ``{}`` when it has neither."""
    if record.ground_truth is not None and record.ground_truth.categories:
        return {int(k): str(v) for k, v in record.ground_truth.categories.items()}
    return {int(c["class_id"]): str(c["name"]) for c in record.per_class or [] if c.get("name")}


def box_label(detection: Any, names: Mapping[int, str] | None = None) -> str:
    """What a detection's box says on the larger view: its class name (``names``: category id -> name, see
    :func:`detection_names`) and score to 2 decimals (``person 0.87``); ``class <id> <score>`` when the id has no
    name."""
    name = (names or {}).get(detection.class_id)
    return f"{name if name else f'class {detection.class_id}'} {detection.score:.2f}"


def _label(draw: Any, text: str, x: float, y: float) -> None:
    """``text`` in white on the predicted colour, just above (x, y) (inside the image when the box is at the
    top)."""
    left, top, right, bottom = draw.textbbox((0, 0), text)
    h = bottom - top + 2
    ty = y - h if y - h >= 0 else y
    draw.rectangle([x, ty, x + right - left + 3, ty + h], fill=PRED_COLOUR)
    draw.text((x + 2, ty + 1 - top), text, fill=(255, 255, 255))


def _tinted(im: Any, seg: SegmentationSample, size: tuple[int, int], names: list[str]) -> Any:
    """``im`` (the thumbnail) with the sample's predicted foreground tinted red and the truth's foreground the
    prediction missed tinted blue (void left out); the masks must match the image's ``size`` (else ``im``)."""
    from PIL import Image

    from repliscope.tasks.segmentation import VOID, background_index, labels_of_rle

    if (seg.size_hw[1], seg.size_hw[0]) != size:
        return im
    background = background_index(names) if "background" in names else 0
    pred, truth = labels_of_rle(seg.predicted or {}, seg.size_hw), labels_of_rle(seg.truth or {}, seg.size_hw)
    void = truth == VOID

    def small(mask: np.ndarray) -> np.ndarray:
        return np.asarray(Image.fromarray(mask.astype(np.uint8) * 255).resize(im.size, Image.Resampling.NEAREST)) > 0

    fg_p = small((pred != background) & ~void)
    missed = small((truth != background) & ~void & (pred != truth))
    out = np.asarray(im, np.float32).copy()
    for mask, colour in ((fg_p, PRED_COLOUR), (missed & ~fg_p, MISSED_COLOUR)):
        out[mask] = 0.45 * out[mask] + 0.55 * np.asarray(colour, np.float32)
    return Image.fromarray(out.astype(np.uint8))


class _Recent:
    """The last few runs' (record, image reader) pairs: the thumbnails of one page ask for the same run ~50 times.
    A stored run is immutable until it is deleted, and another process (``repliscope runs delete``, a second
    server) cannot tell this cache: each hit is checked against the runs table as the compare cache checks its own
    (:func:`repliscope.service.web.compare_cache.stored_state`, one indexed row); a run deleted since, or stored
    again with other contents, is dropped and read anew (an unknown run is then the store's StoreError)."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self.items: OrderedDict[tuple[str, str], tuple[EvaluationRecord, Any]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, store: Any, run_id: str, record: EvaluationRecord | None = None) -> tuple[EvaluationRecord, Any]:
        """The run's (record, reader); ``record``: the run's record when the caller has it already."""
        from repliscope.service.web.compare_cache import stored_state
        from repliscope.service.web.sample_source import sample_reader

        key = (store.url, run_id)
        with self.lock:
            kept = self.items.get(key)
        if kept is not None:
            if stored_state(store, kept[0]) == "same":
                with self.lock:
                    if key in self.items:
                        self.items.move_to_end(key)
                return kept
            with self.lock:  # deleted or replaced by another process: every key holding it goes
                for stale in [k for k, v in self.items.items() if v is kept]:
                    del self.items[stale]
        record = record if record is not None else store.get(run_id)
        value = (record, sample_reader(record, store))
        with self.lock:
            self.items[(store.url, record.run_id)] = value
            self.items[key] = value
            while len(self.items) > self.size:
                self.items.popitem(last=False)
        return value


RECENT = _Recent()


def sample_thumbnail(
    store: Any, run_id: str, position: int, size: str = "thumb", min_score: float = DRAW_MIN_SCORE
) -> bytes | None:
    """The PNG of sample ``position`` of run ``run_id`` at ``size`` (one of :data:`SIZES`), detections drawn from
    ``min_score`` (StoreError for an unknown run); None when the position is out of range or the dataset does not
    re-load with the record's identity."""
    px = SIZES[size]
    record, read = RECENT.get(store, run_id)
    if read is None or not 0 <= position < len(record.samples):
        return None
    data = read(record.samples[position].sample_id)
    if data is None:
        return None
    try:
        return thumbnail_png(record, position, data, px, min_score)
    except Exception:  # an unreadable image: no thumbnail
        return None


def images_of(store: Any, record: EvaluationRecord) -> Any:
    """The run's :class:`repliscope.service.web.sample_source.SampleImages`, None when its dataset does not re-load here
    (the run is kept in :data:`RECENT` for its thumbnails)."""
    return RECENT.get(store, record.run_id, record)[1]
