"""The ``repliscope`` command line: a thin layer over the core (the core never imports this package)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from repliscope.cli.output import console, print_record, print_table
from repliscope.errors import RepliscopeError

app = typer.Typer(help="Check a shared ML model's claims and find why a re-implementation differs.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
runs_app = typer.Typer(help="Stored evaluation records.", no_args_is_help=True)
manifest_app = typer.Typer(help="Model manifests.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")
app.add_typer(manifest_app, name="manifest")


def _register_plugins() -> None:
    from repliscope.cli import convert_cmd, diff_cmd, report_cmd

    report_cmd.register(app)
    diff_cmd.register(app)
    convert_cmd.register(app)


_register_plugins()

DbOption = Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL (default: SQLite in the user data "
                                                          "directory, or $REPLISCOPE_DB)")]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
# options shared by the commands that run a manifest on data (evaluate, pitfalls)
DatasetOption = Annotated[str, typer.Option(help="An image folder, or a registered dataset name.")]
RuntimeOption = Annotated[str | None, typer.Option(help="torch | onnxruntime | opencv_dnn (default: torch for a "
                                                        "torch source, onnxruntime for an ONNX one)")]
LabelRuleOption = Annotated[str | None, typer.Option(help="imagenet_wnid | filename_index | subfolders | csv | none "
                                                          "(default: detected, and recorded as detected)")]
LabelsCsvOption = Annotated[Path | None, typer.Option(help="CSV 'filename,label' for --label-rule csv.")]
AsOption = Annotated[str | None, typer.Option("--as", help="Declare the data to be NAME/SPLIT (e.g. imagenet-1k/val) "
                                                           "so claims on it become comparable.")]
ThreadsOption = Annotated[int, typer.Option(min=1, help="Runtime threads (recorded).")]
BatchSizeOption = Annotated[int, typer.Option(min=1)]
PrepWorkersOption = Annotated[int | None, typer.Option(min=1, help="Pre-processing threads (default: --threads).")]
LimitOption = Annotated[int | None, typer.Option(min=1, help="Only the first N samples (sorted order).")]
FailFastOption = Annotated[bool, typer.Option(help="Stop at the first failed sample.")]
DownloadOption = Annotated[bool, typer.Option(help="Allow downloading https:// sources into the cache.")]


def _fail(exc: Exception) -> None:
    print(f"error: {exc}", file=sys.stderr)
    raise typer.Exit(code=2)


def _dataset_ref(text: str | None) -> Any:
    """``--as NAME/SPLIT`` -> DatasetRef (None when not given)."""
    from repliscope.manifest.schema import DatasetRef

    if text is None:
        return None
    name, sep, split = text.partition("/")
    if not sep or not name or not split:
        raise RepliscopeError(f"--as expects NAME/SPLIT, e.g. imagenet-1k/val, got {text!r}")
    return DatasetRef(name=name, split=split)


def _settings_and_data(loaded: Any, runtime: str | None, dataset: str, label_rule: str | None,
                       labels_csv: Path | None, evaluated_as: str | None, threads: int, batch_size: int,
                       prep_workers: int | None, limit: int | None, fail_fast: bool, download: bool) -> Any:
    """The RunSettings and the Dataset of a command that runs a manifest on data."""
    from repliscope.datasets import resolve_dataset
    from repliscope.evaluation.run import RunSettings

    settings = RunSettings(runtime=runtime or native_runtime(loaded.manifest.framework.name), threads=threads,
                           batch_size=batch_size, prep_workers=prep_workers, fail_fast=fail_fast,
                           evaluated_as=_dataset_ref(evaluated_as), allow_download=download)
    return settings, resolve_dataset(dataset, label_rule, labels_csv=labels_csv, limit=limit)


def native_runtime(framework: str) -> str:
    """The runtime that runs a manifest's own format when --runtime is not given."""
    return {"torch": "torch", "onnx": "onnxruntime"}[framework]


def _emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


