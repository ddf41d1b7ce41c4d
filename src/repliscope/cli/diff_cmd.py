"""``repliscope diff``: task-level and layer-level differential testing (a thin layer over repliscope.diff).

Register with ``register(app)``. Forms::

    repliscope diff RUN_A RUN_B [--db URL] [--json]
    repliscope diff MANIFEST --runtimes torch onnxruntime [--dataset foolbox_imagenet] [--json]
    repliscope diff MANIFEST [--runtimes torch onnxruntime] --layers [--mode golden|carried|both] [--batch 8]
                    [--plot out.png] [--json]
    repliscope diff MANIFEST --candidate X [--candidate-format onnx|tflite|savedmodel|keras|tf_keras|torch|callable]
                    [--mapping FILE] [--save-mapping FILE] ...
    repliscope diff MANIFEST --runtimes onnxruntime opencv_dnn --layers [--opencv-engine new|classic]
                    (node by node on the ONNX graph(s) the runtimes run: repliscope.diff.layers.runtime_layers)

Exit code 1 when a layer diff finds a layer over tolerance in ANY mode run, or when the detections of two runs or
runtimes differ beyond tolerance (repliscope.diff.task_level.compare_detections), 2 on errors.
"""

from __future__ import annotations

import json
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from repliscope.cli.common import dataset_help, runtime_help
from repliscope.cli.diff_output import (
    console,
    layer_samples,
    print_error,
    print_layer_diff,
    print_proposal,
    print_task_diff,
)
from repliscope.cli.trace_cmd import TraceLevelOption, TraceOutOption, finish_tracing, start_tracing
from repliscope.errors import RepliscopeError
from repliscope.tracing.tracer import use_tracer

if TYPE_CHECKING:
    from repliscope.diff.layers.candidate_format import BuiltCandidate
    from repliscope.diff.layers.manifest_layers import CandidateHooks
    from repliscope.diff.task_level import TaskDiffResult


def register(app: typer.Typer) -> None:
    """Add the ``diff`` command to ``app``."""
    app.command("diff")(diff)


