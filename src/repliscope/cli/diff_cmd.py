"""``repliscope diff``: task-level and layer-level differential testing (a thin layer over repliscope.diff).

Register with ``register(app)``. Forms::

    repliscope diff RUN_A RUN_B [--db URL] [--json]
    repliscope diff MANIFEST --runtimes torch onnxruntime [--dataset foolbox_imagenet] [--json]
    repliscope diff MANIFEST [--runtimes torch onnxruntime] --layers [--mode golden|carried|both] [--batch 8]
                    [--plot out.png] [--json]
    repliscope diff MANIFEST --candidate X [--candidate-format onnx|tflite|savedmodel|keras|torch]
                    [--mapping FILE] [--save-mapping FILE] ...
    repliscope diff MANIFEST --runtimes onnxruntime opencv_dnn --layers [--opencv-engine new|classic]
                    (node by node on the ONNX graph(s) the runtimes run: repliscope.diff.runtime_layers)

Exit code 1 when a layer diff finds a layer over tolerance in ANY mode run, 2 on errors.
"""

from __future__ import annotations

import json
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from repliscope.cli.trace_cmd import TraceLevelOption, TraceOutOption, finish_tracing, start_tracing
from repliscope.errors import RepliscopeError
from repliscope.tracing.tracer import use_tracer

if TYPE_CHECKING:
    from repliscope.diff.candidate_format import BuiltCandidate
    from repliscope.diff.layer_result import LayerDiffResult
    from repliscope.diff.manifest_layers import CandidateHooks
    from repliscope.diff.task_level import TaskDiffResult

console = Console()


def register(app: typer.Typer) -> None:
    """Add the ``diff`` command to ``app``."""
    app.command("diff")(diff)