@app.command()
def evaluate(
    manifest: Annotated[Path, typer.Argument(help="Model manifest (YAML).")],
    runtime: RuntimeOption = None,
    dataset: DatasetOption = "foolbox_imagenet",
    label_rule: LabelRuleOption = None,
    labels_csv: LabelsCsvOption = None,
    evaluated_as: AsOption = None,
    threads: ThreadsOption = 2,
    batch_size: BatchSizeOption = 32,
    prep_workers: PrepWorkersOption = None,
    limit: LimitOption = None,
    fail_fast: FailFastOption = False,
    download: DownloadOption = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run a manifest on a dataset, store the evaluation record, print metrics and claim verdicts."""
    from repliscope.evaluation.run import evaluate as run_evaluation
    from repliscope.evaluation.run import prepare
    from repliscope.manifest.loader import load_manifest
    from repliscope.store.repository import RunStore

    try:
        loaded = load_manifest(manifest)
        settings, data = _settings_and_data(loaded, runtime, dataset, label_rule, labels_csv, evaluated_as,
                                            threads, batch_size, prep_workers, limit, fail_fast, download)
        store = RunStore(db)
        prepared = prepare(loaded, settings)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=console, transient=True, disable=as_json) as progress:
            task = progress.add_task(f"{loaded.manifest.name} on {settings.runtime}", total=len(data))
            record = run_evaluation(prepared, data, on_progress=lambda n: progress.advance(task, n))
        store.save(record)
    except RepliscopeError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(record.model_dump(mode="json"))
    else:
        print_record(record)
        console.print(f"stored as run [bold]{record.run_id}[/]")
    if record.counts["evaluated"] == 0:
        print(f"error: every one of the {record.counts['total']} samples failed (see the record)", file=sys.stderr)
        raise typer.Exit(code=1)


@app.command()
def pitfalls(
    manifest: Annotated[Path, typer.Argument(help="Model manifest (YAML).")],
    dataset: DatasetOption = "foolbox_imagenet",
    runtime: RuntimeOption = None,
    variant: Annotated[list[str] | None, typer.Option("--variant", help="Only these pitfalls (repeatable; "
                                                      "default: every registered one).")] = None,
    label_rule: LabelRuleOption = None,
    labels_csv: LabelsCsvOption = None,
    evaluated_as: AsOption = None,
    threads: ThreadsOption = 2,
    batch_size: BatchSizeOption = 32,
    prep_workers: PrepWorkersOption = None,
    limit: LimitOption = None,
    fail_fast: FailFastOption = False,
    download: DownloadOption = False,
    visual: Annotated[int, typer.Option(min=0, help="Images in the visual-testing panel.")] = 3,
    list_variants: Annotated[bool, typer.Option("--list", help="List the registered pitfalls and exit.")] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Sweep the classic pre-processing pitfalls: how much does each one move the result?"""
    from repliscope.evaluation.run import prepare
    from repliscope.manifest.loader import load_manifest
    from repliscope.pitfalls.base import PITFALLS
    from repliscope.pitfalls.sweep import run_sweep
    from repliscope.store.repository import RunStore

    if list_variants:
        import repliscope.pitfalls.variants  # noqa: F401

        print_table("pitfalls", ["name", "description"],
                    [[n, PITFALLS.get(n).description] for n in PITFALLS.names()])
        return
    try:
        loaded = load_manifest(manifest)
        settings, data = _settings_and_data(loaded, runtime, dataset, label_rule, labels_csv, evaluated_as,
                                            threads, batch_size, prep_workers, limit, fail_fast, download)
        store = RunStore(db)
        prepared = prepare(loaded, settings)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=console, transient=True, disable=as_json) as progress:
            task = progress.add_task(f"pitfall sweep of {loaded.manifest.name}", total=len(data))
            out = run_sweep(prepared, data, variant or None, visual_samples=visual,
                            on_progress=lambda n: progress.advance(task, n))
        for record in out.records:
            store.save(record)
        store.save_sweep(out.result)
    except RepliscopeError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(out.result.model_dump(mode="json"))
        return
    from repliscope.cli.output import print_sweep

    print_sweep(out.result)
    console.print(f"stored as sweep [bold]{out.result.sweep_id}[/] ({len(out.records)} runs); "
                  f"repliscope report {out.result.sweep_id[:12]} --format html")


