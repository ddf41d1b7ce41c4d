"""The ``units`` section of a detection run's report: unit evaluation against the stored ground truth.

Statistics table (medians with bootstrap intervals, significance), the diagnosis, bias scatter plots (dx/w vs
dy/h and log w'/w vs log h'/h per match, with the IoU histogram) and overlays of the predicted (red) and
ground-truth (green) boxes, plus a reference run's (blue) when one is given, on the images with the largest
bias. The overlays draw on the real images when the run's dataset can be re-loaded from the record's
``dataset.origin`` with the record's identity, else on a grey canvas of the image's size (the record stores no
pixels). ``repliscope units RUN --against REF --report FILE`` writes the report against a reference run.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.datasets.base import Dataset
from repliscope.evaluation.record import EvaluationRecord
from repliscope.number_text import percent_text
from repliscope.report.view import FigureView, Image, ImageSink, ReportView, Section
from repliscope.units.matching import ImageBoxes, collect_pairs, from_prediction, from_truth
from repliscope.units.offsets import offsets
from repliscope.units.runs import run_units
from repliscope.units.stats import UnitReport

SECTION = Section("units", "Unit evaluation")
OVERLAYS = 3
REPLICATES = 500
NAMES = {"iou": "IoU", "dx_w": "dx/w", "dy_h": "dy/h", "log_w": "log w'/w", "log_h": "log h'/h"}

ImageReader = Callable[[str], bytes | None]


@dataclass(frozen=True)
class UnitRow:
    name: str
    median: str
    interval: str
    n: str
    significant: bool


@dataclass
class UnitsView:
    summary: list[str]
    tables: list[tuple[str, list[UnitRow]]]
    """(what the statistics are against, rows)."""
    figures: list[FigureView]
    note: str


@dataclass
class DetectionRunView(ReportView):
    """A run's :class:`ReportView` with the ``units`` section's data."""

    units: UnitsView | None = field(default=None)


def source_dataset(record: EvaluationRecord) -> Dataset | None:
    """Re-load the run's dataset from ``record.dataset['origin']`` (synthetic_detection, coco, dlib_xml, voc_xml)
    when its identity is the record's; None otherwise."""
    from repliscope.datasets.coco import load_coco
    from repliscope.datasets.dlib_xml import load_dlib_xml
    from repliscope.datasets.synthetic_detection import load_synthetic_detection
    from repliscope.datasets.voc_xml import load_voc_xml

    origin = str(record.dataset.get("origin", ""))
    n = record.dataset.get("num_samples")
    limit = int(n) if isinstance(n, int) and n > 0 else None
    try:
        if record.dataset.get("label_rule") == "pascal voc xml":  # a VOC folder or its split list file
            data = load_voc_xml(origin, limit=limit)
        elif m := re.fullmatch(r"repliscope synthetic_detection seed=(-?\d+)", origin):
            data = load_synthetic_detection(seed=int(m.group(1)), num_images=limit or 16)
        elif m := re.fullmatch(r"(.+) \(annotations (.+)\)", origin):
            data = load_coco(m.group(1), annotations=m.group(2), limit=limit)
        elif origin.endswith(".xml"):
            data = load_dlib_xml(origin, limit=limit)
        else:
            return None
    except Exception:  # any failure to re-load means: no pixels, the canvas is drawn instead
        return None
    return data if data.identity == record.dataset.get("identity") else None


def _canvas(size_hw: tuple[int, int] | None) -> Any:
    from PIL import Image as PILImage

    h, w = size_hw or (256, 256)
    return PILImage.new("RGB", (max(w, 1), max(h, 1)), (200, 200, 200))


