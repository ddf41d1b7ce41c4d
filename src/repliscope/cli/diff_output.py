"""How ``repliscope diff`` and ``repliscope diffs show`` print a diff: the layer-level result (summary per mode,
first divergent units, the worst units, what was not compared), the task-level result (agreement, flips, paired
figures of detection and segmentation) and a proposed layer mapping."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from repliscope.number_text import percent_text

if TYPE_CHECKING:
    from repliscope.diff.layers.candidate_format import BuiltCandidate
    from repliscope.diff.layers.layer_result import LayerDiffResult
    from repliscope.diff.task_level import DetectionComparison, TaskDiffResult

console = Console()


def print_proposal(built: BuiltCandidate) -> None:
    """The proposed mapping: reference path -> candidate unit (op), then the unpaired units."""
    table = Table(title=f"proposed layer mapping ({built.format}): check it, save it with --save-mapping FILE")
    for col in ("reference", "candidate unit", "op"):
        table.add_column(col, overflow="fold")
    for ref, unit in built.mapping.items():
        table.add_row(ref, unit, built.ops.get(unit, ""))
    console.print(table)
    if built.unpaired_candidate:
        console.print(
            f"[dim]candidate units left unpaired ({len(built.unpaired_candidate)}): "
            f"{', '.join(built.unpaired_candidate[:10])}[/]"
        )


def print_task_diff(r: TaskDiffResult) -> None:
    """Human-readable task-level result."""
    console.print(f"[bold]task-level diff[/] ({r.source}): A = {r.a}, B = {r.b}, dataset {r.dataset}")
    agree = "n/a" if r.agreement is None else percent_text(r.agreement)
    if r.task == "object_detection":
        print_detection_figures(r, agree)
    elif r.task == "semantic_segmentation":
        print_segmentation_figures(r, agree)
    else:
        console.print(
            f"samples   {r.compared} compared, top-1 agreement {agree} ({r.agreements}/{r.compared}), "
            f"{len(r.flips)} flipped"
        )
    if r.failed_a or r.failed_b or r.only_in_a or r.only_in_b:
        console.print(
            f"          failed in A: {len(r.failed_a)}, in B: {len(r.failed_b)}; only in A: {r.only_in_a}, "
            f"only in B: {r.only_in_b}"
        )
    if r.mcnemar is not None:
        m = r.mcnemar
        console.print(
            f"McNemar   n={m.n}: only A right {m.only_a_correct}, only B right {m.only_b_correct}, "
            f"p = {m.p_value:.4g} (exact, two-sided)"
        )
    table = Table(title="output errors (B - A)")
    for col in ("quantity", "max |err|", "mean |err|", "max rel", "worst sample", "values", "shape differs"):
        table.add_column(col, overflow="fold")
    for o in r.outputs:
        table.add_row(
            o.quantity,
            f"{o.max_abs:.3g}",
            f"{o.mean_abs:.3g}",
            f"{o.max_rel:.3g}",
            o.max_abs_sample or "",
            str(o.values),
            f"{len(o.shape_differences)} sample(s)" if o.shape_differences else "",
        )
    if r.outputs:
        console.print(table)
    else:
        console.print("outputs   nothing compared value by value (the records keep no model outputs)")
    if r.flips:
        flips = Table(title="flipped samples")
        for col in ("sample", "label", "top-1 A", "top-1 B"):
            flips.add_column(col)
        for f in r.flips:
            flips.add_row(f.sample_id, "" if f.label is None else str(f.label), str(f.top1_a), str(f.top1_b))
        console.print(flips)
    for note in r.notes:
        console.print(f"[dim]note: {note}[/]")


def print_segmentation_figures(r: TaskDiffResult, agree: str) -> None:
    """A segmentation diff's paired figures (B's masks against A's): identical masks, pixel agreement, mIoU
    delta with its paired interval (:meth:`repliscope.tasks.segmentation.SemanticSegmentation.paired`)."""
    console.print(f"images    {r.compared} compared, masks identical on {agree} ({r.agreements}/{r.compared})")
    p = r.paired
    if not p:
        return
    agreement = "n/a (masks not kept)" if p.get("pixel_agreement") is None else percent_text(p["pixel_agreement"])
    console.print(f"pixels    with the same label: {agreement}; {p.get('flipped_images')} image(s) differ")
    console.print(
        f"mIoU      A {p['miou_reference']:.4f}, B {p['miou_variant']:.4f}, delta {p['delta_miou']:+.4f} "
        f"(paired 95 % interval [{p['delta_miou_ci_low']:+.4f}, {p['delta_miou_ci_high']:+.4f}])"
    )


def print_detection_figures(r: TaskDiffResult, agree: str) -> None:
    """A detection diff's paired figures (B's detections against A's): images whose detections match one to one,
    matched fraction, mean IoU, images that differ, AP delta with its paired interval (when ground truth is known).
    """
    console.print(
        f"images    {r.compared} compared, detections identical (one to one, same class, IoU >= 0.5) "
        f"on {agree} ({r.agreements}/{r.compared})"
    )
    p = r.paired
    if not p:
        return
    iou = "n/a (none matched)" if p.get("mean_iou") is None else f"{p['mean_iou']:.4f}"
    console.print(
        f"matched   {percent_text(p.get('matched_fraction', 0))} of A's {p.get('n_reference_detections')} detections "
        f"(B has {p.get('n_variant_detections')}), mean IoU {iou}, {p.get('flipped_images')} image(s) "
        "differ"
    )
    if p.get("delta_ap") is not None:

        def signed(v: float) -> str:  # no "-0.0000" for a difference that rounds to zero
            return f"{round(v, 4) + 0.0:+.4f}"

        console.print(
            f"AP        A {p['ap_reference']:.4f}, B {p['ap_variant']:.4f}, delta AP {signed(p['delta_ap'])} "
            f"(paired 95 % interval [{signed(p['delta_ap_ci_low'])}, {signed(p['delta_ap_ci_high'])}])"
        )
    else:
        console.print("AP        not compared (the dataset has no ground truth)")
    if r.detections is not None:
        print_detection_comparison(r.detections)


LISTED_IMAGES = 20
"""Images whose detections differ, printed (worst first; ``--json`` has every image)."""


def print_detection_comparison(d: DetectionComparison) -> None:
    """What was compared, the verdict against the stated tolerance, and the images whose detections differ."""
    console.print(f"compared  {d.compared}")
    rule = (
        f"tolerance: box coordinates {d.box_tolerance_px:g} px, scores {d.score_tolerance:g}; any detection left "
        "unmatched or a class change differs"
    )
    n_diff = d.images - d.images_within_tolerance
    if d.passed:
        console.print(f"verdict   [green]detections equal within tolerance on all {d.images} images[/] ({rule})")
        return
    console.print(f"verdict   [red]detections differ beyond tolerance on {n_diff} of {d.images} images[/] ({rule})")
    rows = {row.sample_id: row for row in d.per_image}
    first = f", the first {LISTED_IMAGES}; --json lists all" if n_diff > LISTED_IMAGES else ""
    table = Table(
        title=f"images whose detections differ (worst first{first}): detections of A and B, pairs matched, only in "
        "A, only in B, pairs whose class changed, largest box error (px) and score error of a pair",
        show_edge=False,
        pad_edge=False,
    )
    for col in ("image", "A", "B", "pairs", "only A", "only B", "class", "box px", "score"):
        table.add_column(col, no_wrap=True)
    for sid in d.differing_ids[:LISTED_IMAGES]:
        row = rows[sid]
        table.add_row(
            sid,
            str(row.count_a),
            str(row.count_b),
            str(row.matched),
            str(row.only_in_a),
            str(row.only_in_b),
            str(row.class_changes),
            "-" if row.max_box_error is None else f"{row.max_box_error:.3g}",
            "-" if row.max_score_error is None else f"{row.max_score_error:.2g}",
        )
    console.print(table)


def print_layer_diff(r: LayerDiffResult) -> None:
    """Human-readable layer-level result: summary per mode, first divergent layers, the worst layers."""
    ops = r.reference_ops
    total = r.reference_layers + ops
    missed = len(r.uncompared)
    kinds = f" ({r.reference_layers} module layers + {ops} functional ops)" if ops else ""
    fmt = (
        f" ({r.candidate['format']}, mapping {r.candidate.get('mapping_origin', '')})"
        if "format" in r.candidate
        else ""
    )
    console.print(
        f"[bold]layer-level diff[/]: {r.reference.get('framework')} vs {r.candidate.get('candidate')}{fmt}, "
        f"input {r.input_dtype} {tuple(r.input_shape)} ({len(r.samples)} real samples), "
        f"{len(r.layers)} units compared covering {total - missed} of {total} reference units{kinds}, "
        f"{r.seconds:.1f} s"
    )
    console.print(f"tolerance {r.formula} (k = {r.tolerance.k:g})")
    for mode in r.modes:
        s = r.summary[mode]
        first = r.first_divergent[mode]
        colour = "green" if first is None else "red"
        verdict = "all layers within tolerance" if first is None else f"first divergent: {escape(first.describe())}"
        covered = s.reference_units or len(
            {p for row in r.layers if (row.golden if mode == "golden" else row.carried) is not None for p in row.covers}
        )
        missing = s.missing
        gone = f", {missing} reference op(s) missing in the candidate" if missing else ""
        if not s.compared:
            console.print(f"{mode:8s}  [yellow]no unit compared[/] (see 'not compared' and the notes)")
            continue
        console.print(
            f"{mode:8s}  [{colour}]{s.passed}/{s.compared} passed[/] (covering {covered} reference "
            f"units{gone}), max err/tol {s.max_ratio:.3g}; {verdict}"
        )
    for mode in ("golden", "carried"):
        if mode not in r.modes:
            reason = next((n for n in r.notes if n.startswith(f"{mode} mode not run")), f"{mode} mode not run (--mode)")
            console.print(f"{mode:8s}  [yellow]{reason}[/]")
    table = Table(title="worst 15 layers (max |err| / tolerance, the larger of the modes first)")
    for col in ("#", "path", "output shape", *r.modes):
        table.add_column(col, overflow="fold")
    for row in worst_layers(r, 15):
        stats = [row.golden if m == "golden" else row.carried for m in r.modes]
        table.add_row(
            str(row.index),
            row.path,
            "x".join(map(str, row.ref_shape)),
            *[f"{s.ratio:.3g}" if s else "-" for s in stats],
        )
    console.print(table)
    output = r.output
    if output is not None:
        colour = "green" if output.passed else "red"
        console.print(f"output    [{colour}]max |err| {output.max_abs:.3g}, tolerance {output.tolerance:.3g}[/]")
    elif r.output_note:
        console.print(f"output    [yellow]not compared: {r.output_note}[/]")
    uncompared = r.uncompared
    if uncompared:
        more = f"; ... {len(uncompared) - 10} more (--json lists all)" if len(uncompared) > 10 else ""
        console.print(
            f"[yellow]not compared ({len(uncompared)}):[/] "
            + escape("; ".join(f"{u.path} ({u.reason})" for u in uncompared[:10]))
            + more
        )
    else:
        console.print("every reference unit was compared")
    notes = [n for n in r.notes if not n.startswith(("golden mode not run", "carried mode not run"))]
    for note in notes[:20]:
        console.print(f"[dim]note: {escape(note)}[/]")
    if len(notes) > 20:
        console.print(f"[dim]... {len(notes) - 20} more notes (--json shows all)[/]")


def print_error(message: str, as_json: bool) -> None:
    """A diff's error (exit 2 follows): ``error: MESSAGE`` on stderr, or with ``--json`` one JSON object on stdout,
    ``{"error": MESSAGE, "exit_code": 2}``, so a script reading stdout gets JSON on every path."""
    import json
    import sys

    if as_json:
        sys.stdout.write(json.dumps({"error": message, "exit_code": 2}) + "\n")
    else:
        print(f"error: {message}", file=sys.stderr)


def layer_samples(limit: int | None, batch: int, batch_given: bool) -> int:
    """The samples a layer diff compares: ``--limit N`` (the first N), else ``--batch``; ``--batch`` given on the
    command line (``batch_given``) with another value is a RepliscopeError (a layer diff runs one batch)."""
    from repliscope.errors import RepliscopeError

    if limit is None:
        return batch
    if batch_given and batch != limit:
        raise RepliscopeError(
            f"--limit {limit} and --batch {batch}: a layer diff compares one batch of the first samples; give "
            "one of them (--limit N: the first N samples)"
        )
    return limit


def worst_layers(r: LayerDiffResult, n: int) -> list[Any]:
    """The ``n`` rows with the largest error / tolerance in ANY mode run (a unit that only carried mode sees failing
    is not hidden behind golden's figures), in that order; ties keep the execution order."""

    def key(row: Any) -> float:
        stats = [row.golden if m == "golden" else row.carried for m in r.modes]
        return max((s.ratio for s in stats if s is not None), default=0.0)

    return sorted(r.layers, key=key, reverse=True)[:n]


def finish_diff(
    kind: str,
    run: Callable[[], tuple[Any, str | None]],
    show: Callable[[Any], None],
    as_json: bool,
) -> None:
    """The end every ``repliscope diff`` kind shares: ``run()`` -> (result, stored diff id or None); a RepliscopeError
    is one line and exit 2; the result printed as ``{kind: ...}`` JSON or by ``show``, the stored id named; exit 1
    when the result did not pass."""
    import json
    import sys

    import typer

    from repliscope.errors import RepliscopeError

    try:
        result, diff_id = run()
    except RepliscopeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(code=2) from None
    if as_json:
        sys.stdout.write(json.dumps({kind: result.model_dump(mode="json")}, indent=2) + "\n")
    else:
        show(result)
        if diff_id is not None:
            console.print(f"stored as diff {diff_id[:12]} (repliscope diffs show {diff_id[:12]})")
    if not result.passed:
        raise typer.Exit(code=1)