@runs_app.command("list")
def runs_list(
    limit: int = 50,
    kind: Annotated[str | None, typer.Option(help="evaluation | pitfall_variant")] = None,
    sweep: Annotated[str | None, typer.Option(help="Only the runs of this sweep (a unique id prefix).")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """List stored runs, newest first."""
    from repliscope.store.repository import RunStore

    try:
        store = RunStore(db)
        sweep_id = store.get_sweep(sweep).sweep_id if sweep else None
        runs = store.list(limit=limit, kind=kind, sweep_id=sweep_id)
    except RepliscopeError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json([r.model_dump(mode="json") for r in runs])
        return
    print_table("runs (newest first; top-1 in %)", ["run", "created", "manifest", "runtime", "dataset", "n",
                                                    "failed", "top-1", "sweep variant"],
                [[r.run_id[:12], f"{r.created_at:%m-%d %H:%M}", r.manifest_name, r.runtime, r.dataset_name,
                  r.num_samples, r.num_failed, "" if r.top1 is None else f"{100 * r.top1:.1f}",
                  f"{r.sweep_id[:6]}:{r.variant}" if r.sweep_id else ""] for r in runs])


@runs_app.command("show")
def runs_show(run_id: str, samples: Annotated[bool, typer.Option(help="List every sample.")] = False,
              db: DbOption = None, as_json: JsonOption = False) -> None:
    """Show one run's full record (a unique prefix of the id is enough)."""
    from repliscope.store.repository import RunStore

    try:
        record = RunStore(db).get(run_id)
    except RepliscopeError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(record.model_dump(mode="json"))
    else:
        print_record(record, show_samples=samples)


@runs_app.command("compare")
def runs_compare(run_a: str, run_b: str, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Metric deltas (B - A) and the samples whose top-1 differs."""
    from repliscope.store.compare import compare_runs
    from repliscope.store.repository import RunStore

    try:
        store = RunStore(db)
        comparison = compare_runs(store.get(run_a), store.get(run_b))
    except RepliscopeError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(comparison.model_dump(mode="json"))
        return
    from repliscope.cli.output import print_comparison

    print_comparison(comparison)


@manifest_app.command("validate")
def manifest_validate(files: Annotated[list[Path], typer.Argument(help="Manifest files.")]) -> None:
    """Check manifests against the schema and the op registry; every file is checked, exit 2 if any is invalid."""
    from repliscope.manifest.loader import load_manifest

    invalid = 0
    for f in files:
        try:
            loaded = load_manifest(f)
        except RepliscopeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            invalid += 1
            continue
        console.print(f"[green]ok[/] {f}: {loaded.manifest.name} {loaded.manifest.version}, "
                      f"{len(loaded.manifest.preprocess)} pre-processing ops, {len(loaded.manifest.claims)} claims")
    if invalid:
        raise typer.Exit(code=2)


@manifest_app.command("show")
def manifest_show(
    file: Path,
    resolved: Annotated[bool, typer.Option(help="Resolve every op (library + version), the model source and "
                                                "the framework check.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Print a manifest; with --resolved, exactly what a run would execute."""
    from repliscope.evaluation.artifacts import default_cache_dir, load_class_names, resolve_artifact
    from repliscope.manifest.loader import build_ops, load_manifest
    from repliscope.ops.base import BuildContext
    from repliscope.ops.pipeline import Pipeline

    try:
        loaded = load_manifest(file)
        out: dict[str, Any] = {"name": loaded.manifest.name, "version": loaded.manifest.version,
                               "sha256": loaded.sha256}
        if resolved:
            cache = default_cache_dir()
            artifact = resolve_artifact(loaded, cache)
            names = load_class_names(loaded, cache)
            pipeline = Pipeline(*build_ops(loaded, BuildContext(class_names=names)))
            out["source"] = {"path": str(artifact.path), "sha256": artifact.sha256, "verified": True,
                             "format": artifact.format}
            out["framework"] = {"name": loaded.manifest.framework.name,
                                "constraint": loaded.manifest.framework.version, "satisfied": True}
            out["pipeline"] = pipeline.describe()
        else:
            out["manifest"] = loaded.manifest.model_dump(mode="json")
    except RepliscopeError as exc:
        _fail(exc)
        return
    if as_json or not resolved:
        _emit_json(out)
        return
    console.print(f"[bold]{out['name']} {out['version']}[/] (manifest sha256 {out['sha256'][:12]})")
    console.print(f"source    {out['source']['path']} (sha256 verified)")
    console.print(f"framework {out['framework']['name']} {out['framework']['constraint']}: satisfied")
    for stage in ("preprocess", "postprocess"):
        rows = [[i, op["op"], op["library"], op["library_version"],
                 ", ".join(f"{k}={v}" for k, v in op.items() if k not in ("op", "library", "library_version"))]
                for i, op in enumerate(out["pipeline"][stage])]
        print_table(stage, ["#", "op", "library", "version", "parameters"], rows)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
