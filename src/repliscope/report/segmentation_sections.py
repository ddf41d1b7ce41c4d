"""The report's segmentation section of a run: per-class IoU, mask unit evaluation
(:mod:`repliscope.units.segmentation`) and overlays of prediction, ground truth and disagreement on the images
with the lowest foreground IoU. It fills the units section (:class:`UnitsView`) of the run's view."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping
from dataclasses import fields

import numpy as np

from repliscope.evaluation.record import EvaluationRecord
from repliscope.pitfalls.result import SweepResult, VariantOutcome
from repliscope.report.units_sections import SECTION, DetectionRunView, ImageReader, UnitRow, UnitsView
from repliscope.report.view import FigureView, Image, ImageSink, PitfallRow, ReportView
from repliscope.tasks.segmentation import labels_of_rle

OVERLAYS = 3
PANEL_WIDTH = 320
NAMES = {
    "iou": "foreground IoU per image",
    "band_error": "error rate in the boundary band",
    "interior_error": "error rate in the interior",
    "displacement_dy": "displacement dy (px)",
    "displacement_dx": "displacement dx (px)",
}
PRED, TRUTH, MISSED, VOIDC = (220, 40, 40), (40, 170, 80), (40, 90, 220), (150, 150, 150)


def _reader(record: EvaluationRecord) -> ImageReader:
    from repliscope.report.units_sections import source_dataset

    data = source_dataset(record)
    if data is None and record.dataset.get("label_rule") == "voc segmentation masks":
        from repliscope.datasets.voc_seg import load_voc_seg

        try:
            data = load_voc_seg(str(record.dataset.get("origin", "")))
            data = data if data.identity == record.dataset.get("identity") else None
        except Exception:  # no pixels: the canvas is drawn instead
            data = None
    samples = {s.id: s for s in data.samples} if data is not None else {}

    def read(sample_id: str) -> bytes | None:
        sample = samples.get(sample_id)
        try:
            return sample.read() if sample is not None else None
        except Exception:
            return None

    return read


def overlay_png(data: bytes | None, pred: np.ndarray, truth: np.ndarray, background: int = 0) -> bytes:
    """Three panels side by side, each at most :data:`PANEL_WIDTH` wide: the prediction's foreground tinted red,
    the truth's green (void grey), and the disagreement: red = predicted but not true, blue = missed (or another
    class), grey = void."""
    from PIL import Image as PILImage

    h, w = truth.shape
    base = np.full((h, w, 3), 200, np.uint8)
    if data is not None:
        try:
            img = PILImage.open(io.BytesIO(data)).convert("RGB")
            if img.size == (w, h):
                base = np.asarray(img)
        except OSError:
            pass
    grey = (base.astype(np.float32) * 0.6).astype(np.uint8)

    def tint(mask: np.ndarray, colour: tuple[int, int, int], on: np.ndarray) -> np.ndarray:
        out = on.astype(np.float32)
        out[mask] = 0.45 * out[mask] + 0.55 * np.asarray(colour, np.float32)
        return out.astype(np.uint8)

    void = truth == 255
    fg_p, fg_t = (pred != background) & ~void, (truth != background) & ~void
    a = tint(fg_p, PRED, grey)
    b = tint(void, VOIDC, tint(fg_t, TRUTH, grey))
    wrong = (pred != truth) & ~void
    c = tint(void, VOIDC, tint(wrong & ~fg_p, MISSED, tint(wrong & fg_p, PRED, grey)))
    scale = min(1.0, PANEL_WIDTH / w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    panels = [PILImage.fromarray(x).resize(size, PILImage.Resampling.NEAREST) for x in (a, b, c)]
    sheet = PILImage.new("RGB", (size[0] * 3 + 8, size[1]), (255, 255, 255))
    for k, p in enumerate(panels):
        sheet.paste(p, (k * (size[0] + 4), 0))
    buf = io.BytesIO()
    sheet.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def segmentation_units_view(
    record: EvaluationRecord,
    sink: ImageSink,
    images: ImageReader | None = None,
    reference: EvaluationRecord | None = None,
) -> UnitsView | None:
    """The section's data; None for a run of another task or without kept masks."""
    from repliscope.tasks.base import truth_of
    from repliscope.tasks.segmentation import background_index
    from repliscope.units.segmentation import mask_units

    if truth_of(record.task) != "masks":
        return None
    names = record.dataset.get("segmentation_classes") or ["background"]
    background = background_index(names) if "background" in names else 0
    units = mask_units(record.samples, reference.samples if reference is not None else None, background=background)
    if not units.images:
        return None
    summary = []
    if record.per_class:
        summary.append(
            "Per class IoU: "
            + "; ".join(
                f"{r['name']} {r['iou']:.4f} [{r['iou_ci_low']:.4f}, {r['iou_ci_high']:.4f}]"
                if r.get("iou") is not None
                else f"{r['name']} undefined"
                for r in record.per_class
            )
            + "."
        )
    summary.append(
        f"Against {units.against} on {len(units.images)} images"
        + (f" ({units.skipped} without kept masks left out)" if units.skipped else "")
        + f"; boundary band: pixels within {units.band} px of a class boundary of the truth."
    )
    summary += [f"Diagnosis: {line}." for line in units.diagnosis]
    if units.sizes:
        summary.append(
            "Object recall by size (COCO area ranges, mean over objects): "
            + "; ".join(
                f"{b.name} {b.recall:.4f} [{b.ci_low:.4f}, {b.ci_high:.4f}] over {b.n_objects} objects"
                if b.recall is not None
                else f"{b.name}: no object"
                for b in units.sizes
            )
            + "."
        )
    rows = [
        UnitRow(
            NAMES[s.name],
            "-" if s.median is None else f"{s.median:+.4f}",
            "-" if s.ci_low is None else f"[{s.ci_low:+.4f}, {s.ci_high:+.4f}]",
            str(s.n),
            s.significant and s.name.startswith("displacement"),
        )
        for s in units.stats
    ]
    read = images or _reader(record)
    by_id = {s.sample_id: s for s in record.samples}
    ref_by_id = {s.sample_id: s for s in reference.samples} if reference is not None else {}
    worst = sorted((u for u in units.images if u.iou is not None), key=lambda u: (u.iou, u.sample_id))[:OVERLAYS]
    figures = []
    drawn = 0
    for k, u in enumerate(worst):
        seg = by_id[u.sample_id].segmentation
        assert seg is not None and seg.predicted is not None
        other = ref_by_id[u.sample_id].segmentation if reference is not None else seg
        against = (other.predicted if reference is not None else other.truth) if other is not None else None
        if against is None:
            continue
        data = read(u.sample_id)
        drawn += data is not None
        png = overlay_png(
            data, labels_of_rle(seg.predicted, seg.size_hw), labels_of_rle(against, seg.size_hw), background
        )
        figures.append(
            FigureView(
                f"Lowest IoU {k + 1}: {u.sample_id}",
                Image(sink(f"mask-overlay-{k + 1}", png), f"masks on {u.sample_id}"),
                f"left: predicted (red); middle: {units.against} (green, void grey); right: "
                f"disagreement (red: predicted only, blue: missed). Foreground IoU {u.iou:.4f}"
                + (
                    ""
                    if u.displacement is None
                    else f", displacement dy {u.displacement[0]:+d}, dx {u.displacement[1]:+d} px"
                ),
            )
        )
    note = (
        "Medians over images with 95 % percentile bootstrap intervals (500 replicates, seed 0); a displacement "
        f"is diagnosed when its interval excludes 0. Overlays: {drawn} of {len(figures)} on the real image."
    )
    return UnitsView(summary, [(f"against {units.against}", rows)], figures, note)


