"""The ``repliscope`` command line: a thin layer over the core (the core never imports this package)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from repliscope.cli.common import DbOption, JsonOption, dataset_help, emit_json, fail, flag_of, runtime_help
from repliscope.cli.label_rules import label_rule_choices
from repliscope.cli.lazy_group import LazyGroup
from repliscope.cli.output import console, print_record, print_table, sample_progress
from repliscope.cli.trace_cmd import TraceLevelOption, TraceOutOption, finish_tracing, start_tracing
from repliscope.errors import RepliscopeError

COMMANDS: dict[str, str | None] = {
    "report": "repliscope.cli.report_cmd",
    "diff": "repliscope.cli.diff_cmd",
    "convert": "repliscope.cli.convert_cmd",
    "bench": "repliscope.cli.bench_cmd",
    "units": "repliscope.cli.units_cmd",
    "serve": "repliscope.cli.serve_cmd",
    "stacks": "repliscope.cli.stack_cmd",
    "agent": "repliscope.cli.agent_cmd",
    "agents": "repliscope.cli.agent_cmd",
    "evaluate": None,
    "pitfalls": None,
    "runs": "repliscope.cli.runs_cmd",
    "manifest": "repliscope.cli.manifest_cmd",
    "diffs": "repliscope.cli.diffs_cmd",
    "trace": "repliscope.cli.trace_cmd",
    "db": "repliscope.cli.db_cmd",
    "token": "repliscope.cli.token_cmd",
    "stack": "repliscope.cli.stack_cmd",
    "cluster": "repliscope.cli.cluster_cmd",
}
"""Every command of ``repliscope``, in the order of ``repliscope --help``: the module whose ``register(app)`` adds
it (imported only when that command runs, or for ``--help``), or None for a command defined in this module. A new
command module goes here (tests/cli/test_lazy_commands.py fails until it does)."""


class _CommandGroup(LazyGroup):
    """The ``repliscope`` group: guarded (exit codes), each command imported on demand from :data:`COMMANDS`."""

    lazy_commands = COMMANDS


app = typer.Typer(
    help="Check a shared ML model's claims and find why a re-implementation differs. Exit codes: "
    "0 ok, 1 the result is a failure, 2 bad input, 3 internal error (traceback saved to a "
    "file), 130 interrupted.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=_CommandGroup,
)

# options shared by the commands that run a manifest on data (evaluate, pitfalls)
DatasetOption = Annotated[str, typer.Option(help=dataset_help())]
RuntimeOption = Annotated[str | None, typer.Option(help=runtime_help())]
LabelRuleOption = Annotated[
    str | None,
    typer.Option(help=f"{label_rule_choices(labels_csv=True)} (default: detected, and recorded as detected)"),
]
LabelsCsvOption = Annotated[Path | None, typer.Option(help="CSV 'filename,label' for --label-rule csv.")]
AsOption = Annotated[
    str | None,
    typer.Option(
        "--as",
        help="Declare the data to be NAME/SPLIT (e.g. imagenet-1k/val) so claims on it become comparable; "
        "NAME/SPLIT@whole, @random or @selection says how the samples were chosen (the interval assumes random).",
    ),
]
ThreadsOption = Annotated[
    int | None, typer.Option(min=1, help="Intra-op threads of each runner (default: calibrated; recorded).")
]
BatchSizeOption = Annotated[int | None, typer.Option(min=1, help="Default: calibrated (recorded).")]
PrepWorkersOption = Annotated[
    int | None,
    typer.Option(min=1, help="Pre-processing threads (pipelined) or workers (data_parallel) (default: the plan's)."),
]
ScheduleOption = Annotated[
    str | None,
    typer.Option(help="pipelined | data_parallel (default: calibrated; with --threads and --batch-size: pipelined)."),
]
LimitOption = Annotated[int | None, typer.Option(min=1, help="Only the first N samples (sorted order).")]
FailFastOption = Annotated[bool, typer.Option(help="Stop at the first failed sample.")]
DownloadOption = Annotated[bool, typer.Option(help="Allow downloading https:// sources into the cache.")]
OutsidePathsOption = Annotated[
    bool, typer.Option(help="Allow source/label paths outside the manifest's folder (local experiments).")
]

SchedulerOption = Annotated[
    str | None,
    typer.Option(help="Run on an agent of this Dask scheduler (tcp://HOST:PORT, or 'local': an in-process one)."),
]
RequiresOption = Annotated[
    list[str] | None,
    typer.Option(
        "--requires", help="With --scheduler: the agent must have this PEP 508 requirement installed (repeatable)."
    ),
]
HardwareOption = Annotated[
    list[str] | None,
    typer.Option(
        "--hardware",
        help="With --scheduler: KEY=VALUE, KEY>=N, "
        "KEY<=N or KEY~=SUBSTRING on agent_id, cores, cpu_flags, "
        "cpu_model, gpus, hostname, memory_gib (repeatable).",
    ),
]
StackOption = Annotated[
    str | None,
    typer.Option(
        "--stack", help="Run in this provisioned stack (key or spec), on a local agent started for it if none is live."
    ),
]
from repliscope.cli.cluster_cmd import (  # noqa: E402  (the shared --tls-* options of the agents' commands)
    AllowMixedStacksOption,
    InsecureClusterOption,
    ShardsOption,
    TlsCaOption,
    TlsCertOption,
    TlsKeyOption,
)

IdempotencyOption = Annotated[
    str | None,
    typer.Option(help="With --scheduler: store the result exactly once under this key (a stored key runs nothing)."),
]


def _run_options(
    label_rule: str | None,
    evaluated_as: str | None,
    threads: int | None,
    batch_size: int | None,
    prep_workers: int | None,
    limit: int | None,
    fail_fast: bool,
    download: bool,
    allow_outside_paths: bool,
    schedule: str | None,
) -> Any:
    """The typed run options (:class:`repliscope.job_execution.RunOptions`) of a command that runs a manifest on
    data, in this process or on an agent."""
    from repliscope.job_execution import RunOptions

    return RunOptions(
        label_rule=label_rule,
        evaluated_as=evaluated_as,
        threads=threads,
        batch_size=batch_size,
        prep_workers=prep_workers,
        limit=limit,
        fail_fast=fail_fast,
        download=download,
        allow_outside_paths=allow_outside_paths,
        schedule=schedule,
    )


def _with_run_advice(exc: RepliscopeError, loaded: Any, manifest: Path | None) -> RepliscopeError:
    """``exc``, with the importer's advice appended when the manifest's architecture cannot be loaded here and
    the manifest was imported (:func:`repliscope.importers.base.run_advice`: timm's stack), so the one error line
    says how to run it."""
    if loaded is None or manifest is None or not str(exc).startswith("architecture "):
        return exc
    from repliscope.importers.base import run_advice

    advice = run_advice(loaded.manifest, manifest)
    return exc if advice is None else RepliscopeError(f"{exc}; {advice}")


def _settings_and_data(loaded: Any, runtime: str | None, dataset: str, labels_csv: Path | None, options: Any) -> Any:
    """The RunSettings (resolved once, each value's origin recorded: a flag, the manifest or the default) and the
    Dataset of a command that runs a manifest on data, from its run options."""
    # before the dataset is scanned
    settings = options.run_settings(runtime, manifest=loaded, source="cli", name=flag_of)
    return settings, options.dataset(dataset, labels_csv)


@app.command()
def evaluate(
    manifest: Annotated[Path, typer.Argument(help="Model manifest (YAML).")],
    runtime: RuntimeOption = None,
    dataset: DatasetOption = "foolbox_imagenet",
    label_rule: LabelRuleOption = None,
    labels_csv: LabelsCsvOption = None,
    evaluated_as: AsOption = None,
    threads: ThreadsOption = None,
    batch_size: BatchSizeOption = None,
    schedule: ScheduleOption = None,
    prep_workers: PrepWorkersOption = None,
    limit: LimitOption = None,
    fail_fast: FailFastOption = False,
    download: DownloadOption = False,
    allow_outside_paths: OutsidePathsOption = False,
    trace_level: TraceLevelOption = "none",
    trace_out: TraceOutOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    scheduler: SchedulerOption = None,
    requires: RequiresOption = None,
    hardware: HardwareOption = None,
    stack: StackOption = None,
    idempotency_key: IdempotencyOption = None,
    shards: ShardsOption = None,
    allow_mixed_stacks: AllowMixedStacksOption = False,
    tls_ca_file: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    insecure_cluster: InsecureClusterOption = False,
) -> None:
    """Run a manifest on a dataset, store the evaluation record, print metrics and claim verdicts. With
    --scheduler or --stack it runs on an agent placed by the manifest's framework constraint, the runtime,
    --requires and --hardware (refused at once when no live agent qualifies)."""
    options = _run_options(
        label_rule,
        evaluated_as,
        threads,
        batch_size,
        prep_workers,
        limit,
        fail_fast,
        download,
        allow_outside_paths,
        schedule,
    )
    if scheduler is not None or stack is not None:
        from repliscope.cli.agent_cmd import evaluate_on_agents
        from repliscope.cli.cluster_cmd import cluster_security

        try:
            security = cluster_security(tls_ca_file, tls_cert, tls_key, insecure_cluster)
        except RepliscopeError as exc:
            fail(exc)

        if trace_level != "none" or labels_csv is not None:
            fail(
                RepliscopeError(
                    "--trace-level and --labels-csv run in this process only: drop them or --scheduler/--stack"
                )
            )
        evaluate_on_agents(
            manifest,
            runtime,
            dataset,
            options,
            scheduler,
            requires or [],
            hardware or [],
            stack,
            idempotency_key,
            db,
            as_json,
            security,
            shards,
            allow_mixed_stacks,
        )
        return
    if requires or hardware or idempotency_key is not None:
        fail(
            RepliscopeError(
                "--requires, --hardware and --idempotency-key place a job on agents: add "
                "--scheduler tcp://HOST:PORT (or --scheduler local)"
            )
        )
    if shards is not None or allow_mixed_stacks:
        fail(
            RepliscopeError(
                "--shards and --allow-mixed-stacks run shard jobs on agents: add --scheduler tcp://HOST:PORT"
            )
        )

    from repliscope.evaluation.run import evaluate as run_evaluation
    from repliscope.evaluation.run import plan_for, prepare
    from repliscope.manifest.loader import load_manifest
    from repliscope.store.repository import RunStore
    from repliscope.tracing import use_tracer

    loaded = None
    try:
        tracer = start_tracing(trace_level, trace_out)
        loaded = load_manifest(manifest)
        for warning in loaded.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        settings, data = _settings_and_data(loaded, runtime, dataset, labels_csv, options)
        store = RunStore(db)
        prepared = prepare(loaded, settings)
        if tracer.rank:  # calibrate (when not cached) untraced: its trial loops must not measure the tracing
            plan_for(prepared, data)
        with sample_progress(disable=as_json) as progress:
            task = progress.add_task(f"{loaded.manifest.name} on {settings.runtime}", total=len(data))
            with (
                use_tracer(tracer),
                tracer.span(
                    "run", "application", command="evaluate", manifest=loaded.manifest.name, runtime=settings.runtime
                ),
            ):
                record = run_evaluation(prepared, data, on_progress=lambda n: progress.advance(task, n))
        store.save(record)
        traced = finish_tracing(tracer, trace_out, store, record.run_id)
    except RepliscopeError as exc:
        fail(_with_run_advice(exc, loaded, manifest))
        return
    if as_json:
        emit_json(record.model_dump(mode="json"))
        for line in traced:
            print(line, file=sys.stderr)
    else:
        print_record(record)
        console.print(f"stored as run [bold]{record.run_id}[/]")
        for line in traced:
            console.print(line, markup=False)
    if record.counts["evaluated"] == 0:
        print(f"error: every one of the {record.counts['total']} samples failed (see the record)", file=sys.stderr)
        raise typer.Exit(code=1)


@app.command()
def pitfalls(
    manifest: Annotated[Path | None, typer.Argument(help="Model manifest (YAML); not needed with --list.")] = None,
    dataset: DatasetOption = "foolbox_imagenet",
    runtime: RuntimeOption = None,
    variant: Annotated[
        list[str] | None,
        typer.Option(
            "--variant",
            help="Only these pitfalls (repeatable; default: every registered one), each NAME or NAME at a degree, "
            "as the pipeline diff names it: NAME[PARAMETER=VALUE, ...], e.g. 'center_crop_offset[offset=[1, 0]]' "
            "(--list shows each variant's parameters, allowed degrees and default).",
        ),
    ] = None,
    label_rule: LabelRuleOption = None,
    labels_csv: LabelsCsvOption = None,
    evaluated_as: AsOption = None,
    threads: ThreadsOption = None,
    batch_size: BatchSizeOption = None,
    schedule: ScheduleOption = None,
    prep_workers: PrepWorkersOption = None,
    limit: LimitOption = None,
    fail_fast: FailFastOption = False,
    download: DownloadOption = False,
    allow_outside_paths: OutsidePathsOption = False,
    visual: Annotated[int, typer.Option(min=0, help="Images in the visual-testing panel.")] = 3,
    list_variants: Annotated[bool, typer.Option("--list", help="List the registered pitfalls and exit.")] = False,
    trace_level: TraceLevelOption = "none",
    trace_out: TraceOutOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Sweep the classic pre-processing pitfalls: how much does each one move the result?"""
    if list_variants:  # no framework import: starts fast; the registry imports its providers
        from repliscope.pitfalls.degrees import pitfall_listing

        try:  # with MANIFEST: its task's variants, and each one's exact degrees on its pre-processing
            listing = pitfall_listing(manifest)
        except RepliscopeError as exc:
            fail(exc)
            return
        if as_json:
            emit_json(listing)
            return
        from rich.markup import escape

        print_table(
            "pitfalls",
            [
                "name",
                "tasks",
                "degrees: PARAMETER: allowed (default)" if manifest is None else "degrees here",
                "description",
            ],
            [
                [
                    escape(p["name"]),
                    ", ".join(p["tasks"]) or "every task",
                    escape(_on_manifest(p.get("on_manifest")) or p["degrees"]),
                    escape(p["description"]),
                ]
                for p in listing
            ],
        )
        return
    if manifest is None:
        fail(RepliscopeError("missing MANIFEST: give a model manifest (YAML) to sweep, or --list to list the pitfalls"))

    from repliscope.evaluation.run import plan_for, prepare
    from repliscope.manifest.loader import load_manifest
    from repliscope.pitfalls.sweep import run_sweep
    from repliscope.store.repository import RunStore
    from repliscope.tracing import use_tracer

    loaded = None
    try:
        tracer = start_tracing(trace_level, trace_out)
        loaded = load_manifest(manifest)
        options = _run_options(
            label_rule,
            evaluated_as,
            threads,
            batch_size,
            prep_workers,
            limit,
            fail_fast,
            download,
            allow_outside_paths,
            schedule,
        )
        settings, data = _settings_and_data(loaded, runtime, dataset, labels_csv, options)
        if variant:  # each degree on the pre-processing (the sweep's own check) before the model is loaded
            from repliscope.pitfalls.sweep import check_variants

            check_variants(loaded, variant, settings.runtime, settings.batch_size, settings.threads)
        store = RunStore(db)
        prepared = prepare(loaded, settings)
        if tracer.rank:  # calibrate (when not cached) untraced, as in evaluate
            plan_for(prepared, data)
        with sample_progress(disable=as_json) as progress:
            task = progress.add_task(f"pitfall sweep of {loaded.manifest.name}", total=len(data))
            with (
                use_tracer(tracer),
                tracer.span(
                    "run", "application", command="pitfalls", manifest=loaded.manifest.name, runtime=settings.runtime
                ),
            ):
                out = run_sweep(
                    prepared,
                    data,
                    variant or None,
                    visual_samples=visual,
                    on_progress=lambda n: progress.advance(task, n),
                )
        for record in out.records:
            store.save(record)
        store.save_sweep(out.result)
        traced = finish_tracing(tracer, trace_out, store, out.result.sweep_id)
    except RepliscopeError as exc:
        fail(_with_run_advice(exc, loaded, manifest))
        return
    for line in traced:
        print(line, file=sys.stderr)
    if as_json:
        emit_json(out.result.model_dump(mode="json"))
        return
    from repliscope.cli.output import print_sweep

    print_sweep(out.result)
    console.print(
        f"stored as sweep [bold]{out.result.sweep_id}[/] ({len(out.records)} runs); "
        f"repliscope report {out.result.sweep_id[:12]} --format html"
    )


def _on_manifest(on: dict[str, Any] | None) -> str:
    """A variant's degrees on the listed manifest, for ``pitfalls MANIFEST --list`` ("" without a manifest)."""
    if on is None:
        return ""
    if on["not_applicable"]:
        return f"not applicable: {on['not_applicable']}"
    return f"{', '.join(on['degrees'])} (default {on['default']})"


def main() -> None:
    """The ``repliscope`` script (the guard lives in the app's group class, so ``app()`` is guarded too)."""
    app()


if __name__ == "__main__":
    main()
