"""What the web pages show, assembled from the core (store, compare, report view builders); no HTTP here.

The run page reuses :func:`repliscope.report.build.build_run_view` (the HTML report's own view model, charts
embedded as PNG data URIs); the compare page :func:`repliscope.store.compare.compare_runs` plus the pipeline and
stack differences of the two records, and thumbnails of the flipped samples when the run's dataset re-loads
with the record's identity.
"""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from repliscope.errors import StoreError
from repliscope.evaluation.record import EvaluationRecord
from repliscope.report.view import FigureView, ReportView
from repliscope.service.web import metric_format
from repliscope.service.web.metric_format import count_of
from repliscope.service.web.sample_source import sample_reader
from repliscope.store.compare import RunComparison
from repliscope.store.repository import RunQuery, RunStore

THUMBNAIL_PX = 96
MAX_FLIPS_SHOWN = 24


@dataclass(frozen=True)
class Trust:
    """The provenance that makes a result trustworthy, on every page that shows a result."""

    manifest: str
    manifest_sha256: str
    runtime: str
    dataset_identity: str
    result_hash: str


def trust_of(record: EvaluationRecord) -> Trust:
    rt = record.runtime
    version = rt.get("framework_version") or rt.get("version") or "version not recorded"
    return Trust(
        manifest=f"{record.manifest.name}@{record.manifest.version}",
        manifest_sha256=record.manifest.sha256,
        runtime=f"{rt.get('runtime', '?')} {version}",
        dataset_identity=f"{record.dataset.get('name', '?')} · {record.dataset.get('identity', '?')}",
        result_hash=record.result_hash,
    )


def verdict_text(claims: Sequence[Any]) -> str:
    """The claim verdicts of a record as one text: the common verdict, or each ``metric: verdict``."""
    if not claims:
        return "no claim"
    from pydantic import BaseModel

    from repliscope.report.sections import shown_verdict  # an older record's wide "consistent" is not comparable

    def shown(c: Any) -> str:
        if isinstance(c, Mapping):
            return shown_verdict(c)[0]
        return shown_verdict(c.model_dump())[0] if isinstance(c, BaseModel) else str(c.verdict)

    verdicts = [shown(c) for c in claims]
    if len(set(verdicts)) == 1:
        return str(verdicts[0])
    metrics = [c["metric"] if isinstance(c, Mapping) else c.metric for c in claims]
    return "; ".join(f"{m}: {v}" for m, v in zip(metrics, verdicts, strict=True))


# --- runs table ---------------------------------------------------------------------------------------------

RUN_FILTERS = (
    "model",
    "version",
    "runtime",
    "framework_version",
    "dataset",
    "hardware",
    "kind",
    "verdict",
    "sweep_id",
    "tag",
)
"""The runs page's filters: the fields of :class:`RunQuery` (``hardware``: the CPU model; ``sweep_id``: the
variants of one pitfall sweep, as the variant column links them; ``tag``: the runs carrying a tag, as the tag
chips link them)."""
_CHOICE_FILTERS = ("model", "version", "runtime", "framework_version", "dataset", "hardware", "kind", "verdict")
"""The filters whose form field lists the stored values (``sweep_id`` is typed or linked)."""


@dataclass(frozen=True)
class RunLine:
    run_id: str
    created_at: str
    kind: str
    model: str
    runtime: str
    hardware: str
    dataset: str
    top1: str
    """The headline metric of the run's task with its value: ``top1 88.90 %``, ``AP 0.1260``, ``mIoU 0.5844``."""
    verdict: str
    manifest_sha256: str
    result_hash: str
    samples: str = ""
    """Evaluated samples (``n``), with ``(k failed)`` when some failed: 100 % of 3 is not 88.9 % of 1000."""
    interval: str = "—"
    """The headline metric's 95 % interval as the record states it (top-1: Wilson over the evaluated samples;
    AP, mIoU: bootstrap over images)."""
    variant: str = "—"
    """A pitfall sweep variant's name (``reference`` for the sweep's reference run), ``—`` for a plain run."""
    sweep_id: str | None = None
    display_name: str | None = None
    """The run's display name (a rename: :mod:`repliscope.store.annotations`), None without one."""
    tags: tuple[str, ...] = ()