def with_segmentation(
    view: ReportView,
    record: EvaluationRecord,
    sink: ImageSink,
    images: ImageReader | None = None,
    reference: EvaluationRecord | None = None,
) -> ReportView:
    """``view`` with the units section (per-class IoU, mask units, overlays) before the provenance."""
    units = segmentation_units_view(record, sink, images, reference)
    if units is None:
        return view
    sections = list(view.sections)
    if SECTION not in sections:
        at = next((i for i, s in enumerate(sections) if s.id == "provenance"), len(sections))
        sections.insert(at, SECTION)
    values = {f.name: getattr(view, f.name) for f in fields(view) if f.name != "units"}
    values["sections"] = sections
    return DetectionRunView(**values, units=units)


SWEEP_HEADERS = (
    "mIoU",
    "95 % interval",
    "person/fg IoU",
    "paired n",
    "Δ mIoU (paired)",
    "Δ mIoU 95 % interval",
    "pixels agreeing",
    "images differ",
    "pixel accuracy",
)
"""The pitfall table's metric columns for a segmentation sweep, in the classification columns' places."""


def is_segmentation(sweep: SweepResult) -> bool:
    return sweep.reference.metric("mIoU") is not None or any(
        (v.paired_task or {}).get("delta_miou") is not None for v in sweep.variants
    )


