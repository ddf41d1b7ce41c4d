"""``repliscope bench``: performance scenarios (LoadGen semantics) on a manifest."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from repliscope.backends import runtime_names
from repliscope.cli.common import DbOption, JsonOption, dataset_help, emit_json, fail
from repliscope.cli.label_rules import label_rule_choices
from repliscope.errors import RepliscopeError
from repliscope.manifest.schema import SCENARIOS

_VARIADIC = {"--runtimes": "--runtime", "--threads": "--threads"}


def expand_variadic(args: list[str], runtime_names: set[str]) -> list[str]:
    """``--runtimes a b c`` -> ``--runtime a --runtime b --runtime c`` and ``--threads 1 2`` -> ``--threads 1
    --threads 2``: following words are taken while they are runtime names (or unknown words that are not a
    manifest, so a misspelt runtime is reported as an unknown runtime) / integers, so the MANIFEST argument may
    still come after."""
    out: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        target = _VARIADIC.get(word)
        if target is None or i + 1 >= len(args):
            out.append(word)
            i += 1
            continue
        takes = (lambda w: w in runtime_names or _runtime_like(w)) if word == "--runtimes" else str.isdigit
        values = [args[i + 1]]  # the first value is taken as given (click reports a bad one)
        j = i + 2
        while j < len(args) and takes(args[j]):
            values.append(args[j])
            j += 1
        for v in values:
            out += [target, v]
        i = j
    return out


def _runtime_like(word: str) -> bool:
    """Not an option and not the manifest (a YAML name or an existing path): a word meant as a runtime."""
    return not word.startswith("-") and Path(word).suffix.lower() not in (".yaml", ".yml") and not Path(word).exists()


class _BenchCommand(TyperCommand):
    """Expands the variadic ``--runtimes`` / ``--threads`` before click parses the arguments."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from repliscope.runtimes.base import RUNTIMES

        return super().parse_args(ctx, expand_variadic(args, set(RUNTIMES.names())))


_SCENARIO_OPTIONS = {
    "--target-qps": ("server",),
    "--latency-bound-ms": ("server",),
    "--find-peak-qps": ("server",),
    "--samples-per-query": ("multi-stream", "offline"),
    "--batch-size": ("offline",),
}


def check_scenario_options(scenario: str, given: dict[str, Any]) -> None:
    """An unknown scenario, or an option of another scenario, is an error (never silently ignored)."""
    if scenario not in SCENARIOS:
        raise RepliscopeError(f"unknown scenario '{scenario}' (allowed: {', '.join(SCENARIOS)})")
    for option, value in given.items():
        allowed = _SCENARIO_OPTIONS[option]
        if value is not None and scenario not in allowed:
            raise RepliscopeError(f"{option} belongs to --scenario {' / '.join(allowed)}, not {scenario}")