def diff(
    target: Annotated[str, typer.Argument(help="RUN_A (a stored run id or prefix) or a MANIFEST (YAML).")],
    run_b: Annotated[str | None, typer.Argument(help="RUN_B, when TARGET is a run.")] = None,
    runtimes: Annotated[
        tuple[str, str] | None,
        typer.Option(help="Two runtimes to compare on the same samples, e.g. --runtimes torch onnxruntime."),
    ] = None,
    dataset: Annotated[str, typer.Option(help="Registered dataset name or image folder.")] = "foolbox_imagenet",
    layers: Annotated[bool, typer.Option("--layers", help="Layer-level diff on a batch of real samples.")] = False,
    mode: Annotated[str, typer.Option(help="Layer diff mode: golden | carried | both.")] = "both",
    batch: Annotated[int, typer.Option(min=1, help="Samples in the layer-diff batch / task-level batch size.")] = 8,
    candidate: Annotated[
        str | None,
        typer.Option(
            help="A re-implementation to compare layer by layer: a .onnx, .tflite or .keras file, a TensorFlow "
            "SavedModel folder, a Keras port folder, or a torch factory module:function."
        ),
    ] = None,
    candidate_format: Annotated[
        str | None,
        typer.Option(
            help="Force the candidate format: onnx | tflite | savedmodel | keras | torch (default: detected)."
        ),
    ] = None,
    mapping: Annotated[
        Path | None,
        typer.Option(help="YAML 'reference_path: candidate_unit' pairing layers (default: by name, else proposed)."),
    ] = None,
    save_mapping: Annotated[
        Path | None,
        typer.Option(help="Write the mapping used (e.g. the proposed one) here, to check, edit and pass to --mapping."),
    ] = None,
    tolerance_k: Annotated[
        float | None, typer.Option(help="Tolerance factor k (see repliscope.diff.tolerance).")
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="Write the per-layer error plot (PNG) here.")] = None,
    threads: Annotated[int, typer.Option(min=1)] = 2,
    opencv_engine: Annotated[
        str,
        typer.Option(
            help="OpenCV DNN engine of the node-by-node diff --runtimes onnxruntime opencv_dnn --layers: new | "
            "classic (OpenCV 5)."
        ),
    ] = "new",
    trace_level: TraceLevelOption = "none",
    trace_out: TraceOutOption = None,
    db: Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL of the run store.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    pipeline: Annotated[
        str | None,
        typer.Option(
            "--pipeline",
            help="Your own pre-processing to compare with the manifest's: FILE.py:NAME or module:NAME (a "
            "function path -> model input, a list of (name, callable) stages, or a Compose).",
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Compare the first N samples only (--pipeline).")] = None,
    model_effect: Annotated[
        bool,
        typer.Option(
            "--model-effect",
            help="Also feed both inputs through the model: top-1 agreement, flips, McNemar (--pipeline).",
        ),
    ] = False,
    model_runtime: Annotated[
        str | None, typer.Option(help="Runtime of --model-effect (default: the manifest framework's own).")
    ] = None,
    heatmaps: Annotated[
        Path | None, typer.Option(help="Write the worst samples' heatmap panels (PNG) here (--pipeline).")
    ] = None,
    store_result: Annotated[
        bool, typer.Option("--store/--no-store", help="Keep the diff in the run store (--db), as evaluate keeps runs.")
    ] = True,
) -> None:
    """Compare two runs, two runtimes, a candidate implementation with the torch reference, or your own
    pre-processing with the manifest's (--pipeline)."""
    if pipeline is not None:
        from repliscope.cli.pipeline_diff_cmd import PipelineOptions, run_pipeline_diff

        if run_b is not None or runtimes is not None or layers or candidate is not None:
            print(
                "error: --pipeline compares your pre-processing with one MANIFEST's: no RUN_B, --runtimes, "
                "--layers or --candidate",
                file=sys.stderr,
            )
            raise typer.Exit(code=2)
        run_pipeline_diff(
            target,
            PipelineOptions(
                pipeline,
                dataset,
                limit,
                tolerance_k,
                model_effect,
                model_runtime,
                heatmaps,
                threads,
                batch,
                db,
                store_result,
                as_json,
            ),
        )
        return
    if limit is not None or model_effect or model_runtime is not None or heatmaps is not None:
        print(
            "error: --limit, --model-effect, --model-runtime and --heatmaps go with --pipeline FILE.py:NAME",
            file=sys.stderr,
        )
        raise typer.Exit(code=2)
    traced: list[str] = []
    try:
        check_arguments(
            run_b, runtimes, layers or candidate is not None, candidate, candidate_format, mapping, save_mapping
        )
        if opencv_engine not in ("new", "classic"):
            raise RepliscopeError(f"unknown OpenCV engine '{opencv_engine}' (allowed: new, classic)")
        from repliscope.diff.manifest_layers import RUNTIME_LAYER_PAIRS

        if opencv_engine != "new" and not (layers and runtimes is not None and runtimes[0] in RUNTIME_LAYER_PAIRS):
            raise RepliscopeError(
                "--opencv-engine goes with the node-by-node diff --runtimes onnxruntime "
                "opencv_dnn --layers (the opencv_dnn runtime itself asks for the new engine)"
            )
        tracer = start_tracing(trace_level, trace_out)
        if run_b is not None:
            if tracer.rank:
                raise RepliscopeError(
                    "--trace-level traces work that runs: comparing two stored runs runs "
                    "nothing (trace a MANIFEST diff, or trace the runs with evaluate)"
                )
            result: Any = _records(target, run_b, db)
            failed = False
        else:
            with use_tracer(tracer), tracer.span("run", "application", command="diff", manifest=target):
                result, failed = _diff_manifest(
                    target,
                    runtimes,
                    candidate,
                    dataset,
                    layers,
                    mode,
                    batch,
                    tolerance_k,
                    threads,
                    plot,
                    LayerOptions(candidate_format, mapping, save_mapping, as_json, opencv_engine),
                )
            if tracer.rank:
                from repliscope.store.repository import RunStore

                traced = finish_tracing(tracer, trace_out, RunStore(db), f"diff-{uuid.uuid4().hex[:12]}")
    except RepliscopeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(code=2) from None
    for line in traced:
        print(line, file=sys.stderr)
    if store_result:
        _store(result, target if run_b is None else "", db, quiet=as_json)
    _emit(result, failed, plot, as_json)


def _store(result: Any, manifest: str, db: str | None, quiet: bool) -> None:
    """Keep the diff in the store (``repliscope diffs list``); a store that cannot take it is a warning."""
    from repliscope.store.diffs import save_diff

    try:
        name = ""
        if manifest and Path(manifest).is_file():
            from repliscope.manifest.loader import load_manifest

            name = load_manifest(manifest).manifest.name
        diff_id = save_diff(db, result.model_dump(mode="json"), manifest_name=name)
    except RepliscopeError as exc:
        print(f"warning: the diff was not stored: {exc}", file=sys.stderr)
        return
    if not quiet:  # --json: stdout is the result alone, and scripts read it mixed with stderr
        print(f"stored as diff {diff_id[:12]} (repliscope diffs show {diff_id[:12]})", file=sys.stderr)


def _diff_manifest(
    target: str,
    runtimes: tuple[str, str] | None,
    candidate: str | None,
    dataset: str,
    layers: bool,
    mode: str,
    batch: int,
    tolerance_k: float | None,
    threads: int,
    plot: Path | None,
    options: LayerOptions,
) -> tuple[Any, bool]:
    """A task-level or layer-level diff of the manifest ``target`` -> (result, failed)."""
    from repliscope.diff.manifest_layers import (
        MODES,
        LayerDiffOptions,
        is_darknet_candidate_diff,
        manifest_layer_diff,
    )

    if not Path(target).is_file():
        raise RepliscopeError(f"'{target}' is not a manifest file; to compare two stored runs give RUN_A RUN_B")
    if mode not in MODES:
        raise RepliscopeError(f"--mode must be golden, carried or both, not '{mode}'")
    if layers or candidate is not None:
        request = LayerDiffOptions(
            runtimes,
            candidate,
            options.candidate_format,
            options.mapping,
            dataset,
            batch,
            mode,
            tolerance_k,
            threads,
            options.opencv_engine,
        )
        if options.save_mapping is not None and is_darknet_candidate_diff(Path(target), request):
            raise RepliscopeError(
                "--save-mapping: a darknet manifest's candidate is paired by Darknet layer name (or --mapping), "
                "nothing is proposed to save"
            )
        hooks = _hooks(candidate, options) if candidate is not None else None
        result = manifest_layer_diff(Path(target), request, hooks)
        if plot is not None:
            from repliscope.diff.plot import plot_layer_errors

            plot_layer_errors(result, plot)
        return result, not result.passed
    if runtimes is None:
        raise RepliscopeError("give --runtimes A B (e.g. --runtimes torch onnxruntime), or --layers")
    return _runtimes(Path(target), runtimes, dataset, batch, threads), False


def _emit(result: Any, failed: bool, plot: Path | None, as_json: bool) -> None:
    """Print ``result`` (table or JSON) and exit 1 when it is a failure."""
    if as_json:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), indent=2, default=str) + "\n")
    elif result.kind == "layer_diff":
        print_layer_diff(result)
    else:
        print_task_diff(result)
    if plot is not None and not as_json and result.kind == "layer_diff":
        console.print(f"plot written to {plot}")
    if result.kind == "task_diff" and result.compared == 0:  # zero errors over zero samples say nothing
        print(
            f"error: no sample was evaluated by both {result.a} and {result.b} (failed in A: "
            f"{len(result.failed_a)}, in B: {len(result.failed_b)}): nothing to compare",
            file=sys.stderr,
        )
        raise typer.Exit(code=1)
    if failed:
        raise typer.Exit(code=1)