def _frac(x: float | None, digits: int = 4) -> str:
    from repliscope.report import formatting as fmt

    return fmt.DASH if x is None else f"{float(x):.{digits}f}"


def segmentation_row(
    outcome: VariantOutcome, records: Mapping[str, EvaluationRecord] | None, is_reference: bool = False
) -> PitfallRow:
    """:func:`repliscope.report.pitfall_sections.pitfall_row` with mIoU, the foreground class's IoU (from the
    variant's record when given), ΔmIoU with its paired interval, pixel agreement and images that differ."""
    from repliscope.report import formatting as fmt
    from repliscope.report import pitfall_sections as ps

    row = ps.pitfall_row(outcome, is_reference)
    miou, acc = outcome.metric("mIoU"), outcome.metric("pixel_accuracy")
    record = (records or {}).get(outcome.run_id or "") or (records or {}).get(outcome.name)
    fg = None
    if record is not None and record.per_class and len(record.per_class) == 2:
        fg = record.per_class[1].get("iou")
    p = outcome.paired_task or {}
    low, high = p.get("delta_miou_ci_low"), p.get("delta_miou_ci_high")
    n = p.get("n_samples")
    return dataclasses.replace(
        row,
        top1=_frac(miou.value if miou else None),
        top1_interval=f"[{miou.ci_low:.4f}, {miou.ci_high:.4f}]" if miou else fmt.DASH,
        top5=_frac(fg),
        paired_n=fmt.DASH if n is None else str(n),
        delta_top1=fmt.DASH if p.get("delta_miou") is None else f"{p['delta_miou']:+.4f}",
        p=fmt.DASH if low is None or high is None else f"[{low:+.4f}, {high:+.4f}]",
        significant=low is not None and high is not None and (low > 0 or high < 0),
        agreement=fmt.DASH if p.get("pixel_agreement") is None else fmt.pct(p["pixel_agreement"]),
        flips=fmt.DASH if n is None else f"{p.get('flipped_images')}/{n}",
        mean_kl=_frac(acc.value if acc else None),
    )


def segmentation_rows(sweep: SweepResult, records: Mapping[str, EvaluationRecord] | None) -> list[PitfallRow]:
    return [segmentation_row(sweep.reference, records, True)] + [segmentation_row(v, records) for v in sweep.variants]


def segmentation_caption(sweep: SweepResult) -> str:
    n = sweep.dataset.get("num_samples")
    on = f"{sweep.dataset.get('name', 'the dataset')}" + (f" ({n} images)" if n is not None else "")
    return (
        f"Each variant makes one change to the reference pipeline and runs on the same images of {on}. mIoU "
        "(with its 95 % bootstrap interval over images), the foreground class's IoU (two-class models, when "
        "the variant's record is at hand) and pixel accuracy are over each variant's own images. Against the "
        "reference's masks on the images both evaluated: Δ mIoU and its paired bootstrap interval (* when it "
        "excludes 0), the pixels with the same label and the images whose masks differ."
    )
