"""COCO bbox evaluation re-accumulated over resampled images: fast bootstrap intervals of the 12 numbers.

:class:`CocoResampler` runs COCOeval's per-image matching ONCE (pycocotools ``evaluateImg`` semantics: detections by
score, greedy to the highest-IoU unmatched ground truth, crowd / out-of-range boxes ignored, 10 IoU thresholds
0.5:0.05:0.95, area ranges all/small/medium/large, 100 detections per image and class), then :meth:`stats`
accumulates with a weight per image (how often the bootstrap drew it). Drawing an image twice duplicates its
detections with the same score, so weighting each detection by its image's count gives the same precision / recall
envelope as evaluating the duplicated set (only the order of equal scores across different images may differ, as it
does between any two orderings of the images). With all weights 1 it reproduces COCOeval's 12 numbers bit for bit
(tested against pycocotools). Boxes are COCO's ``[x, y, w, h]`` as given and the IoU is pycocotools' ``bbIou``
arithmetic (:func:`box_iou`), so every IoU is pycocotools' double. Everything is vectorised over IoU thresholds and
categories: segments are kept apart with complex keys (numpy orders complex numbers lexicographically), so no
comparison is rounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

IOU_THRS = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)
REC_THRS = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)
AREA_RANGES = ((0.0, 1e5**2), (0.0, 32.0**2), (32.0**2, 96.0**2), (96.0**2, 1e5**2))
MAX_DETS = (1, 10, 100)
WORK_BUDGET = 50_000_000
MIN_REPLICATES = 100
STAT_NAMES = ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")


@dataclass(frozen=True)
class ImageTruth:
    """One image's ground truth: ``boxes`` (G, 4) float64 ``[x, y, w, h]`` pixels as the annotation file gives
    them (COCO's ``bbox``, never recomputed from corners), ``classes`` (G,) int, ``areas`` (G,)
    (COCO's annotation area), ``crowd`` (G,) bool (crowd or not-to-be-scored)."""

    boxes: np.ndarray
    classes: np.ndarray
    areas: np.ndarray
    crowd: np.ndarray


@dataclass(frozen=True)
class ImageDetections:
    """One image's detections: ``boxes`` (D, 4) float64 ``[x, y, w, h]`` pixels (a COCO results file's
    ``bbox``), ``scores`` (D,), ``classes`` (D,) int."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray


def box_iou(dt: np.ndarray, gt: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """(D, G) IoU of ``[x, y, w, h]`` boxes with the arithmetic of COCO's ``maskUtils.iou`` for boxes (``bbIou`` in
    pycocotools' ``maskApi.c``), operation for operation: the areas are ``w * h`` of the numbers as given, the
    intersection ``fmin(x + w, ...) - fmax(x, ...)`` per axis (0 unless both sides > 0), the union
    ``da + ga - i``, a crowd ground truth's union the detection's area."""
    if len(dt) == 0 or len(gt) == 0:
        return np.zeros((len(dt), len(gt)))
    return _row_iou(dt, np.broadcast_to(gt[None, :, :], (len(dt), *gt.shape)), np.broadcast_to(crowd, (len(gt),)))


@dataclass(frozen=True)
class _FlatTruth:
    """Every image's ground truth of the evaluated categories in one array each, sorted by (image, category),
    the image's own order kept within: ``image`` / ``segment`` (category index) (G,), ``boxes`` (G, 4),
    ``areas`` (G,), ``crowd`` (G,) bool."""

    image: np.ndarray
    segment: np.ndarray
    boxes: np.ndarray
    areas: np.ndarray
    crowd: np.ndarray


@dataclass(frozen=True)
class _FlatDetections:
    """Every image's detections of the evaluated categories, at most ``MAX_DETS[-1]`` per (image, category) by
    score, sorted by (image, category, -score, the image's own order): ``image`` / ``segment`` / ``rank`` (the
    detection's place in its (image, category) by score) (D,), ``boxes`` (D, 4), ``scores`` (D,)."""

    image: np.ndarray
    segment: np.ndarray
    boxes: np.ndarray
    scores: np.ndarray
    rank: np.ndarray


def _category_index(classes: np.ndarray, cat_ids: Sequence[int]) -> np.ndarray:
    """Index of each class in ``cat_ids``, -1 for a class that is not one of them."""
    cats = np.asarray(cat_ids, np.int64)
    if not len(cats) or not len(classes):
        return np.full(len(classes), -1, np.int64)
    order = np.argsort(cats, kind="stable")
    pos = np.minimum(np.searchsorted(cats[order], classes), len(cats) - 1)
    return np.where(cats[order][pos] == classes, order[pos], -1)


def _concat(parts: list[np.ndarray], dtype: Any, width: int = 0) -> np.ndarray:
    if not parts:
        return np.zeros((0, width) if width else 0, dtype)
    return np.concatenate([np.asarray(p, dtype).reshape(-1, width) if width else np.asarray(p, dtype) for p in parts])


def _flat_truth(truths: Sequence[ImageTruth], cat_ids: Sequence[int]) -> _FlatTruth:
    image = np.repeat(np.arange(len(truths)), [len(t.classes) for t in truths])
    segment = _category_index(_concat([t.classes for t in truths], np.int64), cat_ids)
    boxes = _concat([t.boxes for t in truths], float, 4)
    areas = _concat([t.areas for t in truths], float)
    crowd = _concat([t.crowd for t in truths], bool)
    keep = segment >= 0
    order = np.lexsort((segment[keep], image[keep]))  # stable: the image's own order within a category
    return _FlatTruth(
        image[keep][order], segment[keep][order], boxes[keep][order], areas[keep][order], crowd[keep][order]
    )


def _flat_detections(detections: Sequence[ImageDetections], cat_ids: Sequence[int]) -> _FlatDetections:
    counts = [len(d.classes) for d in detections]
    image = np.repeat(np.arange(len(detections)), counts)
    within = np.concatenate([np.arange(n) for n in counts]) if counts else np.zeros(0, np.int64)
    segment = _category_index(_concat([d.classes for d in detections], np.int64), cat_ids)
    boxes = _concat([d.boxes for d in detections], float, 4)
    scores = _concat([d.scores for d in detections], float)
    keep = np.flatnonzero(segment >= 0)
    # COCOeval: per (image, category) by score, mergesort (ties keep the image's order), the first 100
    keep = keep[np.lexsort((within[keep], -scores[keep], segment[keep], image[keep]))]
    key = image[keep] * max(len(cat_ids), 1) + segment[keep]
    first = np.searchsorted(key, key, side="left")
    rank = np.arange(len(keep)) - first
    keep, rank = keep[rank < MAX_DETS[-1]], rank[rank < MAX_DETS[-1]]
    return _FlatDetections(image[keep], segment[keep], boxes[keep], scores[keep], rank)


def _gt_ignore(gt: _FlatTruth) -> np.ndarray:
    """(A, G): ground truth COCOeval ignores in each area range (crowd, or its area outside the range)."""
    return np.stack([gt.crowd | (gt.areas < lo) | (gt.areas > hi) for lo, hi in AREA_RANGES])


def _row_iou(dt: np.ndarray, gt: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """(n, P) IoU of detection ``dt[i]`` (n, 4) with each of its own P ground-truth boxes ``gt[i]`` (n, P, 4), all
    ``[x, y, w, h]``, ``crowd`` (n, P) or (P,): ``bbIou`` of pycocotools' ``maskApi.c`` element for element
    (``fmin`` / ``fmax`` as C's, the same operations in the same order, so every IoU is the same double)."""
    d = dt[:, None, :]
    w = np.fmin(d[..., 2] + d[..., 0], gt[..., 2] + gt[..., 0]) - np.fmax(d[..., 0], gt[..., 0])
    h = np.fmin(d[..., 3] + d[..., 1], gt[..., 3] + gt[..., 1]) - np.fmax(d[..., 1], gt[..., 1])
    overlap = (w > 0) & (h > 0)
    inter = w * h
    da = d[..., 2] * d[..., 3]
    ga = gt[..., 2] * gt[..., 3]
    union = np.where(crowd, da, da + ga - inter)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(overlap, inter / union, 0.0)


def _last_best(iou: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """Index along the last axis of the LAST highest ``iou`` among ``eligible`` entries (COCOeval keeps a later
    ground truth whose IoU equals the best so far)."""
    x = np.where(eligible, iou, -1.0)
    return x.shape[-1] - 1 - np.argmax(x[..., ::-1], axis=-1)


def _match_single(
    gt: _FlatTruth,
    dt: _FlatDetections,
    ignore: np.ndarray,
    sel: np.ndarray,
    start: np.ndarray,
    matched: np.ndarray,
    on_ignored: np.ndarray,
) -> None:
    """:func:`_match_all` for the detections ``sel`` of (image, category) pairs with ONE ground-truth box, without
    stepping through ranks: the first detection (by score) with IoU >= the threshold takes it, and every such
    detection when it is a crowd region (whatever the area range; ignored there when the box is)."""
    if not len(sel):
        return
    g = start[sel]
    crowd = gt.crowd[g]
    iou = _row_iou(dt.boxes[sel], gt.boxes[g][:, None, :], crowd[:, None])[:, 0]
    hit = iou[None, :] >= np.minimum(IOU_THRS, 1 - 1e-10)[:, None]  # (T, n)
    seen = np.cumsum(hit, axis=1)
    new_pair = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])  # sel is in (image, category, rank) order
    before = np.concatenate([np.zeros((len(IOU_THRS), 1), seen.dtype), seen], axis=1)[:, new_pair]
    seen = seen - np.repeat(before, np.diff(np.r_[new_pair, len(g)]), axis=1)
    hit &= crowd[None, :] | (seen == 1)
    matched[:, :, sel] = hit[:, None, :]
    on_ignored[:, :, sel] = hit[:, None, :] & ignore[:, g][None, :, :]


def _match_all(gt: _FlatTruth, dt: _FlatDetections, ignore: np.ndarray, n_k: int) -> tuple[np.ndarray, np.ndarray]:
    """COCOeval's greedy matching (``evaluateImg``) of every (image, category) at once: (matched (T, A, D) bool,
    matched-to-an-ignored-ground-truth (T, A, D) bool) per IoU threshold and area range.

    Per threshold and area range, detections in score order take the unmatched, not ignored ground truth with
    the highest IoU >= the threshold (the last of equals), else an ignored one (a crowd region can be taken
    again). The pairs are grouped by their number of ground-truth boxes rounded up to a power of two, and each
    group steps through the detection ranks (at most 100) with every pair of the group in one array."""
    n_t, n_a, n_d = len(IOU_THRS), len(AREA_RANGES), len(dt.image)
    matched = np.zeros((n_t, n_a, n_d), bool)
    on_ignored = np.zeros((n_t, n_a, n_d), bool)
    key_g = gt.image * max(n_k, 1) + gt.segment
    key_d = dt.image * max(n_k, 1) + dt.segment
    start = np.searchsorted(key_g, key_d, side="left")
    size = np.searchsorted(key_g, key_d, side="right") - start
    pad = np.where(size > 0, 2 ** np.ceil(np.log2(np.maximum(size, 1))).astype(np.int64), 0)
    thresholds = np.minimum(IOU_THRS, 1 - 1e-10)[None, :, None, None]
    _match_single(gt, dt, ignore, np.flatnonzero(size == 1), start, matched, on_ignored)
    for p in np.unique(pad[pad > 1]):
        sel = np.flatnonzero(pad == p)
        slots = np.arange(p)
        valid = slots[None, :] < size[sel, None]  # (n, P)
        g_idx = np.where(valid, start[sel, None] + slots[None, :], start[sel, None])
        crowd = gt.crowd[g_idx] & valid
        ious = _row_iou(dt.boxes[sel], gt.boxes[g_idx], crowd)
        ign = np.moveaxis(ignore[:, g_idx], 0, 1)  # (n, A, P)
        _, pair = np.unique(start[sel], return_inverse=True)
        taken = np.zeros((int(pair.max()) + 1, n_t, n_a, int(p)), bool)
        rank = dt.rank[sel]
        by_rank = np.argsort(rank, kind="stable")
        bounds = np.searchsorted(rank[by_rank], np.arange(int(rank.max()) + 2))
        for r in range(int(rank.max()) + 1):
            rows = by_rank[bounds[r] : bounds[r + 1]]  # at most one detection per (image, category)
            g = pair[rows]
            iou = ious[rows][:, None, None, :]
            ok = valid[rows][:, None, None, :] & (iou >= thresholds)  # (n, T, 1, P)
            ig = ign[rows][:, None, :, :]  # (n, 1, A, P)
            free = ~taken[g]
            first = ok & ~ig & free
            second = ok & ig & (crowd[rows][:, None, None, :] | free)
            has_first, has_second = first.any(axis=-1), second.any(axis=-1)  # (n, T, A)
            m = np.where(has_first, _last_best(iou, first), _last_best(iou, second))
            hit = has_first | has_second
            n_i, t_i, a_i = np.nonzero(hit)
            taken[g[n_i], t_i, a_i, m[n_i, t_i, a_i]] = True
            matched[:, :, sel[rows]] = np.moveaxis(hit, 0, -1)
            on_ignored[:, :, sel[rows]] = np.moveaxis(~has_first & has_second, 0, -1)
    return matched, on_ignored


@dataclass
class _Area:
    """Every kept detection of one area range, sorted by (category, -score, image, rank)."""

    image: np.ndarray  # (N,) image index
    segment: np.ndarray  # (N,) category index
    rank: np.ndarray  # (N,) rank of the detection within its (image, category) by score
    tps: np.ndarray  # (T, N) bool
    fps: np.ndarray  # (T, N) bool
    npig: np.ndarray  # (images, K) count of non-ignored ground truth
    n_k: int = 0
    _flat: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.starts = np.searchsorted(self.segment, np.arange(self.n_k), side="left")
        self.ends = np.searchsorted(self.segment, np.arange(self.n_k), side="right")

    def flat_segment(self, n_k: int) -> np.ndarray:
        """(T * N,) id ``t * K + category`` of every (threshold, detection), computed once."""
        if self._flat is None:
            n_t = self.tps.shape[0]
            self._flat = (np.arange(n_t)[:, None] * n_k + self.segment[None, :]).ravel()
        return self._flat

    @property
    def work(self) -> int:
        """Entries one accumulation goes through (thresholds x detections)."""
        return int(self.tps.size)


class CocoResampler:
    """Per-image COCO bbox matching of ``truths``/``detections`` (same image order), categories ``cat_ids``."""

    def __init__(
        self, truths: Sequence[ImageTruth], detections: Sequence[ImageDetections], cat_ids: Sequence[int]
    ) -> None:
        self.n_images = len(truths)
        self.cat_ids = list(cat_ids)
        n_k = len(self.cat_ids)
        gt = _flat_truth(truths, self.cat_ids)
        dt = _flat_detections(detections, self.cat_ids)
        ignore = _gt_ignore(gt)  # (A, G)
        npig = np.zeros((len(AREA_RANGES), self.n_images, n_k))
        for a in range(len(AREA_RANGES)):
            np.add.at(npig[a], (gt.image[~ignore[a]], gt.segment[~ignore[a]]), 1.0)
        matched, on_ignored = _match_all(gt, dt, ignore, n_k)
        d_area = dt.boxes[:, 2] * dt.boxes[:, 3]  # COCO's loadRes: a detection's area is w * h
        order = np.lexsort((dt.rank, dt.image, -dt.scores, dt.segment))  # COCOeval's order, once for all ranges
        image, segment, rank = dt.image[order], dt.segment[order], dt.rank[order]
        matched, on_ignored, d_area = matched[:, :, order], on_ignored[:, :, order], d_area[order]
        self._areas = []
        for a, (lo, hi) in enumerate(AREA_RANGES):
            outside = (d_area < lo) | (d_area > hi)
            ignored = on_ignored[:, a] | (~matched[:, a] & outside[None, :])
            self._areas.append(self._pack(image, segment, rank, matched[:, a], ignored, npig[a]))

    def _pack(
        self,
        image: np.ndarray,
        segment: np.ndarray,
        rank: np.ndarray,
        matched: np.ndarray,
        ignored: np.ndarray,
        npig: np.ndarray,
    ) -> _Area:
        """One area range's :class:`_Area` from detections already in COCOeval's order."""
        n_t, n_k = len(IOU_THRS), len(self.cat_ids)
        if not len(image):
            empty = np.zeros(0, int)
            return _Area(empty, empty, empty, np.zeros((n_t, 0), bool), np.zeros((n_t, 0), bool), npig, n_k)
        tps, fps = matched & ~ignored, ~matched & ~ignored
        # Detections that can never move a number, whatever the weights: ignored at every threshold (a point that
        # repeats the previous one), or false positives after the last true positive of their category (they
        # neither raise recall nor come before any recall threshold is reached). Dropping them is exact.
        position = np.arange(len(segment))
        any_tp = tps.any(axis=0)
        last_tp = np.full(int(segment.max()) + 1, -1)
        np.maximum.at(last_tp, segment[any_tp], position[any_tp])
        keep = (tps | fps).any(axis=0) & (position <= last_tp[segment])
        tps, fps = np.ascontiguousarray(tps[:, keep]), np.ascontiguousarray(fps[:, keep])  # rows: cumsum, ravel
        return _Area(image[keep], segment[keep], rank[keep], tps, fps, npig, n_k)

    def stats(self, weights: np.ndarray | None = None) -> np.ndarray:
        """The 12 COCO numbers (NaN where COCOeval prints -1: no ground truth in that range) with image ``i``
        counted ``weights[i]`` times (default: once)."""
        return _category_mean(self.per_category(weights))

    def per_category(self, weights: np.ndarray | None = None) -> np.ndarray:
        """(12, K): each COCO number per category (its mean over IoU thresholds and recall points); NaN for a
        category without ground truth in that area range. A number is the mean over its defined categories."""
        w = np.ones(self.n_images) if weights is None else np.asarray(weights, float)
        out = np.full((12, len(self.cat_ids)), np.nan)
        with np.errstate(invalid="ignore"):
            for a in range(len(AREA_RANGES)):
                precision, recall = self._accumulate(self._areas[a], w, MAX_DETS[-1])
                if a == 0:
                    out[0], out[1], out[2] = precision.mean(axis=(0, 2)), precision[0].mean(1), precision[5].mean(1)
                    out[8] = recall.mean(axis=0)
                else:
                    out[2 + a], out[8 + a] = precision.mean(axis=(0, 2)), recall.mean(axis=0)
            for j, m in enumerate(MAX_DETS[:2]):
                out[6 + j] = self._accumulate(self._areas[0], w, m, precision=False)[1].mean(axis=0)
        return out

    def cocoeval_values(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """COCOeval's own numbers, averaged as its ``summarize`` averages them (one mean over every defined
        (threshold, recall point, category) entry, in its array order): (the 12 stats, -1 where COCOeval prints
        -1; AP per category and AR@100 per category over all areas, NaN for a category without ground truth).
        Equal to faster-coco-eval's numbers bit for bit on the test fixtures."""
        w = np.ones(self.n_images)
        stats = np.full(12, -1.0)

        def mean(values: np.ndarray) -> float:
            values = np.nan_to_num(values, nan=-1.0)
            defined = values[values > -1]
            return float(np.mean(defined)) if defined.size else -1.0

        def per_category(values: np.ndarray) -> np.ndarray:  # (T, R, K) or (T, K) -> (K,)
            out = np.full(values.shape[-1], np.nan)
            for k in range(values.shape[-1]):
                v = mean(values[..., k])
                out[k] = np.nan if v == -1.0 else v
            return out

        class_ap = class_ar = np.full(len(self.cat_ids), np.nan)
        for a in range(len(AREA_RANGES)):
            q, recall = self._accumulate(self._areas[a], w, MAX_DETS[-1])
            precision = q.transpose(0, 2, 1)  # COCOeval's (T, R, K)
            if a == 0:
                stats[0], stats[1], stats[2] = mean(precision), mean(precision[0]), mean(precision[5])
                stats[8] = mean(recall)
                class_ap, class_ar = per_category(precision), per_category(recall)
            else:
                stats[2 + a], stats[8 + a] = mean(precision), mean(recall)
        for j, m in enumerate(MAX_DETS[:2]):
            stats[6 + j] = mean(self._accumulate(self._areas[0], w, m, precision=False)[1])
        return stats, class_ap, class_ar

    def bounded(self, replicates: int) -> int:
        """``replicates`` capped for large runs, deterministically from the data (never by a clock): at most
        :data:`WORK_BUDGET` / (thresholds x detections over the four area ranges) replicates, and never fewer
        than :data:`MIN_REPLICATES` (about 6 s per evaluation on one 2024 CPU core at the cap)."""
        work = sum(a.work for a in self._areas)
        return min(replicates, max(MIN_REPLICATES, WORK_BUDGET // max(work, 1)))

    def ap(self, weights: np.ndarray | None = None) -> float:
        """AP (IoU .50:.95, all areas, 100 detections) alone: a quarter of :meth:`stats`' work."""
        w = np.ones(self.n_images) if weights is None else np.asarray(weights, float)
        return _mean(self._accumulate(self._areas[0], w, MAX_DETS[-1])[0])

    def per_class(self, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(AP per category, AR@100 per category), all areas; NaN for a category without ground truth."""
        w = np.ones(self.n_images) if weights is None else np.asarray(weights, float)
        precision, recall = self._accumulate(self._areas[0], w, MAX_DETS[-1])
        with np.errstate(invalid="ignore"):
            return precision.mean(axis=(0, 2)), recall.mean(axis=0)

    def _accumulate(
        self, ar: _Area, w: np.ndarray, max_det: int, precision: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """(precision (T, K, R), recall (T, K)) with NaN for categories without non-ignored ground truth."""
        n_t, n_k, n_r = len(IOU_THRS), len(self.cat_ids), len(REC_THRS)
        npig = w @ ar.npig  # (K,)
        wd = np.where(ar.rank < max_det, w[ar.image], 0.0)
        seg, starts, ends, tps, fps, flat = ar.segment, ar.starts, ar.ends, ar.tps, ar.fps, None
        drawn = wd > 0
        if not drawn.all():
            # A detection of weight 0 (its image not drawn, or beyond max_det) adds nothing to any cumulative sum:
            # its point repeats the previous one of its category (same precision, same recall: same slot and
            # value below), or is a category's leading (0, 0) point, whose precision 0 never raises a maximum.
            # Dropping them is exact, and saves a third of a bootstrap replicate's work.
            wd, seg, tps = wd[drawn], seg[drawn], tps[:, drawn]
            fps = fps[:, drawn] if precision else fps
            starts = np.searchsorted(seg, np.arange(n_k), side="left")
            ends = np.searchsorted(seg, np.arange(n_k), side="right")
            flat = (np.arange(n_t)[:, None] * n_k + seg[None, :]).ravel()
        tp = np.cumsum(tps * wd, axis=1)  # integer counts in float64: exact
        tp0 = np.concatenate([np.zeros((n_t, 1)), tp], axis=1)
        total_tp = tp0[:, ends] - tp0[:, starts]  # (T, K)
        valid = npig > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            recall = np.where(valid, total_tp / npig, np.nan)
        if not precision:
            return np.empty((n_t, n_k, n_r)), recall
        sizes = ends - starts
        tp -= np.repeat(tp0[:, starts], sizes, axis=1)  # cumulative within each category
        fp = np.cumsum(fps * wd, axis=1)
        fp -= np.repeat(np.concatenate([np.zeros((n_t, 1)), fp], axis=1)[:, starts], sizes, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            rc = tp / npig[seg]
        pr = tp / (fp + tp + np.spacing(1))
        # q[r] = the precision envelope (max to the right) at the first point with recall >= REC_THRS[r] = the
        # max precision over the points whose recall reaches threshold r or a later one (recall only grows
        # along a category): a max per (threshold, category, recall point), then a running max; exact
        reach = _thresholds_reached(np.nan_to_num(rc, nan=0.0).ravel())
        slot = (ar.flat_segment(n_k) if flat is None else flat) * n_r + reach - 1
        fill = np.zeros(n_t * n_k * n_r)
        np.maximum.at(fill, slot, pr.ravel())
        q = np.maximum.accumulate(fill.reshape(n_t * n_k, n_r)[:, ::-1], axis=1)[:, ::-1].reshape(n_t, n_k, n_r)
        q[:, ~valid, :] = np.nan
        return q, recall


def _thresholds_reached(rc: np.ndarray) -> np.ndarray:
    """How many of :data:`REC_THRS` are <= each recall (COCOeval's ``searchsorted(rc, recThrs, side="left")``
    seen from the recall side)."""
    return np.searchsorted(REC_THRS, rc, side="right")


def _mean(values: np.ndarray) -> float:
    """Mean over defined entries (COCOeval averages entries > -1); NaN when none is defined."""
    finite = values[~np.isnan(values)]
    return float(finite.mean()) if finite.size else float("nan")


def _category_mean(per_category: np.ndarray) -> np.ndarray:
    """Mean over the defined (non-NaN) categories of each row; NaN for a row with none."""
    defined = ~np.isnan(per_category)
    counts = defined.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, np.where(defined, per_category, 0.0).sum(axis=-1) / np.maximum(counts, 1), np.nan)


def bootstrap_deltas(resampler: CocoResampler, replicates: int, seed: int) -> np.ndarray:
    """(replicates, 12): each replicate's numbers minus the full set's numbers ON THE CATEGORIES THE REPLICATE
    DEFINES (NaN where the replicate defines none). Images are drawn with replacement (numpy
    ``default_rng(seed)`` multinomial counts).

    COCO's numbers are means over the categories that have ground truth, and a replicate that misses every image
    of a rare category drops that category from its mean; comparing each replicate with the full set on the same
    categories keeps that change of composition out of the interval (:func:`corrected_interval` of the
    deltas)."""
    rng = np.random.default_rng(seed)
    n = resampler.n_images
    full = resampler.per_category()
    replicates = resampler.bounded(replicates)
    out = np.empty((replicates, 12))
    for b in range(replicates):
        counts = rng.multinomial(n, np.full(n, 1.0 / n)) if n else np.zeros(0)
        rep = resampler.per_category(counts)
        out[b] = _category_mean(rep) - _category_mean(np.where(np.isnan(rep), np.nan, full))
    return out


BIAS_FACTOR = 2.0
"""How many times the bootstrap's own bias estimate :func:`corrected_interval` subtracts. A COCO number on a
sample of images is biased upward (the precision envelope of fewer objects is higher), and the bootstrap sees
about half of that bias once the categories have some 30 objects each (``benchmarks/bench_interval_coverage.py``:
0.68 of 1.49 points at 100 images of its default world, 1.00 of 1.98 at 400 images of its sparse one); twice its
estimate centres the interval. With fewer objects per category it sees less (1.71 of 8.72 points at 30 sparse
images) and the verdict does not judge (:data:`repliscope.metrics.intervals.MIN_OBJECTS_PER_CATEGORY`)."""


def corrected_interval(
    value: float,
    deltas: np.ndarray,
    n: int,
    confidence: float = 0.95,
    bounds: tuple[float, float] = (0.0, 1.0),
    bias_factor: float = BIAS_FACTOR,
) -> tuple[float, float]:
    """The interval ``evaluate`` gives a COCO number (a fraction) of ``n`` images from its bootstrap ``deltas``
    (:func:`bootstrap_deltas`' column; NaN entries left out): centred on ``value`` minus :data:`BIAS_FACTOR` times
    the mean delta (the bias), half-width Student's t quantile (n - 1 degrees of freedom) x the deltas' standard
    deviation x sqrt(n / (n - 1)), widened to hold ``value`` itself (a reader checks the measured number against
    its interval; the bias correction alone can leave it just outside) and clipped to ``bounds`` ([0, 1] for a
    fraction; [-1, 1] for a difference of two fractions, a paired ΔAP). ``(value, value)`` when fewer than two
    deltas are defined or every delta is 0. Its measured coverage is in docs/benchmarks.md ("Interval coverage");
    the percentile interval it replaced covered a population's AP about 80 % of the time at every size
    measured."""
    from scipy.special import stdtrit

    d = np.asarray(deltas, float)
    d = d[~np.isnan(d)]
    if d.size < 2 or n < 2:
        return value, value
    centre = value - bias_factor * float(np.mean(d))
    half = float(stdtrit(n - 1, 0.5 + 0.5 * confidence)) * float(np.std(d, ddof=1)) * float(np.sqrt(n / (n - 1)))
    return max(bounds[0], min(centre - half, value)), min(bounds[1], max(centre + half, value))


def ap_replicate_deltas(resampler: CocoResampler, replicates: int, seed: int) -> np.ndarray:
    """(replicates,) :func:`bootstrap_deltas`' AP column alone (each replicate's AP minus the full set's AP on the
    categories the replicate defines; NaN where it defines none), with the same draws for the same ``seed``: a
    quarter of the work (one area range). The coverage benchmark's replicates."""
    rng = np.random.default_rng(seed)
    n = resampler.n_images
    full, _ = resampler.per_class()
    out = np.empty(replicates)
    for b in range(replicates):
        counts = rng.multinomial(n, np.full(n, 1.0 / n)) if n else np.zeros(0)
        rep, _ = resampler.per_class(counts)
        with np.errstate(invalid="ignore"):
            out[b] = _mean(rep) - _mean(np.where(np.isnan(rep), np.nan, full))
    return out


INTERVAL_METHODS = ("percentile", "basic", "bca", "normal_bc", "corrected")
"""The interval methods the coverage benchmark compares (:func:`ap_interval`)."""


def _jackknife_ap(resampler: CocoResampler) -> np.ndarray:
    """(n,) AP with each image left out once (BCa's acceleration)."""
    out = np.empty(resampler.n_images)
    for i in range(resampler.n_images):
        w = np.ones(resampler.n_images)
        w[i] = 0.0
        out[i] = resampler.ap(w)
    return out


def ap_interval(resampler: CocoResampler, value: float, deltas: np.ndarray, method: str) -> tuple[float, float]:
    """The 95 % interval of ``value`` (the sample's AP) from its replicates' ``deltas`` by ``method`` (one of
    :data:`INTERVAL_METHODS`; ``corrected`` is :func:`corrected_interval`, what ``evaluate`` uses; the others are
    the textbook ones it was compared with: percentile, basic, BCa with a jackknife acceleration, and a normal
    interval with one bootstrap bias correction)."""
    from scipy.special import ndtr, ndtri
    from scipy.stats import t as student_t

    d = deltas[~np.isnan(deltas)]
    n = resampler.n_images
    if method == "percentile":
        low, high = value + np.percentile(d, [2.5, 97.5])
    elif method == "basic":
        low, high = value - np.percentile(d, [97.5, 2.5])
    elif method == "normal_bc":
        half = float(student_t.ppf(0.975, max(n - 1, 1))) * float(np.std(d, ddof=1)) * np.sqrt(n / max(n - 1, 1))
        low, high = value - float(np.mean(d)) - half, value - float(np.mean(d)) + half
    elif method == "corrected":
        low, high = corrected_interval(value, deltas, n)
    elif method == "bca":
        z0 = float(ndtri(np.clip(np.mean(d < 0) + 0.5 * np.mean(d == 0), 1e-6, 1 - 1e-6)))
        jack = _jackknife_ap(resampler)
        jack = jack[~np.isnan(jack)]
        u = jack.mean() - jack
        denom = 6.0 * float(np.sum(u**2)) ** 1.5
        a = float(np.sum(u**3)) / denom if denom > 0 else 0.0
        z = ndtri(np.array([0.025, 0.975]))
        levels = ndtr(z0 + (z0 + z) / (1 - a * (z0 + z)))
        low, high = value + np.percentile(d, 100 * levels)
    else:
        raise ValueError(f"interval method {method!r} is not one of {', '.join(INTERVAL_METHODS)}")
    return float(low), float(high)
