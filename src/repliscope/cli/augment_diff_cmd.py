"""``repliscope diff MANIFEST --augment CANDIDATE``: a re-implemented training augmentation, op by op, against the
original's own code on the same random draws (or, ``--draws own``, its output distributions)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from repliscope.cli.output import console
from repliscope.errors import RepliscopeError

if TYPE_CHECKING:
    from repliscope.diff.augment.driver import AugmentDiffResult


@dataclass(frozen=True)
class AugmentOptions:
    candidate: str
    pipeline: str
    draws: str
    seeds: int
    dataset: str
    limit: int | None
    db: str | None
    store: bool
    as_json: bool


def run_augment_diff(manifest: str, opts: AugmentOptions) -> None:
    """Run, print (table or ``{"augmentation_diff": ...}``), store; exit 0 (every op matches), 1 or 2."""
    from repliscope.cli.diff_output import finish_diff

    finish_diff("augmentation_diff", lambda: _run(manifest, opts), _print, opts.as_json)


def _run(manifest: str, opts: AugmentOptions) -> tuple[AugmentDiffResult, str | None]:
    from rich.progress import Progress

    from repliscope.datasets import resolve_dataset
    from repliscope.datasets.base import read_sample
    from repliscope.diff.augment.contract import AUGMENTATIONS, as_candidate
    from repliscope.diff.augment.driver import Item, run_diff
    from repliscope.evaluation.artifacts import resolve_artifact
    from repliscope.manifest.loader import load_manifest
    from repliscope.paths import default_cache_dir
    from repliscope.user_code import load_user_object

    if opts.draws not in ("shared", "own"):
        raise RepliscopeError(f"--draws {opts.draws!r} is not one of: shared, own")
    if not Path(manifest).is_file():
        raise RepliscopeError(f"'{manifest}' is not a manifest file")
    loaded = load_manifest(manifest)
    artifact = resolve_artifact(loaded, default_cache_dir())
    if artifact.config_path is None:
        raise RepliscopeError(
            f"{manifest}: --augment reads the training augmentation from the model's config (source.config: a "
            "Darknet cfg); this manifest has none"
        )
    pipeline = AUGMENTATIONS.get(opts.pipeline).from_model_config(Path(artifact.config_path))
    if pipeline.stack_task is not None:  # an original in a provisioned stack (tfmg_yolo_input): one crossing
        from repliscope.stacks.call import run_task

        pipeline.bind(run_task)
    candidate = as_candidate(opts.candidate, load_user_object(opts.candidate, "--augment"), pipeline)
    data = resolve_dataset(opts.dataset)
    samples = list(data.samples[: opts.limit] if opts.limit else data.samples)
    if not samples:
        raise RepliscopeError(f"dataset '{opts.dataset}' has no sample")
    if all(s.objects is None for s in samples):
        raise RepliscopeError(f"dataset '{opts.dataset}' has no boxes: --augment needs a detection dataset (COCO)")
    items: list[Item] = []
    failed: list[dict[str, str]] = []
    for smp in samples:
        read = read_sample(smp)
        if read.data is None:
            failed.append({"sample": smp.id, "error": read.fingerprint})
            continue
        try:
            image = pipeline.decode(read.data, Path(smp.location or smp.id).suffix or ".jpg")
        except ValueError as exc:
            failed.append({"sample": smp.id, "error": str(exc)})
            continue
        h, w = image.shape[:2]
        rows = [
            ((o.box[0] + o.box[2]) / 2 / w, (o.box[1] + o.box[3]) / 2 / h, (o.box[2] - o.box[0]) / w,
             (o.box[3] - o.box[1]) / h, o.class_id)
            for o in smp.objects or () if not o.iscrowd
        ]  # fmt: skip
        import numpy as np

        items.append(Item(smp.id, image, np.asarray(rows, dtype=np.float32).reshape(-1, 5)))
    if not items:
        raise RepliscopeError(f"no sample of '{opts.dataset}' could be decoded ({failed[0]['error']})")
    seeds = list(range(1, opts.seeds + 1))
    draws: Literal["shared", "own"] = "own" if opts.draws == "own" else "shared"
    with Progress(console=console, transient=True, disable=opts.as_json) as progress:
        task = progress.add_task(f"augmentation diff ({draws} draws)", total=len(items) * len(seeds))
        try:
            result = run_diff(
                pipeline,
                candidate,
                items,
                seeds,
                draws=draws,
                manifest=loaded.manifest.name,
                dataset=data.name,
                failed=failed,
                on_step=lambda: progress.advance(task),
            )
        finally:
            pipeline.close()
    diff_id = None
    if opts.store:
        from repliscope.errors import StoreError
        from repliscope.store.diffs import save_diff

        try:
            diff_id = save_diff(opts.db, result.model_dump(mode="json"), manifest_name=loaded.manifest.name)
        except StoreError as exc:
            print(f"warning: the diff was not stored: {exc}", file=sys.stderr)
    return result, diff_id


def _print(result: AugmentDiffResult) -> None:
    from rich.table import Table

    console.print(
        f"augmentation diff: {result.candidate} vs {result.pipeline['pipeline']} ({result.pipeline['origin']}), "
        f"{result.samples} images x {len(result.seeds)} seeds, {result.draws} draws"
    )
    if result.ops:
        table = Table("op", "compared", "differing", "max |err|", "tolerance", "hint")
        for op in result.ops:
            table.add_row(
                op.name,
                str(op.compared),
                str(op.differing),
                f"{op.max_abs_err:.3g}",
                f"{op.tolerance:.3g}",
                op.hint or "",
            )
        console.print(table)
    if result.distribution:
        table = Table("op", "statistic", "original mean", "candidate mean", "KS", "p (adjusted)", "differs")
        for t in result.distribution:
            table.add_row(
                t.op,
                t.statistic,
                f"{t.original_mean:.4g}",
                f"{t.candidate_mean:.4g}",
                f"{t.ks:.3f}",
                f"{t.p_adjusted:.3g}",
                "yes" if t.differs else "",
            )
        console.print(table)
    for f in result.failed_samples:
        console.print(f"failed sample {f['sample']}: {f['error']}")
    verdict = "every op matches the original" if result.passed else f"first divergent op: {result.first_divergent}"
    console.print(verdict)
