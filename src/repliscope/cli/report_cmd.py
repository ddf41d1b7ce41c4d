"""``repliscope report ID`` (a run, sweep, benchmark or stack matrix): a self-contained HTML or Markdown report."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from repliscope.cli.gc_pause import gc_paused
from repliscope.errors import RepliscopeError

if TYPE_CHECKING:
    from repliscope.bench.record import BenchmarkRecord
    from repliscope.evaluation.record import EvaluationRecord
    from repliscope.pitfalls.result import SweepResult
    from repliscope.stacks.matrix import StackMatrix
    from repliscope.store.diffs import StoredDiff
    from repliscope.store.repository import RunStore

_MAX_VARIANT_RECORDS = 1000

REPORT_KINDS: tuple[tuple[str, str], ...] = (
    ("run", "claim, metrics, failures, latency, provenance"),
    ("sweep", "the pitfall table, deltas chart and visual testing"),
    ("benchmark", "every configuration of its matrix run, with each traced layer's time"),
    ("stack matrix", "one manifest across provisioned stacks"),
    ("diff", "{kinds}, the ids `repliscope diffs list` shows"),
)
"""What ``report ID`` looks an id up as, in order (the first kind that knows it wins), with what its report holds:
the lookups of :func:`_resolve`, the help of ``ID`` and the error of an unknown id are made from this table."""


def _kind_names() -> str:
    """``run, sweep, benchmark, stack matrix or diff``."""
    names = [k for k, _ in REPORT_KINDS]
    return f"{', '.join(names[:-1])} or {names[-1]}"


def report_help() -> str:
    """The command's help: every kind of :data:`REPORT_KINDS` with what its report holds."""
    from repliscope.store.diffs import DIFF_KINDS

    kinds = [f"{k} ({what.format(kinds=' | '.join(DIFF_KINDS))})" for k, what in REPORT_KINDS]
    return f"Write a self-contained HTML or Markdown report of a stored {', '.join(kinds[:-1])} or {kinds[-1]}."


def _resolve(
    store: RunStore, object_id: str
) -> EvaluationRecord | SweepResult | BenchmarkRecord | StackMatrix | StoredDiff:
    """The object with this id (or unique prefix), looked up as each kind of :data:`REPORT_KINDS` in order;
    otherwise one RepliscopeError: the lookups' own errors when one is more than "unknown" (an ambiguous prefix),
    else one sentence naming the kinds, the store and its most recent runs."""
    from repliscope.store.diffs import get_diff
    from repliscope.store.repository import MIN_PREFIX, hide_password

    getters: dict[str, Any] = {
        "run": store.get,
        "sweep": store.get_sweep,
        "benchmark": store.get_benchmark,
        "stack matrix": store.get_stack_matrix,
        "diff": lambda i: get_diff(store, i),
    }
    errors = []
    for kind, _ in REPORT_KINDS:
        try:
            return getters[kind](object_id)
        except RepliscopeError as exc:
            errors.append(str(exc))
    telling = [e for e in errors if not e.startswith("unknown ")]  # e.g. "... prefix 'x' is ambiguous; ..."
    if telling:
        raise RepliscopeError("; ".join(telling))
    where = f"no {_kind_names()} matches '{object_id}'"
    if len(object_id) < MIN_PREFIX:
        raise RepliscopeError(f"{where} (a prefix needs at least {MIN_PREFIX} characters)")
    recent = ", ".join(r.run_id[:12] for r in store.list(limit=5))
    raise RepliscopeError(
        f"{where}, in {hide_password(store.url)}; " + (f"most recent runs: {recent}" if recent else "no run stored")
    )


def _benchmark_report(store: RunStore, bench: BenchmarkRecord, path: Path) -> Path:
    """The report of a benchmark: every configuration of its matrix run (one when it ran alone), with the
    per-layer time of each stored trace."""
    from repliscope.cli.bench_cmd import write_bench_report

    records = (
        sorted(store.list_benchmarks(limit=10_000, matrix_id=bench.matrix_id), key=lambda r: r.created_at)
        if bench.matrix_id
        else [bench]
    )
    traces: list[Any] = [store.load_trace(r.benchmark_id) for r in records]  # None: not traced
    write_bench_report(records, path, traces)
    return path