def _trace_path(base: Path, runtime: str, threads: int, many: bool) -> Path:
    return base.with_name(f"{base.stem}-{runtime}-t{threads}{base.suffix}") if many else base


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def print_benchmark(rec: Any) -> None:
    """One benchmark record as text: percentiles with intervals, throughput, early stopping, overhead, claims."""
    from repliscope.cli.output import console, print_table

    s = rec.settings
    extra = f", {s['target_qps']:.4g} QPS, bound {s['latency_bound_ms']} ms" if rec.scenario == "server" else ""
    console.print(
        f"[bold]{rec.manifest.name}[/] {rec.scenario} on {rec.runtime['runtime']} "
        f"({rec.runtime.get('framework')} {rec.runtime.get('framework_version')}), {rec.threads} "
        f"thread{'s' if rec.threads != 1 else ''}, "
        f"batch {s['batch_size']}{extra}; {rec.hardware.get('cpu_model')}"
    )
    rows = [
        [k, _ms(q.value), f"[{_ms(q.low)}, {_ms(q.high)}]", f"{q.coverage:.3f}"]
        for k, q in rec.latency.percentiles.items()
    ]
    rows.append(["mean", _ms(rec.latency.mean), "", ""])
    print_table("latency (ms), 95 % distribution-free intervals", ["percentile", "ms", "interval", "coverage"], rows)
    ci = rec.throughput_ci
    console.print(
        f"throughput {rec.throughput_samples_per_second:.2f} samples/s"
        + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
        + f"; {rec.queries} queries, {rec.samples} samples in {rec.duration_seconds:.2f} s"
    )
    es = rec.early_stopping
    if es is not None and es.passed is not None:
        console.print(
            f"early stopping: {es.overlatency} over-latency queries, {es.needed} needed, ran {es.queries}:"
            f" {'passed' if es.passed else 'not passed'}"
        )
    elif es is not None:
        console.print(
            f"early stopping p{es.percentile * 100:g} estimate: "
            + (
                f"{es.estimate_ms:.3f} ms ({es.discarded} highest discarded)"
                if es.estimate_ms is not None
                else f"needs {es.min_queries} queries"
            )
        )
    if rec.peak is not None:
        console.print(
            "peak search: "
            + ", ".join(
                f"{p.qps:.3g} QPS p99 {p.p99_ms:.3g} ms {'ok' if p.meets_bound else 'over'}" for p in rec.peak.tried
            )
        )
    o = rec.overhead
    console.print(
        f"harness overhead (no-op runtime, {o.queries} queries): {o.latency_p50_us:.1f} µs p50 inside the "
        f"latency, {o.cycle_mean_us:.1f} µs per query cycle; without the post-processing ops "
        f"{o.loop_p50_us:.1f} µs / {o.loop_cycle_mean_us:.1f} µs"
    )
    failed = rec.dataset.get("failed_samples") or {}
    if failed:
        console.print(
            f"[yellow]warning:[/] {len(failed)} samples could not be pre-processed and are not in the "
            f"library (first: {next(iter(failed.items()))})"
        )
    console.print("[green]valid[/]" if rec.valid else "[yellow]not valid:[/] " + "; ".join(rec.invalid_reasons))
    for c in rec.claims:
        console.print(f"claim {c.metric} {c.claimed:g} ({c.claim_dataset}): [bold]{c.verdict}[/] - {c.reason}")