def diff(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(help="RUN_A (a stored run id or prefix) or a MANIFEST (YAML).")],
    run_b: Annotated[str | None, typer.Argument(help="RUN_B, when TARGET is a run.")] = None,
    runtimes: Annotated[
        tuple[str, str] | None,
        typer.Option(help="Two runtimes to compare on the same samples (--runtimes A B): " + runtime_help(None)),
    ] = None,
    dataset: Annotated[str, typer.Option(help=dataset_help())] = "foolbox_imagenet",
    layers: Annotated[bool, typer.Option("--layers", help="Layer-level diff on a batch of real samples.")] = False,
    mode: Annotated[str, typer.Option(help="Layer diff mode: golden | carried | both.")] = "both",
    batch: Annotated[int, typer.Option(min=1, help="Samples in the layer-diff batch / task-level batch size.")] = 8,
    candidate: Annotated[
        str | None,
        typer.Option(
            help="A re-implementation to compare layer by layer: a .onnx, .tflite, .keras or tf_keras .h5 file, a "
            "TensorFlow SavedModel folder, a Keras port folder, a torch factory module:function, or (darknet "
            "manifests) a callable FILE.py:NAME returning named tensors."
        ),
    ] = None,
    candidate_format: Annotated[
        str | None,
        typer.Option(
            help="Force the candidate format: onnx | tflite | savedmodel | keras | tf_keras | torch | callable "
            "(default: detected)."
        ),
    ] = None,
    mapping: Annotated[
        Path | None,
        typer.Option(
            help="YAML 'reference_path: candidate_unit' pairing layers (default: by name, else proposed); for a "
            "darknet manifest also 'layer: {unit, activation, layout, scale}'."
        ),
    ] = None,
    save_mapping: Annotated[
        Path | None,
        typer.Option(help="Write the mapping used (e.g. the proposed one) here, to check, edit and pass to --mapping."),
    ] = None,
    tolerance_k: Annotated[
        float | None, typer.Option(help="Tolerance factor k (see repliscope.diff.tolerance).")
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="Write the per-layer error plot (PNG) here.")] = None,
    box_tolerance: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Detections (RUN_A RUN_B, --runtimes): largest box-coordinate change (source px) of two matched "
            "detections still the same box.",
        ),
    ] = 0.01,
    score_tolerance: Annotated[
        float, typer.Option(min=0.0, help="Detections: largest score change of two matched detections.")
    ] = 1e-4,
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
    augment: Annotated[
        str | None,
        typer.Option(
            "--augment",
            help="Your re-implementation of the model's TRAINING augmentation, op by op against the original's "
            "own code on the same random draws: FILE.py:NAME or module:NAME (docs: guides/augmentation-diff).",
        ),
    ] = None,
    augment_pipeline: Annotated[
        str, typer.Option(help="The original augmentation (--augment): darknet_detection | tfmg_yolo_input.")
    ] = "darknet_detection",
    draws: Annotated[
        str, typer.Option(help="--augment: shared (both sides get the same draws) | own (compare distributions).")
    ] = "shared",
    seeds: Annotated[int, typer.Option(min=1, help="--augment: random draws (seeds 1..N) per image.")] = 4,
    limit: Annotated[
        int | None,
        typer.Option(min=1, help="Compare the first N samples only (--pipeline, --augment, --loss, --layers)."),
    ] = None,
    model_effect: Annotated[
        bool,
        typer.Option(
            "--model-effect",
            help="Also feed both inputs through the model: top-1 agreement, flips, McNemar (--pipeline).",
        ),
    ] = False,
    model_runtime: Annotated[
        str | None, typer.Option(help="Runtime of --model-effect: " + runtime_help("the manifest framework's own"))
    ] = None,
    heatmaps: Annotated[
        Path | None, typer.Option(help="Write the worst samples' heatmap panels (PNG) here (--pipeline).")
    ] = None,
    store_result: Annotated[
        bool, typer.Option("--store/--no-store", help="Keep the diff in the run store (--db), as evaluate keeps runs.")
    ] = True,
    loss: Annotated[
        str | None,
        typer.Option(
            "--loss",
            help="Your re-implemented loss against the original's on the same outputs and targets: FILE.py:NAME or "
            "module:NAME (docs: guides/loss-diff).",
        ),
    ] = None,
    original: Annotated[str, typer.Option(help="--loss: the registered original loss.")] = "darknet_yolo",
    random_seed: Annotated[
        int | None, typer.Option("--random", help="--loss: seeded random outputs and boxes instead of a dataset.")
    ] = None,
    gradients: Annotated[
        str | None,
        typer.Option(
            "--gradients",
            help="A Keras port's gradients against libdarknet's backward, layer by layer: darknet-keras, FILE.keras "
            "or FILE.py:NAME; tfmg-yolov3-tiny[:as-loaded|:darknet-bn] (the Model Garden's model, in its stack) "
            "(docs: guides/training-diff).",
        ),
    ] = None,
    train_steps: Annotated[
        int, typer.Option(min=0, help="--gradients: then K optimiser steps on both sides (train_network vs SGD).")
    ] = 0,
    train_batch: Annotated[int, typer.Option(min=1, help="--gradients: images per training batch (1..16).")] = 1,
    port_bn: Annotated[
        str, typer.Option(help="--gradients darknet-keras: batch-norm convention darknet | autodiff | keras.")
    ] = "darknet",
    bn_dtype: Annotated[
        str, typer.Option(help="--gradients darknet-keras: normalisation layers in float32 | bfloat16 | float16.")
    ] = "float32",
    seen: Annotated[
        int | None, typer.Option(min=0, help="--gradients: Darknet's images seen (lr policy, burn_in) at the start.")
    ] = None,
    port_loss: Annotated[
        str | None, typer.Option(help="--gradients: a registered loss on the port's outputs as its upstream gradient.")
    ] = None,
) -> None:
    """Compare two runs, two runtimes, a candidate implementation with the torch reference, or your own
    pre-processing with the manifest's (--pipeline)."""
    if gradients is not None:
        from repliscope.cli.training_diff_cmd import TrainingOptions, run_training_diff_cmd

        t_opts = (gradients, mapping, train_steps, train_batch, port_bn, bn_dtype, seen, dataset, threads, plot)
        return run_training_diff_cmd(target, TrainingOptions(*t_opts, db, store_result, as_json, port_loss))
    if loss is not None:
        from repliscope.cli.loss_diff_cmd import LossOptions, run_loss_diff_cli

        loss_opts = (loss, original, dataset, limit, random_seed, tolerance_k, threads, db, store_result, as_json)
        return run_loss_diff_cli(target, LossOptions(*loss_opts))
    if augment is not None:
        from repliscope.cli.augment_diff_cmd import AugmentOptions, run_augment_diff

        opts = AugmentOptions(augment, augment_pipeline, draws, seeds, dataset, limit, db, store_result, as_json)
        return run_augment_diff(target, opts)
    if pipeline is not None:
        from repliscope.cli.pipeline_diff_cmd import PipelineOptions, run_pipeline_diff

        if run_b is not None or runtimes is not None or layers or candidate is not None:
            print_error(
                "--pipeline compares your pre-processing with one MANIFEST's: no RUN_B, --runtimes, --layers or "
                "--candidate",
                as_json,
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
    layer_level = layers or candidate is not None
    if (limit is not None and not layer_level) or model_effect or model_runtime is not None or heatmaps is not None:
        print_error(
            "--model-effect, --model-runtime and --heatmaps go with --pipeline FILE.py:NAME; --limit with it, "
            "--augment, --loss or --layers",
            as_json,
        )
        raise typer.Exit(code=2)
    traced: list[str] = []
    try:
        batch = layer_samples(limit, batch, getattr(ctx.get_parameter_source("batch"), "name", "") == "COMMANDLINE")
        check_arguments(
            run_b, runtimes, layers or candidate is not None, candidate, candidate_format, mapping, save_mapping
        )
        if opencv_engine not in ("new", "classic"):
            raise RepliscopeError(f"unknown OpenCV engine '{opencv_engine}' (allowed: new, classic)")
        from repliscope.diff.layers.manifest_layers import RUNTIME_LAYER_PAIRS

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
            result: Any = _records(target, run_b, db, (box_tolerance, score_tolerance))
            failed = result.differs_beyond_tolerance  # detections differing beyond tolerance: exit 1
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
                    (box_tolerance, score_tolerance),
                )
            if tracer.rank:
                from repliscope.store.repository import RunStore

                traced = finish_tracing(tracer, trace_out, RunStore(db), f"diff-{uuid.uuid4().hex[:12]}")
    except RepliscopeError as exc:
        print_error(str(exc), as_json)
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
    detection_tolerances: tuple[float, float],
) -> tuple[Any, bool]:
    """A task-level or layer-level diff of the manifest ``target`` -> (result, failed)."""
    from repliscope.diff.layers.manifest_layers import (
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
            from repliscope.diff.layers.plot import plot_layer_errors

            plot_layer_errors(result, plot)
        return result, not result.passed
    if runtimes is None:
        raise RepliscopeError("give --runtimes A B (e.g. --runtimes torch onnxruntime), or --layers")
    task_diff = _runtimes(Path(target), runtimes, dataset, batch, threads, detection_tolerances)
    return task_diff, task_diff.differs_beyond_tolerance


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
            from repliscope.diff.layers.manifest_layers import check_layer_runtimes

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
        from repliscope.diff.layers.candidate_format import check_format, detect_format

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


def _records(run_a: str, run_b: str, db: str | None, tolerances: tuple[float, float]) -> TaskDiffResult:
    from repliscope.diff.task_level import diff_records
    from repliscope.store.repository import RunStore

    store = RunStore(db)
    try:
        return diff_records(
            store.get(run_a), store.get(run_b), box_tolerance=tolerances[0], score_tolerance=tolerances[1]
        )
    finally:
        store.close()


def _runtimes(
    manifest: Path, runtimes: tuple[str, str], dataset: str, batch: int, threads: int, tolerances: tuple[float, float]
) -> TaskDiffResult:
    from repliscope.datasets import resolve_dataset
    from repliscope.diff.task_level import diff_runtimes

    return diff_runtimes(
        manifest,
        runtimes[0],
        runtimes[1],
        resolve_dataset(dataset),
        batch_size=batch,
        threads=threads,
        box_tolerance=tolerances[0],
        score_tolerance=tolerances[1],
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
    from repliscope.diff.layers.manifest_layers import CandidateHooks

    def on_format(fmt: str) -> None:
        if fmt in ("keras", "tflite", "savedmodel"):
            from repliscope.cli.common import quiet_keras

            quiet_keras()

    def on_candidate(built: BuiltCandidate) -> None:
        if built.mapping_origin == "proposed" and not opts.as_json:
            print_proposal(built)
        if opts.save_mapping is not None:
            from repliscope.diff.layers.mapping import save_mapping

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