def check_arguments(
    run_b: str | None,
    runtimes: tuple[str, str] | None,
    layer_level: bool,
    candidate: str | None,
    candidate_format: str | None = None,
    mapping: Path | None = None,
    save_mapping: Path | None = None,
) -> None:
    """Refuse, before any work, a command line whose parts do not go together: ``--runtimes`` takes exactly
    two runtime names (an option in their place means one was missing), names it does not know, and a
    second argument (RUN_B) beside the options that need a MANIFEST."""
    if runtimes is not None:
        flag = next((v for v in runtimes if v.startswith("-")), None)
        if flag is not None:
            raise RepliscopeError(
                f"--runtimes takes exactly two runtime names (e.g. --runtimes torch onnxruntime); "
                f"it got '{runtimes[0]} {runtimes[1]}': '{flag}' is an option, so a runtime name "
                "is missing"
            )
        if layer_level:
            from repliscope.diff.manifest_layers import check_layer_runtimes

            check_layer_runtimes(runtimes, candidate, candidate_format)
        else:
            from repliscope.runtimes import RUNTIMES

            for name in runtimes:
                if name in ("keras", "tflite", "savedmodel", "tensorflow") and name not in RUNTIMES:
                    what = (
                        "Keras port"
                        if name == "keras"
                        else "TensorFlow Lite model"
                        if name == "tflite"
                        else "TensorFlow SavedModel"
                    )
                    raise RepliscopeError(
                        f"unknown runtime '{name}' (allowed: {', '.join(RUNTIMES.names())}); a "
                        f"{what} is compared layer by layer: --candidate PATH --layers"
                    )
                RUNTIMES.get(name)  # unknown -> UnknownNameError listing the runtimes
    if candidate is None and (candidate_format or mapping or save_mapping):
        raise RepliscopeError("--candidate-format, --mapping and --save-mapping go with --candidate X")
    if candidate is not None:
        from repliscope.diff.candidate_format import check_format, detect_format

        fmt = check_format(candidate_format) if candidate_format else detect_format(candidate)
        if fmt == "keras" and Path(candidate).exists() and mapping is None:
            from repliscope.backends.keras.candidate import check_port_path

            check_port_path(Path(candidate))
        if mapping is not None and not mapping.is_file():
            raise RepliscopeError(f"--mapping {mapping}: no such file")
    if run_b is not None and (runtimes is not None or layer_level):
        raise RepliscopeError(
            f"RUN_A RUN_B compares two stored runs; --runtimes, --layers and --candidate need "
            f"one MANIFEST (an extra argument '{run_b}' was given: --runtimes takes exactly two "
            "names)"
        )