def _samples_text(num_samples: int, num_failed: int) -> str:
    evaluated = num_samples - num_failed
    return f"{evaluated}" + (f" ({num_failed} failed)" if num_failed else "")


def run_lines(store: RunStore, query: RunQuery, sort: str, page: int, page_size: int) -> tuple[list[RunLine], int]:
    """One page of :meth:`RunStore.query_runs` as table lines, and the total matching: each run's headline
    metric (its task's first metric spec) with its 95 % interval (:mod:`repliscope.service.web.metric_format`)."""
    from repliscope.service.web.metric_format import headline_text, interval_text

    summaries, total = store.query_runs(query, sort, page, page_size)
    labels = store.annotations.labels(r.run_id for r in summaries)
    lines = [
        RunLine(
            run_id=r.run_id,
            created_at=f"{r.created_at:%Y-%m-%d %H:%M}",
            kind=r.kind,
            model=f"{r.manifest_name} {r.manifest_version}",
            runtime=f"{r.runtime} {r.framework_version or ''}".strip(),
            hardware=r.cpu_model or "—",
            dataset=r.dataset_name,
            top1=headline_text(r.metric_name, r.metric_value),
            verdict=r.verdict or "no claim",
            manifest_sha256=r.manifest_sha256,
            result_hash=r.result_hash,
            samples=_samples_text(r.num_samples, r.num_failed),
            interval=interval_text(r.metric_name, r.metric_low, r.metric_high),
            variant=r.variant or ("reference" if r.sweep_id else "—"),
            sweep_id=r.sweep_id,
            display_name=labels[r.run_id].display_name if r.run_id in labels else None,
            tags=tuple(labels[r.run_id].tags) if r.run_id in labels else (),
        )
        for r in summaries
    ]
    return lines, total


def best_cell_names(store: RunStore, models: Sequence[Any]) -> dict[str, str]:
    """The display names (``runs rename``: :mod:`repliscope.store.annotations`) of the runs the models pages'
    cells come from (:class:`repliscope.service.model_verdicts.ModelVerdicts`), by run id; a run without one is
    left out. Read fresh on each page (one query), so a rename shows at once."""
    ids = [cell.run_id for model in models for cell in model.cells]
    return {rid: label.display_name for rid, label in store.annotations.labels(ids).items() if label.display_name}


CHOICES_TTL_SECONDS = 30.0
"""How long the filter form's value lists are reused (eight DISTINCT scans cost ~0.1 s on 100,000 runs); a run
stored meanwhile is found by its filter value all the same, it is only missing from the lists until then."""
_choices_cache: dict[str, tuple[float, dict[str, list[str]]]] = {}


def filter_choices(store: RunStore) -> dict[str, list[str]]:
    """The distinct values of each run filter (for the filter form's lists), at most CHOICES_TTL_SECONDS old."""
    now = time.monotonic()
    cached = _choices_cache.get(store.url)
    if cached is not None and now - cached[0] < CHOICES_TTL_SECONDS:
        return cached[1]
    choices = store.runs.filter_values(_CHOICE_FILTERS, limit=200)
    _choices_cache[store.url] = (now, choices)
    return choices


# --- one run ------------------------------------------------------------------------------------------------


@dataclass
class RunPage:
    record: EvaluationRecord
    view: ReportView
    trust: Trust
    verdict: str
    pitfalls: list[Any] = field(default_factory=list)
    pitfalls_caption: str = ""
    deltas: FigureView | None = None
    pitfall_headers: tuple[str, str, str, str] = ("Top-1", "Δ top-1", "McNemar p", "Flips")
    """The pitfall table's metric columns: classification, or (detection sweep) AP / Δ AP / its interval."""
    variant_runs: dict[str, str] = field(default_factory=dict)
    """Sweep variant name (``reference`` too) -> its run id: the pitfall table links each variant's run."""

    @property
    def truth(self) -> str | None:
        """What the run's task records (:attr:`repliscope.tasks.base.Task.truth`): the page's task sections."""
        from repliscope.tasks.base import truth_of

        return truth_of(self.record.task)

    @property
    def samples_title(self) -> str:
        """The samples section's title: the task's failures title when it lists top-1 misses, else ``Images``."""
        from repliscope.tasks.base import TASKS

        task = TASKS.get(self.record.task) if self.record.task in TASKS else None
        return task.report.failures_title if task is not None and task.report.misclassified else "Images"


