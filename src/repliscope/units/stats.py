"""Unit evaluation of one run: per-detection offsets against ground truth or a reference run, summarised.

Medians of IoU, dx/w, dy/h, log(w'/w), log(h'/h) with 95 % percentile-bootstrap intervals over IMAGES (the
matches of one image move together; numpy ``default_rng(seed)``, ``replicates`` draws); an offset whose
interval excludes 0 is a significant bias. Also: the IoU histogram of the matches (bins of 0.05 from the
matching threshold), the confusion of matched classes (class-agnostic matching; the off-diagonal share is the
mass of class confusions) and, against ground truth, class-aware vs class-agnostic COCO AP.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from repliscope.units.diagnosis import Diagnosis, diagnose
from repliscope.units.matching import ImageBoxes, Pair, collect_pairs
from repliscope.units.offsets import OFFSETS, offsets

DEFAULT_REPLICATES = 1000
IOU_BIN = 0.05


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UnitStat(_Model):
    """The median of one per-match quantity over ``n`` matches with its bootstrap interval."""

    name: str
    median: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    significant: bool
    """The interval excludes 0 (offsets only; IoU is never flagged)."""


class UnitReport(_Model):
    against: Literal["ground_truth", "reference"]
    n_images: int
    n_predictions: int
    n_reference: int
    n_matched: int
    matched_fraction: float
    """Matched reference boxes / reference boxes (0 when there is none)."""
    stats: list[UnitStat]
    iou_bins: list[float]
    iou_histogram: list[int]
    confusion: list[tuple[int, int, int]]
    """(reference class, predicted class, count) of class-agnostic matches, most frequent first."""
    off_diagonal: float
    """Share of class-agnostic matches whose classes differ."""
    ap_class_aware: float | None = None
    ap_class_agnostic: float | None = None
    diagnosis: Diagnosis
    per_image: list[dict[str, Any]]
    """Per image with a match: sample_id, n, median dx_w / dy_h / log_w / log_h and ``bias`` (the largest of
    their absolute values), largest bias first."""
    replicates: int
    seed: int

    def stat(self, name: str) -> UnitStat:
        return next(s for s in self.stats if s.name == name)

    @property
    def significant(self) -> list[UnitStat]:
        return [s for s in self.stats if s.significant]


def bootstrap_median(
    values: np.ndarray, images: np.ndarray, n_images: int, replicates: int, seed: int
) -> tuple[float | None, float | None, float | None]:
    """(median, 2.5 %, 97.5 %) of ``values`` (NaN left out) resampling images with replacement."""
    keep = ~np.isnan(values)
    values, images = values[keep], images[keep]
    if not len(values):
        return None, None, None
    rng = np.random.default_rng(seed)
    order = np.argsort(images, kind="stable")
    values, images = values[order], images[order]
    meds = []
    for _ in range(replicates):
        counts = rng.multinomial(n_images, np.full(n_images, 1.0 / n_images))
        reps = np.repeat(values, counts[images])
        if len(reps):
            meds.append(np.median(reps))
    low, high = np.percentile(meds, [2.5, 97.5]) if meds else (np.nan, np.nan)
    return float(np.median(values)), float(low), float(high)


def unit_report(
    preds: Sequence[ImageBoxes],
    refs: Sequence[ImageBoxes],
    *,
    against: Literal["ground_truth", "reference"],
    iou_threshold: float = 0.5,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = 0,
    ap: tuple[float, float] | None = None,
    diagnosis_pairing: str | None = None,
    input_size: tuple[int, int] | None = None,
) -> UnitReport:
    """Match ``preds[i]`` to ``refs[i]`` (class-aware for the offsets, class-agnostic for the confusion) and
    summarise. ``ap`` = (class-aware AP, class-agnostic AP) when computed by the caller. ``diagnosis_pairing``:
    ``rank`` (two runs of the same model), ``iou`` (default against ground truth), see :mod:`.diagnosis`."""
    pairs = collect_pairs(preds, refs, iou_threshold=iou_threshold, class_aware=True)
    agnostic = collect_pairs(preds, refs, iou_threshold=iou_threshold, class_aware=False)
    off = offsets(pairs)
    n_images = len(preds)
    stats = []
    for name in ("iou", *OFFSETS):
        med, low, high = bootstrap_median(off[name], off["image"], max(n_images, 1), replicates, seed)
        significant = name != "iou" and low is not None and high is not None and (low > 0 or high < 0)
        stats.append(
            UnitStat(
                name=name,
                median=med,
                ci_low=low,
                ci_high=high,
                n=int(np.count_nonzero(~np.isnan(off[name]))),
                significant=bool(significant),
            )
        )
    bins = [round(iou_threshold + IOU_BIN * k, 10) for k in range(round((1 - iou_threshold) / IOU_BIN) + 1)]
    hist, _ = np.histogram(off["iou"], bins=bins)
    conf = Counter((p.ref_class, p.class_id) for p in agnostic)
    n_ref = sum(len(r) for r in refs)
    if diagnosis_pairing is None:
        diagnosis_pairing = "rank" if against == "reference" else "iou"
    diag_pairs = (
        collect_pairs(preds, refs, mode="rank")
        if diagnosis_pairing == "rank"
        else collect_pairs(preds, refs, iou_threshold=0.1, class_aware=False)
    )
    return UnitReport(
        against=against,
        n_images=n_images,
        n_predictions=sum(len(p) for p in preds),
        n_reference=n_ref,
        n_matched=len(pairs),
        matched_fraction=len(pairs) / n_ref if n_ref else 0.0,
        stats=stats,
        iou_bins=bins,
        iou_histogram=[int(c) for c in hist],
        confusion=[(a, b, c) for (a, b), c in conf.most_common()],
        off_diagonal=sum(c for (a, b), c in conf.items() if a != b) / len(agnostic) if agnostic else 0.0,
        ap_class_aware=ap[0] if ap else None,
        ap_class_agnostic=ap[1] if ap else None,
        diagnosis=diagnose(diag_pairs, input_size=input_size, pairing=diagnosis_pairing),
        per_image=_per_image(pairs, off),
        replicates=replicates,
        seed=seed,
    )


def _per_image(pairs: Sequence[Pair], off: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    rows = []
    for image in sorted(set(off["image"].tolist())):
        sel = off["image"] == image
        row: dict[str, Any] = {"sample_id": next(p.sample_id for p in pairs if p.image == image), "n": int(sel.sum())}
        for name in OFFSETS:
            vals = off[name][sel]
            vals = vals[~np.isnan(vals)]
            row[name] = float(np.median(vals)) if len(vals) else 0.0
        row["bias"] = max(abs(row[name]) for name in OFFSETS)
        rows.append(row)
    return sorted(rows, key=lambda r: -r["bias"])
