"""Human-readable rendering of records and comparisons (rich). JSON output bypasses this module."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from repliscope.number_text import percent_text, unit_delta_text, unit_interval_text

if TYPE_CHECKING:  # annotations only: importing the CLI stays fast (no scipy/SQLAlchemy at start-up)
    from repliscope.evaluation.record import EvaluationRecord
    from repliscope.pitfalls.result import SweepResult, VariantOutcome
    from repliscope.store.compare import RunComparison

console = Console()


def sample_progress(disable: bool = False) -> Any:
    """The progress bar of a command that runs samples (description, bar, done/total, time left), transient, on
    the console; ``disable`` (--json): none. rich.progress is imported only here, when a command shows one."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=disable,
    )


def pct(x: float | None) -> str:
    """A proportion in the house's format (:mod:`repliscope.number_text`): ``88.90 %``; ``n/a`` for None."""
    return "n/a" if x is None else percent_text(x)


def pct_interval(low: float | None, high: float | None) -> str:
    """A 95 % interval of a proportion: ``[86.81, 90.71] %``; ``n/a`` when either end is unknown."""
    return "n/a" if low is None or high is None else unit_interval_text("percent", low, high)


def pct_delta(delta: float | None) -> str:
    """A difference of proportions in percentage points: ``+0.20 pp``; ``n/a`` for None."""
    return "n/a" if delta is None else unit_delta_text("percent", delta)


def fraction_interval(low: float | None, high: float | None) -> str:
    """A 95 % interval of a fraction metric: ``[0.3612, 0.3857]``; ``n/a`` when either end is unknown."""
    return "n/a" if low is None or high is None else unit_interval_text("fraction", low, high)


def delta_interval(low: float | None, high: float | None) -> str:
    """A 95 % interval of a difference of fractions, signed: ``[-0.0040, +0.0012]``; ``n/a`` when unknown."""
    return "n/a" if low is None or high is None else f"[{low:+.4f}, {high:+.4f}]"


def print_skipped_files(dataset: dict[str, Any], shown: int = 5) -> None:
    """The files of the dataset's folder that are not samples (other extensions) and the folders that could
    not be listed: count and the first names (all of them are in the record, see --json)."""
    ignored, count = dataset.get("ignored_files") or [], dataset.get("num_ignored_files", 0)
    if count:
        more = f" and {count - shown} more" if count > shown else ""
        console.print(f"ignored   {count} non-image files: {', '.join(ignored[:shown])}{more}", highlight=False)
    folders = dataset.get("unreadable_folders") or []
    if folders:
        more = f" and {len(folders) - shown} more" if len(folders) > shown else ""
        console.print(
            f"[yellow]unlisted[/]  {len(folders)} folders could not be read, their files are not "
            f"samples: {', '.join(folders[:shown])}{more}",
            highlight=False,
        )


SHOWN_FLIPS = 50
"""Top-1 flips ``runs compare`` lists in its text output (the count says how many there are)."""


