"""Assemble the whole :class:`ReportView` of a run or a sweep (the templates are only layout)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from repliscope.evaluation.record import EvaluationRecord
from repliscope.pitfalls.result import SweepResult
from repliscope.report import detection_sections as ds
from repliscope.report import pitfall_sections as ps
from repliscope.report import sections as sec
from repliscope.report.view import ExtraFigure, ImageSink, ReportView, Section

LAYER_DIFF = Section("layer-diff", "Layer differences")
LAYER_TIME = Section("layer-diff", "Per-layer time")
"""The same section when every extra figure is a trace's per-layer chart (:mod:`repliscope.report.trace_sections`)."""


def _with_extra(sections: list[Section], extra: Sequence[ExtraFigure] | None) -> list[Section]:
    if not extra:
        return sections
    from repliscope.report.trace_sections import FIGURE_PREFIX

    return [*sections, LAYER_TIME if all(t.startswith(FIGURE_PREFIX) for t, _ in extra) else LAYER_DIFF]


def build_run_view(
    record: EvaluationRecord, extra_figures: Sequence[ExtraFigure] | None = None, sink: ImageSink = sec.embed_sink
) -> ReportView:
    """The report of one evaluation run."""
    from repliscope.tasks.base import TASKS

    task = TASKS.get(record.task)
    spec = task.report
    namer = sec.class_namer(record.manifest)
    fail_rows, fail_more, fail_summary = sec.failures(record.samples, namer, not spec.misclassified)
    from repliscope.metrics.classification import tie_line

    ties = tie_line(record.counts)  # classification: all-equal rows, label ties at the top-k boundary
    fail_summary += f" Ties: {ties}." if ties else ""
    latency, latency_stats = sec.latency(record, sink)
    per_class = [Section("per-class", spec.per_class_title)] if spec.per_class_title else []
    sections = [
        Section("claim", "Claim"),
        Section("metrics", spec.metrics_title),
        *per_class,
        Section("failures", spec.failures_title),
        Section("latency", "Latency"),
        Section("provenance", "Provenance"),
    ]
    where = f"{record.dataset.get('name', '?')}, {record.counts.get('evaluated', len(record.samples))} samples"
    note = f"On {where}; {spec.interval_note}" + _left_out_note(record.dataset)
    title = f"{record.manifest.name} {record.manifest.version}"
    if record.variant:
        title += f" · variant {record.variant}" + (f" of sweep {record.sweep_id[:12]}" if record.sweep_id else "")
    view = ReportView(
        kind="run",
        title=title,
        object_id=record.run_id,
        created_at=f"{record.created_at:%Y-%m-%d %H:%M:%S %Z}".strip(),
        repliscope_version=record.repliscope_version,
        description=sec.manifest_description(record.manifest),
        sections=_with_extra(sections, extra_figures),
        claims=sec.claim_rows(record.claims, record.metrics),
        claim_figure=sec.claim_figure(record.claims, record.metrics, sink),
        metrics=sec.metric_rows(record.metrics),
        metrics_note=note,
        metrics_count_header=spec.count_header,
        per_class=sec.per_class_rows(record.per_class) if spec.per_class_title else [],  # else: the task's section
        provenance=sec.record_provenance(record),
        failures=fail_rows,
        failures_more=fail_more,
        failures_summary=fail_summary,
        latency=latency,
        latency_stats=latency_stats,
        extra_figures=sec.extra_figure_views(extra_figures, sink),
    )
    if task.truth == "masks":
        from repliscope.report.segmentation_sections import with_segmentation

        return with_segmentation(view, record, sink)
    if task.truth != "boxes":
        return view
    from repliscope.report.units_sections import with_units

    return with_units(view, record, sink)


def _left_out_note(dataset: Mapping[str, Any]) -> str:
    """`` Scored on 1 of 80 dataset categories ...`` (a sentence) when a run left categories out (the record's
    ``categories_left_out``, noted by detection's ``restrict``); empty otherwise."""
    from repliscope.tasks.detection import categories_left_out_line

    line = categories_left_out_line(dict(dataset))
    return f" {line[0].upper()}{line[1:]}{'' if line.endswith('...') else '.'}" if line else ""