def _trace_figures(store: RunStore, object_id: str) -> list[tuple[str, bytes]]:
    """The per-layer time chart of the trace stored with a run or sweep (recorded with --trace-level framework
    or library); [] when there is none."""
    doc = store.load_trace(object_id)
    if doc is None:
        return []
    from repliscope.report.trace_sections import trace_figures

    return trace_figures(doc)


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
    object_id: Annotated[
        str,
        typer.Argument(
            metavar="ID",
            help=f"A {_kind_names()} id (a unique prefix of 6+ characters is enough).",
        ),
    ],
    fmt: Annotated[str, typer.Option("--format", "-f", help="html | md")] = "html",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Output file (default: repliscope-<kind>-<id12>.<format> in the current directory)."
        ),
    ] = None,
    images: Annotated[
        str,
        typer.Option(
            help="Markdown only: 'files': PNGs in <stem>_files/ beside the .md; "
            "'embed': data URIs in the text (one file); 'auto': files for sweeps, "
            "embed for runs."
        ),
    ] = "auto",
    db: Annotated[
        str | None,
        typer.Option("--db", help="SQLAlchemy URL (default: SQLite in the user data directory, or $REPLISCOPE_DB)"),
    ] = None,
    figure: Annotated[
        list[Path] | None,
        typer.Option(
            "--figure",
            help="Extra PNG to embed in the layer-diff "
            "section, e.g. from `repliscope diff ... --layers --plot` "
            "(repeatable).",
        ),
    ] = None,
) -> None:
    """Write a self-contained report of a stored object (the help lists every kind: :func:`report_help`)."""
    from repliscope.bench.record import BenchmarkRecord
    from repliscope.pitfalls.result import SweepResult
    from repliscope.report.write import FORMATS, IMAGE_MODES, ImageMode, write_report
    from repliscope.stacks.matrix import StackMatrix
    from repliscope.store.diffs import StoredDiff, get_figure
    from repliscope.store.repository import RunStore

    try:
        if fmt not in FORMATS:
            raise RepliscopeError(f"unknown report format '{fmt}' (allowed: {', '.join(FORMATS)})")
        if images not in IMAGE_MODES:
            raise RepliscopeError(f"unknown --images '{images}' (allowed: {', '.join(IMAGE_MODES)})")
        store = RunStore(db)
        obj = _resolve(store, object_id)
        if isinstance(obj, StoredDiff):
            from repliscope.report.diff_report import write_diff_report

            written = write_diff_report(
                obj, get_figure(store, obj.diff_id), out or Path(f"repliscope-diff-{obj.diff_id[:12]}.{fmt}"), fmt
            )
            print(f"wrote diff report {written}")
            return
        if isinstance(obj, StackMatrix):
            from repliscope.report.stack_matrix import write_stack_matrix_report

            written = write_stack_matrix_report(obj, out or Path(f"repliscope-stacks-{obj.matrix_id[:12]}.{fmt}"), fmt)
            print(f"wrote stack matrix report {written}")
            return
        if isinstance(obj, BenchmarkRecord):
            if fmt == "md" and images == "files":
                raise RepliscopeError("a benchmark report embeds its images: use --images embed or auto")
            written = _benchmark_report(store, obj, out or Path(f"repliscope-benchmark-{obj.benchmark_id[:12]}.{fmt}"))
            print(f"wrote benchmark report {written}")
            return
        is_sweep = isinstance(obj, SweepResult)
        records = _variant_records(store, obj) if isinstance(obj, SweepResult) else None
        full_id = obj.sweep_id if isinstance(obj, SweepResult) else obj.run_id
        path = out or Path(f"repliscope-{'sweep' if is_sweep else 'run'}-{full_id[:12]}.{fmt}")
        extra = [(f"layer-level diff ({p.stem})", p.read_bytes()) for p in figure or []]
        extra += _trace_figures(store, full_id)
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
    app.command("report", help=report_help())(gc_paused()(report))
