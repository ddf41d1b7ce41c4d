"""``repliscope stack create|list|remove`` (provisioned software stacks) and ``repliscope stacks`` (one manifest
across stacks -> a stored matrix)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from repliscope.cli.cluster_cmd import (
    InsecureClusterOption,
    TlsCaOption,
    TlsCertOption,
    TlsKeyOption,
    cluster_security,
)
from repliscope.cli.common import DbOption, JsonOption, dataset_help, emit_json, fail, runtime_help
from repliscope.cli.label_rules import label_rule_choices
from repliscope.errors import RepliscopeError

stack_app = typer.Typer(
    help="Provisioned software stacks: a cached venv per pip requirement set, e.g. "
    '"onnxruntime==1.20.1" (`current` is this environment).',
    no_args_is_help=True,
)

SpecArgument = Annotated[
    str,
    typer.Argument(
        metavar="SPEC", help='pip requirements, e.g. "onnxruntime==1.20.1 numpy<2" (names from the index only).'
    ),
]


@stack_app.command("create")
def create(spec: SpecArgument, as_json: JsonOption = False) -> None:
    """Resolve SPEC with pip, then build its venv (repliscope from this checkout, dask/distributed at this
    environment's versions) or reuse the cached one; prints pip's progress and the stack key."""
    from rich.markup import escape

    from repliscope.cli.output import console
    from repliscope.stacks.store import create_stack

    start = time.perf_counter()
    try:
        with console.status("resolving ...", spinner="dots") as status:

            def on_line(line: str) -> None:
                if as_json:
                    return
                status.update(escape(line[:100]))
                if not line.startswith(("  ", "Processing ", "Collecting ", "Looking in ")):
                    console.print(escape(line), style="dim")

            stack = create_stack(spec, on_line=on_line)
    except RepliscopeError as exc:
        fail(exc)
    seconds = time.perf_counter() - start
    if as_json:
        emit_json({**stack.model_dump(mode="json"), "size_mb": stack.size_mb(), "seconds": round(seconds, 1)})
        return
    what = "cached" if stack.cached else "created"
    console.print(
        f"{what}: stack [bold]{stack.key}[/] ({escape(stack.spec)}) in {seconds:.1f} s; "
        f"{', '.join(f'{k} {v}' for k, v in stack.main_versions.items())}; python {stack.python}; "
        f"{stack.size_mb()} MB"
    )
    console.print(f"use it: repliscope stacks MANIFEST --stack current --stack {stack.key}", markup=False)


@stack_app.command("list")
def list_(as_json: JsonOption = False) -> None:
    """The cached stacks: key, spec, main versions, python, size, created."""
    from repliscope.cli.output import print_table
    from repliscope.stacks.store import list_stacks

    stacks = list_stacks()
    if as_json:
        emit_json([{**s.model_dump(mode="json"), "size_mb": s.size_mb()} for s in stacks])
        return
    if not stacks:
        print('no stacks yet: repliscope stack create "onnxruntime==1.20.1"')
        return
    print_table(
        "stacks",
        ["key", "spec", "versions", "python", "size MB", "created"],
        [
            [
                s.key,
                s.spec,
                ", ".join(f"{k} {v}" for k, v in s.main_versions.items()),
                s.python,
                s.size_mb(),
                f"{s.created_at:%Y-%m-%d %H:%M}",
            ]
            for s in stacks
        ],
    )


@stack_app.command("remove")
def remove(
    key_or_spec: Annotated[
        str, typer.Argument(metavar="KEY|SPEC", help="A stack key (or a unique prefix) or its spec.")
    ],
) -> None:
    """Delete a stack's venv and lock."""
    from repliscope.stacks.store import remove_stack

    try:
        stack = remove_stack(key_or_spec)
    except RepliscopeError as exc:
        fail(exc)
    print(f"removed stack {stack.key} ({stack.spec})")


def stacks(
    manifest: Annotated[Path, typer.Argument(help="Model manifest (YAML).")],
    stack: Annotated[
        list[str],
        typer.Option(
            "--stack",
            help="A stack key, spec or `current` (repeatable; the "
            "first is the reference; a spec without a stack is created).",
        ),
    ],
    runtime: Annotated[str | None, typer.Option(help=runtime_help("the manifest's native runtime"))] = None,
    dataset: Annotated[str, typer.Option(help=dataset_help())] = "foolbox_imagenet",
    label_rule: Annotated[
        str | None, typer.Option(help=f"{label_rule_choices(labels_csv=False)} (default: detected).")
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N samples (sorted order).")] = None,
    threads: Annotated[int, typer.Option(min=1, help="Runtime threads of every run.")] = 1,
    batch_size: Annotated[
        int | None,
        typer.Option(min=1, help="Batch of every run (default 8; 1 for a model that takes one image at a time)."),
    ] = None,
    scheduler: Annotated[
        str | None, typer.Option(help="tcp://HOST:PORT of a Dask scheduler (default: an in-process one).")
    ] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Also write the matrix report (.html or .md).")
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    tls_ca_file: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    insecure_cluster: InsecureClusterOption = False,
) -> None:
    """Run MANIFEST on the same samples in each --stack (an agent per stack) -> top-1, agreement, flipped
    samples, max |Δ output|, result-hash equality and timing per stack; stores the runs and the matrix."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

    from repliscope.cli.output import console, print_table
    from repliscope.manifest.loader import load_manifest
    from repliscope.runtimes import native_runtime
    from repliscope.stacks.matrix import summary_rows
    from repliscope.stacks.run import run_stacks
    from repliscope.store.repository import RunStore

    try:
        if report is not None and report.suffix not in (".html", ".md"):
            raise RepliscopeError(f"--report {report}: give a .html or .md file")
        loaded = load_manifest(manifest)
        rt = runtime or native_runtime(loaded.manifest.framework.name)
        store = RunStore(db)
        cluster = None
        if scheduler is not None:
            from repliscope.agents.cluster import Cluster

            cluster = Cluster.connect(
                scheduler, security=cluster_security(tls_ca_file, tls_cert, tls_key, insecure_cluster)
            )
        try:
            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                console=console,
                transient=True,
                disable=as_json,
            ) as progress:
                tasks: dict[str, TaskID] = {}

                def on_total(key: str, n: int) -> None:
                    tasks[key] = progress.add_task(f"stack {key}", total=n)

                def on_progress(key: str, n: int) -> None:
                    if key in tasks:
                        progress.advance(tasks[key], n)

                def log(line: str) -> None:
                    if not as_json:
                        progress.console.print(line, markup=False, style="dim")

                matrix, outcomes = run_stacks(
                    manifest,
                    stack,
                    rt,
                    dataset,
                    cluster,
                    on_progress,
                    on_total=on_total,
                    log=log,
                    limit=limit,
                    label_rule=label_rule,
                    threads=threads,
                    batch_size=batch_size,
                )
        finally:
            if cluster is not None:
                cluster.close()
        for outcome, entry in zip(outcomes, [e for e in matrix.stacks if e.error is None], strict=True):
            store.save_outcome(outcome, f"stack-matrix-{matrix.matrix_id}-{entry.key}")
        store.save_stack_matrix(matrix)
        written = None
        if report is not None:
            from repliscope.report.stack_matrix import write_stack_matrix_report

            written = write_stack_matrix_report(matrix, report, report.suffix[1:])
    except RepliscopeError as exc:
        fail(exc)
    if as_json:
        emit_json(matrix.model_dump(mode="json"))
        return
    rows = summary_rows(matrix)
    print_table(
        f"{matrix.manifest.name} on {matrix.runtime}, {matrix.dataset.n} samples, per stack (vs the first)",
        [
            "stack",
            "versions",
            "top-1 / AP",
            "Δ vs first",
            "agreement",
            "flips →/←",
            "max |Δ output|",
            "hash equal",
            "seconds",
        ],
        [
            [
                r["stack"],
                r["versions"],
                r["top1"],
                r["delta"],
                r["agreement"],
                r["flips"],
                r["max_diff"],
                r["hash_equal"],
                r["seconds"],
            ]
            for r in rows
        ],
    )
    for entry in matrix.stacks:
        if entry.error is not None:
            console.print(
                f"stack {entry.key} ({entry.spec}) could not run the job: {entry.error}", markup=False, style="yellow"
            )
    console.print(
        f"stored as stack matrix [bold]{matrix.matrix_id}[/] ({len(outcomes)} runs); "
        f"repliscope report {matrix.matrix_id[:12]}"
    )
    if written is not None:
        console.print(f"wrote {written}", markup=False)


def register(app: typer.Typer) -> None:
    """Add ``stack`` (create/list/remove) and ``stacks`` to ``app``."""
    app.add_typer(stack_app, name="stack")
    app.command("stacks")(stacks)
