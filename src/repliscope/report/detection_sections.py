"""Detection pitfall sweeps in the report: the pitfall table's columns read AP, the paired delta AP with its
bootstrap interval, the matched fraction, mean IoU and the images whose detections differ
(:meth:`repliscope.tasks.detection.ObjectDetection.paired`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from repliscope.number_text import unit_delta_text, unit_interval_text, unit_value_text
from repliscope.pitfalls.result import SweepResult, VariantOutcome
from repliscope.report import formatting as fmt
from repliscope.report import pitfall_sections as ps
from repliscope.report.view import PitfallRow

HEADERS = (
    "AP",
    "95 % interval",
    "AP50",
    "paired n",
    "Δ AP (paired)",
    "Δ AP 95 % interval",
    "matched",
    "images differ",
    "mean IoU",
)
"""The table's metric columns for a detection sweep, in the classification columns' places."""


def is_detection(sweep: SweepResult) -> bool:
    return sweep.reference.metric("AP") is not None or any(v.paired_task for v in sweep.variants)


def _frac(x: Any) -> str:
    """A fraction in the house's format (:mod:`repliscope.number_text`): ``0.3741``."""
    return unit_value_text("fraction", None if x is None else float(x))


def detection_row(outcome: VariantOutcome, is_reference: bool = False) -> PitfallRow:
    """:func:`repliscope.report.pitfall_sections.pitfall_row` with the detection numbers in its columns."""
    row = ps.pitfall_row(outcome, is_reference)
    ap, ap50 = outcome.metric("AP"), outcome.metric("AP50")
    p = outcome.paired_task or {}
    low, high = p.get("delta_ap_ci_low"), p.get("delta_ap_ci_high")
    n = p.get("n_samples")
    return replace(
        row,
        top1=_frac(ap.value if ap else None),
        top1_interval=unit_interval_text("fraction", ap.ci_low, ap.ci_high) if ap else fmt.DASH,
        top5=_frac(ap50.value if ap50 else None),
        paired_n=fmt.DASH if n is None else str(n),
        delta_top1=unit_delta_text("fraction", p.get("delta_ap")),
        p=fmt.DASH
        if low is None or high is None
        else f"[{unit_delta_text('fraction', low)}, {unit_delta_text('fraction', high)}]",
        significant=low is not None and high is not None and (low > 0 or high < 0),
        agreement=fmt.DASH if p.get("matched_fraction") is None else fmt.pct(p["matched_fraction"]),
        flips=fmt.DASH if n is None else f"{p.get('flipped_images')}/{n}",
        mean_kl=_frac(p.get("mean_iou")),
    )


def detection_rows(sweep: SweepResult) -> list[PitfallRow]:
    return [detection_row(sweep.reference, True)] + [detection_row(v) for v in sweep.variants]


def detection_caption(sweep: SweepResult) -> str:
    n = sweep.dataset.get("num_samples")
    on = f"{sweep.dataset.get('name', 'the dataset')}" + (f" ({n} images)" if n is not None else "")
    return (
        f"Each variant makes one change to the reference pipeline and runs on the same images of {on}. AP "
        "(COCO .50:.95, with its 95 % bootstrap interval over images) and AP50 are over each variant's own "
        "images. Everything right of them is paired against the reference's detections on the images both "
        "evaluated: Δ AP and its paired bootstrap interval (* when it excludes 0), the reference detections "
        "matched by a variant detection of the same class at IoU ≥ 0.5, the images whose detections differ, "
        "and the mean IoU of the matches."
    )