def print_record(rec: EvaluationRecord, show_samples: bool = False, class_names: Sequence[str] | None = None) -> None:
    """A record for a person; ``show_samples`` adds the sample table, whose label and top-1 columns read
    ``"243 bull mastiff"`` when ``class_names`` (index -> name) is given."""
    console.print(
        f"[bold]run {rec.run_id}[/]  {rec.created_at:%Y-%m-%d %H:%M:%S} UTC  repliscope {rec.repliscope_version}"
    )
    console.print(
        f"manifest  {rec.manifest.name} {rec.manifest.version}  ({rec.manifest.path}, "
        f"sha256 {rec.manifest.sha256[:12]})"
    )
    rt = rec.runtime
    console.print(
        f"runtime   {rt['runtime']} ({rt['framework']} {rt['framework_version']}), threads {rt['threads']}"
        + (
            f", ONNX exported from torch ({'cached' if rt['export'].get('cached') else 'new'})"
            if rt.get("export")
            else ""
        )
        + _conversion(rt.get("conversion"))
    )
    d = rec.dataset
    console.print(
        f"dataset   {d['name']}  {d['num_samples']} samples, identity {d['identity'][:12]}, "
        f"label rule {d['label_rule']}"
    )
    print_skipped_files(d)
    if rec.shards:
        agents = ", ".join(f"{s.shard} on {s.agent_id or s.hostname or '?'} ({s.samples})" for s in rec.shards)
        console.print(f"shards    {len(rec.shards)} merged into this record: {agents}", markup=False)
    c = rec.counts
    truth = rec.ground_truth
    annotated = (
        f"{sum(len(t.boxes) for t in truth.samples)} ground-truth boxes in {len(truth.categories)} "
        f"categor{'y' if len(truth.categories) == 1 else 'ies'}"
        if truth is not None
        else f"{c['labelled']} labelled"
    )
    console.print(
        f"samples   {c['evaluated']} evaluated, [{'red' if c['failed'] else 'green'}]{c['failed']} failed[/]"
        f", {annotated}"
    )
    from repliscope.metrics.classification import tie_line

    if (ties := tie_line(c)) is not None:
        console.print(f"ties      {ties}")
    print_categories_left_out(d)
    from repliscope.tasks.base import TASKS

    task = TASKS.get(rec.task)
    bootstrap = task.interval() == "bootstrap"
    title = "metrics (95 % bootstrap interval over images)" if bootstrap else "metrics (95 % Wilson interval)"
    table = Table(title=title)
    for col in ("metric", "value", "interval", "n"):
        table.add_column(col)
    for m in rec.metrics:
        if m.successes is None:  # AP-like: a fraction as COCOeval prints it, n images
            table.add_row(m.name, f"{m.value:.4f}", f"[{m.ci_low:.4f}, {m.ci_high:.4f}]", f"{m.n} images")
        else:
            table.add_row(m.name, pct(m.value), pct_interval(m.ci_low, m.ci_high), f"{m.successes}/{m.n}")
    if rec.metrics:
        console.print(table)
    elif bootstrap:
        console.print("metrics   none: no sample was evaluated (predictions are stored per sample)")
    else:
        console.print("metrics   none: no labelled sample was evaluated (outputs are stored per sample)")
    if rec.per_class and task.truth == "masks":
        print_table(
            "per class (IoU, 95 % bootstrap interval over images)",
            ["class", "IoU", "interval", "gt pixels", "predicted pixels", "images"],
            [
                [
                    f"{r['class_id']} {r['name']}",
                    _fraction(r.get("iou")),
                    "" if r.get("iou_ci_low") is None else f"[{r['iou_ci_low']:.4f}, {r['iou_ci_high']:.4f}]",
                    r["gt_pixels"],
                    r["predicted_pixels"],
                    r["images"],
                ]
                for r in rec.per_class
            ],
        )
    elif rec.per_class:
        print_per_class(rec.per_class)
    if not rec.claims:
        console.print("claims    none: the manifest makes no claim (claims: [])")
    colour = {"consistent": "green", "inconsistent": "red", "not comparable": "yellow"}
    from repliscope.manifest.schema import claim_metric_spec
    from repliscope.report.sections import shown_verdict

    for v in rec.claims:
        spec = claim_metric_spec(v.metric)
        value = pct if spec is not None and spec.unit == "percent" else _fraction
        verdict, reason = shown_verdict(v.model_dump())  # a record judged before the width rule: not comparable
        console.print(
            f"claim     {v.metric} {value(v.claimed)} on {v.claim_dataset}, measured {value(v.measured)}: "
            f"[bold {colour[verdict]}]{verdict}[/] ({reason})",
            highlight=False,
        )
    t = rec.timings
    if t.loop_seconds is None:  # a record stored before load and warm-up were timed apart
        console.print(
            f"timing    {t.total_seconds:.2f} s total, {t.inference_seconds:.2f} s in the runtime, "
            f"{t.throughput_samples_per_second:.1f} samples/s"
        )
    else:
        from repliscope.report.formatting import runtime_seconds_note

        console.print(
            f"timing    {t.total_seconds:.2f} s total: {t.load_seconds:.2f} s model load, "
            f"{t.warmup_seconds:.2f} s warm-up, {t.loop_seconds:.2f} s measured loop "
            f"({t.inference_seconds:.2f} s in the runtime{runtime_seconds_note(rec.options)}): "
            f"{t.throughput_samples_per_second:.1f} samples/s",
            highlight=False,
        )
    plan = rec.options.get("plan")
    if plan:
        calibrated = plan.get("calibration", {}).get("seconds")
        console.print(
            f"plan      {plan['schedule']}, batch {plan['batch_size']}, {plan['workers']} "
            f"{'workers' if plan['schedule'] == 'data_parallel' else 'pre-processing threads'} x "
            f"{plan['threads']} runtime threads; {plan['source']}"
            + (f" ({calibrated:.1f} s, not in the timing)" if calibrated and plan["source"] == "calibrated" else ""),
            highlight=False,
        )
    console.print(f"result    {rec.result_hash}")
    failed = [s for s in rec.samples if s.error]
    for s in failed[:20]:
        console.print(f"[red]failed[/] {s.sample_id}: {s.error}")
    if len(failed) > 20:
        console.print(f"... and {len(failed) - 20} more failed samples (see --json)")
    if show_samples and task.truth == "boxes":
        print_detection_samples(rec)
    elif show_samples:
        from rich import box

        st = Table(title="samples", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
        for col in ("sample", "label", "top-1", "p(top-1)", "correct"):
            st.add_column(col, overflow="fold", no_wrap=col not in ("label", "top-1"))
        for s in rec.samples:
            st.add_row(
                s.sample_id,
                class_cell(s.label, class_names),
                "failed" if s.error else class_cell(s.top1, class_names),
                f"{s.topk_probs[0]:.4f}" if s.topk_probs else "",
                "" if s.label is None or s.error else ("yes" if s.top1 == s.label else "no"),
            )
        console.print(st)


def _fraction(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _conversion(conv: Any) -> str:
    """``", converted from tflite by tf2onnx 1.17.0 (cached)"`` for a runtime that ran a converted model."""
    if not isinstance(conv, dict) or "converter" not in conv:
        return ""
    cached = " (cached)" if conv.get("cached") else ""
    version = conv.get("converter_version", "")
    source = f" from {conv['from']}" if conv.get("from") else ""  # records made before every link named it
    return f", converted{source} by {conv['converter']} {version}{cached}"


def print_categories_left_out(dataset: dict[str, Any]) -> None:
    from repliscope.tasks.detection import categories_left_out_line

    line = categories_left_out_line(dataset)
    if line is not None:
        console.print(f"categories {line}", highlight=False)


def print_per_class(rows: Sequence[dict[str, Any]]) -> None:
    """Detection: AP and AR@100 per category the model detected at least once, with its ground-truth objects
    and detections; the categories it never detected are counted below (all of them are in --json / report)."""
    shown = [r for r in rows if r.get("n_detections")]
    print_table(
        "per class (COCO AP .50:.95, AR@100)",
        ["class", "AP", "AR", "objects", "detections"],
        [
            [
                f"{r['class_id']} {r['name']}",
                _fraction(r.get("ap")),
                _fraction(r.get("ar")),
                r.get("n_objects", ""),
                r.get("n_detections", ""),
            ]
            for r in shown
        ],
    )
    never = [r for r in rows if not r.get("n_detections")]
    if never:
        objects = sum(int(r.get("n_objects") or 0) for r in never)
        console.print(
            f"per class {len(never)} categories were never detected ({objects} ground-truth objects, AP 0 "
            f"where they have objects): {', '.join(str(r['name']) for r in never[:8])}"
            f"{' ...' if len(never) > 8 else ''}",
            highlight=False,
        )


def print_detection_samples(rec: EvaluationRecord, shown: int = 3) -> None:
    """Detection: per sample the number of detections and the best ones (class, score, box in source px)."""
    from rich import box

    st = Table(title="samples", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for col in ("sample", "detections", f"best {shown} (class score [x1 y1 x2 y2])"):
        st.add_column(col, overflow="fold")
    for s in rec.samples:
        dets = s.detections or []
        best = "; ".join(f"{d.class_id} {d.score:.3f} [{' '.join(f'{v:.1f}' for v in d.box)}]" for d in dets[:shown])
        st.add_row(s.sample_id, "failed" if s.error else str(len(dets)), best)
    console.print(st)


def class_cell(index: int | None, class_names: Sequence[str] | None) -> str:
    """``"243 bull mastiff"`` (the index alone without names or out of their range; ``""`` for None)."""
    if index is None:
        return ""
    if class_names is not None and 0 <= index < len(class_names):
        return f"{index} {class_names[index]}"
    return str(index)


def print_table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    """A titled table; the first column never wraps, the others fold long text onto more lines (never cut)."""
    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, no_wrap=i == 0, overflow="fold")
    for row in rows:
        table.add_row(*[str(v) for v in row])
    console.print(table)


def print_comparison(c: RunComparison) -> None:
    console.print(f"[bold]A[/] {c.run_a}\n[bold]B[/] {c.run_b}")
    for w in c.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    console.print(
        f"common samples {c.common_samples}, evaluated by both {c.common_evaluated} (only in A: "
        f"{c.only_in_a}, only in B: {c.only_in_b}); "
        f"result hash {'[green]identical[/]' if c.same_result_hash else '[yellow]differs[/]'}"
    )
    if not c.comparable:
        return
    from repliscope.tasks.base import TASKS

    task = TASKS.get(c.task)
    if all(m.unit == "fraction" for m in task.metric_specs):
        print_table(
            "metrics (B - A); paired: on the samples both runs evaluated",
            ["metric", "A", "B", "delta", "paired delta", "A interval", "B interval"],
            [
                [
                    d.name,
                    _fraction(d.a),
                    _fraction(d.b),
                    f"{d.delta:+.4f}",
                    "n/a" if d.paired_delta is None else f"{d.paired_delta:+.4f} (n = {d.paired_n})",
                    fraction_interval(*d.ci_a),
                    fraction_interval(*d.ci_b),
                ]
                for d in c.metric_deltas
            ],
        )
        if task.truth == "masks":
            print_segmentation_paired(c.paired)
        elif task.truth == "boxes":
            print_detection_paired(c.paired)
        if c.failed_in_one:
            console.print(f"failed only in A: {c.failed_only_in_a}; failed only in B: {c.failed_only_in_b}")
        return
    print_table(
        "metrics (B - A); paired: on the samples both runs evaluated",
        ["metric", "A", "B", "delta", "paired delta", "A interval", "B interval"],
        [
            [
                d.name,
                pct(d.a),
                pct(d.b),
                pct_delta(d.delta),
                "n/a" if d.paired_delta is None else f"{pct_delta(d.paired_delta)} (n = {d.paired_n})",
                pct_interval(*d.ci_a),
                pct_interval(*d.ci_b),
            ]
            for d in c.metric_deltas
        ],
    )
    if c.max_abs_top1_prob_diff is not None:
        console.print(
            f"max |p_A(top-1) - p_B(top-1)| = {c.max_abs_top1_prob_diff:.3g} (sample {c.max_abs_top1_prob_diff_sample})"
        )
    if c.top1_flips:
        shown = c.top1_flips[:SHOWN_FLIPS]  # a 50,000-sample comparison prints at once; --json has them all
        print_table(
            f"{len(c.top1_flips)} samples whose top-1 differs"
            + (f" (the first {len(shown)}; all with --json)" if len(shown) < len(c.top1_flips) else ""),
            ["sample", "label", "top-1 A", "top-1 B"],
            [[f.sample_id, f.label, f.top1_a, f.top1_b] for f in shown],
        )
    else:
        console.print("no sample's top-1 differs")
    if c.failed_in_one:
        console.print(f"failed only in A: {c.failed_only_in_a}; failed only in B: {c.failed_only_in_b}")


def detection_paired_line(p: dict[str, Any]) -> str:
    """One line of detection paired statistics (:func:`repliscope.units.detection_paired`'s keys)."""
    parts = [
        f"{p.get('n_samples', '?')} images",
        f"matched {_pct_or(p.get('matched_fraction'))} of the "
        f"{p.get('n_reference_detections', '?')} A detections (IoU >= 0.5, same class)",
        f"mean IoU {_fraction(p.get('mean_iou'))}",
        f"{p.get('flipped_images', '?')} images differ",
    ]
    if p.get("delta_ap") is not None:
        parts.append(
            f"AP {_fraction(p.get('ap_reference'))} -> {_fraction(p.get('ap_variant'))} "
            f"(delta {p['delta_ap']:+.4f}, 95 % {delta_interval(p.get('delta_ap_ci_low'), p.get('delta_ap_ci_high'))})"
        )
    return ", ".join(parts)


def _pct_or(x: Any) -> str:
    return pct(x) if isinstance(x, int | float) else "n/a"


def print_segmentation_paired(p: dict[str, Any] | None) -> None:
    """Segmentation paired statistics (:meth:`SemanticSegmentation.paired`'s keys)."""
    if p is None:
        console.print("paired    none: no image was evaluated by both runs")
        return
    agreement = "n/a (masks not kept)" if p.get("pixel_agreement") is None else pct(p["pixel_agreement"])
    listed = ": " + ", ".join(p["flipped_ids"]) if p["flipped_ids"] else ""
    console.print(
        f"paired    B against A on {p['n_samples']} images: mIoU {p['miou_reference']:.4f} -> "
        f"{p['miou_variant']:.4f} (delta {p['delta_miou']:+.4f}, 95 % "
        f"{delta_interval(p['delta_miou_ci_low'], p['delta_miou_ci_high'])}), pixels with the same label {agreement}, "
        f"{p['flipped_images']} images differ{listed}",
        highlight=False,
    )


def print_detection_paired(p: dict[str, Any] | None) -> None:
    if p is None:
        console.print("paired    none: no image was evaluated by both runs")
        return
    console.print(f"paired    B against A's detections: {detection_paired_line(p)}", highlight=False)


def _variant_line(v: VariantOutcome) -> str:
    """``  NAME: change`` (or its status and reason) with the variant's degree shown as typed, never as markup."""
    said = escape(v.change) if v.status == "ok" else f"[dim]{escape(f'{v.status}: {v.reason}')}[/]"
    return f"  {escape(v.name)}: {said}"


def print_sweep(sweep: SweepResult) -> None:
    """The pitfall table, compact enough for 80 columns: numbers never cut, long variant names wrap."""
    from rich import box

    ref = sweep.reference
    console.print(
        f"[bold]pitfall sweep {sweep.sweep_id}[/]  {sweep.manifest.name} on {sweep.runtime['runtime']}, "
        f"dataset {sweep.dataset['name']} ({sweep.dataset['num_samples']} samples)"
    )
    if ref.metric("mIoU") is not None or any(
        (v.paired_task or {}).get("delta_miou") is not None for v in sweep.variants
    ):
        _print_segmentation_sweep(sweep)
        return
    if ref.metric("AP") is not None or any(v.paired_task for v in sweep.variants):
        _print_detection_sweep(sweep)
        return
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 0), pad_edge=False)
    table.add_column("variant", overflow="fold")
    for col in ("n/fail", "top-1", "95% CI", "pairs", "Δ", "p", "agree", "flips", "KL"):
        table.add_column(col, justify="right", no_wrap=True)
    for v in [ref, *sweep.variants]:
        t1 = v.metric("top1")
        p = v.paired
        counts: str
        if v.status != "ok":
            counts = "n/a" if v.status == "not applicable" else v.status
        else:
            counts = f"{'?' if v.evaluated_samples is None else v.evaluated_samples}/{v.failed_samples}"
        table.add_row(
            escape(v.name),
            counts,
            pct(t1.value) if t1 else "",
            pct_interval(t1.ci_low, t1.ci_high) if t1 else "",
            str(p.n) if p else "",
            pct_delta(p.delta_top1) if p and p.delta_top1 is not None else "",
            ("<.001" if p.mcnemar_p < 1e-3 else f"{p.mcnemar_p:.2g}") if p and p.mcnemar_p is not None else "",
            pct(p.agreement) if p else "",
            str(p.flipped) if p else "",
            f"{p.mean_kl:.2g}" if p else "",
        )
    console.print(table)
    console.print(
        "n/fail: samples evaluated / failed; top-1 over each variant's own evaluated samples. "
        "Paired against the reference on the samples both evaluated (pairs): Δ top-1 (percentage points), exact "
        "McNemar p, top-1 agreement, flipped predictions, mean KL (nats).",
        highlight=False,
    )
    for v in sweep.variants:
        console.print(_variant_line(v), highlight=False)
    for v in sweep.variants:
        if v.paired is not None and not v.paired.same_samples:
            console.print(
                f"[yellow]warning:[/] {escape(v.name)}: {v.paired.pairing_note()}; its top-1 and the "
                f"reference's are over different samples, Δ is not their difference",
                highlight=False,
            )
    _print_sweep_tail(sweep)


