"""The compare page across N runs (two or more, as MLflow's "compare runs"): a metrics table with each run's
value, 95 % interval and n; a chart of every shared metric across the runs; the pipelines and stacks side by side
(differing rows highlighted); for segmentation runs, mask overlays of the same images side by side.

With exactly two runs the page also carries the paired details of :func:`repliscope.service.web.views.compare_page`
(paired deltas, McNemar, flips); this module holds only what applies to any number of runs. No HTTP here.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from repliscope.evaluation.record import EvaluationRecord
from repliscope.report.view import FigureView, Image
from repliscope.service.web.compare_cache import derived
from repliscope.service.web.compare_rows import MAX_RUNS, RowAcross, letter
from repliscope.service.web.views import Trust, op_text, trust_of, verdict_text

MASK_SAMPLES = 3
"""Segmentation: the images whose masks are shown side by side (those where the runs' IoUs differ most)."""
MAX_CHART_METRICS = 4


@dataclass(frozen=True)
class SweepPage:
    """One page of a sweep's compare: ``run_ids`` (the reference first, then up to ``MAX_RUNS - 1`` variants by
    name), page ``page`` of ``pages``, of a sweep with ``total`` stored runs."""

    sweep_id: str
    run_ids: list[str]
    page: int
    pages: int
    total: int


def sweep_page(sweep_id: str, variant_runs: dict[str, str], page: int) -> SweepPage:
    """The runs page ``page`` of a sweep compares (``variant_runs``: variant name -> run id, ``reference`` the
    reference run): every page starts with the reference so each variant is read against it. ValueError naming
    the allowed pages when ``page`` is past the last, or when the sweep has fewer than two stored runs."""
    if len(variant_runs) < 2:
        raise ValueError(
            f"sweep {sweep_id[:12]} has {len(variant_runs)} stored run{'' if len(variant_runs) == 1 else 's'}: "
            "a compare needs two"
        )
    reference = variant_runs.get("reference")
    others = [rid for name, rid in sorted(variant_runs.items()) if rid != reference]
    per_page = MAX_RUNS - 1 if reference is not None else MAX_RUNS
    pages = max(1, -(-len(others) // per_page))
    if page > pages:
        raise ValueError(f"page must be between 1 and {pages} for sweep {sweep_id[:12]}, not {page}")
    chunk = others[(page - 1) * per_page : page * per_page]
    run_ids = [reference, *chunk] if reference is not None else chunk
    if len(run_ids) < 2:  # a lone leftover variant without a reference: read it with the page before's last
        run_ids = [others[(page - 1) * per_page - 1], *chunk]
    return SweepPage(sweep_id=sweep_id, run_ids=run_ids, page=page, pages=pages, total=len(variant_runs))


@dataclass(frozen=True)
class RunHead:
    """One compared run: its letter (A, B, C, ...), ids and what it ran."""

    letter: str
    run_id: str
    model: str
    runtime: str
    variant: str
    samples: str
    verdict: str
    trust: Trust


@dataclass(frozen=True)
class MetricCell:
    value: str
    interval: str
    n: str


@dataclass(frozen=True)
class MaskRow:
    """One image's overlays, one per run (prediction | ground truth | disagreement), in the runs' order."""

    sample_id: str
    overlays: list[tuple[str, str | None, str]]
    """Per run: (letter, PNG data URI or None when that run kept no mask of this image, caption)."""


@dataclass
class ManyPage:
    runs: list[RunHead]
    metrics: list[str]
    cells: list[list[MetricCell]]
    """``cells[i][j]``: run ``i``'s metric ``metrics[j]`` (``—`` when it does not report it)."""
    chart: FigureView | None
    pipeline: list[RowAcross]
    stack: list[RowAcross]
    masks: list[MaskRow] = field(default_factory=list)
    masks_note: str = ""
    perf: Any = None
    """The runs' latency and throughput with the conditions they were measured under
    (:class:`~repliscope.service.web.compare_perf.PerfTable`)."""


def _metric_cell(record: EvaluationRecord, name: str) -> MetricCell:
    m = record.metric(name)
    if m is None:
        return MetricCell("—", "—", "—")
    from repliscope.service.web.metric_format import interval_text, value_text

    proportion = m.successes is not None
    return MetricCell(
        value_text(name, m.value, proportion), interval_text(name, m.ci_low, m.ci_high, proportion), str(m.n)
    )


def _metric_names(records: Sequence[EvaluationRecord]) -> list[str]:
    names: list[str] = []
    for r in records:
        for m in r.metrics:
            if m.name not in names:
                names.append(m.name)
    return names


def chart_png(records: Sequence[EvaluationRecord], letters: Sequence[str], names: Sequence[str]) -> bytes | None:
    """One panel per metric (at most :data:`MAX_CHART_METRICS`, those every run reports first): each run's value
    as a dot with its 95 % interval as a bar, runs top to bottom in the table's order. None without a metric."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    shared = [n for n in names if all(r.metric(n) is not None for r in records)]
    shown = (shared + [n for n in names if n not in shared])[:MAX_CHART_METRICS]
    if not shown:
        return None
    rows = len(records)
    fig = Figure(figsize=(6.4, 0.9 + len(shown) * (0.55 + 0.32 * rows)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(shown), 1, squeeze=False)[:, 0]
    y = np.arange(rows)[::-1]
    for ax, name in zip(axes, shown, strict=True):
        for k, r in enumerate(records):
            m = r.metric(name)
            if m is None:
                continue
            ax.errorbar(
                [m.value],
                [y[k]],
                xerr=[[m.value - m.ci_low], [m.ci_high - m.value]],
                fmt="o",
                color="#2c6fbb",
                ecolor="#2c6fbb",
                elinewidth=2.5,
                capsize=4,
                ms=7,
            )
        ax.set_yticks(y, [f"{letter}" for letter in letters], fontsize=12)
        ax.set_ylim(-0.6, rows - 0.4)
        ax.set_title(f"{name} (95 % interval)", fontsize=12, loc="left")
        ax.tick_params(axis="x", labelsize=11)
        ax.grid(axis="x", color="#dddddd")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _pipeline_rows(records: Sequence[EvaluationRecord]) -> list[RowAcross]:
    pipes = [r.pipeline or {} for r in records]
    stages: list[str] = []
    for p in pipes:
        stages += [s for s in p if s not in stages]
    rows = []
    for stage in stages:
        ops = [list(p.get(stage, [])) for p in pipes]
        for i in range(max(len(o) for o in ops)):
            values = [op_text(o[i]) if i < len(o) else "—" for o in ops]
            rows.append(RowAcross(f"{stage} {i + 1}", values, len(set(values)) == 1))
    return rows


def _stack_rows(records: Sequence[EvaluationRecord]) -> list[RowAcross]:
    """The stacks item by item on normalised values (:func:`~repliscope.service.web.stack_compare.compared_items`)."""
    from repliscope.service.web.stack_compare import compared_items

    rows = [RowAcross(what, values, same) for what, values, same in compared_items(records)]
    return sorted(rows, key=lambda r: r.same)


def _foreground_iou(pred: np.ndarray, truth: np.ndarray, background: int) -> float | None:
    void = truth == 255
    p, t = (pred != background) & ~void, (truth != background) & ~void
    union = int((p | t).sum())
    return None if union == 0 else float((p & t).sum()) / union


def _counted_foreground_iou(seg: Any, background: int) -> float | None:
    """:func:`_foreground_iou` of a stored sample from its confusion counts (void pixels are never counted):
    no mask decoded. A prediction outside the model's classes is foreground, as its decoded label is."""
    both = either = 0
    for t, p, n in seg.confusion:
        fg_t, fg_p = t != background, p != background
        both += n if fg_t and fg_p else 0
        either += n if fg_t or fg_p else 0
    return None if either == 0 else both / either


def mask_rows(records: Sequence[EvaluationRecord], letters: Sequence[str]) -> tuple[list[MaskRow], str]:
    """Segmentation runs: overlays of the :data:`MASK_SAMPLES` images (kept masks in every run) whose foreground
    IoU differs most across the runs (ties: the lowest IoU, then the id), each run's prediction, the ground truth
    and their disagreement; ([], why not) otherwise."""
    from repliscope.report.sections import embed_sink
    from repliscope.report.segmentation_sections import _reader, overlay_png
    from repliscope.tasks.base import truth_of
    from repliscope.tasks.segmentation import background_index, labels_of_rle

    if any(truth_of(r.task) != "masks" for r in records):
        return [], ""
    names = records[0].dataset.get("segmentation_classes") or ["background"]
    background = background_index(names) if "background" in names else 0
    by_run = [{s.sample_id: s.segmentation for s in r.samples if s.segmentation is not None} for r in records]
    common = [i for i in by_run[0] if all(i in b for b in by_run[1:])]
    scored: list[tuple[float, float, str]] = []
    for sample_id in common:  # scored from the confusion counts; only the chosen images' masks are decoded
        ious = []
        for b in by_run:
            seg = b[sample_id]
            if seg is None or seg.predicted is None or seg.truth is None:
                break
            ious.append(_counted_foreground_iou(seg, background))
        else:
            known = [x for x in ious if x is not None]
            if known:
                scored.append((-(max(known) - min(known)), min(known), sample_id))
    if not scored:
        return [], "No image has kept masks in every run: no overlay."
    chosen = [s for *_, s in sorted(scored)[:MASK_SAMPLES]]
    # runs of one result hash predicted the same masks: decoded and drawn once
    first = {r.result_hash: k for k, r in reversed(list(enumerate(records)))}
    same = [first[r.result_hash] for r in records]
    labels: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}
    for k, b in enumerate(by_run):
        if same[k] != k:
            continue
        for sample_id in chosen:
            seg = b[sample_id]
            assert seg is not None and seg.predicted is not None and seg.truth is not None  # scored above
            labels[(k, sample_id)] = (labels_of_rle(seg.predicted, seg.size_hw), labels_of_rle(seg.truth, seg.size_hw))
    read = _reader(records[0])
    rows, real = [], 0
    for sample_id in chosen:
        data = read(sample_id)
        real += data is not None
        overlays: list[tuple[str, str | None, str]] = []
        drawn: dict[int, tuple[str | None, float | None]] = {}
        for k, run_letter in enumerate(letters):
            if same[k] not in drawn:
                pred, truth = labels[(same[k], sample_id)]
                png = overlay_png(data, pred, truth, background)
                drawn[same[k]] = (embed_sink(f"compare-mask-{k}", png), _foreground_iou(pred, truth, background))
            src, iou = drawn[same[k]]
            caption = f"{run_letter}: foreground IoU {'n/a' if iou is None else f'{iou:.4f}'}"
            overlays.append((run_letter, src, caption))
        rows.append(MaskRow(sample_id, overlays))
    note = (
        f"Images whose foreground IoU differs most across the runs; each run: its prediction (red), the ground "
        f"truth (green, void grey) and the disagreement (red: predicted only, blue: missed). {real} of "
        f"{len(rows)} drawn on the real image (the others on a grey canvas)."
    )
    return rows, note


def _samples_text(r: EvaluationRecord) -> str:
    """Evaluated samples, ``(k failed)`` when some failed: from the samples, or the record's counts when it was
    read without them."""
    if r.samples:
        failed = sum(1 for s in r.samples if s.error is not None)
        evaluated = len(r.samples) - failed
    else:
        failed, evaluated = r.counts.get("failed", 0), r.counts.get("evaluated", 0)
    return f"{evaluated}" + (f" ({failed} failed)" if failed else "")


def many_page(
    records: Sequence[EvaluationRecord],
    hide: Callable[[str], str] | None = None,
    full: Callable[[EvaluationRecord], EvaluationRecord] | None = None,
) -> ManyPage:
    """The N-run page of ``records`` (in the order given). ``hide``: a text -> text function applied to every
    pipeline and stack value (server paths off a viewer's page), None to show them as stored. ``full``: the
    whole record of one read without its samples (``RunStore.get``), called only when the figures (the mask
    overlays need the samples) are not cached yet; None when ``records`` are whole."""
    from repliscope.report.sections import embed_sink
    from repliscope.service.web.compare_perf import runs_table

    letters = [letter(i) for i in range(len(records))]
    names = _metric_names(records)
    heads = [
        RunHead(
            letter=letter,
            run_id=r.run_id,
            model=f"{r.manifest.name} {r.manifest.version}",
            runtime=f"{r.runtime.get('runtime', '?')} {r.runtime.get('framework_version') or ''}".strip(),
            variant=r.variant or "—",
            samples=_samples_text(r),
            verdict=verdict_text(r.claims),
            trust=trust_of(r),
        )
        for letter, r in zip(letters, records, strict=True)
    ]

    def figures() -> tuple[FigureView | None, list[MaskRow], str]:
        png = chart_png(records, letters, names)
        chart = (
            FigureView(
                "Metrics across the runs",
                Image(embed_sink("compare-metrics", png), "each run's metrics with their 95 % intervals"),
                "dot: the run's value over its own samples; bar: its 95 % interval; rows in the table's order",
            )
            if png is not None
            else None
        )
        from repliscope.tasks.base import truth_of

        masks = all(truth_of(r.task) == "masks" for r in records)  # only mask overlays read the samples
        whole = [full(r) for r in records] if full is not None and masks else records
        return (chart, *mask_rows(whole, letters))

    chart, masks, note = derived("compare-figures", records, figures)  # drawn once per set of stored runs
    pipeline, stack = _pipeline_rows(records), _stack_rows(records)
    if hide is not None:
        pipeline = [RowAcross(r.what, [hide(v) for v in r.values], r.same) for r in pipeline]
        stack = [RowAcross(r.what, [hide(v) for v in r.values], r.same) for r in stack]
    return ManyPage(
        runs=heads,
        metrics=names,
        cells=[[_metric_cell(r, n) for n in names] for r in records],
        chart=chart,
        pipeline=pipeline,
        stack=stack,
        masks=masks,
        masks_note=note,
        perf=runs_table(records, letters),
    )


@dataclass(frozen=True)
class TaskRuns:
    """The asked runs of one task: ``runs`` (letter, run id, model, metric names) and the compare of just them
    (``compare_url``, None when only one run of that task was asked)."""

    task: str
    runs: list[tuple[str, str, str, str]]
    compare_url: str | None


@dataclass(frozen=True)
class Refusal:
    """Why a compare of runs of different tasks is refused (the page answers 422 with it): ``message`` is the
    API's text (:class:`~repliscope.store.compare.MixedTasksError`), ``groups`` the asked runs by task with what
    can be compared instead."""

    message: str
    groups: list[TaskRuns]


def mixed_tasks(records: Sequence[EvaluationRecord]) -> Refusal | None:
    """The refusal of a compare of ``records`` when they are not all of one task, else None."""
    from urllib.parse import urlencode

    from repliscope.store.compare import MixedTasksError, check_one_task

    try:
        check_one_task(records)
    except MixedTasksError as exc:
        by_task: dict[str, list[tuple[str, str, str, str]]] = {}
        for i, r in enumerate(records):
            metrics = ", ".join(m.name for m in r.metrics) or "no metric"
            by_task.setdefault(r.task, []).append(
                (letter(i), r.run_id, f"{r.manifest.name} {r.manifest.version}", metrics)
            )
        groups = [
            TaskRuns(
                task,
                runs,
                "/compare?" + urlencode([("run", run_id) for _, run_id, _, _ in runs]) if len(runs) > 1 else None,
            )
            for task, runs in by_task.items()
        ]
        return Refusal(str(exc), groups)
    return None


MAX_BOX_IMAGES = 12
"""Detection compare: the differing images shown with both runs' boxes (the rest are listed by id)."""


@dataclass(frozen=True)
class BoxImage:
    """One image whose detections differ between runs A and B: its position in each run (the thumbnail URLs),
    its ground truth's classes and each run's detections drawn (``red 0.98, blue 0.87``, class names)."""

    sample_id: str
    position_a: int
    position_b: int
    truth: str
    detections_a: str
    detections_b: str


@dataclass(frozen=True)
class BoxesPanel:
    """The first :data:`MAX_BOX_IMAGES` differing images of a two-run detection compare, side by side: each
    thumbnail opens larger, where every box carries its class name and score; ``thumbnails_a`` /
    ``thumbnails_b``: whether the run's dataset re-loads here (else no image, the classes only)."""

    run_a: str
    run_b: str
    images: list[BoxImage]
    thumbnails_a: bool
    thumbnails_b: bool
    min_score: float
    more: int


def boxes_panel(store: Any, run_a: str, run_b: str, differing: Sequence[str]) -> BoxesPanel | None:
    """The :class:`BoxesPanel` of the images ``differing`` between the stored detection runs ``run_a`` and
    ``run_b`` (their whole records are read once and kept for the thumbnails); None when none differs."""
    from repliscope.service.web.samples import DRAW_MIN_SCORE, RECENT, _kept, box_label, detection_names

    if not differing:
        return None
    a, read_a = RECENT.get(store, run_a)
    b, read_b = RECENT.get(store, run_b)
    names = detection_names(a)
    at_a = {s.sample_id: i for i, s in enumerate(a.samples)}
    at_b = {s.sample_id: i for i, s in enumerate(b.samples)}

    def drawn(record: EvaluationRecord, position: int) -> str:
        sample = record.samples[position]
        if sample.error is not None:
            return "failed (the run page says why)"
        kept = sorted(_kept(sample, DRAW_MIN_SCORE), key=lambda d: -d.score)
        return ", ".join(box_label(d, names) for d in kept) or "none"

    def truth(position: int) -> str:
        gt = a.ground_truth
        if gt is None or position >= len(gt.samples):
            return "—"
        t = gt.samples[position]
        flags = zip(t.iscrowd or [False] * len(t.classes), t.ignore or [False] * len(t.classes), strict=False)
        kept = [c for c, (crowd, ignore) in zip(t.classes, flags, strict=False) if not (crowd or ignore)]
        return ", ".join(names.get(c, f"class {c}") for c in kept) or "none"

    shown = [i for i in differing if i in at_a and i in at_b]
    images = [
        BoxImage(i, at_a[i], at_b[i], truth(at_a[i]), drawn(a, at_a[i]), drawn(b, at_b[i]))
        for i in shown[:MAX_BOX_IMAGES]
    ]
    return BoxesPanel(
        run_a=a.run_id,
        run_b=b.run_id,
        images=images,
        thumbnails_a=read_a is not None,
        thumbnails_b=read_b is not None,
        min_score=DRAW_MIN_SCORE,
        more=max(0, len(shown) - MAX_BOX_IMAGES),
    )