def variant_runs(store: RunStore, sweep_id: str) -> dict[str, str]:
    """The stored runs of sweep ``sweep_id`` by variant name (at most 500: a sweep has a few dozen)."""
    summaries, _ = store.query_runs(RunQuery(sweep_id=sweep_id), "variant", 1, 500)
    return {r.variant: r.run_id for r in summaries if r.variant}


def run_page(store: RunStore, run_id: str) -> RunPage:
    """The run page of ``run_id`` (full id or unique prefix): the report view, its trace's per-layer chart, and
    when the run is a sweep variant the sweep's pitfall table and Δ top-1 chart (charts drawn once:
    :mod:`repliscope.service.web.chart_cache`)."""
    from repliscope.service.web import chart_cache
    from repliscope.service.web.samples import RECENT

    record = RECENT.get(store, run_id)[0]  # the last few runs' records stay read (a run is immutable)
    view = chart_cache.run_view(store, record)
    view = metric_format.run_view_numbers(view, record)  # the claims' and metrics' numbers as every page shows them
    page = RunPage(record=record, view=view, trust=trust_of(record), verdict=verdict_text(record.claims))
    if record.sweep_id:
        from repliscope.report import pitfall_sections as ps

        try:
            sweep = store.get_sweep(record.sweep_id)
        except StoreError:
            return page
        page.variant_runs = variant_runs(store, sweep.sweep_id)
        from repliscope.report import detection_sections as ds

        if ds.is_detection(sweep):  # no top-1, no McNemar: AP and the paired ΔAP interval; no Δ top-1 chart
            page.pitfalls = metric_format.sweep_row_numbers(
                ds.detection_rows(sweep), [sweep.reference, *sweep.variants], "AP"
            )
            page.pitfalls_caption = ds.detection_caption(sweep)
            page.pitfall_headers = ("AP", "Δ AP (paired)", "Δ AP 95 % interval", "Images differ")
            return page
        page.pitfalls = metric_format.sweep_row_numbers(
            ps.pitfall_rows(sweep), [sweep.reference, *sweep.variants], "top1"
        )
        page.pitfalls_caption = ps.pitfalls_caption(sweep)
        page.deltas = chart_cache.sweep_deltas(store, sweep)
    return page


@dataclass
class BenchPage:
    view: ReportView
    verdict: str
    trust: Trust


def bench_page(store: RunStore, benchmark_id: str) -> BenchPage:
    """A benchmark record's page: the benchmark report view (latency ECDF, performance claims; drawn once)."""
    from repliscope.service.web import chart_cache

    rec = store.get_benchmark(benchmark_id)
    view = chart_cache.bench_view(store, rec)
    rt = rec.runtime
    trust = Trust(
        manifest=f"{rec.manifest.name}@{rec.manifest.version}",
        manifest_sha256=rec.manifest.sha256,
        runtime=f"{rt.get('runtime', '?')} {rt.get('framework_version', 'version not recorded')}",
        dataset_identity=f"{rec.dataset.get('name', '?')} · {rec.dataset.get('identity', '?')}",
        result_hash="none: a benchmark records latencies, not predictions",
    )
    return BenchPage(view=view, verdict=verdict_text(view.claims), trust=trust)


# --- compare ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiffLine:
    """One compared item: ``same`` False is highlighted."""

    what: str
    a: str
    b: str
    same: bool
    note: str = ""
    """Why differing values are not a difference (:data:`~repliscope.service.web.stack_compare.INCIDENTAL_NOTE`)."""


@dataclass(frozen=True)
class FlipView:
    sample_id: str
    label: str
    top1_a: str
    top1_b: str
    thumbnail: str | None


@dataclass
class ComparePage:
    a: EvaluationRecord
    b: EvaluationRecord
    comparison: RunComparison
    trust_a: Trust
    trust_b: Trust
    verdict_a: str
    verdict_b: str
    mcnemar: str
    pipeline: list[DiffLine]
    stack: list[DiffLine]
    flips: list[FlipView]
    flips_more: int
    thumbnails_note: str
    why: list[str]
    detection: bool = False
    differing_images: list[str] = field(default_factory=list)
    """Detection: ids of the images whose detections differ (the task's paired ``flipped_ids``)."""


