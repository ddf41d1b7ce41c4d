"""``repliscope runs list|show|compare|import``: the stored evaluation records."""

from __future__ import annotations

import stat
import sys
from collections.abc import Sequence
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from repliscope.cli.common import DbOption, JsonOption, emit_json, fail
from repliscope.cli.gc_pause import gc_paused
from repliscope.cli.output import console, print_record
from repliscope.errors import RepliscopeError
from repliscope.number_text import count_of, unit_value_text

if TYPE_CHECKING:
    from repliscope.evaluation.record import EvaluationRecord
    from repliscope.store.repository import RunSummary

runs_app = typer.Typer(help="Stored evaluation records.", no_args_is_help=True)

RUN_KINDS = ("evaluation", "pitfall_variant")
"""The values of a record's ``kind``: a plain evaluation, or one variant run of a pitfall sweep."""
ID_CHARS = 8
SHOWN_FAILED = 20
"""Failed samples ``runs show`` lists (as :func:`repliscope.cli.output.print_record` does; the rest is a count)."""
"""Characters of a run id ``runs list`` shows (any unique prefix of 6+ characters selects a run)."""
_SHARED_FIRST = ("date", "sweep", "runtime", "dataset", "model")
"""Columns moved above the table, in this order, when their value is the same in every row and the table
would not fit the terminal otherwise."""
_FOLDABLE = ("model", "dataset", "variant", "name", "tags")
"""Columns whose long names fold onto a second line when the table still does not fit (never cut)."""


def register(app: typer.Typer) -> None:
    """Add the ``runs`` command group to ``app``."""
    app.add_typer(runs_app, name="runs")