def _counts(v: Any) -> str:
    if v.status != "ok":
        return "n/a" if v.status == "not applicable" else v.status
    return f"{'?' if v.evaluated_samples is None else v.evaluated_samples}/{v.failed_samples}"


def _print_segmentation_sweep(sweep: SweepResult) -> None:
    """Segmentation variants: mIoU with its bootstrap interval and, against the reference on the images both
    evaluated, ΔmIoU with its paired bootstrap interval, pixel agreement of the masks and images that differ."""
    from rich import box

    table = Table(box=box.SIMPLE_HEAD, padding=(0, 0), pad_edge=False)
    table.add_column("variant", overflow="fold")
    for col in ("n/fail", "mIoU", "95% CI", "ΔmIoU", "ΔmIoU 95% CI", "agree", "diff"):
        table.add_column(col, justify="right", no_wrap=True)
    for v in [sweep.reference, *sweep.variants]:
        miou = v.metric("mIoU")
        p = v.paired_task or {}
        low, high = p.get("delta_miou_ci_low"), p.get("delta_miou_ci_high")
        table.add_row(
            escape(v.name),
            _counts(v),
            f"{miou.value:.4f}" if miou else "",
            fraction_interval(miou.ci_low, miou.ci_high) if miou else "",
            f"{p['delta_miou']:+.4f}" if p.get("delta_miou") is not None else "",
            delta_interval(low, high) if low is not None and high is not None else "",
            pct(p["pixel_agreement"]) if p.get("pixel_agreement") is not None else "",
            str(p.get("flipped_images", "")),
        )
    console.print(table)
    console.print(
        "n/fail: images evaluated / failed; mIoU over each variant's own images with its bootstrap "
        "interval. Against the reference on the images both evaluated: ΔmIoU and its paired bootstrap "
        "interval, pixels with the same label, images whose masks differ.",
        highlight=False,
    )
    for v in sweep.variants:
        console.print(_variant_line(v), highlight=False)
    _print_sweep_tail(sweep)