def op_text(op: Mapping[str, Any]) -> str:
    params = ", ".join(f"{k}={v}" for k, v in op.items() if k != "op")
    return f"{op.get('op', '?')}({params})"


def pipeline_diff(
    a: Mapping[str, Sequence[Mapping[str, Any]]] | None, b: Mapping[str, Sequence[Mapping[str, Any]]] | None
) -> list[DiffLine]:
    """The two pipelines op by op, stage by stage (a missing op is ``—``)."""
    a, b = a or {}, b or {}
    lines = []
    for stage in [*a, *(s for s in b if s not in a)]:
        ops_a, ops_b = list(a.get(stage, [])), list(b.get(stage, []))
        for i in range(max(len(ops_a), len(ops_b))):
            ta = op_text(ops_a[i]) if i < len(ops_a) else "—"
            tb = op_text(ops_b[i]) if i < len(ops_b) else "—"
            lines.append(DiffLine(f"{stage} {i + 1}", ta, tb, ta == tb))
    return lines


def stack_diff(a: EvaluationRecord, b: EvaluationRecord) -> list[DiffLine]:
    """Runtime, software and hardware of the two runs item by item, compared on normalised values
    (:mod:`repliscope.service.web.stack_compare`: ``null`` = missing, unordered lists sorted, a conversion's
    cache state never a difference); differing items first."""
    from repliscope.service.web.stack_compare import INCIDENTAL_NOTE, compared_items

    lines = [
        DiffLine(what, va, vb, same, INCIDENTAL_NOTE if same and va != vb else "")
        for what, (va, vb), same in compared_items([a, b])
    ]
    return sorted(lines, key=lambda d: d.same)


def _thumbnail_reader(record: EvaluationRecord, store: Any = None) -> Any:
    """sample id -> PNG data URI of a thumbnail (see :func:`sample_reader`); None when the dataset does not
    re-load with the record's identity."""
    read_bytes = sample_reader(record, store)
    if read_bytes is None:
        return None

    def read(sample_id: str) -> str | None:
        from PIL import Image

        data = read_bytes(sample_id)
        if data is None:
            return None
        try:
            with Image.open(io.BytesIO(data)) as opened:
                im = opened.convert("RGB")
            im.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
            buf = io.BytesIO()
            im.save(buf, format="PNG")
        except Exception:  # an unreadable file: the sample id stands alone
            return None
        return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")

    return read


def _n(count: int, noun: str) -> str:
    return count_of(count, noun)


def _frac(x: Any) -> str:
    return f"{x:.4f}" if isinstance(x, int | float) else "n/a"


def detection_paired_text(p: Mapping[str, Any] | None) -> str:
    """The detection paired figures of B against A (:func:`repliscope.units.detection_paired`'s keys)."""
    if p is None:
        return "no paired statistics (no image evaluated by both runs, or different tasks)"
    matched = p.get("matched_fraction")
    text = (
        f"Paired over the {p.get('n_samples', '?')} images both evaluated: B matched "
        f"{'n/a' if not isinstance(matched, int | float) else f'{100 * matched:.1f} %'} of A's "
        f"{p.get('n_reference_detections', '?')} detections (IoU >= 0.5, same class), mean IoU "
        f"{_frac(p.get('mean_iou'))}, images with differing detections: {p.get('flipped_images', '?')}"
    )
    if p.get("delta_ap") is not None:
        text += (
            f"; AP {_frac(p.get('ap_reference'))} -> {_frac(p.get('ap_variant'))}, ΔAP {p['delta_ap']:+.4f} "
            f"(95 % paired bootstrap [{_frac(p.get('delta_ap_ci_low'))}, {_frac(p.get('delta_ap_ci_high'))}])"
        )
    return text + "."