def _records(run_a: str, run_b: str, db: str | None) -> TaskDiffResult:
    from repliscope.diff.task_level import diff_records
    from repliscope.store.repository import RunStore

    store = RunStore(db)
    try:
        return diff_records(store.get(run_a), store.get(run_b))
    finally:
        store.close()


def _runtimes(manifest: Path, runtimes: tuple[str, str], dataset: str, batch: int, threads: int) -> TaskDiffResult:
    from repliscope.datasets import resolve_dataset
    from repliscope.diff.task_level import diff_runtimes

    return diff_runtimes(
        manifest, runtimes[0], runtimes[1], resolve_dataset(dataset), batch_size=batch, threads=threads
    )


@dataclass(frozen=True)
class LayerOptions:
    """The command line's side of a layer diff: the candidate's format and mapping, where to save the mapping
    used, --json (no proposal table on stdout) and the OpenCV engine."""

    candidate_format: str | None = None
    mapping: Path | None = None
    save_mapping: Path | None = None
    as_json: bool = False
    opencv_engine: str = "new"


def _hooks(candidate: str, opts: LayerOptions) -> CandidateHooks:
    """Keras imported quietly; the proposed mapping printed, and saved with --save-mapping."""
    from repliscope.diff.manifest_layers import CandidateHooks

    def on_format(fmt: str) -> None:
        if fmt in ("keras", "tflite", "savedmodel"):
            from repliscope.cli.common import quiet_keras

            quiet_keras()

    def on_candidate(built: BuiltCandidate) -> None:
        if built.mapping_origin == "proposed" and not opts.as_json:
            print_proposal(built)
        if opts.save_mapping is not None:
            from repliscope.diff.mapping import save_mapping

            if not built.mapping:
                raise RepliscopeError(
                    f"--save-mapping: the {built.format} candidate is paired by its {built.mapping_origin}, not by "
                    "a name mapping"
                )
            save_mapping(
                built.mapping,
                opts.save_mapping,
                header=f"layer mapping ({built.mapping_origin}) for --candidate {candidate}\n"
                "reference_path: candidate_unit; edit, then pass with --mapping FILE",
            )
            target = sys.stderr if opts.as_json else sys.stdout
            print(f"mapping ({len(built.mapping)} pairs) written to {opts.save_mapping}", file=target)

    return CandidateHooks(on_format, on_candidate)


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
    agree = "n/a" if r.agreement is None else f"{100 * r.agreement:.2f} %"
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
    console.print(table)
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
    agreement = "n/a (masks not kept)" if p.get("pixel_agreement") is None else f"{100 * p['pixel_agreement']:.4f} %"
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
        f"matched   {p.get('matched_fraction', 0):.2%} of A's {p.get('n_reference_detections')} detections "
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
        verdict = "all layers within tolerance" if first is None else f"first divergent: {first.describe()}"
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
    table = Table(title="worst 15 layers (max |err| / tolerance)")
    for col in ("#", "path", "output shape", *r.modes):
        table.add_column(col, overflow="fold")

    def key(row: Any) -> float:
        stats = row.golden if "golden" in r.modes else row.carried
        return stats.ratio if stats is not None else 0.0

    for row in sorted(r.layers, key=key, reverse=True)[:15]:
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
            + "; ".join(f"{u.path} ({u.reason})" for u in uncompared[:10])
            + more
        )
    else:
        console.print("every reference unit was compared")
    notes = [n for n in r.notes if not n.startswith(("golden mode not run", "carried mode not run"))]
    for note in notes[:20]:
        console.print(f"[dim]note: {note}[/]")
    if len(notes) > 20:
        console.print(f"[dim]... {len(notes) - 20} more notes (--json shows all)[/]")