def overlay_png(data: bytes | None, size_hw: tuple[int, int] | None, layers: list[tuple[ImageBoxes, str]]) -> bytes:
    """PNG of the image (or a grey canvas of ``size_hw``) with each layer's boxes outlined in its colour."""
    from PIL import Image as PILImage
    from PIL import ImageDraw

    img = _canvas(size_hw)
    if data is not None:
        try:
            img = PILImage.open(io.BytesIO(data)).convert("RGB")
        except Exception:  # an unreadable image: draw on the canvas
            img = _canvas(size_hw)
    draw = ImageDraw.Draw(img)
    width = max(1, round(max(img.size) / 250))
    for boxes, colour in layers:
        for x1, y1, x2, y2 in boxes.boxes.tolist():
            draw.rectangle([min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)], outline=colour, width=width)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def bias_figure(off: dict[str, np.ndarray], iou_bins: list[float], iou_hist: list[int]) -> bytes:
    """Three panels: dx/w vs dy/h, log w'/w vs log h'/h (one dot per match), IoU histogram."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10.5, 3.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    for ax, (x, y) in zip(axes[:2], (("dx_w", "dy_h"), ("log_w", "log_h")), strict=True):
        ax.axhline(0, color="#999999", lw=0.8)
        ax.axvline(0, color="#999999", lw=0.8)
        ax.scatter(off[x], off[y], s=8, alpha=0.6, color="#2c6fbb")
        if len(off[x]):
            ax.plot([np.nanmedian(off[x])], [np.nanmedian(off[y])], "x", color="#c0392b", ms=10, mew=2, label="median")
            ax.legend(loc="best", fontsize=8)
        ax.set_xlabel(NAMES[x])
        ax.set_ylabel(NAMES[y])
    axes[2].bar(iou_bins[:-1], iou_hist, width=np.diff(iou_bins), align="edge", color="#7f8c8d", edgecolor="white")
    axes[2].set_xlabel("IoU of the matches")
    axes[2].set_ylabel("matches")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _rows(report: UnitReport) -> list[UnitRow]:
    return [
        UnitRow(
            NAMES[s.name],
            "-" if s.median is None else f"{s.median:+.4f}",
            "-" if s.ci_low is None or s.ci_high is None else f"[{s.ci_low:+.4f}, {s.ci_high:+.4f}]",
            str(s.n),
            s.significant,
        )
        for s in report.stats
    ]


def _summary(report: UnitReport, what: str) -> list[str]:
    lines = [
        f"Against {what}: {report.n_matched} of {report.n_reference} boxes matched "
        f"({percent_text(report.matched_fraction)}) by {report.n_predictions} predictions on {report.n_images} images."
    ]
    lines += [
        f"Significant bias against {what}: {NAMES[s.name]} median {s.median:+.4f}."
        for s in report.significant
        if s.median is not None
    ]
    if report.ap_class_aware is not None and report.ap_class_agnostic is not None:
        lines.append(
            f"AP class-aware {report.ap_class_aware:.4f}, class-agnostic {report.ap_class_agnostic:.4f};"
            f" {percent_text(report.off_diagonal)} of class-agnostic matches have another class."
        )
    lines += [f"Diagnosis against {what}: {line}" for line in report.diagnosis.summary]
    return lines


def _reader(record: EvaluationRecord) -> ImageReader:
    source = source_dataset(record)
    pixels = {s.id: s for s in source.samples} if source is not None else {}

    def read(sample_id: str) -> bytes | None:
        sample = pixels.get(sample_id)
        if sample is None:
            return None
        try:
            return sample.read()
        except Exception:  # a file gone since the run: draw on the canvas
            return None

    return read


def units_view(
    record: EvaluationRecord,
    sink: ImageSink,
    images: ImageReader | None = None,
    reference: EvaluationRecord | None = None,
) -> UnitsView | None:
    """The section's data, or None when the record carries no ground truth (nothing to compare with). With
    ``reference`` (a run on the same samples) the scatter plots, the overlays' choice of images and the first
    table are against the reference's detections (drawn in blue)."""
    if record.ground_truth is None:  # only box tasks keep it (Task.truth == "boxes")
        return None
    result = run_units(record, reference, replicates=REPLICATES)
    primary, truth = result.primary, result.dataset
    by_id = {s.id: s for s in truth.samples}
    keep = [
        i
        for i, s in enumerate(record.samples)
        if s.error is None
        and s.detections is not None
        and s.sample_id in by_id
        and (reference is None or (reference.samples[i].error is None and reference.samples[i].detections is not None))
    ]
    preds = [from_prediction(record.samples[i], by_id[record.samples[i].sample_id].size_hw) for i in keep]
    gts = [from_truth(by_id[record.samples[i].sample_id]) for i in keep]
    refs = (
        [from_prediction(reference.samples[i], p.size_hw) for i, p in zip(keep, preds, strict=True)]
        if reference is not None
        else None
    )
    off = offsets(collect_pairs(preds, refs if refs is not None else gts))
    against = "the reference run" if reference is not None else "the ground truth"
    figures = [
        FigureView(
            f"Bias scatter against {against}",
            Image(
                sink("units-bias", bias_figure(off, primary.iou_bins, primary.iou_histogram)),
                "bias scatter plots and IoU histogram",
            ),
            "one dot per matched detection (class-aware, IoU >= 0.5); red cross: the medians",
        )
    ]
    read = images or _reader(record)
    index = {p.sample_id: j for j, p in enumerate(preds)}
    drawn_real = 0
    chosen: list[tuple[str, str]] = [
        (
            row["sample_id"],
            f"against {against} median dx/w {row['dx_w']:+.3f}, dy/h {row['dy_h']:+.3f}, log w'/w "
            f"{row['log_w']:+.3f}, log h'/h {row['log_h']:+.3f} over {row['n']} matches",
        )
        for row in primary.per_image[:OVERLAYS]
    ]
    if not chosen:  # no detection matched (e.g. every class shifted): show the first images with detections
        chosen = [(p.sample_id, f"no detection matched {against}") for p in preds if len(p)][:OVERLAYS]
    for k, (sample_id, caption) in enumerate(chosen):
        j = index[sample_id]
        data = read(sample_id)
        drawn_real += data is not None
        layers = [(gts[j], "#27ae60"), *([(refs[j], "#2c6fbb")] if refs is not None else []), (preds[j], "#c0392b")]
        png = overlay_png(data, preds[j].size_hw, layers)
        title = f"Largest bias {k + 1}" if primary.per_image else f"Image {k + 1}"
        figures.append(
            FigureView(
                f"{title}: {sample_id}",
                Image(sink(f"units-overlay-{k + 1}", png), f"boxes on {sample_id}"),
                "green: ground truth, "
                + ("blue: reference, " if refs is not None else "")
                + f"red: predicted; {caption}",
            )
        )
    tables = [(f"against {against}", _rows(primary))]
    summary = _summary(primary, against)
    if result.against_reference is not None:
        tables.append(("against the ground truth", _rows(result.truth)))
        summary += _summary(result.truth, "the ground truth")
        if result.paired and "delta_ap" in result.paired:
            p = result.paired
            summary.append(
                f"AP {p['ap_variant']:.4f} vs the reference's {p['ap_reference']:.4f}: ΔAP "
                f"{p['delta_ap']:+.4f} [{p['delta_ap_ci_low']:+.4f}, {p['delta_ap_ci_high']:+.4f}]; "
                f"{p['flipped_images']} of {p['n_samples']} images with another matched set."
            )
    shown = len(chosen)
    note = (
        f"Medians over matches with 95 % percentile bootstrap intervals over images ({REPLICATES} replicates, "
        f"seed 0); a bias is significant when its interval excludes 0. Overlays: {drawn_real} of {shown} on the "
        "real image"
        + (
            ""
            if drawn_real == shown
            else " (the others on a grey canvas: the dataset could not be re-loaded with the record's identity)"
        )
        + "."
    )
    return UnitsView(summary, tables, figures, note)


