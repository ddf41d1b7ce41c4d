"""``repliscope runs list|show|compare``: the stored evaluation records."""

from __future__ import annotations

from typing import Annotated

import typer

from repliscope.cli.common import DbOption, JsonOption, emit_json, fail
from repliscope.cli.output import print_record, print_table
from repliscope.errors import RepliscopeError

runs_app = typer.Typer(help="Stored evaluation records.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the ``runs`` command group to ``app``."""
    app.add_typer(runs_app, name="runs")


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
        fail(exc)
        return
    if as_json:
        emit_json([r.model_dump(mode="json") for r in runs])
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
        fail(exc)
        return
    if as_json:
        emit_json(record.model_dump(mode="json"))
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
        fail(exc)
        return
    if as_json:
        emit_json(comparison.model_dump(mode="json"))
        return
    from repliscope.cli.output import print_comparison

    print_comparison(comparison)
