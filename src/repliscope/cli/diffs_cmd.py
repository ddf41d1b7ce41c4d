"""``repliscope diffs list|show``: the stored diffs (task-level, layer-level, pipeline and training diffs)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from repliscope.cli.common import DbOption, JsonOption, emit_json, fail
from repliscope.cli.output import console
from repliscope.errors import RepliscopeError
from repliscope.store.diffs import DIFF_KINDS

diffs_app = typer.Typer(help="Stored diffs (repliscope diff keeps every result).", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the ``diffs`` command group to ``app``."""
    app.add_typer(diffs_app, name="diffs")


@diffs_app.command("list")
def diffs_list(
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many diffs.")] = 50,
    kind: Annotated[str | None, typer.Option(help=" | ".join(DIFF_KINDS))] = None,
    model: Annotated[str | None, typer.Option(help="Only the diffs of this manifest name.")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """The stored diffs, newest first."""
    from repliscope.store.diffs import list_diffs
    from repliscope.store.repository import RunStore

    try:
        with RunStore(db) as store:
            rows, total = list_diffs(store, kind=kind, manifest_name=model, limit=limit)
    except RepliscopeError as exc:
        fail(exc)
    if as_json:
        emit_json({"total": total, "diffs": [r.model_dump(mode="json") for r in rows]})
        return
    table = Table(title=f"diffs ({len(rows)} of {total})")
    for col in ("id", "date", "kind", "model", "a", "b", "samples", "verdict", "summary"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            r.diff_id[:12],
            r.created_at.strftime("%Y-%m-%d %H:%M"),
            r.kind,
            r.manifest_name,
            r.a,
            r.b,
            str(r.samples),
            r.verdict,
            r.summary,
        )
    console.print(table)


@diffs_app.command("show")
def diffs_show(
    diff_id: Annotated[str, typer.Argument(help="A diff id or a unique prefix (6+ characters).")],
    figure: Annotated[Path | None, typer.Option(help="Write the diff's stored figure (PNG) here.")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """One stored diff, printed as repliscope diff printed it."""
    from repliscope.store.diffs import get_diff, get_figure
    from repliscope.store.repository import RunStore

    try:
        with RunStore(db) as store:
            stored = get_diff(store, diff_id)
            png = get_figure(store, stored.diff_id) if figure is not None else None
    except RepliscopeError as exc:
        fail(exc)
    if figure is not None:
        if png is None:
            print(f"error: diff {stored.diff_id[:12]} has no figure", file=sys.stderr)
            raise typer.Exit(code=2)
        figure.write_bytes(png)
    if as_json:
        # as repliscope diff --json printed it: the task and layer diffs bare, the others under their kind
        emit_json(stored.result if stored.kind in ("task_diff", "layer_diff") else {stored.kind: stored.result})
        return
    console.print(f"diff {stored.diff_id} ({stored.kind}), stored {stored.created_at:%Y-%m-%d %H:%M} UTC")
    _print(stored.kind, stored.result)


def _print(kind: str, result: dict) -> None:
    from repliscope.cli.diff_output import print_layer_diff, print_task_diff
    from repliscope.cli.pipeline_diff_cmd import print_pipeline_diff
    from repliscope.diff.layers.layer_result import LayerDiffResult
    from repliscope.diff.pipeline.driver import PipelineDiffResult
    from repliscope.diff.task_level import TaskDiffResult

    if kind == "pipeline_diff":
        print_pipeline_diff(PipelineDiffResult.model_validate(result))
    elif kind == "layer_diff":
        print_layer_diff(LayerDiffResult.model_validate(result))
    elif kind == "task_diff":
        print_task_diff(TaskDiffResult.model_validate(result))
    elif kind == "augmentation_diff":
        from repliscope.cli.augment_diff_cmd import _print as print_augment_diff
        from repliscope.diff.augment.driver import AugmentDiffResult

        print_augment_diff(AugmentDiffResult.model_validate(result))
    elif kind == "loss_diff":
        from repliscope.cli.loss_diff_cmd import print_loss_diff
        from repliscope.diff.loss.driver import LossDiffResult

        print_loss_diff(LossDiffResult.model_validate(result))
    else:  # gradient, training-step diffs: the stored result as it is
        console.print_json(data=result)
