"""``repliscope diff``: task-level and layer-level differential testing (a thin layer over repliscope.diff).

Register with ``register(app)``. Forms::

    repliscope diff RUN_A RUN_B [--db URL] [--json]
    repliscope diff MANIFEST --runtimes torch onnxruntime [--dataset foolbox_imagenet] [--json]
    repliscope diff MANIFEST [--runtimes torch onnxruntime] --layers [--mode golden|carried|both] [--batch 8]
                    [--plot out.png] [--json]
    repliscope diff MANIFEST --candidate PATH --layers ...

Exit code 1 when a layer diff finds a layer over tolerance (golden mode if run, else carried), 2 on errors.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from repliscope.errors import RepliscopeError

if TYPE_CHECKING:
    from repliscope.diff.base import Candidate
    from repliscope.diff.layer_result import LayerDiffResult
    from repliscope.diff.task import TaskDiffResult
    from repliscope.evaluation.run import PreparedRun

console = Console()
_MODES = {"golden": ["golden"], "carried": ["carried"], "both": ["golden", "carried"]}


def register(app: typer.Typer) -> None:
    """Add the ``diff`` command to ``app``."""
    app.command("diff")(diff)


def diff(
    target: Annotated[str, typer.Argument(help="RUN_A (a stored run id or prefix) or a MANIFEST (YAML).")],
    run_b: Annotated[str | None, typer.Argument(help="RUN_B, when TARGET is a run.")] = None,
    runtimes: Annotated[tuple[str, str] | None, typer.Option(
        help="Two runtimes to compare on the same samples, e.g. --runtimes torch onnxruntime.")] = None,
    dataset: Annotated[str, typer.Option(help="Registered dataset name or image folder.")] = "foolbox_imagenet",
    layers: Annotated[bool, typer.Option("--layers", help="Layer-level diff on a batch of real samples.")] = False,
    mode: Annotated[str, typer.Option(help="Layer diff mode: golden | carried | both.")] = "both",
    batch: Annotated[int, typer.Option(min=1, help="Samples in the layer-diff batch / task-level batch size.")]
    = 8,
    candidate: Annotated[Path | None, typer.Option(help="A re-implementation to compare layer by layer "
                                                        "(e.g. a Keras port).")] = None,
    tolerance_k: Annotated[float | None, typer.Option(help="Tolerance factor k (see repliscope.diff.tolerance)."
                                                      )] = None,
    plot: Annotated[Path | None, typer.Option(help="Write the per-layer error plot (PNG) here.")] = None,
    threads: Annotated[int, typer.Option(min=1)] = 2,
    db: Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL of the run store.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Compare two runs, two runtimes, or a candidate implementation with the torch reference."""
    try:
        check_arguments(run_b, runtimes, layers or candidate is not None, candidate)
        if run_b is not None:
            result: Any = _records(target, run_b, db)
            failed = False
        else:
            if not Path(target).is_file():
                raise RepliscopeError(f"'{target}' is not a manifest file; to compare two stored runs give "
                                      "RUN_A RUN_B")
            if mode not in _MODES:
                raise RepliscopeError(f"--mode must be golden, carried or both, not '{mode}'")
            if layers or candidate is not None:
                result = _layers(Path(target), runtimes, candidate, dataset, batch, _MODES[mode], tolerance_k,
                                 threads)
                decisive = result.first_divergent.get("golden", result.first_divergent.get("carried"))
                failed = decisive is not None
                if plot is not None:
                    from repliscope.diff.plot import plot_layer_errors

                    plot_layer_errors(result, plot)
            else:
                if runtimes is None:
                    raise RepliscopeError("give --runtimes A B (e.g. --runtimes torch onnxruntime), or --layers")
                result = _runtimes(Path(target), runtimes, dataset, batch, threads)
                failed = False
    except RepliscopeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(code=2) from None
    if as_json:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), indent=2, default=str) + "\n")
    elif result.kind == "layer_diff":
        print_layer_diff(result)
    else:
        print_task_diff(result)
    if plot is not None and not as_json and result.kind == "layer_diff":
        console.print(f"plot written to {plot}")
    if result.kind == "task_diff" and result.compared == 0:  # zero errors over zero samples say nothing
        print(f"error: no sample was evaluated by both {result.a} and {result.b} (failed in A: "
              f"{len(result.failed_a)}, in B: {len(result.failed_b)}): nothing to compare", file=sys.stderr)
        raise typer.Exit(code=1)
    if failed:
        raise typer.Exit(code=1)


