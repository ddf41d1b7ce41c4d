"""``repliscope units RUN`` for a semantic segmentation run: the mask unit evaluation
(:mod:`repliscope.units.segmentation`) printed or as JSON, and the run's report with the masks section."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from repliscope.cli.common import emit_json
from repliscope.cli.output import console, print_table
from repliscope.errors import RepliscopeError
from repliscope.evaluation.record import EvaluationRecord

NAMES = {
    "iou": "foreground IoU per image",
    "band_error": "error rate, boundary band",
    "interior_error": "error rate, interior",
    "displacement_dy": "displacement dy (px)",
    "displacement_dx": "displacement dx (px)",
}


def segmentation_units(
    record: EvaluationRecord,
    reference: EvaluationRecord | None,
    replicates: int,
    seed: int,
    report: Path | None,
    as_json: bool,
) -> None:
    """Print (or emit) the mask units of ``record`` against its truth or ``reference``; exit 1 on a diagnosed
    displacement."""
    from repliscope.units.segmentation import mask_units

    if reference is not None and [s.sample_id for s in reference.samples] != [s.sample_id for s in record.samples]:
        raise RepliscopeError("--against: the reference run evaluated other samples (or in another order)")
    units = mask_units(
        record.samples, reference.samples if reference is not None else None, replicates=replicates, seed=seed
    )
    if not units.images:
        raise RepliscopeError(
            f"run {record.run_id[:12]} keeps no masks (failed samples, or masks too large to keep): nothing to evaluate"
        )
    if report is not None:
        if report.suffix.lower() not in (".html", ".md"):
            raise RepliscopeError(f"--report {report}: the file name must end in .html or .md")
        from repliscope.report.build import build_run_view
        from repliscope.report.html import render_view_html
        from repliscope.report.markdown import render_view_markdown
        from repliscope.report.sections import embed_sink
        from repliscope.report.segmentation_sections import with_segmentation

        view = with_segmentation(build_run_view(record), record, embed_sink, reference=reference)
        text = render_view_markdown(view) if report.suffix.lower() == ".md" else render_view_html(view)
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(text, encoding="utf-8")
    flagged = bool(units.diagnosis)
    if as_json:
        emit_json(
            {
                "run_id": record.run_id,
                "reference_id": reference.run_id if reference else None,
                "against": units.against,
                "band": units.band,
                "skipped": units.skipped,
                "stats": [dataclasses.asdict(s) for s in units.stats],
                "diagnosis": units.diagnosis,
                "sizes": [dataclasses.asdict(b) for b in units.sizes],
                "images": [dataclasses.asdict(u) for u in units.images],
                "flagged": flagged,
            }
        )
    else:
        console.print(
            f"[bold]run[/] {record.run_id}"
            + (f"  [bold]reference[/] {reference.run_id}" if reference else "")
            + f": masks against {units.against}, "
            f"{len(units.images)} images ({units.skipped} without kept masks)",
            highlight=False,
        )
        print_table(
            f"medians over images, 95 % bootstrap intervals; boundary band {units.band} px",
            ["statistic", "median", "interval", "n"],
            [
                [
                    NAMES[s.name],
                    "-" if s.median is None else f"{s.median:+.4f}",
                    "-" if s.ci_low is None else f"[{s.ci_low:+.4f}, {s.ci_high:+.4f}]",
                    s.n,
                ]
                for s in units.stats
            ],
        )
        if units.sizes:
            print_table(
                "object recall by size (COCO area ranges; mean over objects, 95 % bootstrap over images)",
                ["size", "objects", "recall", "interval"],
                [
                    [
                        b.name,
                        b.n_objects,
                        "-" if b.recall is None else f"{b.recall:.4f}",
                        "-" if b.ci_low is None else f"[{b.ci_low:.4f}, {b.ci_high:.4f}]",
                    ]
                    for b in units.sizes
                ],
            )
        for line in units.diagnosis or ["no systematic displacement of the masks"]:
            console.print(f"diagnosis {line}", highlight=False)
        if report is not None:
            console.print(f"wrote {report}")
    if flagged:
        raise typer.Exit(code=1)
