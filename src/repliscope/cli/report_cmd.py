"""``repliscope report RUN_OR_SWEEP_ID``: write a self-contained HTML or Markdown report."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from repliscope.errors import RepliscopeError

if TYPE_CHECKING:
    from repliscope.evaluation.record import EvaluationRecord
    from repliscope.pitfalls.result import SweepResult
    from repliscope.store.repository import RunStore

_MAX_VARIANT_RECORDS = 1000


def _resolve(store: RunStore, object_id: str) -> EvaluationRecord | SweepResult:
    """The run with this id (or unique prefix), else the sweep; a RepliscopeError naming both otherwise."""
    try:
        return store.get(object_id)
    except RepliscopeError as run_error:
        try:
            return store.get_sweep(object_id)
        except RepliscopeError as sweep_error:
            raise RepliscopeError(f"no run or sweep matches '{object_id}': {run_error}; {sweep_error}") from None


def _variant_records(store: RunStore, sweep: SweepResult) -> dict[str, EvaluationRecord]:
    """The stored records of a sweep's runs, by run id (missing ones are simply left out)."""
    records = {}
    for summary in store.list(limit=_MAX_VARIANT_RECORDS, sweep_id=sweep.sweep_id):
        records[summary.run_id] = store.get(summary.run_id)
    ref_id = sweep.reference.run_id
    if ref_id and ref_id not in records:
        with contextlib.suppress(RepliscopeError):
            records[ref_id] = store.get(ref_id)
    return records


def report(
    object_id: Annotated[str, typer.Argument(metavar="RUN_OR_SWEEP_ID",
                                             help="A run or sweep id (a unique prefix of 6+ characters is enough).")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="html | md")] = "html",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Output file (default: "
                                             "repliscope-<kind>-<id12>.<format> in the current directory).")] = None,
    images: Annotated[str, typer.Option(help="Markdown only: 'files': PNGs in <stem>_files/ beside the .md; "
                                        "'embed': data URIs in the text (one file); 'auto': files for sweeps, "
                                        "embed for runs.")] = "auto",
    db: Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL (default: SQLite in the user data "
                                           "directory, or $REPLISCOPE_DB)")] = None,
    figure: Annotated[list[Path] | None, typer.Option("--figure", help="Extra PNG to embed in the layer-diff "
                                                      "section, e.g. from `repliscope diff ... --layers --plot` "
                                                      "(repeatable).")] = None,
) -> None:
    """Write a self-contained report (claim, metrics, provenance; for sweeps the pitfall table, deltas chart and
    visual testing) of a stored run or sweep."""
    from repliscope.pitfalls.result import SweepResult
    from repliscope.report.write import FORMATS, IMAGE_MODES, ImageMode, write_report
    from repliscope.store.repository import RunStore

    try:
        if fmt not in FORMATS:
            raise RepliscopeError(f"unknown report format '{fmt}' (allowed: {', '.join(FORMATS)})")
        if images not in IMAGE_MODES:
            raise RepliscopeError(f"unknown --images '{images}' (allowed: {', '.join(IMAGE_MODES)})")
        store = RunStore(db)
        obj = _resolve(store, object_id)
        is_sweep = isinstance(obj, SweepResult)
        records = _variant_records(store, obj) if isinstance(obj, SweepResult) else None
        full_id = obj.sweep_id if isinstance(obj, SweepResult) else obj.run_id
        path = out or Path(f"repliscope-{'sweep' if is_sweep else 'run'}-{full_id[:12]}.{fmt}")
        extra = [(f"layer-level diff ({p.stem})", p.read_bytes()) for p in figure or []]
        mode: ImageMode = "files" if images == "files" else "embed" if images == "embed" else "auto"
        written = write_report(obj, fmt, path, records=records, images=mode, extra_figures=extra or None)
    except (RepliscopeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(code=2) from None
    except ImportError as exc:
        print(f"error: the report needs jinja2 and matplotlib ({exc})", file=sys.stderr)
        raise typer.Exit(code=2) from None
    print(f"wrote {'sweep' if is_sweep else 'run'} report {written}")


def register(app: typer.Typer) -> None:
    """Add the ``report`` command to ``app``."""
    app.command("report")(report)