def with_units(
    view: ReportView,
    record: EvaluationRecord,
    sink: ImageSink,
    images: ImageReader | None = None,
    reference: EvaluationRecord | None = None,
) -> ReportView:
    """``view`` with the units section before the provenance (its units replaced when it already has them;
    unchanged when there is no ground truth)."""
    units = units_view(record, sink, images, reference)
    if units is None:
        return view
    sections = list(view.sections)
    if SECTION not in sections:
        at = next((i for i, s in enumerate(sections) if s.id == "provenance"), len(sections))
        sections.insert(at, SECTION)
    values = {f.name: getattr(view, f.name) for f in fields(view) if f.name != "units"}
    values["sections"] = sections
    return DetectionRunView(**values, units=units)


def write_units_report(record: EvaluationRecord, reference: EvaluationRecord | None, out_path: Path) -> Path:
    """The run's report (HTML, or Markdown for a ``.md`` path; images embedded) with the units section against
    ``reference``."""
    from repliscope.report.build import build_run_view
    from repliscope.report.html import render_view_html
    from repliscope.report.markdown import render_view_markdown
    from repliscope.report.sections import embed_sink

    view = with_units(build_run_view(record), record, embed_sink, reference=reference)
    text = render_view_markdown(view) if out_path.suffix.lower() == ".md" else render_view_html(view)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(text, encoding="utf-8")
    return out_path
