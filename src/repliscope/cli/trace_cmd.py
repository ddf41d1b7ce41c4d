"""``repliscope trace``: summarise, compare and export leveled traces; the ``--trace-level`` / ``--trace-out`` options
and their start/finish helpers shared by the commands that run a model (evaluate, pitfalls, bench, diff)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from repliscope.cli.common import DbOption, JsonOption, emit_json, fail
from repliscope.cli.output import console, print_table
from repliscope.errors import RepliscopeError
from repliscope.number_text import percent_text
from repliscope.tracing import LEVELS, Tracer, make_tracer

TraceLevelOption = Annotated[
    str,
    typer.Option(
        "--trace-level",
        help="none | application (the run) | model (each batch/query: pre-processing ops, inference, "
        "post-processing) | framework (each layer) | library (kernels). Stored with the run.",
    ),
]
TraceOutOption = Annotated[
    Path | None,
    typer.Option("--trace-out", help="Also write the Chrome trace / Perfetto JSON to this file (needs --trace-level)."),
]

PlotOption = Annotated[
    Path | None,
    typer.Option(
        "--plot", help="Also write the per-layer bar chart (PNG) here; `repliscope report RUN --figure PNG` embeds it."
    ),
]

trace_app = typer.Typer(
    help="Summarise, compare and export leveled traces (recorded with --trace-level).", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    """Add the ``trace`` command group to ``app``."""
    app.add_typer(trace_app, name="trace")


def start_tracing(level: str, out: Path | None) -> Tracer:
    """The tracer of ``--trace-level``; ``--trace-out`` without a level above ``none`` is an error."""
    tracer = make_tracer(level)
    if out is not None and tracer.rank == 0:
        raise RepliscopeError(f"--trace-out needs --trace-level above none (allowed: {', '.join(LEVELS[1:])})")
    return tracer


def finish_tracing(tracer: Tracer, out: Path | None, store: Any, object_id: str) -> list[str]:
    """Store the trace under ``object_id`` (a run, sweep or benchmark id), write ``out``, flush OpenTelemetry ->
    what was done, one line each ([] at level ``none``)."""
    if tracer.rank == 0:
        return []
    doc = tracer.chrome_trace()
    store.save_trace(object_id, tracer.level, doc)
    done = [
        f"trace ({tracer.level}, {sum(1 for e in doc['traceEvents'] if e['ph'] == 'X')} spans) stored; "
        f"repliscope trace summary {object_id[:12]}"
    ]
    if out is not None:
        done.append(f"wrote {tracer.write_chrome_trace(out)} (open in https://ui.perfetto.dev or chrome://tracing)")
    tracer.flush()
    if tracer.otel is not None:
        tracer.otel.shutdown()
        done.append(f"OpenTelemetry spans exported with {', '.join(tracer.otel.exporters)}")
    return done


def load_trace_doc(ref: str, db: str | None) -> dict[str, Any]:
    """A Chrome trace from a file path, or stored for a run / sweep / benchmark id (or unique prefix)."""
    path = Path(ref)
    if path.is_file():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RepliscopeError(f"cannot read the trace file '{path}': {exc}") from exc
        if not isinstance(doc, dict):
            raise RepliscopeError(f"'{path}' is not a Chrome trace (a JSON object with 'traceEvents')")
        return doc
    from repliscope.store.repository import RunStore

    found = RunStore(db).load_trace(ref)
    if found is None:
        raise RepliscopeError(
            f"'{ref}' is neither a trace file nor the id of a stored trace (record one with "
            "--trace-level framework on evaluate / pitfalls / bench)"
        )
    return found


def _write_png(path: Path, png: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
    except OSError as exc:
        raise RepliscopeError(f"cannot write the plot '{path}': {exc}") from exc
    print(f"wrote {path}", file=sys.stderr)


@trace_app.command("summary")
def summary(
    ref: Annotated[
        str, typer.Argument(metavar="RUN|FILE", help="A run id (prefix) with a stored trace, or a Chrome trace file.")
    ],
    top: Annotated[int, typer.Option(min=1, help="Show the N slowest layers.")] = 15,
    plot: PlotOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Per-layer time (p50 self time, share of the model time), the slowest layers and per-op-type totals."""
    from repliscope.tracing.chrome import from_chrome
    from repliscope.tracing.summary import summarize

    try:
        s = summarize(from_chrome(load_trace_doc(ref, db)))
        if plot is not None:
            from repliscope.report.trace_sections import layer_time_chart

            _write_png(plot, layer_time_chart(s, top))
    except RepliscopeError as exc:
        fail(exc)
        return
    if as_json:
        emit_json(
            {
                "source": s.source,
                "inferences": s.inferences,
                "model_p50_ms": s.model_p50_ms,
                "spans_per_level": s.spans_per_level,
                "layers": [vars(layer) for layer in s.layers],
                "op_types": [{"op_type": t, "p50_ms": ms, "share": sh} for t, ms, sh in s.op_types],
            }
        )
        return
    console.print(
        f"{ref}: {s.source}, {s.inferences} inferences, model p50 {s.model_p50_ms:.3f} ms, "
        f"{len(s.layers)} layers; spans per level: " + ", ".join(f"{k} {v}" for k, v in s.spans_per_level.items())
    )
    print_table(
        f"top {min(top, len(s.layers))} layers (p50 self time)",
        ["layer", "op type", "calls", "p50 ms", "share"],
        [[x.layer, x.op_type, x.count, f"{x.p50_ms:.3f}", percent_text(x.share)] for x in s.top(top)],
    )
    print_table(
        "per op type",
        ["op type", "p50 ms (sum)", "share"],
        [[t, f"{ms:.3f}", percent_text(sh)] for t, ms, sh in s.op_types[:top]],
    )