def build_sweep_view(
    sweep: SweepResult,
    records: Mapping[str, EvaluationRecord] | None = None,
    extra_figures: Sequence[ExtraFigure] | None = None,
    sink: ImageSink = sec.embed_sink,
) -> ReportView:
    """The report of one pitfall sweep; ``records`` (keyed by run id or variant name) adds flipped samples."""
    from repliscope.report import segmentation_sections as sg  # a sweep's only: a run report does not import it

    namer = sec.class_namer(sweep.manifest)
    deltas, deltas_note = ps.delta_figure(sweep, sink)
    ref_record = records.get(sweep.reference.run_id or "") if records else None
    pipeline = sweep.reference.pipeline or (ref_record.pipeline if ref_record else None)
    sections = [
        Section("claim", "Claim"),
        Section("metrics", "Measured metrics (reference)"),
        Section("pitfalls", "Pitfalls"),
        Section("deltas", "Δ top-1 per variant"),
        Section("visual", "Visual testing"),
        Section("provenance", "Provenance"),
    ]
    n = sweep.dataset.get("num_samples")
    detection = ds.is_detection(sweep)  # also true for segmentation (paired by its task), whose columns differ
    segmentation = sg.is_segmentation(sweep)
    if detection:  # no top-1: the Δ top-1 chart and flip lists do not apply
        sections = [s for s in sections if s.id != "deltas"]
        deltas, deltas_note = None, ""
    return ReportView(
        kind="sweep",
        title=f"{sweep.manifest.name} {sweep.manifest.version}: pitfall sweep",
        object_id=sweep.sweep_id,
        created_at=f"{sweep.created_at:%Y-%m-%d %H:%M:%S %Z}".strip(),
        repliscope_version=sweep.repliscope_version,
        description=sec.manifest_description(sweep.manifest),
        sections=_with_extra(sections, extra_figures),
        claims=sec.claim_rows(sweep.claims, sweep.reference.metrics),
        claim_figure=sec.claim_figure(sweep.claims, sweep.reference.metrics, sink),
        metrics=sec.metric_rows(sweep.reference.metrics),
        metrics_count_header="n" if sweep.reference.metric("AP") or segmentation else "correct / n",
        metrics_note=(
            f"The reference pipeline (the manifest as written) on {sweep.dataset.get('name', '?')}"
            f"{'' if n is None else f', {n} samples'}; "
            + (
                "fractions, 95 % bias-corrected bootstrap intervals over images."
                if segmentation
                else "COCOeval's numbers as fractions, 95 % bias-corrected bootstrap intervals over images."
                + _left_out_note(ref_record.dataset if ref_record else {})
                if detection
                else "95 % Wilson score intervals."
            )
        ),
        provenance=sec.provenance(
            sweep.manifest,
            pipeline,
            sweep.runtime,
            sweep.software,
            sweep.hardware,
            sweep.dataset,
            sweep.options,
            ps.sweep_timings(sweep.timings, sweep.variants),
        ),
        pitfalls=(
            sg.segmentation_rows(sweep, records)
            if segmentation
            else ds.detection_rows(sweep)
            if detection
            else ps.pitfall_rows(sweep)
        ),
        pitfalls_caption=(
            sg.segmentation_caption(sweep)
            if segmentation
            else ds.detection_caption(sweep)
            if detection
            else ps.pitfalls_caption(sweep)
        ),
        pitfall_headers=list(sg.SWEEP_HEADERS if segmentation else ds.HEADERS) if detection else [],
        flips=[] if detection else ps.flip_lists(sweep, records, namer),
        deltas=deltas,
        deltas_note=deltas_note,
        visual=ps.visual_panels(sweep, namer, sink),
        extra_figures=sec.extra_figure_views(extra_figures, sink),
    )


def build_benchmark_view(records: Sequence[Any], sink: ImageSink = sec.embed_sink) -> ReportView:
    """The report of benchmark records (one, or one matrix run): see :mod:`repliscope.report.bench_sections`."""
    from repliscope.report.bench_sections import build_benchmark_view as build

    return build(records, sink)