def bench(
    manifest: Annotated[Path, typer.Argument(help="Model manifest (YAML).")],
    runtime: Annotated[
        list[str] | None,
        typer.Option(
            "--runtime",
            help=f"{' | '.join(runtime_names())} (repeatable; --runtimes A B C takes "
            "several; default: the manifest's native one).",
        ),
    ] = None,
    threads: Annotated[
        list[int] | None,
        typer.Option(
            "--threads", min=1, help="Intra-op threads (repeatable; --threads 1 2 takes several; default 1, recorded)."
        ),
    ] = None,
    scenario: Annotated[str, typer.Option(help=" | ".join(SCENARIOS))] = "single-stream",
    dataset: Annotated[str, typer.Option(help=dataset_help())] = "foolbox_imagenet",
    label_rule: Annotated[
        str | None,
        typer.Option(
            help=f"{label_rule_choices(labels_csv=False)} "
            "(default: detected; labels do not change timings, use "
            "'none' for an unlabelled folder)."
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N samples in the library.")] = None,
    timed_preprocess: Annotated[
        bool,
        typer.Option(
            help="Time decode + pre-processing in each query (default: pre-processed before timing, as LoadGen)."
        ),
    ] = False,
    target_qps: Annotated[float | None, typer.Option(min=0.000001, help="server: Poisson arrival rate.")] = None,
    latency_bound_ms: Annotated[float | None, typer.Option(min=0.000001, help="server: the p99 latency bound.")] = None,
    find_peak_qps: Annotated[
        bool, typer.Option(help="server: binary search of the highest QPS whose p99 meets --latency-bound-ms.")
    ] = False,
    min_duration: Annotated[float, typer.Option(min=0, help="Seconds the measured load lasts at least.")] = 10.0,
    min_queries: Annotated[
        int, typer.Option(min=1, help="Queries issued at least (early stopping needs 64 for p90, 662 for p99).")
    ] = 1024,
    samples_per_query: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="multi-stream: samples per query (default "
            "8); offline: samples of the one query (default --min-queries).",
        ),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(min=1, help="offline: inference batch (default 8; 1 for a model that takes one image at a time)."),
    ] = None,
    warmup_queries: Annotated[int, typer.Option(min=0, help="Untimed queries first.")] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the sample order and the server arrivals.")] = 0,
    trace_level: Annotated[str, typer.Option(help="none | application | model | framework | library")] = "none",
    trace_out: Annotated[
        Path | None,
        typer.Option(
            help="Write the Chrome trace / Perfetto JSON here (a matrix: "
            "one file per configuration, -RUNTIME-tN added)."
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            help="Also write a report of the run(s) (latency ECDF per configuration, claims, provenance): .html or .md."
        ),
    ] = None,
    allow_outside_paths: Annotated[
        bool, typer.Option(help="Allow source/label paths outside the manifest's folder.")
    ] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Benchmark a manifest in a LoadGen scenario: latency percentiles with intervals, throughput, early stopping,
    the harness's own overhead; a matrix of runtimes x threads prints ratios against the fastest."""
    from repliscope.bench.matrix import ratio_rows, run_matrix
    from repliscope.bench.run import BenchOptions, default_offline_batch, make_tracer
    from repliscope.bench.scenarios import ScenarioSettings
    from repliscope.cli.output import console, print_table
    from repliscope.datasets import resolve_dataset
    from repliscope.job_execution import RunOptions
    from repliscope.manifest.loader import load_manifest
    from repliscope.runtimes import native_runtime
    from repliscope.runtimes.base import RUNTIMES
    from repliscope.store.repository import RunStore

    try:
        if report is not None and report.suffix not in (".html", ".md"):
            raise RepliscopeError(f"--report {report}: the file name must end in .html or .md")
        check_scenario_options(
            scenario,
            {
                "--target-qps": target_qps,
                "--latency-bound-ms": latency_bound_ms,
                "--find-peak-qps": find_peak_qps or None,
                "--samples-per-query": samples_per_query,
                "--batch-size": batch_size,
            },
        )
        if trace_out is not None and trace_level == "none":
            raise RepliscopeError("--trace-out needs a --trace-level other than none")
        if find_peak_qps and target_qps is not None:
            raise RepliscopeError("--find-peak-qps searches the rate itself: drop --target-qps")
        if scenario == "server" and not find_peak_qps and target_qps is None:
            raise RepliscopeError("--scenario server needs --target-qps (or --find-peak-qps)")
        if scenario == "server" and latency_bound_ms is None:
            raise RepliscopeError("--scenario server needs --latency-bound-ms (LoadGen judges p99 against it)")
        loaded = load_manifest(manifest)
        for warning in loaded.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        runtimes = list(dict.fromkeys(runtime or [native_runtime(loaded.manifest.framework.name)]))
        for name in runtimes:  # every runtime of a matrix is checked before the first one runs
            if name not in RUNTIMES:
                RUNTIMES.get(name)  # raises, naming the allowed ones
        thread_counts = list(dict.fromkeys(threads or [1]))
        spq = samples_per_query or (8 if scenario == "multi-stream" else min_queries)
        settings = ScenarioSettings(
            scenario=scenario,
            min_duration_s=min_duration,
            min_queries=min_queries,
            warmup_queries=warmup_queries,
            samples_per_query=spq if scenario in ("multi-stream", "offline") else 1,
            batch_size=(batch_size or default_offline_batch(loaded.manifest.inputs[0].shape))
            if scenario == "offline"
            else 1,
            target_qps=1.0 if find_peak_qps else target_qps,  # the search replaces it by the peak it finds
            latency_bound_ms=latency_bound_ms,
            seed=seed,
        )
        make_tracer(trace_level)  # an unknown level fails before anything runs
        options = BenchOptions(
            scenario=settings, timed_preprocess=timed_preprocess, trace_level=trace_level, find_peak_qps=find_peak_qps
        )
        # resolved once, as evaluate resolves its flags: the first runtime (a flag or the manifest's), each origin
        run_settings = RunOptions(allow_outside_paths=allow_outside_paths).run_settings(
            runtimes[0] if runtime else None, manifest=loaded, source="cli"
        )
        data = resolve_dataset(dataset, label_rule, limit=limit)
        store = RunStore(db)
        # progress as plain lines: an animated spinner would take CPU from the measured runtime
        result = run_matrix(
            loaded,
            data,
            runtimes,
            thread_counts,
            options,
            settings=run_settings,
            on_config=None if as_json else _announce,
        )
        many = len(result.records) > 1
        traces: list[dict[str, Any] | None] = []
        trace_notes: dict[str, list[str]] = {}
        for rec, tracer in zip(result.records, result.tracers, strict=True):
            store.save_benchmark(rec)
            if trace_level != "none":
                doc = tracer.chrome_trace()
                traces.append(doc)
                store.save_trace(rec.benchmark_id, trace_level, doc)
                spans = sum(1 for e in doc["traceEvents"] if e["ph"] == "X")
                notes = trace_notes[rec.benchmark_id] = [
                    f"trace ({trace_level}, {spans} spans) stored; repliscope trace summary {rec.benchmark_id[:12]}"
                ]
                if trace_out is not None:
                    written = tracer.write_chrome_trace(
                        _trace_path(trace_out, rec.runtime["runtime"], rec.threads, many)
                    )
                    notes.append(f"wrote {written} (open in https://ui.perfetto.dev or chrome://tracing)")
        if report is not None:
            write_bench_report(result.records, report, traces or None)
    except (RepliscopeError, OSError) as exc:
        fail(exc)
        return
    rows = ratio_rows(result.records)
    if as_json:
        if many:
            emit_json({"matrix_id": result.matrix_id, "results": [r.summary() for r in result.records], "ratios": rows})
        else:
            emit_json(result.records[0].summary())
        return
    for rec in result.records:
        print_benchmark(rec)
        console.print(f"stored as benchmark [bold]{rec.benchmark_id}[/]")
        for note in trace_notes.get(rec.benchmark_id, []):
            console.print(note, markup=False)
        console.print()
    if report is not None:
        console.print(f"wrote benchmark report {report}")
    if many:
        print_table(
            f"matrix {result.matrix_id}: ratio to the fastest ({rows[0]['metric']})",
            ["runtime", "threads", rows[0]["metric"], "ratio", "p50 ms", "samples/s"],
            [
                [
                    r["runtime"],
                    r["threads"],
                    f"{r['value']:.3f}",
                    f"{r['ratio_to_fastest']:.2f}x",
                    f"{r['p50_ms']:.3f}",
                    f"{r['throughput_samples_per_second']:.1f}",
                ]
                for r in rows
            ],
        )


def write_bench_report(records: list[Any], path: Path, traces: list[dict[str, Any] | None] | None = None) -> None:
    """HTML (self-contained) or Markdown (images embedded) report of benchmark records; ``traces`` (the Chrome
    trace of each record, None for one not traced) adds their per-layer charts."""
    from repliscope.report.bench_sections import build_benchmark_view

    view = build_benchmark_view(records, traces=traces)
    if path.suffix == ".html":
        from repliscope.report.html import render_view_html

        text = render_view_html(view)
    else:
        from repliscope.report.markdown import render_view_markdown

        text = render_view_markdown(view)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _announce(runtime: str, threads: int) -> None:
    print(f"benchmarking {runtime} with {threads} thread{'s' if threads != 1 else ''} ...", file=sys.stderr)


def register(app: typer.Typer) -> None:
    """Add the ``bench`` command to ``app``."""
    app.command("bench", cls=_BenchCommand)(bench)
