"""``repliscope diff MANIFEST --pipeline FILE.py:NAME``: the CLI side of :mod:`repliscope.diff.pipeline.driver`.

Exit 0 when the candidate matches the manifest's pre-processing on every sample, 1 on a difference (or a sample
the candidate failed on), 2 on bad input (manifest, --pipeline that does not import, no sample comparable)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from repliscope.errors import RepliscopeError
from repliscope.number_text import percent_text

if TYPE_CHECKING:
    from repliscope.diff.pipeline.driver import PipelineDiffResult

console = Console()


@dataclass(frozen=True)
class PipelineOptions:
    pipeline: str
    dataset: str
    limit: int | None
    tolerance_k: float | None
    model_effect: bool
    model_runtime: str | None
    heatmaps: Path | None
    threads: int
    batch: int
    db: str | None
    store: bool
    as_json: bool


def run_pipeline_diff(manifest: str, opts: PipelineOptions) -> None:
    """Run the diff, print it (table or ``{"pipeline_diff": ...}``), store it, exit 0 / 1 / 2."""
    try:
        result, png, diff_id = _run(manifest, opts)
    except RepliscopeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(code=2) from None
    if opts.as_json:
        sys.stdout.write(json.dumps({"pipeline_diff": result.model_dump(mode="json")}, indent=2) + "\n")
    else:
        print_pipeline_diff(result)
        if opts.heatmaps is not None and png is not None:
            console.print(f"heatmaps written to {opts.heatmaps}")
        if diff_id is not None:
            console.print(f"stored as diff {diff_id[:12]} (repliscope diffs show {diff_id[:12]})")
    if not result.passed:
        raise typer.Exit(code=1)


def _run(manifest: str, opts: PipelineOptions) -> tuple[PipelineDiffResult, bytes | None, str | None]:
    from repliscope.datasets import resolve_dataset
    from repliscope.diff.pipeline.candidate import load_candidate
    from repliscope.diff.pipeline.driver import DEFAULT_K, diff_pipeline
    from repliscope.manifest.loader import load_manifest

    if not Path(manifest).is_file():
        raise RepliscopeError(f"'{manifest}' is not a manifest file")
    loaded = load_manifest(manifest)
    candidate = load_candidate(opts.pipeline)
    data = resolve_dataset(opts.dataset)
    samples = list(data.samples[: opts.limit] if opts.limit else data.samples)
    if not samples:
        raise RepliscopeError(f"dataset '{opts.dataset}' has no sample")
    effect = None
    if opts.model_effect:
        from repliscope.diff.pipeline.effect import ModelEffect
        from repliscope.runtimes import native_runtime

        runtime = opts.model_runtime or native_runtime(loaded.manifest.framework.name)
        effect = ModelEffect(loaded, runtime, opts.pipeline, data, samples, threads=opts.threads, batch_size=opts.batch)
    worst: list = []
    result = diff_pipeline(
        loaded,
        candidate,
        samples,
        data.name,
        k=opts.tolerance_k or DEFAULT_K,
        on_pair=effect.add if effect is not None else None,
        worst=worst,
    )
    if effect is not None:
        result.model_effect = effect.result()
    png = None
    if worst:
        from repliscope.diff.pipeline.heatmap import heatmap_png

        png = heatmap_png(worst, loaded.manifest.inputs[0].layout)
        if opts.heatmaps is not None:
            opts.heatmaps.write_bytes(png)
    diff_id = None
    if opts.store:
        from repliscope.errors import StoreError
        from repliscope.store.diffs import save_diff

        try:
            diff_id = save_diff(opts.db, result.model_dump(mode="json"), manifest_name=loaded.manifest.name, figure=png)
        except StoreError as exc:
            print(f"warning: the diff was not stored: {exc}", file=sys.stderr)
    return result, png, diff_id


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def print_pipeline_diff(r: PipelineDiffResult) -> None:
    """Human-readable pipeline diff: output shapes, errors, verdict and diagnosis, stages, timing, model effect."""
    colour = {"match": "green", "explained": "yellow"}.get(r.verdict, "red")
    console.print(
        f"[bold]pipeline diff[/]: {r.candidate} ({r.candidate_kind}) vs {r.manifest_name} pre-processing, "
        f"{r.samples} samples of {r.dataset} compared" + (f", {r.failed} not compared" if r.failed else "")
    )
    console.print(f"output    {r.output_message}")
    for note in r.notes:
        console.print(f"[dim]note: {note}[/]")
    frac = "-" if r.fraction_differing is None else percent_text(r.fraction_differing)
    console.print(
        f"errors    max |err| {_f(r.max_abs_error)}, mean |err| {_f(r.mean_abs_error)}, values differing "
        f"{frac} (tolerance {r.tolerance:.3g}: {r.tolerance_rule})"
    )
    d = r.diagnosis
    message = d.message.removeprefix(f"{r.verdict}: ")  # the verdict is printed once, in its colour
    console.print(f"verdict   [{colour}]{r.verdict}[/]: {message}")
    for hint in d.hints:
        console.print(f"hint      {hint}")
    if d.candidates and r.verdict != "match":  # only variants that bring the output closer are candidates
        console.print(
            "closest   "
            + "; ".join(f"{c.variant} ({_f(c.max_abs_error)})" for c in d.candidates[:5])
            + f"  [{d.singles} variants and degrees, {d.pairs} pairs searched]"
        )
    if r.stages:
        table = Table(title="stages (each against the manifest op playing its role)")
        for col in ("stage", "manifest op", "output", "max |err|", "differing", "ok", "note"):
            table.add_column(col, overflow="fold")
        for s in r.stages:
            ok = "" if s.within_tolerance is None else ("yes" if s.within_tolerance else "[red]NO[/]")
            table.add_row(
                s.stage,
                s.compared_with or "-",
                s.output,
                _f(s.max_abs_error),
                "-" if s.fraction_differing is None else percent_text(s.fraction_differing),
                ok,
                s.note,
            )
        console.print(table)
        if r.first_divergent_stage:
            console.print(f"first divergent stage: [red]{r.first_divergent_stage}[/]")
    bad = [p for p in r.per_sample if p.error]
    for p in bad[:10]:
        console.print(f"[yellow]not compared[/] {p.sample_id}: {p.error}")
    if len(bad) > 10:
        console.print(f"[yellow]... {len(bad) - 10} more not compared (--json lists all)[/]")
    if r.worst_samples and r.verdict != "match":
        console.print(f"worst     {', '.join(r.worst_samples)}")
    t = r.timing
    if t.samples_timed:
        console.print(
            f"timing    manifest {t.reference_ms_per_image:.2f} ms/image, candidate "
            f"{t.candidate_ms_per_image:.2f} ms/image, ratio {t.ratio:.2f} ({t.samples_timed} images, "
            f"{t.method})"
        )
    if r.model_effect is not None:
        from repliscope.cli.diff_output import print_task_diff

        print_task_diff(r.model_effect)
