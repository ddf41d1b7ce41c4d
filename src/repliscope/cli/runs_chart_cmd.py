"""``repliscope runs chart``: a metric across stored runs, or a sweep's parallel coordinates, written as an SVG file
(the same data and drawing as the web UI's ``/charts`` and ``/sweeps/{id}/parallel``:
:func:`repliscope.store.run_charts.chart_data`, :mod:`repliscope.report.run_charts`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from repliscope.cli.common import DbOption, fail, runtime_help
from repliscope.cli.output import console
from repliscope.errors import RepliscopeError


def runs_chart(
    out: Annotated[Path, typer.Option("--out", help="The SVG file to write (its folder must exist).")],
    metric: Annotated[
        str | None,
        typer.Option(
            help="The metric: top1, top5 | AP, AP50, ... | mIoU, ... (default: top1; a sweep's: its task's headline)."
        ),
    ] = None,
    by: Annotated[
        str,
        typer.Option(help="Group the runs by runtime | stack | framework_version | variant | dataset | model."),
    ] = "runtime",
    model: Annotated[str | None, typer.Option(help="Only the runs of this model (manifest name).")] = None,
    runtime: Annotated[str | None, typer.Option(help=f"Only the runs on this runtime: {runtime_help(None)}.")] = None,
    dataset: Annotated[str | None, typer.Option(help="Only the runs on this dataset (its name).")] = None,
    sweep: Annotated[str | None, typer.Option(help="Only the runs of this pitfall sweep (a unique id prefix).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="Chart the newest this many runs at most.")] = 500,
    parallel: Annotated[
        str | None,
        typer.Option(
            help="Instead: the parallel coordinates of this sweep (an axis for the variant, each varied parameter "
            "and the metric; one line per run)."
        ),
    ] = None,
    db: DbOption = None,
) -> None:
    """Write a chart of stored runs as an SVG file: a metric's value and 95 % interval per run, grouped (claims as
    dashed lines), or with ``--parallel`` a sweep's parallel coordinates."""
    from repliscope.report.run_charts import metric_chart_svg, metric_chart_title, parallel_svg, sweep_parallel
    from repliscope.store.repository import RunQuery, RunStore
    from repliscope.store.run_charts import chart_data

    if not out.parent.is_dir():
        fail(RepliscopeError(f"--out {out}: the folder {out.parent} does not exist"))
    if out.suffix.lower() != ".svg":
        fail(RepliscopeError(f"--out {out}: the chart is an SVG file, name it *.svg"))
    try:
        store = RunStore(db)
        if parallel is not None:
            if any(x is not None for x in (model, runtime, dataset, sweep)) or by != "runtime":
                raise RepliscopeError(
                    "--parallel draws one sweep's runs: --by, --model, --runtime, --dataset and --sweep do not apply"
                )
            result = store.get_sweep(parallel)
            pc = sweep_parallel(result, metric)
            out.write_text(parallel_svg(pc), encoding="utf-8")
            console.print(
                f"wrote {out}: the parallel coordinates of sweep {result.sweep_id[:12]}, {len(pc.lines)} runs, "
                f"axes {', '.join(a.name for a in pc.axes)}",
                highlight=False,
            )
            return
        sweep_id = store.get_sweep(sweep).sweep_id if sweep else None
        query = RunQuery(model=model, runtime=runtime, dataset=dataset, sweep_id=sweep_id)
        data = chart_data(store, metric or "top1", by, query, limit)
    except RepliscopeError as exc:
        fail(exc)
    out.write_text(metric_chart_svg(data), encoding="utf-8")
    more = f"; the newest {data.read} of {data.matched} matching runs" if data.more else ""
    missing = f"; {data.without_value} without a value, not drawn" if data.without_value else ""
    console.print(
        f"wrote {out}: {metric_chart_title(data)} in {len(data.groups)} groups{more}{missing}", highlight=False
    )