def _print_detection_sweep(sweep: SweepResult) -> None:
    """Detection variants: AP with its bootstrap interval, and against the reference's detections the paired
    delta AP (interval), the matched fraction, mean IoU of the matches and the images whose detections differ."""
    from rich import box

    table = Table(box=box.SIMPLE_HEAD, padding=(0, 0), pad_edge=False)
    table.add_column("variant", overflow="fold")
    for col in ("n/fail", "AP", "95% CI", "ΔAP", "ΔAP 95% CI", "match", "IoU", "diff"):
        table.add_column(col, justify="right", no_wrap=True)
    for v in [sweep.reference, *sweep.variants]:
        ap = v.metric("AP")
        p = v.paired_task or {}
        low, high = p.get("delta_ap_ci_low"), p.get("delta_ap_ci_high")
        table.add_row(
            escape(v.name),
            _counts(v),
            f"{ap.value:.4f}" if ap else "",
            fraction_interval(ap.ci_low, ap.ci_high) if ap else "",
            unit_delta_text("fraction", p["delta_ap"]) if p.get("delta_ap") is not None else "",
            delta_interval(low, high) if low is not None and high is not None else "",
            pct(p["matched_fraction"]) if p.get("matched_fraction") is not None else "",
            f"{p['mean_iou']:.4f}" if p.get("mean_iou") is not None else "",
            str(p.get("flipped_images", "")),
        )
    console.print(table)
    console.print(
        "n/fail: images evaluated / failed; AP (COCO .50:.95) over each variant's own images with its "
        "bootstrap interval. Against the reference's detections on the images both evaluated: ΔAP and its "
        "paired bootstrap interval, reference detections matched (same class, IoU >= 0.5), mean IoU of "
        "the matches, images whose detections differ.",
        highlight=False,
    )
    for v in sweep.variants:
        console.print(_variant_line(v), highlight=False)
    _print_sweep_tail(sweep)


def _print_sweep_tail(sweep: SweepResult) -> None:
    t = sweep.timings
    parts = [
        f"{t[k]:.1f} s {label}"
        for k, label in (
            ("load_seconds", "loading the model(s)"),
            ("warmup_seconds", "warm-up"),
            ("loop_seconds", "measured loop"),
            ("inference_seconds", "in the runtime"),
        )
        if k in t
    ]
    console.print(f"time {t['total_seconds']:.1f} s ({', '.join(parts)})")
