"""``repliscope diff MANIFEST --loss CANDIDATE``: a re-implemented loss against a registered original
(``--original darknet_yolo``: libdarknet's own forward_yolo_layer) on the same network outputs and targets: the
model's real outputs on a detection dataset (``--dataset D --limit N``) or seeded random ones (``--random SEED``).

The candidate is the user's own code on their own command line (``FILE.py:NAME`` or ``module:NAME``,
:mod:`repliscope.user_code`); an original that names a provisioned stack runs there (:mod:`repliscope.stacks.call`).
Exit 0: the candidate reproduces the original; 1: it does not (the first divergent quantity and, when one
explains it, the loss pitfall are printed); 2: an error, in one line (a candidate that raises, returns NaN/Inf, a
non-scalar total or a misshapen gradient), with nothing stored.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from repliscope.cli.output import console
from repliscope.errors import RepliscopeError

if TYPE_CHECKING:
    from repliscope.diff.loss.driver import LossDiffResult

RANDOM_IMAGES = 2
"""Images of a ``--random`` diff without ``--limit``."""
DIFF_DEFAULT_DATASET = "foolbox_imagenet"
"""``repliscope diff``'s default ``--dataset`` (any other value was given, and contradicts ``--random``)."""


@dataclass(frozen=True)
class LossOptions:
    candidate: str
    original: str
    dataset: str
    limit: int | None
    random_seed: int | None
    tolerance_k: float | None
    threads: int
    db: str | None
    store: bool
    as_json: bool


def run_loss_diff_cli(manifest: str, opts: LossOptions) -> None:
    """Run, print (table or ``{"loss_diff": ...}``), store; exit 0, 1 or 2."""
    from repliscope.cli.diff_output import finish_diff

    finish_diff("loss_diff", lambda: _run(manifest, opts), print_loss_diff, opts.as_json)


def _run(manifest: str, opts: LossOptions) -> tuple[LossDiffResult, str | None]:
    from rich.progress import Progress

    from repliscope.diff.loss.contract import LOSSES
    from repliscope.diff.loss.driver import run_loss_diff
    from repliscope.diff.loss.sources import darknet_inputs, load_yolo_model, random_inputs
    from repliscope.diff.tolerance import DEFAULT_K
    from repliscope.stacks.call import run_loss
    from repliscope.user_code import load_user_object

    if opts.random_seed is not None and opts.dataset != DIFF_DEFAULT_DATASET:
        raise RepliscopeError(
            f"--random {opts.random_seed} draws the outputs and the boxes; --dataset {opts.dataset} would give real "
            "ones: give one of them"
        )
    spec = LOSSES.get(opts.original)
    candidate = load_user_object(opts.candidate, "--loss")
    if not callable(candidate):
        raise RepliscopeError(
            f"--loss {opts.candidate}: {type(candidate).__name__} is not callable (a LossFunction: LossInputs -> "
            "LossResult, docs: guides/loss-diff)"
        )
    if spec.family != "yolo":
        raise RepliscopeError(
            f"--original {opts.original}: a {spec.family} loss; repliscope diff MANIFEST --loss builds YOLO inputs "
            "from a Darknet manifest (yolo originals: "
            + ", ".join(n for n in LOSSES.names() if LOSSES.get(n).family == "yolo")
            + ")"
        )
    model, name = load_yolo_model(manifest)
    if opts.random_seed is not None:
        prepared = random_inputs(model, opts.random_seed, opts.limit or RANDOM_IMAGES)
        source, dataset = f"random seed {opts.random_seed}", ""
    else:
        with Progress(console=console, transient=True, disable=opts.as_json) as progress:
            task = progress.add_task("network outputs (libdarknet)", total=opts.limit)
            prepared = darknet_inputs(
                model, opts.dataset, opts.limit, threads=opts.threads, on_image=lambda: progress.advance(task)
            )
        source, dataset = "dataset", opts.dataset
    result = run_loss_diff(
        prepared.inputs,
        spec,
        lambda inputs: run_loss(spec, inputs),
        opts.candidate,
        candidate,
        k=opts.tolerance_k or DEFAULT_K,
        source=source,
        manifest=name,
        dataset=dataset,
    )
    result.notes = prepared.notes + [f"failed sample {f['sample']}: {f['error']}" for f in prepared.failed]
    diff_id = None
    if opts.store:
        from repliscope.errors import StoreError
        from repliscope.store.diffs import save_diff

        try:
            diff_id = save_diff(opts.db, result.model_dump(mode="json"), manifest_name=name)
        except StoreError as exc:
            print(f"warning: the diff was not stored: {exc}", file=sys.stderr)
    return result, diff_id


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def print_loss_diff(result: LossDiffResult) -> None:
    """The loss diff as tables: values, gradients, matching, worst images, diagnosis."""
    from rich.table import Table

    console.print(
        f"loss diff: {result.candidate} vs {result.reference} ({result.origin}), {result.samples} images "
        f"({result.source}{', ' + result.dataset if result.dataset else ''})"
    )
    table = Table("value", "original", "candidate", "|err|", "tolerance", "")
    for row in [result.total, *result.components]:
        mark = "ok" if row.passed else "DIFFERS"
        table.add_row(
            row.name, _num(row.original), _num(row.candidate), _num(row.abs_error), f"{row.tolerance:.3g}",
            f"{mark} {row.note}".strip(),
        )  # fmt: skip
    console.print(table)
    table = Table("gradient of", "max |err|", "ulp", "tolerance", "worst at", "")
    for g in result.gradients:
        at = f"{g.worst_entry or g.worst_at}: {g.original_value:.6g} vs {g.candidate_value:.6g}"
        if g.entries_over:
            at += f" (over tolerance: {', '.join(g.entries_over)})"
        table.add_row(
            g.output, f"{g.max_abs:.3g}", f"{g.ulp:.3g}", f"{g.tolerance:.3g}", at, "ok" if g.passed else "DIFFERS"
        )
    console.print(table)
    if result.matching is not None:
        bad = [m for m in result.matching if not m.passed]
        pairs = sum(m.pairs for m in result.matching)
        console.print(f"matching: {pairs} pairs, {len(bad)} images differ")
        for m in bad[:5]:
            console.print(f"  {m.image}: only original {m.only_original[:3]}, only candidate {m.only_candidate[:3]}")
    else:
        console.print(result.matching_note)
    if not result.passed:
        table = Table("worst image", "original", "candidate", "|err|", "gradient max |err|")
        for img in result.worst_images:
            table.add_row(
                img.image, _num(img.original), _num(img.candidate), _num(img.abs_error), f"{img.gradient_max_abs:.3g}"
            )
        console.print(table)
    if result.diagnosis is not None and result.diagnosis.verdict != "match":
        console.print(f"diagnosis ({result.diagnosis.verdict}): {result.diagnosis.message}")
    for line in result.differences:
        console.print(f"documented difference of {result.reference}: {line}")
    verdict = "the candidate reproduces the original" if result.passed else f"first divergent: {result.first_divergent}"
    console.print(verdict)