@runs_app.command("list")
def runs_list(
    limit: Annotated[int, typer.Option(min=1, help="At most this many runs.")] = 50,
    kind: Annotated[str | None, typer.Option(help="evaluation | pitfall_variant | benchmark")] = None,
    sweep: Annotated[str | None, typer.Option(help="Only the runs of this sweep (a unique id prefix).")] = None,
    tag: Annotated[str | None, typer.Option(help="Only the runs carrying this tag (`runs tag`).")] = None,
    search: Annotated[
        str | None,
        typer.Option(
            help="Only the runs with this text (any case) in a model, dataset, runtime, variant, tag, "
            "display name or note."
        ),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """List stored runs, newest first (with their display names and tags: `runs tag`, `runs rename`)."""
    from repliscope.store.repository import RunStore

    if kind is not None and kind not in (*RUN_KINDS, "benchmark"):
        fail(RepliscopeError(f"--kind {kind!r}: unknown run kind (allowed: {', '.join(RUN_KINDS)}, benchmark)"))
    try:
        store = RunStore(db)
        if kind == "benchmark":
            if sweep:
                raise RepliscopeError("--sweep lists the runs of a pitfall sweep; benchmarks belong to no sweep")
            if tag is not None or search is not None:
                raise RepliscopeError("--tag and --search find runs; benchmarks carry no tags, names or notes")
            _list_benchmarks(store.list_benchmarks(limit=limit), as_json)
            return
        sweep_id = store.get_sweep(sweep).sweep_id if sweep else None
        if tag is not None or search is not None:  # the store's query with its filters
            runs = _matching_runs(store, limit, kind, sweep_id, tag, search)
        else:
            runs = store.list(limit=limit, kind=kind, sweep_id=sweep_id)
        labels = store.annotations.labels(r.run_id for r in runs)
        benchmarks = (
            store.count_benchmarks() if kind is None and sweep is None and tag is None and search is None else 0
        )
    except RepliscopeError as exc:
        fail(exc)
        return
    if as_json:
        emit_json([{**r.model_dump(mode="json"), **_label_json(labels.get(r.run_id))} for r in runs])
        return
    if not runs:
        what = (f" of kind {kind}" if kind else "") + (" in this sweep" if sweep else "")
        what += (f" tagged {tag}" if tag is not None else "") + (f" matching {search!r}" if search else "")
        console.print("no stored runs" + what, highlight=False, markup=False)
    else:
        print_runs(runs, labels)
    if benchmarks:
        console.print(
            f"and {benchmarks} stored benchmark{'s' if benchmarks != 1 else ''}: repliscope runs list --kind benchmark",
            highlight=False,
        )


def _list_benchmarks(records: Sequence[Any], as_json: bool) -> None:
    """``runs list --kind benchmark``: one line per benchmark record, newest first."""
    if as_json:
        emit_json([r.summary() for r in records])
        return
    if not records:
        console.print("no stored benchmarks")
        return
    from rich import box
    from rich.table import Table

    console.print(
        f"[bold]{count_of(len(records), 'benchmark')}[/], newest first (local time; the scenario's metric: p90 "
        "single-stream, p99 multi-stream and server, throughput offline)",
        highlight=False,
    )
    cells = []
    for r in records:
        created = (r.created_at if r.created_at.tzinfo else r.created_at.replace(tzinfo=UTC)).astimezone()
        if r.scenario == "offline":
            metric = f"{r.throughput_samples_per_second:.1f}/s"
        else:
            key = "p99" if r.scenario in ("multi-stream", "server") else "p90"
            metric = f"{key} {r.latency.percentiles[key].value:.2f} ms"
        cells.append(
            {
                "benchmark": r.benchmark_id[:ID_CHARS],
                "created": f"{created:%m-%d %H:%M}",
                "model": f"{r.manifest.name} {r.manifest.version}",
                "runtime": str(r.runtime["runtime"]),
                "thr": str(r.threads),
                "scenario": r.scenario,
                "queries": str(r.queries),
                "metric": metric,
                "valid": "yes" if r.valid else "no",
            }
        )
    # a model / scenario shared by every row is said once above the table (it would fold at 80 columns)
    shared = [c for c in ("model", "scenario") if len({row[c] for row in cells}) == 1]
    for line in pack(
        [f"{c} {cells[0][c]}" for c in shared], console.width, first="every benchmark: ", next_="                 "
    ):
        console.print(line, highlight=False, soft_wrap=True)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    columns = [c for c in cells[0] if c not in shared]
    for name in columns:
        table.add_column(
            name,
            no_wrap=name not in ("model", "scenario"),
            overflow="fold",
            justify="right" if name in ("thr", "queries", "metric") else "left",
        )
    for row in cells:
        table.add_row(*(row[c] for c in columns))
    console.print(table)


def _matching_runs(
    store: Any, limit: int, kind: str | None, sweep_id: str | None, tag: str | None, search: str | None
) -> list[Any]:
    """``runs list --tag/--search``: at most ``limit`` runs of the store's query, newest first, read a page of
    :data:`repliscope.store.repository.MAX_PAGE_SIZE` at a time."""
    from repliscope.store.repository import MAX_PAGE_SIZE, RunQuery

    query = RunQuery(kind=kind, sweep_id=sweep_id, tag=tag, search=(search or "").strip() or None)
    found: list[Any] = []
    page = 1
    while len(found) < limit:
        batch, _total = store.query_runs(query, "-created_at", page, MAX_PAGE_SIZE)
        found.extend(batch[: limit - len(found)])
        if len(batch) < MAX_PAGE_SIZE:
            break
        page += 1
    return found


def _label_json(label: Any) -> dict[str, Any]:
    """A run's display name and tags for ``runs list --json`` (None and [] without)."""
    return {"display_name": label.display_name if label else None, "tags": list(label.tags) if label else []}


def run_cells(r: RunSummary, label: Any = None) -> dict[str, str]:
    """One run's cells in ``runs list``: 8-character id, its display name (``runs rename``), local creation date
    and time, model name and version in full, top-1 and detection's AP in the house's number format
    (:mod:`repliscope.number_text`, as the web pages: ``88.90 %``, ``0.3741``), its tags (each empty when the run
    has none)."""
    created = (r.created_at if r.created_at.tzinfo else r.created_at.replace(tzinfo=UTC)).astimezone()
    return {
        "run": r.run_id[:ID_CHARS],
        "name": (label.display_name or "") if label else "",
        "date": f"{created:%Y-%m-%d}",
        "time": f"{created:%H:%M}",
        "model": f"{r.manifest_name} {r.manifest_version}",
        "runtime": r.runtime,
        "dataset": r.dataset_name,
        "n": str(r.num_samples),
        "failed": str(r.num_failed),
        "top-1": "" if r.top1 is None else unit_value_text("percent", r.top1),
        "AP": "" if r.ap is None else unit_value_text("fraction", r.ap),
        "sweep": r.sweep_id[:ID_CHARS] if r.sweep_id else "",
        "variant": r.variant or "",
        "tags": " ".join(label.tags) if label else "",
    }


def runs_layout(cells: Sequence[dict[str, str]], width: int) -> tuple[list[str], list[str], int]:
    """(columns of the table, ``"name value"`` parts shown once above it, spaces between columns) for
    ``cells`` at ``width`` terminal columns.

    Columns empty in every row (no sweep, top-1 of none) and ``failed`` when no run failed are dropped. Then,
    until the table fits ``width``: two spaces between columns, else one, else the next column with the same
    value in every row moves above the table (the date first, then sweep, runtime, dataset, model)."""
    columns = [c for c in cells[0] if any(row[c] for row in cells)]
    if all(row["failed"] == "0" for row in cells):
        columns.remove("failed")
    shared: list[str] = []
    movable = [c for c in _SHARED_FIRST if c in columns and len({row[c] for row in cells}) == 1]
    while True:
        for gap in (2, 1):
            if _table_width(cells, columns, gap) <= width:
                return columns, shared, gap
        if not movable:
            return columns, shared, 1
        name = movable.pop(0)
        columns.remove(name)
        shared.append(f"{name} {cells[0][name]}")


def _table_width(cells: Sequence[dict[str, str]], columns: list[str], gap: int) -> int:
    """Width of the table :func:`print_runs` draws: the widest cell of each column, ``gap`` spaces between."""
    return sum(max(len(c), *(len(row[c]) for row in cells)) for c in columns) + gap * (len(columns) - 1)


def print_runs(runs: Sequence[RunSummary], labels: dict[str, Any] | None = None) -> None:
    """The ``runs list`` table: one line per run at 80 columns for typical names; a cell is never cut
    (``labels``: display names and tags by run id)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    cells = [run_cells(r, (labels or {}).get(r.run_id)) for r in runs]
    columns, shared, gap = runs_layout(cells, console.width)
    units = "; AP: COCO .50:.95" if "AP" in columns else ""
    console.print(f"[bold]{count_of(len(runs), 'run')}[/], newest first (local time{units})", highlight=False)
    for line in pack(shared, console.width, first="every run: ", next_="           "):
        console.print(line, highlight=False, soft_wrap=True)
    # SIMPLE_HEAD draws a space between columns: gap 2 = that space + one of padding
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, gap - 1, 0, 0))
    for c in columns:
        table.add_column(
            c,
            justify="right" if c in ("n", "failed", "top-1", "AP") else "left",
            no_wrap=c not in _FOLDABLE,
            overflow="fold",
        )
    for row in cells:  # as Text: a display name is the user's text, never rich markup
        table.add_row(*(Text(row[c]) for c in columns))
    console.print(table)


def pack(parts: Sequence[str], width: int, first: str, next_: str) -> list[str]:
    """``parts`` joined by ``"; "`` into lines of at most ``width`` characters where possible (a part is never
    split; the first line starts with ``first``, the others with ``next_``)."""
    lines: list[str] = []
    line = ""
    for part in parts:
        prefix = first if not lines else next_
        candidate = f"{line}; {part}" if line else part
        if line and len(prefix) + len(candidate) > width:
            lines.append(prefix + line)
            line = part
        else:
            line = candidate
    if line:
        lines.append((first if not lines else next_) + line)
    return lines


@runs_app.command("import")
def runs_import(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Record JSON files (the unsaved-runs/<run_id>.json a failed "
            "store write kept, or `runs show --json` output)."
        ),
    ],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Store evaluation records kept as JSON files; each one is validated first, a run already stored is an
    error naming it."""
    from pydantic import ValidationError

    from repliscope.evaluation.record import EvaluationRecord, ImportedRecord
    from repliscope.limits import MANIFEST_BYTES
    from repliscope.store.repository import RunStore

    stored = []
    try:
        records: list[EvaluationRecord] = []
        for file in files:
            try:
                info = file.stat()  # stat, not open: a FIFO is refused without waiting for a writer
                if not stat.S_ISREG(info.st_mode):
                    raise RepliscopeError(f"{file}: not a regular file")
                if info.st_size > 64 * MANIFEST_BYTES.value:
                    raise RepliscopeError(
                        f"{file}: {info.st_size:,} bytes is more than a record file may have "
                        f"({64 * MANIFEST_BYTES.value:,})"
                    )
                imported = ImportedRecord.model_validate_json(file.read_bytes())
                records.append(EvaluationRecord.model_validate(imported.model_dump()))
            except OSError as exc:
                raise RepliscopeError(f"{file}: cannot read: {exc.strerror or exc}") from None
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise RepliscopeError(
                    f"{file}: not an evaluation record ({where + ': ' if where else ''}{first['msg']}; "
                    f"{exc.error_count()} problem(s)); nothing was stored"
                ) from None
        store = RunStore(db)
        for file, record in zip(files, records, strict=True):
            store.save(record)
            stored.append({"file": str(file), "run_id": record.run_id})
    except RepliscopeError as exc:
        fail(exc)
        return
    if as_json:
        emit_json(stored)
        return
    for item in stored:
        console.print(f"stored {item['file']} as run [bold]{item['run_id']}[/]", highlight=False)


@runs_app.command("show")
def runs_show(
    run_id: str,
    samples: Annotated[bool, typer.Option(help="List every sample.")] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one run's full record (a unique prefix of the id is enough)."""
    from repliscope.store.repository import RunStore

    more_failed = 0
    try:
        store = RunStore(db)
        try:
            if samples or as_json:
                record = store.get(run_id)
            else:  # the record and its first failed samples: a 50,000-sample run shows at once
                record, n_failed = store.get_head(run_id, failed=SHOWN_FAILED)
                more_failed = n_failed - len(record.samples)
        except RepliscopeError as run_error:
            try:
                bench = store.get_benchmark(run_id)
            except RepliscopeError:
                raise run_error from None
            _show_benchmark(bench, as_json)
            return
    except RepliscopeError as exc:
        fail(exc)
        return
    if as_json:
        emit_json(record.model_dump(mode="json"))
        return
    names, why = record_class_names(record) if samples else (None, None)
    print_record(record, show_samples=samples, class_names=names)
    if more_failed > 0:
        console.print(f"... and {more_failed} more failed samples (see --json)")
    if why:
        console.print(f"[dim]class names not shown: {why}[/]", highlight=False)
    from repliscope.cli.runs_annotate_cmd import print_annotations

    try:
        print_annotations(store, record.run_id)
    except RepliscopeError as exc:  # deleted meanwhile
        fail(exc)


def _show_benchmark(bench: Any, as_json: bool) -> None:
    """``runs show`` of a benchmark id: the record as ``repliscope bench`` printed it (``--json``: the whole
    record, every per-query latency included)."""
    if as_json:
        emit_json(bench.model_dump(mode="json"))
        return
    from repliscope.cli.bench_cmd import print_benchmark

    print_benchmark(bench)


def record_class_names(rec: EvaluationRecord) -> tuple[tuple[str, ...] | None, str | None]:
    """The class names of a stored run, from the ``labels`` section of the manifest text stored in its record
    (a label file is found relative to the manifest's recorded path and sha256-checked as at run time).
    Returns ``(names, None)``, or ``(None, reason)`` when they cannot be resolved (e.g. the file moved)."""
    from pydantic import ValidationError

    from repliscope.errors import ManifestError
    from repliscope.manifest.labels import class_names_of
    from repliscope.manifest.schema import LabelsSpec
    from repliscope.manifest.yaml_lines import format_path, load_with_lines
    from repliscope.paths import default_cache_dir

    where = rec.manifest.path
    try:
        data, _ = load_with_lines(rec.manifest.text, where)
        if not isinstance(data, dict) or not isinstance(data.get("labels"), dict):
            return None, f"the stored manifest {where} has no labels section"
        spec = LabelsSpec.model_validate(data["labels"])
        # the run already read this file under its path policy; showing its names reads it again, read-only
        names = class_names_of(
            spec,
            Path(where).parent,
            default_cache_dir(),
            lambda msg, at, allowed: ManifestError(msg, file=where, field=format_path(at), allowed=allowed),
            allow_outside_paths=True,
        )
    except ValidationError as exc:
        return None, f"the stored manifest's labels section is invalid: {exc.errors()[0]['msg']}"
    except RepliscopeError as exc:
        return None, str(exc)
    return names, None


@runs_app.command("compare")
@gc_paused()
def runs_compare(run_a: str, run_b: str, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Metric deltas (B - A) and the samples whose top-1 differs (exit 1 if no sample was evaluated by both)."""
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
    else:
        from repliscope.cli.output import print_comparison

        print_comparison(comparison)
    if not comparison.comparable:
        print(
            f"error: runs {comparison.run_a[:ID_CHARS]} and {comparison.run_b[:ID_CHARS]} have no sample that "
            f"both evaluated ({comparison.common_samples} shared sample ids, {comparison.only_in_a} only in A, "
            f"{comparison.only_in_b} only in B): nothing to compare",
            file=sys.stderr,
        )
        raise typer.Exit(code=1)


from repliscope.cli.runs_annotate_cmd import COMMANDS as ANNOTATE_COMMANDS  # noqa: E402  (tag, note, rename, ...)
from repliscope.cli.runs_chart_cmd import runs_chart  # noqa: E402  (runs chart: an SVG of stored runs)

for _name, _command in ANNOTATE_COMMANDS.items():
    runs_app.command(_name)(_command)
runs_app.command("chart")(runs_chart)