def check_arguments(run_b: str | None, runtimes: tuple[str, str] | None, layer_level: bool,
                    candidate: Path | None) -> None:
    """Refuse, before any work, a command line whose parts do not go together: ``--runtimes`` takes exactly
    two runtime names (an option in their place means one was missing), names it does not know, and a
    second argument (RUN_B) beside the options that need a MANIFEST."""
    if runtimes is not None:
        flag = next((v for v in runtimes if v.startswith("-")), None)
        if flag is not None:
            raise RepliscopeError(f"--runtimes takes exactly two runtime names (e.g. --runtimes torch onnxruntime); "
                                  f"it got '{runtimes[0]} {runtimes[1]}': '{flag}' is an option, so a runtime name "
                                  "is missing")
        if layer_level:
            _check_layer_runtimes(runtimes, candidate)
        else:
            from repliscope.runtimes import RUNTIMES

            for name in runtimes:
                if name == "keras" and name not in RUNTIMES:
                    raise RepliscopeError(f"unknown runtime 'keras' (allowed: {', '.join(RUNTIMES.names())}); a "
                                          "Keras port is compared layer by layer: --candidate PATH --layers")
                RUNTIMES.get(name)  # unknown -> UnknownNameError listing the runtimes
    if candidate is not None:
        from repliscope.diff.keras_candidate import check_port_path

        check_port_path(candidate)
    if run_b is not None and (runtimes is not None or layer_level):
        raise RepliscopeError(f"RUN_A RUN_B compares two stored runs; --runtimes, --layers and --candidate need "
                              f"one MANIFEST (an extra argument '{run_b}' was given: --runtimes takes exactly two "
                              "names)")


def _check_layer_runtimes(runtimes: tuple[str, str], candidate: Path | None) -> None:
    from repliscope.diff import CANDIDATES

    ref, cand = runtimes
    if ref != "torch":
        raise RepliscopeError(f"the layer-level reference must be torch (--runtimes torch {cand}), not '{ref}'")
    if candidate is not None:
        if cand != "keras":
            raise RepliscopeError(f"--candidate {candidate} is a Keras port: give --runtimes torch keras or leave "
                                  f"--runtimes out (not '{cand}')")
        return
    if cand == "keras":
        raise RepliscopeError("a Keras candidate is a re-implementation, not a runtime: give --candidate PATH (a "
                              "port folder with model.py and mapping.yaml, its mapping .yaml, or a converted "
                              ".keras file)")
    if cand not in CANDIDATES:
        allowed = [n for n in CANDIDATES.names() if n != "keras"]
        raise RepliscopeError(f"unknown layer-diff candidate '{cand}' (allowed: {', '.join(allowed)}; a Keras "
                              "port: --candidate PATH)")


def _records(run_a: str, run_b: str, db: str | None) -> TaskDiffResult:
    from repliscope.diff.task import diff_records
    from repliscope.store.repository import RunStore

    store = RunStore(db)
    try:
        return diff_records(store.get(run_a), store.get(run_b))
    finally:
        store.close()


def _runtimes(manifest: Path, runtimes: tuple[str, str], dataset: str, batch: int, threads: int) -> TaskDiffResult:
    from repliscope.datasets import resolve_dataset
    from repliscope.diff.task import diff_runtimes

    return diff_runtimes(manifest, runtimes[0], runtimes[1], resolve_dataset(dataset), batch_size=batch,
                         threads=threads)


def _layers(manifest: Path, runtimes: tuple[str, str] | None, candidate_path: Path | None, dataset: str,
            batch: int, modes: list[str], tolerance_k: float | None, threads: int) -> LayerDiffResult:
    from repliscope.datasets import resolve_dataset
    from repliscope.diff.layers import diff_layers
    from repliscope.diff.reference import TorchReference
    from repliscope.diff.task import first_batch
    from repliscope.diff.tolerance import TolerancePolicy
    from repliscope.evaluation.run import RunSettings, prepare

    cand_name = runtimes[1] if runtimes else "onnxruntime"  # the reference is torch (check_arguments)
    prepared = prepare(manifest, RunSettings(runtime="torch", threads=threads, batch_size=batch))
    reference = TorchReference.from_artifact(prepared.artifact)
    cand = _candidate(prepared, reference, cand_name, candidate_path, threads)
    ids, x = first_batch(prepared.pipeline, resolve_dataset(dataset), batch,
                         tuple(prepared.artifact.input_shape[1:]))
    policy = TolerancePolicy() if tolerance_k is None else TolerancePolicy(k=tolerance_k)
    return diff_layers(reference, cand, x, modes=modes, tolerance=policy, samples=ids)  # type: ignore[arg-type]


