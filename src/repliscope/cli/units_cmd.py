"""``repliscope units RUN [--against RUN_REF]``: unit evaluation of a stored detection run (a thin layer over
:mod:`repliscope.units`).

Prints the per-detection statistics (medians of IoU, dx/w, dy/h, log w'/w, log h'/h with bootstrap intervals),
the significant biases and the diagnosis; ``--report FILE.html|.md`` also writes the run's report with the
unit-evaluation section (overlays of the predicted, reference and ground-truth boxes). Exit code 1 when a bias
is significant or the diagnosis names a transform (of the comparison against RUN_REF when given, else against
the ground truth), 0 otherwise, 2 on errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from repliscope.cli.common import DbOption, JsonOption, emit_json, fail
from repliscope.cli.output import console, print_table
from repliscope.errors import RepliscopeError
from repliscope.number_text import percent_text

NAMES = {"iou": "IoU", "dx_w": "dx/w", "dy_h": "dy/h", "log_w": "log w'/w", "log_h": "log h'/h"}


def register(app: typer.Typer) -> None:
    """Add the ``units`` command to ``app``."""
    app.command("units")(units)


def units(
    run: Annotated[str, typer.Argument(help="A stored detection run (id or unique prefix).")],
    against: Annotated[
        str | None,
        typer.Option(help="A reference run on the same samples (e.g. the original implementation's detections)."),
    ] = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            help="The data the run was evaluated on, for records that store "
            "no ground truth (checked against the record's identity)."
        ),
    ] = None,
    input_size: Annotated[
        tuple[int, int] | None, typer.Option(help="Model input H W, for the letterbox diagnosis (default: fitted).")
    ] = None,
    replicates: Annotated[int, typer.Option(min=10, help="Bootstrap replicates (over images).")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    report: Annotated[
        Path | None,
        typer.Option(
            help="Also write the run's report with the units section (against "
            "RUN_REF when given): FILE.html, or FILE.md."
        ),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Unit evaluation of a detection run: per-detection biases against ground truth or a reference run."""
    from repliscope.store.repository import RunStore
    from repliscope.units.runs import run_units

    try:
        store = RunStore(db)
        record = store.get(run)
        reference = store.get(against) if against else None
        from repliscope.tasks.base import truth_of

        if truth_of(record.task) == "masks":
            from repliscope.cli.segmentation_units import segmentation_units

            segmentation_units(record, reference, replicates, seed, report, as_json)
            return
        data = None
        if dataset is not None:
            from repliscope.datasets import resolve_dataset

            n = record.dataset.get("num_samples")  # a run on the first N samples (--limit) has their identity
            data = resolve_dataset(dataset, limit=n if isinstance(n, int) and n > 0 else None)
        result = run_units(record, reference, dataset=data, replicates=replicates, seed=seed, input_size=input_size)
        if report is not None:
            if report.suffix.lower() not in (".html", ".md"):
                raise RepliscopeError(f"--report {report}: the file name must end in .html or .md")
            if record.ground_truth is None:
                raise RepliscopeError("--report needs a record that stores its ground truth")
            from repliscope.report.units_sections import write_units_report

            write_units_report(record, reference, report)
    except RepliscopeError as exc:
        fail(exc)
        return
    primary = result.primary
    flagged = bool(primary.significant or primary.diagnosis.box or primary.diagnosis.classes)
    if as_json:
        emit_json({**result.to_json(), "flagged": flagged})
    else:
        console.print(
            f"[bold]run[/] {result.run_id}"
            + (f"  [bold]reference[/] {result.reference_id}" if result.reference_id else "")
        )
        print_units(result.truth, "against the ground truth")
        if result.against_reference is not None:
            print_units(result.against_reference, f"against reference run {(result.reference_id or '')[:12]}")
        if result.paired:
            console.print(_paired_line(result.paired), markup=False, soft_wrap=True)
        if report is not None:
            console.print(f"report written to {report}", markup=False, soft_wrap=True)
    if flagged:
        raise typer.Exit(code=1)


def _num(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:+.{digits}f}"


def print_units(report: Any, what: str) -> None:
    """Statistics table, significant biases, AP and confusion, diagnosis."""
    boxes = "ground-truth" if what == "against the ground truth" else "reference"
    console.print(
        f"units {what}: {report.n_matched} of {report.n_reference} {boxes} boxes matched "
        f"({percent_text(report.matched_fraction)}), {report.n_predictions} predictions, {report.n_images} images",
        markup=False,
        soft_wrap=True,
    )
    print_table(
        f"medians {what}, bootstrap over images ({report.replicates} replicates)",
        ["statistic", "median", "95 % interval", "n", "bias"],
        [
            [
                NAMES[s.name],
                _num(s.median),
                f"[{_num(s.ci_low)}, {_num(s.ci_high)}]",
                s.n,
                "significant" if s.significant else "",
            ]
            for s in report.stats
        ],
    )
    for s in report.significant:
        console.print(
            f"significant bias: {NAMES[s.name]} median {_num(s.median)} "
            f"(95 % interval {_num(s.ci_low)} .. {_num(s.ci_high)}, {s.n} matches)",
            markup=False,
            soft_wrap=True,
        )
    if not report.significant:
        console.print("no significant bias (every interval contains 0)")
    if report.ap_class_aware is not None and report.ap_class_agnostic is not None:
        console.print(f"AP class-aware {report.ap_class_aware:.4f}, class-agnostic {report.ap_class_agnostic:.4f}")
    if report.confusion:
        top = ", ".join(f"{a}->{b}: {c}" for a, b, c in report.confusion if a != b)[:200]
        console.print(
            f"class-agnostic matches with another class: {percent_text(report.off_diagonal)}"
            + (f" ({top})" if top else ""),
            markup=False,
            soft_wrap=True,
        )
    console.print(f"diagnosis ({report.diagnosis.pairing} pairs, {report.diagnosis.n_pairs}):", markup=False)
    for line in report.diagnosis.summary:
        console.print(f"  {line}", markup=False, soft_wrap=True)


def _paired_line(p: dict[str, Any]) -> str:
    line = (
        f"paired: {percent_text(p['matched_fraction'])} of the reference detections matched"
        + (f" (mean IoU {p['mean_iou']:.4f})" if p.get("mean_iou") is not None else "")
        + f", {p['flipped_images']} of {p['n_samples']} images with another matched set"
    )
    if "delta_ap" in p:
        line += (
            f"; AP {p['ap_variant']:.4f} vs reference {p['ap_reference']:.4f}: ΔAP {p['delta_ap']:+.4f} "
            f"[{p['delta_ap_ci_low']:+.4f}, {p['delta_ap_ci_high']:+.4f}]"
        )
    return line
