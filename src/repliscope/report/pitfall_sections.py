"""Sweep-only builders: the pitfall table (the paper's Table 1, one row per variant), the deltas chart, the
visual-testing panels (the paper's Figures 6 and 7) and, when the variants' records are at hand, flipped samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from repliscope.evaluation.record import EvaluationRecord
from repliscope.pitfalls.result import SweepResult, VariantOutcome, VisualEntry
from repliscope.report import figures
from repliscope.report import formatting as fmt
from repliscope.report.sections import ClassNamer
from repliscope.report.view import FigureView, FlipList, Image, ImageSink, PitfallRow, VisualCard, VisualPanelView

MAX_FLIPS = 10
_STATUS_CSS = {"ok": "ok", "not applicable": "na", "failed": "failed"}
REFERENCE = "reference"
IDENTICAL = "input identical to the reference (max |Δ| 0): images not repeated"


def _top(outcome: VariantOutcome, name: str) -> tuple[str, str]:
    metric = outcome.metric(name)
    if metric is None:
        return fmt.DASH, fmt.DASH
    return f"{fmt.pct(metric.value)} ({metric.successes}/{metric.n})", fmt.interval(metric.ci_low, metric.ci_high)


def pitfall_row(outcome: VariantOutcome, is_reference: bool = False) -> PitfallRow:
    """One table row; variants that did not run keep their status and reason, numbers are dashes."""
    top1, top1_ci = _top(outcome, "top1")
    top5, _ = _top(outcome, "top5")
    p = outcome.paired
    significant = bool(p and p.mcnemar_p is not None and p.mcnemar_p < figures.SIGNIFICANCE_LEVEL)
    notes = [outcome.reason] if outcome.reason else []
    if outcome.status == "ok" and outcome.failed_samples:
        notes.insert(0, f"{outcome.failed_samples} samples failed")
    if p is not None and not p.same_samples:
        notes.append(p.pairing_note())
    ran = outcome.status == "ok"
    evaluated = fmt.DASH if outcome.evaluated_samples is None else str(outcome.evaluated_samples)
    return PitfallRow(
        name=outcome.name,
        change=outcome.change or ("none (the manifest as written)" if is_reference else ""),
        description=outcome.description,
        evaluated=f"{evaluated} / {outcome.failed_samples}" if ran else fmt.DASH,
        top1=top1,
        top1_interval=top1_ci,
        top5=top5,
        paired_n=str(p.n) if p else fmt.DASH,
        delta_top1=fmt.delta_pp(p.delta_top1) if p else fmt.DASH,
        p=fmt.p_value(p.mcnemar_p) if p else fmt.DASH,
        significant=significant,
        agreement=fmt.pct(p.agreement) if p else fmt.DASH,
        flips=f"{p.flipped}/{p.n}" if p else fmt.DASH,
        mean_kl=fmt.kl(p.mean_kl) if p else fmt.DASH,
        status=REFERENCE if is_reference else outcome.status,
        reason="; ".join(notes),
        css="reference" if is_reference else _STATUS_CSS.get(outcome.status, "failed"),
        is_reference=is_reference,
    )


def pitfall_rows(sweep: SweepResult) -> list[PitfallRow]:
    return [pitfall_row(sweep.reference, is_reference=True)] + [pitfall_row(v) for v in sweep.variants]


def pitfalls_caption(sweep: SweepResult) -> str:
    """The claim the table is read against (Table 1's "Reported" column) and how to read the columns."""
    claims = [c for c in sweep.claims if c.get("metric") in ("top1", "top1_accuracy")]
    reported = "; ".join(f"reported top-1 {fmt.pct(c.get('claimed'))} on {c.get('claim_dataset', '?')}" for c in claims)
    n = sweep.dataset.get("num_samples")
    on = f"{sweep.dataset.get('name', 'the dataset')}" + (f" ({n} samples)" if n is not None else "")
    text = (
        f"Each variant makes one change to the reference pipeline and runs on the same samples of {on}. "
        "Evaluated / failed counts each variant's samples; top-1 and top-5 are over its own evaluated "
        "samples. Everything right of them is paired: over the samples both the reference and the variant "
        "evaluated (paired n), so a sample that failed in only one of them is in no paired number. "
        "Δ top-1 is the variant's top-1 minus the reference's on those samples; p is the exact McNemar test "
        "on the discordant pairs (* p < 0.05); agreement and flips compare top-1 predictions; KL is the mean "
        "KL(reference ‖ variant) of the output distributions in nats."
    )
    return f"{reported[0].upper()}{reported[1:]}. {text}" if reported else text


def delta_figure(sweep: SweepResult, sink: ImageSink) -> tuple[FigureView | None, str]:
    """Δ top-1 per variant that ran (or, without labels, the share of flipped predictions), and a note on
    the variants left out."""
    ran = [v for v in sweep.variants if v.status == "ok" and v.paired is not None]
    left_out = [v for v in sweep.variants if v not in ran]
    note = (
        (
            "Not shown (did not run): "
            + "; ".join(f"{v.name} ({v.status}{': ' + v.reason if v.reason else ''})" for v in left_out)
            + "."
        )
        if left_out
        else ""
    )
    if not ran:
        return None, note or "No variant ran."
    labelled = all(v.paired is not None and v.paired.delta_top1 is not None for v in ran)
    if labelled:
        bars = [
            figures.DeltaBar(
                v.name,
                100.0 * (v.paired.delta_top1 or 0.0) if v.paired else 0.0,
                v.paired.mcnemar_p if v.paired else None,
            )
            for v in ran
        ]
        xlabel = "Δ top-1 vs reference on the samples both evaluated (percentage points)"
        title = "Change in top-1 accuracy per variant (paired)"
        caption = (
            "Paired: each bar is over the samples both the reference and that variant evaluated. "
            "Bars coloured red when the exact McNemar test gives p < 0.05 (marked *)."
        )
    else:
        bars = [figures.DeltaBar(v.name, 100.0 * (1.0 - v.paired.agreement) if v.paired else 0.0) for v in ran]
        xlabel, title = "top-1 predictions changed vs reference (%)", "Predictions changed per variant (no labels)"
        caption = "Without labels there is no accuracy; the bars show how many top-1 predictions changed."
    png = figures.delta_chart(bars, xlabel)
    return FigureView(title, Image(sink("deltas", png), title), caption), note


def _image(sink: ImageSink, name: str, b64: str | None, alt: str) -> Image | None:
    if not b64:
        return None
    try:
        png = figures.decode_png_b64(b64)
    except ValueError:
        return None
    return Image(sink(name, png), alt)


def _visual_caption(entry: VisualEntry, is_reference: bool) -> str:
    parts = []
    if is_reference:
        parts.append("reference input")
    elif entry.max_abs_diff is not None and entry.mean_abs_diff is not None:
        parts.append(f"max |Δ| {entry.max_abs_diff:.4g}, mean |Δ| {entry.mean_abs_diff:.4g}")
    elif entry.diff_png is None:
        parts.append("no difference map (input shapes differ)")
    if entry.note:
        parts.append(entry.note)
    return "; ".join(parts)


def _prediction(entry: VisualEntry, namer: ClassNamer) -> str:
    if entry.top1 is not None:
        return f"top-1 {namer(entry.top1)}" + (f", {fmt.pct(entry.top1_prob)}" if entry.top1_prob is not None else "")
    if entry.note and entry.note.startswith("sample failed"):
        return "no prediction (the sample failed)"
    return ""  # a sweep stored before predictions were kept with its panels


def _colorbar(sink: ImageSink, name: str, entries: Sequence[VisualEntry]) -> Image | None:
    scale = next((e.diff_scale for e in entries if e.diff_scale is not None and e.diff_png), None)
    if scale is None:
        return None
    png = figures.heat_colorbar(scale, "mean |Δ| to the reference over channels (model-input units)")
    return Image(sink(name, png), f"colour scale of the difference heatmaps: black 0, yellow ≥ {scale:.3g}")


def visual_panels(sweep: SweepResult, namer: ClassNamer, sink: ImageSink) -> list[VisualPanelView]:
    """Per image: the reference input first, then each variant's input with its difference heatmap (a variant
    whose input equals the reference's exactly gets a text card, not two more copies of known pictures), each
    card with the variant's top-1 prediction; one colour scale per image for its heatmaps."""
    panels = []
    for p_index, panel in enumerate(sweep.visual):
        entries = sorted(panel.entries, key=lambda e: e.variant != REFERENCE)
        cards = []
        for e_index, entry in enumerate(entries):
            stem = f"visual-{p_index + 1}-{e_index + 1}"
            is_ref = entry.variant == REFERENCE
            prediction = _prediction(entry, namer)
            if not is_ref and entry.max_abs_diff == 0.0:
                cards.append(VisualCard(entry.variant, None, None, IDENTICAL, identical=True, prediction=prediction))
                continue
            cards.append(
                VisualCard(
                    variant=entry.variant,
                    image=_image(sink, f"{stem}-input", entry.image_png, f"{entry.variant} input of {panel.sample_id}"),
                    diff=None
                    if is_ref
                    else _image(
                        sink,
                        f"{stem}-diff",
                        entry.diff_png,
                        f"difference {entry.variant} vs reference, {panel.sample_id}",
                    ),
                    caption=_visual_caption(entry, is_ref),
                    prediction=prediction,
                )
            )
        panels.append(
            VisualPanelView(
                sample_id=panel.sample_id,
                label=namer(panel.label),
                cards=cards,
                colorbar=_colorbar(sink, f"visual-{p_index + 1}-scale", entries),
            )
        )
    return panels


def _find(records: Mapping[str, EvaluationRecord], outcome: VariantOutcome) -> EvaluationRecord | None:
    if outcome.run_id and outcome.run_id in records:
        return records[outcome.run_id]
    return records.get(outcome.name)


def flip_lists(sweep: SweepResult, records: Mapping[str, EvaluationRecord] | None, namer: ClassNamer) -> list[FlipList]:
    """Samples whose top-1 differs from the reference, per variant (needs the stored records)."""
    if not records:
        return []
    ref = _find(records, sweep.reference)
    if ref is None:
        return []
    ref_top1 = {s.sample_id: s for s in ref.samples}
    lists = []
    for outcome in sweep.variants:
        record = _find(records, outcome)
        if outcome.status != "ok" or record is None:
            continue
        lines = []
        for s in record.samples:
            r = ref_top1.get(s.sample_id)
            if r is None or r.top1 == s.top1:
                continue
            lines.append(
                f"{s.sample_id}: {namer(r.top1)} → {namer(s.top1)}"
                + (f"; label {namer(s.label)}" if s.label is not None else "")
            )
        if lines:
            lists.append(FlipList(outcome.name, lines[:MAX_FLIPS], max(0, len(lines) - MAX_FLIPS)))
    return lists


def sweep_timings(timings: Mapping[str, float], variants: Sequence[VariantOutcome]) -> list[tuple[str, str]]:
    rows = [(k, fmt.seconds(v)) for k, v in timings.items()]
    rows.extend((f"inference {v.name}", fmt.seconds(v.inference_seconds)) for v in variants if v.status == "ok")
    return rows