def _layer_times(side: str, ref: str, db: str | None) -> Any:
    """The per-layer times of one side of ``trace compare``; an error names the side and its reference."""
    from repliscope.tracing.chrome import from_chrome
    from repliscope.tracing.summary import layer_times

    try:
        return layer_times(from_chrome(load_trace_doc(ref, db)))
    except RepliscopeError as exc:
        raise RepliscopeError(f"{side} ({ref}): {exc}") from exc


@trace_app.command("compare")
def compare(
    ref_a: Annotated[str, typer.Argument(metavar="RUN_A", help="Run id (prefix) or trace file.")],
    ref_b: Annotated[str, typer.Argument(metavar="RUN_B", help="Run id (prefix) or trace file.")],
    top: Annotated[int, typer.Option(min=1, help="Show the N layers with the largest time difference.")] = 15,
    plot: PlotOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Per-layer time of two runs aligned by layer (torch modules ↔ ONNX nodes): "layer X is 3.1× slower on B"."""
    from repliscope.tracing.compare import compare_layers

    try:
        a, b = (_layer_times(side, ref, db) for side, ref in (("A", ref_a), ("B", ref_b)))
        c = compare_layers(a, b)
        if plot is not None:
            from repliscope.report.trace_sections import layer_compare_chart

            _write_png(plot, layer_compare_chart(c, top))
    except RepliscopeError as exc:
        fail(exc)
        return
    name_a, name_b = f"A ({c.a_source})", f"B ({c.b_source})"
    if as_json:
        emit_json(
            {
                "a": {"ref": ref_a, "source": c.a_source, "model_p50_ms": c.a_model_ms},
                "b": {"ref": ref_b, "source": c.b_source, "model_p50_ms": c.b_model_ms},
                "mapping": c.mapping,
                "only_a": c.only_a,
                "only_b": c.only_b,
                "layers": [
                    {
                        "layer": x.key,
                        "label": x.label,
                        "covers": list(x.covers),
                        "a_ms": x.a_ms,
                        "b_ms": x.b_ms,
                        "ratio": None if math.isinf(x.ratio) else x.ratio,
                        "sentence": x.sentence(name_a, name_b),
                    }
                    for x in c.layers
                ],
            }
        )
        return
    ratio = c.b_model_ms / c.a_model_ms if c.a_model_ms else float("nan")
    console.print(
        f"model p50: {name_a} {c.a_model_ms:.3f} ms, {name_b} {c.b_model_ms:.3f} ms "
        f"(B/A {ratio:.2f}); {len(c.layers)} layers aligned ({c.mapping})"
    )
    rows = [[x.label, f"{x.a_ms:.3f}", f"{x.b_ms:.3f}", f"{x.ratio:.2f}"] for x in c.largest(top)]
    print_table("largest per-layer differences (p50 ms)", ["layer", "A", "B", "B/A"], rows)
    for x in c.largest(3):
        console.print(x.sentence(name_a, name_b), markup=False)
    for side, keys in (("A", c.only_a), ("B", c.only_b)):
        if keys:
            print(
                f"only in {side} ({len(keys)}): {', '.join(keys[:10])}{' …' if len(keys) > 10 else ''}", file=sys.stderr
            )


EXPORT_FORMATS = ("chrome", "otlp-json")
"""``trace export --format``: the Chrome trace / Perfetto JSON as stored, or OTLP/JSON for an OpenTelemetry backend."""


@trace_app.command("export")
def export(
    ref: Annotated[
        str,
        typer.Argument(
            metavar="ID|FILE", help="A run, sweep or benchmark id (prefix) with a stored trace, or a Chrome trace file."
        ),
    ],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="chrome (Chrome trace / Perfetto JSON, as stored) | otlp-json (OTLP/JSON: an "
            "ExportTraceServiceRequest for Jaeger, Tempo or an OpenTelemetry Collector; needs the tracing extra: "
            "pip install 'repliscope\\[tracing]').",
        ),
    ] = "chrome",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write here (default: standard output).")] = None,
    db: DbOption = None,
) -> None:
    """Write a stored trace as a file: Chrome / Perfetto JSON, or OTLP/JSON for an OpenTelemetry backend."""
    try:
        if fmt not in EXPORT_FORMATS:
            raise RepliscopeError(f"unknown trace format '{fmt}' (allowed: {', '.join(EXPORT_FORMATS)})")
        doc = load_trace_doc(ref, db)
        if fmt == "otlp-json":
            from repliscope.tracing.otlp_json import dumps, to_otlp_json

            text = dumps(to_otlp_json(doc)).decode()
        else:
            text = json.dumps(doc, ensure_ascii=False) + "\n"
        if out is None:
            sys.stdout.write(text)
            return
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise RepliscopeError(f"cannot write the trace '{out}': {exc}") from exc
    except RepliscopeError as exc:
        fail(exc)
        return
    print(f"wrote {out} ({fmt})", file=sys.stderr)