def compare_page(store: RunStore, run_a: str, run_b: str) -> ComparePage:
    """Why run B differs from run A: metric deltas with McNemar, pipeline and stack differences, flips. The runs
    are read without their samples; their whole records only when their comparison is not cached yet
    (:func:`~repliscope.service.web.compare_cache.comparison_of`)."""
    from repliscope.report.sections import class_namer
    from repliscope.service.web.compare_cache import HEADS, comparison_of

    a, b = HEADS.get(store, run_a), HEADS.get(store, run_b)
    comparison = comparison_of(a, b, full=lambda r: store.get(r.run_id))
    paired = comparison.paired or {}
    p = paired.get("mcnemar_p")
    mcnemar = (
        "no paired test (no sample evaluated by both runs, or different tasks)"
        if p is None
        else f"McNemar exact test on the {paired.get('n', comparison.common_evaluated)} samples both evaluated: "
        f"b={paired.get('b')}, c={paired.get('c')}, p={p:.3g}"
        + (" (significant at 0.05)" if p < 0.05 else " (not significant at 0.05)")
    )
    pipeline = pipeline_diff(a.pipeline, b.pipeline)
    stack = stack_diff(a, b)
    namer = class_namer(a.manifest)
    reader = _thumbnail_reader(a, store) if comparison.top1_flips else None
    flips = [
        FlipView(
            sample_id=f.sample_id,
            label=namer(f.label),
            top1_a=namer(f.top1_a),
            top1_b=namer(f.top1_b),
            thumbnail=reader(f.sample_id) if reader else None,
        )
        for f in comparison.top1_flips[:MAX_FLIPS_SHOWN]
    ]
    note = (
        "Thumbnails from the run's dataset (re-loaded with the same identity)."
        if reader
        else "The run's dataset does not re-load with the record's identity here: sample ids only."
    )
    from repliscope.tasks.base import truth_of

    truth = truth_of(comparison.task)
    detection = truth == "boxes" and a.task == b.task
    differing: list[str] = []
    if detection:
        mcnemar = detection_paired_text(comparison.paired)
        differing = [str(i) for i in (comparison.paired or {}).get("flipped_ids") or []]
    if truth == "masks" and a.task == b.task and comparison.paired:
        sp = comparison.paired  # SemanticSegmentation.paired's keys
        agree = "n/a" if sp.get("pixel_agreement") is None else f"{100 * sp['pixel_agreement']:.2f} %"
        mcnemar = (
            f"Paired on the {sp['n_samples']} images both evaluated: mIoU {sp['miou_reference']:.4f} -> "
            f"{sp['miou_variant']:.4f}, delta {sp['delta_miou']:+.4f} (95 % paired bootstrap "
            f"[{sp['delta_miou_ci_low']:+.4f}, {sp['delta_miou_ci_high']:+.4f}]); pixels with the same "
            f"label {agree}; {sp['flipped_images']} images whose masks differ."
        )
    why = []
    if comparison.same_result_hash:
        why.append(
            "The result hashes are equal: both runs predicted the same "
            + (
                "detections on every image."
                if detection
                else "masks on every image."
                if truth == "masks"
                else "top-k on every sample."
            )
        )
    if not comparison.same_dataset:
        why.append("The dataset identities differ: the runs did not see the same data.")
    changed_ops = [d.what for d in pipeline if not d.same]
    if changed_ops:
        why.append(f"The pipelines differ at {', '.join(changed_ops)}.")
    changed_stack = [d.what for d in stack if not d.same]
    if changed_stack:
        shown = ", ".join(changed_stack[:6]) + (f" and {len(changed_stack) - 6} more" if len(changed_stack) > 6 else "")
        why.append(f"The stacks differ in {shown}.")
    if comparison.top1_flips and not detection:
        why.append(f"{_n(len(comparison.top1_flips), 'sample')} changed top-1 class.")
    if differing:
        why.append(f"{_n(len(differing), 'image')} {'has' if len(differing) == 1 else 'have'} differing detections.")
    if comparison.failed_in_one:
        why.append(f"{_n(comparison.failed_in_one, 'sample')} failed in one run only.")
    if not changed_ops and not changed_stack:
        why.append("The pipelines and the stacks (runtime, software, hardware) are identical.")
    if not why:
        why.append("Same data, same pipeline, same stack and no flipped sample.")
    return ComparePage(
        a=a,
        b=b,
        comparison=comparison,
        trust_a=trust_of(a),
        trust_b=trust_of(b),
        verdict_a=verdict_text(a.claims),
        verdict_b=verdict_text(b.claims),
        mcnemar=mcnemar,
        pipeline=pipeline,
        stack=stack,
        flips=flips,
        flips_more=max(0, len(comparison.top1_flips) - MAX_FLIPS_SHOWN),
        thumbnails_note=note,
        why=why,
        detection=detection,
        differing_images=differing,
    )