def _candidate(prepared: PreparedRun, reference: Any, name: str, path: Path | None, threads: int) -> Candidate:
    from repliscope.diff import CANDIDATES
    from repliscope.evaluation.artifacts import default_cache_dir

    if path is not None:
        from repliscope.cli.common import quiet_keras

        quiet_keras()
        if "keras" not in CANDIDATES:
            importlib.import_module("repliscope.diff.keras_candidate")
        cls: Any = CANDIDATES.get("keras")
        return cls.from_path(path, reference.module)
    cls = CANDIDATES.get(name)
    return cls.from_artifact(prepared.artifact, cache_dir=prepared.settings.cache_dir or default_cache_dir(),
                             threads=threads)


def print_task_diff(r: TaskDiffResult) -> None:
    """Human-readable task-level result."""
    console.print(f"[bold]task-level diff[/] ({r.source}): A = {r.a}, B = {r.b}, dataset {r.dataset}")
    agree = "n/a" if r.agreement is None else f"{100 * r.agreement:.2f} %"
    console.print(f"samples   {r.compared} compared, top-1 agreement {agree} ({r.agreements}/{r.compared}), "
                  f"{len(r.flips)} flipped")
    if r.failed_a or r.failed_b or r.only_in_a or r.only_in_b:
        console.print(f"          failed in A: {len(r.failed_a)}, in B: {len(r.failed_b)}; only in A: {r.only_in_a}, "
                      f"only in B: {r.only_in_b}")
    if r.mcnemar is not None:
        m = r.mcnemar
        console.print(f"McNemar   n={m.n}: only A right {m.only_a_correct}, only B right {m.only_b_correct}, "
                      f"p = {m.p_value:.4g} (exact, two-sided)")
    table = Table(title="output errors (B - A)")
    for col in ("quantity", "max |err|", "mean |err|", "max rel", "worst sample"):
        table.add_column(col, overflow="fold")
    for o in r.outputs:
        table.add_row(o.quantity, f"{o.max_abs:.3g}", f"{o.mean_abs:.3g}", f"{o.max_rel:.3g}", o.max_abs_sample or "")
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


def print_layer_diff(r: LayerDiffResult) -> None:
    """Human-readable layer-level result: summary per mode, first divergent layers, the worst layers."""
    console.print(f"[bold]layer-level diff[/]: {r.reference.get('framework')} vs {r.candidate.get('candidate')}, "
                  f"input {r.input_dtype} {tuple(r.input_shape)} ({len(r.samples)} real samples), "
                  f"{len(r.layers)} layers compared covering {r.reference_layers - len(r.not_compared)} of "
                  f"{r.reference_layers} reference layers, {r.seconds:.1f} s")
    console.print(f"tolerance {r.formula} (k = {r.tolerance.k:g})")
    for mode in r.modes:
        s = r.summary[mode]
        first = r.first_divergent[mode]
        colour = "green" if first is None else "red"
        verdict = "all layers within tolerance" if first is None else f"first divergent: {first.describe()}"
        console.print(f"{mode:8s}  [{colour}]{s.passed}/{s.compared} passed[/], max err/tol {s.max_ratio:.3g}; "
                      f"{verdict}")
    table = Table(title="worst 15 layers (max |err| / tolerance)")
    for col in ("#", "path", "output shape", *r.modes):
        table.add_column(col, overflow="fold")

    def key(row: Any) -> float:
        stats = row.golden if "golden" in r.modes else row.carried
        return stats.ratio if stats is not None else 0.0

    for row in sorted(r.layers, key=key, reverse=True)[:15]:
        stats = [row.golden if m == "golden" else row.carried for m in r.modes]
        table.add_row(str(row.index), row.path, "x".join(map(str, row.ref_shape)),
                      *[f"{s.ratio:.3g}" if s else "-" for s in stats])
    console.print(table)
    if r.not_compared:
        console.print(f"[dim]not compared ({len(r.not_compared)}): {', '.join(r.not_compared[:10])}[/]")
    for note in r.notes[:10]:
        console.print(f"[dim]note: {note}[/]")
