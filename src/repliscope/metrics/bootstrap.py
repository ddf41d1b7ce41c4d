"""COCO bbox evaluation re-accumulated over resampled images: fast percentile-bootstrap intervals of the 12 numbers.

:class:`CocoResampler` runs COCOeval's per-image matching ONCE (pycocotools ``evaluateImg`` semantics: detections
by score, greedy to the highest-IoU unmatched ground truth, crowd / out-of-range boxes ignored, 10 IoU thresholds
0.5:0.05:0.95, area ranges all/small/medium/large, 100 detections per image and class), then :meth:`stats`
accumulates with a weight per image (how often the bootstrap drew it). Drawing an image twice duplicates its
detections with the same score, so weighting each detection by its image's count gives the same precision /
recall envelope as evaluating the duplicated set (only the order of equal scores across different images may
differ, as it does between any two orderings of the images). With all weights 1 it reproduces COCOeval's
12 numbers (tested against faster-coco-eval). Everything is vectorised over IoU thresholds and categories:
segments are kept apart with complex keys (numpy orders complex numbers lexicographically), so no comparison
is rounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    """One image's ground truth: ``boxes`` (G, 4) float64 xyxy pixels, ``classes`` (G,) int, ``areas`` (G,)
    (COCO's annotation area), ``crowd`` (G,) bool (crowd or not-to-be-scored)."""

    boxes: np.ndarray
    classes: np.ndarray
    areas: np.ndarray
    crowd: np.ndarray


@dataclass(frozen=True)
class ImageDetections:
    """One image's detections: ``boxes`` (D, 4) float64 xyxy pixels, ``scores`` (D,), ``classes`` (D,) int."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray


def box_iou(dt: np.ndarray, gt: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """(D, G) IoU of xyxy boxes as COCO's ``maskUtils.iou`` for boxes: a crowd ground truth's union is the
    detection's area."""
    if len(dt) == 0 or len(gt) == 0:
        return np.zeros((len(dt), len(gt)))
    iw = np.minimum(dt[:, None, 2], gt[None, :, 2]) - np.maximum(dt[:, None, 0], gt[None, :, 0])
    ih = np.minimum(dt[:, None, 3], gt[None, :, 3]) - np.maximum(dt[:, None, 1], gt[None, :, 1])
    inter = np.where((iw > 0) & (ih > 0), iw * ih, 0.0)
    da = (dt[:, 2] - dt[:, 0]) * (dt[:, 3] - dt[:, 1])
    ga = (gt[:, 2] - gt[:, 0]) * (gt[:, 3] - gt[:, 1])
    union = np.where(crowd[None, :], da[:, None], da[:, None] + ga[None, :] - inter)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(inter > 0, inter / union, 0.0)


def _match(ious: np.ndarray, gt_ignore: np.ndarray, crowd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """COCOeval's greedy matching of score-sorted detections to ground truth sorted non-ignored first:
    (matched (T, D) bool, matched-to-an-ignored-gt (T, D) bool)."""
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


@dataclass
class _Area:
    """Every kept detection of one area range, sorted by (category, -score, image, rank)."""

    image: np.ndarray  # (N,) image index
    segment: np.ndarray  # (N,) category index
    rank: np.ndarray  # (N,) rank of the detection within its (image, category) by score
    tps: np.ndarray  # (T, N) bool
    fps: np.ndarray  # (T, N) bool
    npig: np.ndarray  # (images, K) count of non-ignored ground truth
    _flat: np.ndarray | None = None

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
        k_of = {c: k for k, c in enumerate(self.cat_ids)}
        n_k = len(self.cat_ids)
        rows: list[list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = [[] for _ in AREA_RANGES]
        npig = np.zeros((len(AREA_RANGES), self.n_images, n_k))
        for i, (gt, dt) in enumerate(zip(truths, detections, strict=True)):
            for c in np.union1d(gt.classes, dt.classes):
                k = k_of.get(int(c))
                if k is None:
                    continue
                gsel = np.flatnonzero(gt.classes == c)
                dsel = np.flatnonzero(dt.classes == c)
                dsel = dsel[np.argsort(-dt.scores[dsel], kind="mergesort")][: MAX_DETS[-1]]
                d_boxes = dt.boxes[dsel]
                d_area = (d_boxes[:, 2] - d_boxes[:, 0]) * (d_boxes[:, 3] - d_boxes[:, 1])
                for a, (lo, hi) in enumerate(AREA_RANGES):
                    area = gt.areas[gsel]
                    g_ignore = gt.crowd[gsel] | (area < lo) | (area > hi)
                    order = np.argsort(g_ignore, kind="mergesort")
                    g_ignore, g_crowd = g_ignore[order], gt.crowd[gsel][order]
                    npig[a, i, k] = np.count_nonzero(~g_ignore)
                    if len(dsel) == 0:
                        continue
                    ious = box_iou(d_boxes, gt.boxes[gsel][order], g_crowd)
                    matched, ignored = _match(ious, g_ignore, g_crowd)
                    outside = (d_area < lo) | (d_area > hi)
                    ignored |= ~matched & outside[None, :]
                    rows[a].append((i, k, dt.scores[dsel], matched, ignored, np.arange(len(dsel))))
        self._areas = [self._pack(r, npig[a]) for a, r in enumerate(rows)]

    def _pack(
        self, rows: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]], npig: np.ndarray
    ) -> _Area:
        n_t = len(IOU_THRS)
        if not rows:
            empty = np.zeros(0, int)
            return _Area(empty, empty, empty, np.zeros((n_t, 0), bool), np.zeros((n_t, 0), bool), npig)
        image = np.concatenate([np.full(len(r[2]), r[0]) for r in rows])
        segment = np.concatenate([np.full(len(r[2]), r[1]) for r in rows])
        scores = np.concatenate([r[2] for r in rows])
        matched = np.concatenate([r[3] for r in rows], axis=1)
        ignored = np.concatenate([r[4] for r in rows], axis=1)
        rank = np.concatenate([r[5] for r in rows])
        order = np.lexsort((rank, image, -scores, segment))
        matched, ignored, segment = matched[:, order], ignored[:, order], segment[order]
        tps, fps = matched & ~ignored, ~matched & ~ignored
        # Detections that can never move a number, whatever the weights: ignored at every threshold (a point that
        # repeats the previous one), or false positives after the last true positive of their category (they
        # neither raise recall nor come before any recall threshold is reached). Dropping them is exact.
        position = np.arange(len(segment))
        any_tp = tps.any(axis=0)
        last_tp = np.full(int(segment.max()) + 1, -1)
        np.maximum.at(last_tp, segment[any_tp], position[any_tp])
        keep = (tps | fps).any(axis=0) & (position <= last_tp[segment])
        return _Area(image[order][keep], segment[keep], rank[order][keep], tps[:, keep], fps[:, keep], npig)

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
        keep = ar.rank < max_det
        wd = np.where(keep, w[ar.image], 0.0)
        seg = ar.segment
        tp = np.cumsum(ar.tps * wd, axis=1)
        fp = np.cumsum(ar.fps * wd, axis=1)
        starts = np.searchsorted(seg, np.arange(n_k), side="left")
        ends = np.searchsorted(seg, np.arange(n_k), side="right")
        before = np.concatenate([np.zeros((n_t, 1)), tp], axis=1)[:, starts]  # (T, K) cumsum before each segment
        before_fp = np.concatenate([np.zeros((n_t, 1)), fp], axis=1)[:, starts]
        tp = tp - before[:, seg]
        fp = fp - before_fp[:, seg]
        valid = npig > 0
        total_tp = np.where(ends > starts, np.concatenate([np.zeros((n_t, 1)), tp], axis=1)[:, ends], 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            recall = np.where(valid, total_tp / npig, np.nan)
        if not precision:
            return np.empty((n_t, n_k, n_r)), recall
        with np.errstate(divide="ignore", invalid="ignore"):
            rc = tp / npig[seg]
        pr = tp / (fp + tp + np.spacing(1))
        # envelope: max of precision to the right within each (threshold, category) segment
        flat_seg = ar.flat_segment(n_k)
        keyed = (-flat_seg + 1j * pr.ravel())[::-1]
        env = np.maximum.accumulate(keyed)[::-1].imag
        # q[r] = envelope at the first point with recall >= REC_THRS[r] = max of the envelope over the points
        # whose recall reaches threshold r (the envelope does not increase along a segment); exact comparisons
        reach = _thresholds_reached(np.nan_to_num(rc, nan=0.0).ravel())
        slot = flat_seg * n_r + reach - 1
        first = np.ones(len(slot), bool)
        first[1:] = slot[1:] != slot[:-1]
        fill = np.zeros(n_t * n_k * n_r)
        fill[slot[first]] = env[first]
        q = np.maximum.accumulate(fill.reshape(n_t * n_k, n_r)[:, ::-1], axis=1)[:, ::-1].reshape(n_t, n_k, n_r)
        q[:, ~valid, :] = np.nan
        return q, recall


def _thresholds_reached(rc: np.ndarray) -> np.ndarray:
    """How many of :data:`REC_THRS` are <= each recall, with the exact float comparisons of
    ``np.searchsorted(REC_THRS, rc, side="right")`` (a guess from ``rc * 100`` corrected by one step)."""
    n_r = len(REC_THRS)
    guess = np.clip(np.floor(rc * (n_r - 1)).astype(np.int64), 0, n_r - 1)  # REC_THRS[guess] <= rc, give or take
    guess -= REC_THRS[guess] > rc
    up = np.minimum(guess + 1, n_r - 1)
    guess += (REC_THRS[up] <= rc) & (up > guess)
    return guess + 1


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
    categories keeps that change of composition out of the interval (``value + percentiles of the deltas``,
    which is the plain percentile interval when every replicate holds every category)."""
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
